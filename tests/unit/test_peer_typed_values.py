"""Issue #48: typed values a peer sink stored come back as the bytes Connect wrote (no broker, no Spark).

Archives are written here as each sink's source writes them (see formats/peers/*.py); the
expected texts are what Connect 4.4.0 itself prints for the same typed values
(Values.convertToString, JsonConverter; checked with jshell on JDK 17, see
tests/unit/test_connect_values.py).
"""

from __future__ import annotations

import datetime
import decimal
import io
import json

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from peertools import restored
from topicvault.core.errors import DATAFRAME_WORDING, TopicvaultError
from topicvault.formats.peers import PeerOptions

# What SimpleHeaderConverter.toConnectHeader (Values.parseString) makes of each header text, and
# the text that has to come back: 19.99 and 0.1 are FLOAT32, 2026-04-07 a Date, true a BOOLEAN,
# 18446744073709551615 a Decimal of scale 0.
TYPED_HEADERS = [("price", b"19.99"), ("ratio", b"0.1"), ("day", b"2026-04-07"), ("flag", b"true"),
                 ("big", b"18446744073709551615")]
HEADER_VALUES = {"price": 19.99, "ratio": 0.1, "day": datetime.date(2026, 4, 7), "flag": True,
                 "big": decimal.Decimal("18446744073709551615")}


def _metadata(offset: int) -> dict:
    return {"timestamp": 1_775_563_496_789 + offset, "topic": "t", "partition": 0, "offset": offset}


LENSES_TYPED_AVRO = {"type": "record", "name": "Envelope", "fields": [
    {"name": "key", "type": ["null", "bytes"]},
    {"name": "value", "type": ["null", "bytes"]},
    {"name": "headers", "type": ["null", {"type": "record", "name": "Headers", "fields": [
        {"name": "price", "type": ["null", "float"]},
        {"name": "ratio", "type": ["null", "float"]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "flag", "type": ["null", "boolean"]},
        {"name": "big", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}]},
    ]}]},
    {"name": "metadata", "type": {"type": "record", "name": "Metadata", "fields": [
        {"name": "timestamp", "type": "long"}, {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"}]}},
]}


def _restored_lenses_avro_headers(root, schema: dict, headers: dict) -> list[tuple[str, bytes | None]]:
    """The headers restored from one Lenses Avro envelope record (offset 3) holding `headers`."""
    folder = root / "t" / "0"
    folder.mkdir(parents=True)
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema),
                    [{"key": None, "value": b"v", "headers": headers, "metadata": _metadata(3)}])
    (folder / "000000000003_1_1.avro").write_bytes(out.getvalue())
    rows, _ = restored(root, "lenses")
    return [(h["key"], h["value"]) for h in rows[0]["headers"]]


def test_lenses_avro_typed_headers_come_back_as_connect_wrote_their_text(tmp_path):
    assert _restored_lenses_avro_headers(tmp_path, LENSES_TYPED_AVRO, HEADER_VALUES) == TYPED_HEADERS


def test_lenses_parquet_typed_headers_come_back_as_connect_wrote_their_text(tmp_path):
    folder = tmp_path / "t" / "0"
    folder.mkdir(parents=True)
    headers = pa.array([HEADER_VALUES], pa.struct([
        ("price", pa.float32()), ("ratio", pa.float32()), ("day", pa.date32()), ("flag", pa.bool_()),
        ("big", pa.decimal128(20, 0))]))
    metadata = pa.array([_metadata(3)], pa.struct([("timestamp", pa.int64()), ("topic", pa.string()),
                                                   ("partition", pa.int32()), ("offset", pa.int64())]))
    table = pa.table({"key": pa.array([None], pa.binary()), "value": pa.array([b"v"]), "headers": headers,
                      "metadata": metadata})
    pq.write_table(table, folder / "000000000003_1_1.parquet")
    rows, _ = restored(tmp_path, "lenses")
    assert [(h["key"], h["value"]) for h in rows[0]["headers"]] == TYPED_HEADERS


def test_aiven_parquet_typed_header_maps_come_back_as_connect_wrote_their_text(tmp_path):
    # SinkSchemaBuilder.headersSchema: one map per record, all its values of one Connect type.
    floats = pa.table({"value": pa.array([b"a"]), "offset": pa.array([0], pa.int64()),
                       "headers": pa.array([[("price", 19.99), ("ratio", 0.1)]], pa.map_(pa.string(), pa.float32()))})
    days = pa.table({"value": pa.array([b"b"]), "offset": pa.array([1], pa.int64()),
                     "headers": pa.array([[("day", datetime.date(2026, 4, 7))]], pa.map_(pa.string(), pa.date32()))})
    pq.write_table(floats, tmp_path / "t-0-0")
    pq.write_table(days, tmp_path / "t-0-1")
    rows, _ = restored(tmp_path, "aiven")
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        [("price", b"19.99"), ("ratio", b"0.1")], [("day", b"2026-04-07")]]


# ---- Aiven format.output.envelope=false: each line is the value itself ----

