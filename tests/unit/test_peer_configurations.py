"""One test per row of docs/peers.md's configuration table (issue #48): every sink setting that
changes the bytes a peer stores is restored exactly, or refused in one line naming the setting.

Objects are written as each sink's source writes them (cited in formats/peers/*.py); rows the
table marks as tested elsewhere name that test. Test names start with the row's id.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import io
import json

import cramjam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from peertools import restored, xerial_snappy
from topicvault.core.errors import CorruptObject, TopicvaultError
from topicvault.formats.peers import PeerOptions


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def lines(*rows: bytes) -> bytes:
    """Aiven's jsonl: a "\\n" between records, none after the last."""
    return b"\n".join(rows)


def jsonl(*nodes: object) -> bytes:
    return lines(*(json.dumps(node, separators=(",", ":")).encode() for node in nodes))


def pairs(rows: list[dict]) -> list[tuple]:
    return [(r["offset"], r["key"], r["value"]) for r in rows]


def header_pairs(row: dict) -> list[tuple]:
    return [(h["key"], h["value"]) for h in row["headers"]]


# ---- Aiven ----

def test_aiven_csv_all_fields_restores_every_field_and_headers_in_order(tmp_path):
    # format.output.fields=key,value,offset,timestamp,headers: headers base64(k):base64(v); in order, repeats kept.
    headers = f"{b64(b'h')}:{b64(b'1')};{b64(b'h')}:{b64(b'2')};"
    (tmp_path / "t-0-4").write_bytes(lines(f"{b64(b'k')},{b64(b'v')},4,1700000000000,{headers}".encode(),
                                           ",,5,1700000000001,".encode()))
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("key", "value", "offset", "timestamp", "headers")))
    assert pairs(rows) == [(4, b"k", b"v"), (5, None, None)]
    assert [round(r["timestamp"].timestamp() * 1000) for r in rows] == [1700000000000, 1700000000001]
    assert header_pairs(rows[0]) == [("h", b"1"), ("h", b"2")]


def test_aiven_csv_json_encoding_is_refused_in_one_line(tmp_path):
    (tmp_path / "t-0-0").write_bytes(b64(b"v").encode())
    with pytest.raises(CorruptObject, match="is csv: .*--peer-value-encoding json is for jsonl and json objects"):
        restored(tmp_path, "aiven", PeerOptions(value_encoding="json"))


@pytest.mark.parametrize("encoding,stored,restored_value", [
    ("base64", b64(b"\x00\xff"), b"\x00\xff"),  # value.converter=ByteArrayConverter
    ("none", "plain text", b"plain text"),  # StringConverter
    ("json", "quoted", b'"quoted"'),  # JsonConverter: a JSON string value, quotes and all
])
def test_aiven_jsonl_value_converters_restore_by_peer_value_encoding(tmp_path, encoding, stored, restored_value):
    (tmp_path / "t-0-0").write_bytes(jsonl({"value": stored, "offset": 0}, {"value": None, "offset": 1}))
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset"), value_encoding=encoding))
    assert [r["value"] for r in rows] == [restored_value, None]


def test_aiven_jsonl_jsonconverter_numbers_come_back_as_jackson_wrote_them(tmp_path):
    # JsonConverter writes a double 1e10 as 1.0E10 and a float 19.99f as 19.99 (Jackson, Double/Float.toString).
    (tmp_path / "t-0-0").write_bytes(b'{"value":{"big":1.0E10,"price":19.99,"n":7},"offset":0}')
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset"), value_encoding="json"))
    assert rows[0]["value"] == b'{"big":1.0E10,"price":19.99,"n":7}'


def test_aiven_jsonl_key_converter_differs_restores_by_peer_key_encoding(tmp_path):
    (tmp_path / "t-0-0").write_bytes(jsonl({"key": "user-1", "value": b64(b"\x01"), "offset": 0}))
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("key", "value", "offset"), key_encoding="none"))
    assert pairs(rows) == [(0, b"user-1", b"\x01")]


def test_aiven_jsonl_headers_text_and_typed_as_the_header_converter_wrote_them(tmp_path):
    # HeaderBuilder: JsonConverter.fromConnectHeader; a text header is a JSON string, a FLOAT32 a number.
    (tmp_path / "t-0-0").write_bytes(jsonl({"value": None, "offset": 0, "headers": [
        {"key": "src", "value": "web"}, {"key": "price", "value": 19.99}, {"key": "src", "value": "app"}]}))
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset", "headers")))
    assert header_pairs(rows[0]) == [("src", b"web"), ("price", b"19.99"), ("src", b"app")]


