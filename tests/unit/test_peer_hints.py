"""Issue #48: where a peer archive's content tells which sink setting was used, the restore says which
option it assumed and how to choose the other, in the CLI's flags or the DataFrame reader's options."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from peertools import restored
from topicvault.core.errors import DATAFRAME_WORDING, CorruptObject
from topicvault.core.stores.locations import open_store
from topicvault.formats.peers import PeerOptions
from topicvault.source.peer_layout import content_hints, peer_state

B64 = base64.b64encode(b"\x00\xff").decode()


def hints(root: Path, layout: str, options: PeerOptions = PeerOptions()) -> list[str]:
    store = open_store(str(root))
    state, _ = peer_state(store, layout, None)
    return content_hints(store, layout, options, state)


def test_aiven_base64_headers_are_named_with_the_cli_flag_or_the_dataframe_option(tmp_path):
    (tmp_path / "t-0-0").write_bytes(json.dumps({"value": None, "offset": 0,
                                                 "headers": [{"key": "b", "value": B64}]}).encode())
    assert hints(tmp_path, "aiven") == [
        "aiven: every header value in t-0-0 is base64, yet header values are read as text (the default): if the "
        "sink's header.converter was ByteArrayConverter, restore with --peer-header-encoding base64"]
    assert hints(tmp_path, "aiven", PeerOptions(wording=DATAFRAME_WORDING))[0].endswith(
        'restore with option("peer_header_encoding", "base64")')
    assert hints(tmp_path, "aiven", PeerOptions(header_encoding="text")) == []


def test_aiven_lines_that_are_not_envelopes_suggest_envelope_off(tmp_path):
    # Issue #48 case 2 read with the default envelope: the values' own key/value/offset fields differ per line.
    (tmp_path / "t-0-10").write_bytes(b'{"key":"reader-a","value":"file-1.csv","offset":0}\nnull\n{"value":"x"}')
    assert hints(tmp_path, "aiven") == [
        "aiven: the lines of t-0-10 are JSON but not envelopes of one set of output fields: if the sink had "
        "format.output.envelope=false, restore with --peer-envelope false"]
    assert hints(tmp_path, "aiven", PeerOptions(value_encoding="json", envelope=False)) == []


def test_aiven_jsonl_envelopes_of_one_field_set_get_no_envelope_hint(tmp_path):
    (tmp_path / "t-0-0").write_bytes(b'{"value":"' + B64.encode() + b'","offset":0}\n{"value":null,"offset":1}')
    assert hints(tmp_path, "aiven") == []


def test_base64_values_read_as_json_text_suggest_base64(tmp_path):
    (tmp_path / "t-0-0").write_bytes(b'"' + B64.encode() + b'"\n"AAEC"')
    assert hints(tmp_path, "aiven", PeerOptions(value_encoding="json", envelope=False)) == [
        "aiven: every value in t-0-0 is a base64 JSON string, yet values are read with --peer-value-encoding json: "
        "if the sink's value.converter was ByteArrayConverter, restore with --peer-value-encoding base64"]


def test_typed_parquet_and_avro_fields_are_named(tmp_path):
    value = pa.array([{"price": 1.5}], pa.struct([("price", pa.float32())]))
    pq.write_table(pa.table({"value": value, "offset": pa.array([0], pa.int64())}), tmp_path / "t-0-0")
    assert hints(tmp_path, "aiven") == [
        "aiven: t-0-0 stores value typed (not bytes): restored as the JSON Connect's JsonConverter "
        "(schemas.enable=false) writes for them, header values as its header converter writes them; the bytes "
        "another converter made of them (Avro or Protobuf with a schema registry) cannot be rebuilt"]
    folder = tmp_path / "c" / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema({"type": "record", "name": "V", "fields": [
        {"name": "price", "type": "float"}]}), [{"price": 1.5}])
    (folder / "t+0+0000000000.avro").write_bytes(out.getvalue())
    assert [h.split(" stores ")[0] for h in hints(tmp_path / "c", "confluent")] == [
        "confluent: topics/t/partition=0/t+0+0000000000.avro"]


def test_lenses_json_base64_headers_are_named(tmp_path):
    (tmp_path / "t" / "0").mkdir(parents=True)
    (tmp_path / "t" / "0" / "000000000000_1_1.json").write_bytes(json.dumps({
        "key": None, "value": None, "headers": {"b": B64},
        "metadata": {"timestamp": 1, "topic": "t", "partition": 0, "offset": 0}}).encode())
    assert hints(tmp_path, "lenses") == [
        "lenses: every header value in t/0/000000000000_1_1.json is base64, yet header values are read as text (the "
        "default): if the sink's header.converter was ByteArrayConverter, restore with --peer-header-encoding base64"]


def test_confluent_base64_header_siblings_are_named(tmp_path):
    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "t+0+0000000000.json").write_bytes(b'"' + B64.encode() + b'"\n')
    (folder / "t+0+0000000000.headers.json").write_bytes(
        json.dumps({"headers": [{"key": "b", "value": B64}]}).encode() + b"\n")
    assert hints(tmp_path, "confluent") == [
        "confluent: every header value in topics/t/partition=0/t+0+0000000000.json is base64, yet header values are "
        "read as text (the default): if the sink's header.converter was ByteArrayConverter, restore with "
        "--peer-header-encoding base64"]


def test_decoding_errors_name_the_dataframe_option_on_the_dataframe_reader(tmp_path):
    (tmp_path / "t-0-0").write_bytes(b"not base64!")
    with pytest.raises(CorruptObject, match=r'set option\("peer_value_encoding", "none"\) or '
                                            r'option\("peer_header_encoding", "text"\)'):
        restored(tmp_path, "aiven", PeerOptions(wording=DATAFRAME_WORDING))
    with pytest.raises(CorruptObject, match="set --peer-value-encoding none or --peer-header-encoding text"):
        restored(tmp_path, "aiven")


def test_empty_header_values_count_as_base64_but_alone_say_nothing(tmp_path):
    # ByteArrayConverter writes an empty header value as "", which is base64 of b"" (the real sink's archives hold them).
    (tmp_path / "t-0-0").write_bytes(json.dumps({"value": None, "offset": 0, "headers": [
        {"key": "e", "value": ""}, {"key": "b", "value": B64}]}).encode())
    assert len(hints(tmp_path, "aiven")) == 1
    (tmp_path / "t-0-0").write_bytes(json.dumps({"value": None, "offset": 0,
                                                 "headers": [{"key": "e", "value": ""}]}).encode())
    assert hints(tmp_path, "aiven") == []