ENVELOPE_OFF_LINES = [b'{"key":"reader-a","value":"file-1.csv","offset":0}', b"null",
                      b'{"key":"reader-b","value":"file-2.csv","offset":1}', b'{"value":"file-3.csv"}']


def test_aiven_jsonl_without_envelope_reads_each_line_as_the_value(tmp_path):
    # format.output.fields=value, format.output.envelope=false, value.converter=JsonConverter
    # (schemas.enable=false): AbstractJsonOutputStreamWriter writes the value's JSON alone, a
    # tombstone as `null`.
    (tmp_path / "t-0-10").write_bytes(b"\n".join(ENVELOPE_OFF_LINES))
    rows, report = restored(tmp_path, "aiven", PeerOptions(value_encoding="json", envelope=False))
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (10, None, ENVELOPE_OFF_LINES[0]), (11, None, None), (12, None, ENVELOPE_OFF_LINES[2]),
        (13, None, ENVELOPE_OFF_LINES[3])]
    assert (report.duplicates, report.gaps) == (0, 0)


def test_aiven_json_array_without_envelope_reads_each_element_as_the_value(tmp_path):
    # JsonOutputStreamWriter: "[\n", the records joined by ",\n", "\n]".
    (tmp_path / "t-0-10").write_bytes(b"[\n" + b",\n".join(ENVELOPE_OFF_LINES) + b"\n]")
    rows, _ = restored(tmp_path, "aiven", PeerOptions(value_encoding="json", envelope=False))
    assert [r["value"] for r in rows] == [ENVELOPE_OFF_LINES[0], None, ENVELOPE_OFF_LINES[2], ENVELOPE_OFF_LINES[3]]


def test_aiven_without_envelope_refuses_fields_other_than_value_alone():
    with pytest.raises(TopicvaultError, match="format.output.envelope=false"):
        PeerOptions(("value", "offset"), envelope=False)
    with pytest.raises(TopicvaultError, match="holds no values"):
        PeerOptions(("key",), envelope=False)
    # The DataFrame reader's users are told its option's name.
    with pytest.raises(TopicvaultError, match=r'option\("peer_envelope", "false"\) with option\("peer_fields"\) key'):
        PeerOptions(("key",), envelope=False, wording=DATAFRAME_WORDING)


# ---- typed values rendered as JSON text, as Connect's JsonConverter writes them ----

def test_confluent_avro_float_fields_render_as_jsonconverter_writes_them(tmp_path):
    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    schema = {"type": "record", "name": "Order", "fields": [
        {"name": "name", "type": "string"}, {"name": "price", "type": "float"}, {"name": "big", "type": "double"},
        {"name": "small", "type": "float"}]}
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), [{"name": "a", "price": 19.99, "big": 1e10, "small": 1e-5}])
    (folder / "t+0+0000000000.avro").write_bytes(out.getvalue())
    rows, _ = restored(tmp_path, "confluent")
    # JsonConverter (schemas.enable=false) on Connect 4.4.0 writes exactly this for the same struct.
    assert rows[0]["value"] == b'{"name":"a","price":19.99,"big":1.0E10,"small":1.0E-5}'
    json.loads(rows[0]["value"])  # still JSON


def test_lenses_avro_headers_of_every_connect_type_come_back_as_connect_wrote_their_text(tmp_path):
    # What SimpleHeaderConverter makes of header texts such as 1.0E10, 12:34:56.789Z, [1,2] or {"x":1},
    # stored typed; a BYTES header (ByteArrayConverter) is its bytes.
    schema = {"type": "record", "name": "Envelope", "fields": [
        {"name": "key", "type": ["null", "bytes"]}, {"name": "value", "type": ["null", "bytes"]},
        {"name": "headers", "type": {"type": "record", "name": "Headers", "fields": [
            {"name": "f64", "type": "double"},
            {"name": "time", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "raw", "type": "bytes"},
            {"name": "list", "type": {"type": "array", "items": "int"}},
            {"name": "floats", "type": {"type": "array", "items": "float"}},
            {"name": "map", "type": {"type": "map", "values": "string"}},
            {"name": "struct", "type": {"type": "record", "name": "S", "fields": [
                {"name": "n", "type": "long"}, {"name": "s", "type": ["null", "string"]}]}},
        ]}},
        {"name": "metadata", "type": LENSES_TYPED_AVRO["fields"][3]["type"]},
    ]}
    headers = {"f64": 1e10, "time": datetime.time(12, 34, 56, 789000),
               "ts": datetime.datetime(2026, 4, 7, 12, 4, 56, 789000, tzinfo=datetime.timezone.utc),
               "raw": b"\x00\xff", "list": [1, 2], "floats": [0.1, 19.99], "map": {"x": 'say "hi"'},
               "struct": {"n": 7, "s": None}}
    assert _restored_lenses_avro_headers(tmp_path, schema, headers) == [
        ("f64", b"1.0E10"), ("time", b"12:34:56.789Z"), ("ts", b"2026-04-07T12:04:56.789Z"), ("raw", b"\x00\xff"),
        ("list", b"[1,2]"), ("floats", b"[0.1,19.99]"), ("map", b'{"x":"say \\"hi\\""}'),
        ("struct", b'{"n":7,"s":null}')]