def test_aiven_jsonl_headers_base64_restore_with_peer_header_encoding(tmp_path):
    (tmp_path / "t-0-0").write_bytes(jsonl({"value": None, "offset": 0,
                                            "headers": [{"key": "b", "value": b64(b"\x00\xff")}]}))
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset", "headers"), header_encoding="base64"))
    assert header_pairs(rows[0]) == [("b", b"\x00\xff")]


def test_aiven_json_array_restores_as_jsonl(tmp_path):
    # JsonOutputStreamWriter: "[\n", records joined by ",\n", "\n]".
    (tmp_path / "t-0-0").write_bytes(b'[\n{"value":"' + b64(b"a").encode() + b'","offset":0},\n'
                                     b'{"value":null,"offset":1}\n]')
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset")))
    assert pairs(rows) == [(0, None, b"a"), (1, None, None)]


def test_aiven_parquet_envelope_off_struct_value_is_the_row(tmp_path):
    # tryUnwrapEnvelope: a struct value's fields are the columns; its float32 field as JsonConverter writes it.
    table = pa.table({"name": ["a"], "price": pa.array([19.99], pa.float32())})
    pq.write_table(table, tmp_path / "t-0-3")
    rows, _ = restored(tmp_path, "aiven", PeerOptions(envelope=False))
    assert pairs(rows) == [(3, None, b'{"name":"a","price":19.99}')]


def test_aiven_parquet_typed_values_come_back_as_jsonconverter_json(tmp_path):
    value = pa.array([{"day": datetime.date(2026, 4, 7), "ratio": 0.1}],
                     pa.struct([("day", pa.date32()), ("ratio", pa.float32())]))
    pq.write_table(pa.table({"value": value, "offset": pa.array([0], pa.int64())}), tmp_path / "t-0-0")
    rows, _ = restored(tmp_path, "aiven", PeerOptions(("value", "offset")))
    assert rows[0]["value"] == b'{"day":20550,"ratio":0.1}'


AIVEN_AVRO = {"type": "record", "name": "connector_records", "fields": [
    {"name": "key", "type": ["null", "string"]}, {"name": "value", "type": ["null", "bytes"]},
    {"name": "offset", "type": "long"}, {"name": "timestamp", "type": "long"},
    {"name": "headers", "type": ["null", {"type": "map", "values": "float"}]}]}


def test_aiven_avro_restores_its_typed_fields(tmp_path):
    # format.output.type=avro (AvroOutputWriter), named <template>.avro.
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(AIVEN_AVRO), [
        {"key": "k", "value": b"\x00", "offset": 9, "timestamp": 1700000000000, "headers": {"price": 19.99}},
        {"key": None, "value": None, "offset": 10, "timestamp": 1700000000001, "headers": None}])
    (tmp_path / "t-0-9.avro").write_bytes(out.getvalue())
    rows, _ = restored(tmp_path, "aiven")
    assert pairs(rows) == [(9, b"k", b"\x00"), (10, None, None)]
    assert header_pairs(rows[0]) == [("price", b"19.99")]


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress), (".snappy", xerial_snappy), (".zst", lambda d: bytes(cramjam.zstd.compress(d)))])
def test_aiven_compression_is_undone(tmp_path, suffix, compress):
    (tmp_path / f"t-0-0{suffix}").write_bytes(compress(f"{b64(b'a')}\n{b64(b'b')}".encode()))
    rows, _ = restored(tmp_path, "aiven")
    assert [r["value"] for r in rows] == [b"a", b"b"]


# ---- Lenses ----

def _lenses_row(offset: int, **fields: object) -> dict:
    return {"key": None, "value": None, "headers": None,
            "metadata": {"timestamp": 1700000000000 + offset, "topic": "t", "partition": 0, "offset": offset},
            **fields}


def test_lenses_json_headers_base64_restore_with_peer_header_encoding(tmp_path):
    (tmp_path / "t" / "0").mkdir(parents=True)
    (tmp_path / "t" / "0" / "000000000000_1_1.json").write_bytes(
        json.dumps(_lenses_row(0, value=b64(b"v"), valueIsArray=True, headers={"b": b64(b"\x00\xff")})).encode())
    rows, _ = restored(tmp_path, "lenses", PeerOptions(header_encoding="base64"))
    assert (rows[0]["value"], header_pairs(rows[0])) == (b"v", [("b", b"\x00\xff")])


def test_lenses_without_envelope_is_refused_naming_store_envelope(tmp_path):
    (tmp_path / "t" / "0").mkdir(parents=True)
    (tmp_path / "t" / "0" / "000000000000_1_1.json").write_bytes(b'{"id":1}')
    with pytest.raises(CorruptObject, match="store.envelope=true"):
        restored(tmp_path, "lenses")


def test_lenses_avro_typed_value_comes_back_as_jsonconverter_json(tmp_path):
    schema = {"type": "record", "name": "Envelope", "fields": [
        {"name": "key", "type": ["null", "string"]},
        {"name": "value", "type": {"type": "record", "name": "Order", "fields": [
            {"name": "price", "type": "float"}, {"name": "at", "type": {"type": "long",
                                                                          "logicalType": "timestamp-millis"}}]}},
        {"name": "metadata", "type": {"type": "record", "name": "Metadata", "fields": [
            {"name": "timestamp", "type": "long"}, {"name": "topic", "type": "string"},
            {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"}]}}]}
    out = io.BytesIO()
    at = datetime.datetime(2026, 4, 7, 12, 4, 56, 789000, tzinfo=datetime.timezone.utc)
    fastavro.writer(out, fastavro.parse_schema(schema), [
        {"key": "k", "value": {"price": 19.99, "at": at}, "metadata": _lenses_row(0)["metadata"]}])
    (tmp_path / "t" / "0").mkdir(parents=True)
    (tmp_path / "t" / "0" / "000000000000_1_1.avro").write_bytes(out.getvalue())
    rows, _ = restored(tmp_path, "lenses")
    assert pairs(rows) == [(0, b"k", b'{"price":19.99,"at":1775563496789}')]


# ---- Confluent ----

def _confluent(tmp_path, name: str, data: bytes) -> None:
    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


@pytest.mark.parametrize("encoding,stored,restored_value", [
    ("base64", '"AA=="', b"\x00"), ("none", '"text"', b"text"), ("json", '{"a":1.0E10}', b'{"a":1.0E10}')])
def test_confluent_json_values_restore_by_peer_value_encoding(tmp_path, encoding, stored, restored_value):
    # JsonFormat: each value through JsonConverter (schemas.enable=false), one per line.
    _confluent(tmp_path, "t+0+0000000000.json", stored.encode() + b"\n")
    rows, _ = restored(tmp_path, "confluent", PeerOptions(value_encoding=encoding))
    assert [r["value"] for r in rows] == [restored_value]


def test_confluent_json_gzip_is_undone(tmp_path):
    # s3.compression.type=gzip: JsonFormat files named .json.gz.
    _confluent(tmp_path, "t+0+0000000000.json.gz", gzip.compress(f'"{b64(b"a")}"\n"{b64(b"b")}"\n'.encode()))
    rows, _ = restored(tmp_path, "confluent")
    assert [r["value"] for r in rows] == [b"a", b"b"]


def test_confluent_bytearray_format_restores_bytes_as_they_are(tmp_path):
    _confluent(tmp_path, "t+0+0000000000.bin", b"\x00\xff\n{\"a\":1}\n")
    rows, _ = restored(tmp_path, "confluent")
    assert [r["value"] for r in rows] == [b"\x00\xff", b'{"a":1}']


def test_confluent_keys_sibling_in_avro_restores_keys(tmp_path):
    # store.kafka.keys=true: keys.format.class defaults to AvroFormat whatever the values' format.
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema({"type": "string"}), ["k0", "k1"])
    _confluent(tmp_path, "t+0+0000000000.keys.avro", out.getvalue())
    _confluent(tmp_path, "t+0+0000000000.json", f'"{b64(b"a")}"\n"{b64(b"b")}"\n'.encode())
    rows, _ = restored(tmp_path, "confluent")
    assert pairs(rows) == [(0, b"k0", b"a"), (1, b"k1", b"b")]


def test_confluent_keys_without_value_file_are_refused_naming_the_setting(tmp_path):
    # behavior.on.null.values=write: a tombstone's key written alone.
    _confluent(tmp_path, "t+0+0000000000.json", f'"{b64(b"a")}"\n'.encode())
    _confluent(tmp_path, "t+0+0000000001.keys.json", b'"k"\n')
    with pytest.raises(TopicvaultError, match="behavior.on.null.values=write"):
        restored(tmp_path, "confluent")


# ---- Quix ----

def test_quix_jsonl_restores_keys_text_and_values_as_json(tmp_path):
    (tmp_path / "t" / "0").mkdir(parents=True)
    (tmp_path / "t" / "0" / f"{5:019d}.jsonl").write_bytes(lines(
        b'{"_timestamp":1700000000000,"_key":"k","_value":{"n":1}}',
        b'{"_timestamp":1700000000001,"_key":"<quixstreams.sinks.base.item.SinkItem object at 0x7f3a>","_value":null}'))
    rows, _ = restored(tmp_path, "quix")
    assert pairs(rows) == [(5, b"k", b'{"n":1}'), (6, None, None)]

