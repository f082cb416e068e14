"""Restoring archives written by other sinks (Aiven, Confluent), built here in their exact formats.

Each archive spreads a partition over several objects, starts above offset 10, and holds null
keys, tombstones, non-UTF-8 bytes and repeated headers where the format can carry them. The
formats follow the sinks' source code (see topicvault/formats/peers.py for the evidence).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from clitools import run_cli, run_cli_stdout
from kafkatools import consume_all, topic_exists
from peertools import BASE, FIELDS, aiven_csv, archive_records, assert_restored, b64, write_chunks
from topicvault.core.envelope import Record


def iso_instant(millis: int) -> str:
    text = datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z").replace(".000Z", "Z")  # Java's ISO_INSTANT drops zero millis


def aiven_jsonl(records: list[Record]) -> bytes:
    def encoded(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    return b"".join(json.dumps({
        "key": encoded(r.key), "value": encoded(r.value), "offset": r.offset, "timestamp": iso_instant(r.timestamp_ms),
        "headers": [{"key": k, "value": encoded(v)} for k, v in r.headers],
    }).encode() + b"\n" for r in records)


def aiven_parquet(records: list[Record]) -> bytes:
    table = pa.table({
        "key": pa.array([r.key for r in records], pa.binary()),
        "value": pa.array([r.value for r in records], pa.binary()),
        "offset": pa.array([r.offset for r in records], pa.int64()),
        "timestamp": pa.array([r.timestamp_ms for r in records], pa.int64()),
        "headers": pa.array([list(r.headers) or None for r in records], pa.map_(pa.string(), pa.binary())),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()






def test_aiven_csv_default_names_gzip_and_redelivery(bootstrap, spark, tmp_path):
    topic = f"orders.v1-aiven-csv-{uuid.uuid4().hex[:6]}"
    # Aiven's csv writer cannot write a null header value (it base64-encodes the bytes), so none here.
    records = {p: [Record(topic, p, r.offset, r.key, r.value, r.timestamp_ms, 0,
                          tuple((k, v if v is not None else b"") for k, v in r.headers))
                   for r in rows] for p, rows in archive_records(topic).items()}
    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}.gz", lambda rows: gzip.compress(aiven_csv(rows)))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--peer-fields", FIELDS,
                  "--rename", f"{topic}={topic}-r")
    assert "layout aiven (detected)" in out
    assert_restored(bootstrap, f"{topic}-r", records)


def test_aiven_jsonl_with_time_partitioned_template(bootstrap, spark, tmp_path):
    topic = f"aiven-jsonl-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic)
    template = "dt={{timestamp:unit=yyyy}}/{{topic}}-{{partition:padding=true}}-{{start_offset:padding=true}}"

    def name(p: int, first: Record) -> str:  # records of one partition spread over two folders
        return f"dt={2023 + first.offset % 2}/{topic}-{p:010d}-{first.offset:020d}"

    write_chunks(tmp_path, records, name, aiven_jsonl, size=3)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "aiven", "--key-template", template,
            "--peer-header-encoding", "base64", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records)


def test_aiven_jsonl_text_keys_beside_base64_values_come_back_both(bootstrap, spark, tmp_path):
    # key.converter=StringConverter with value.converter=ByteArrayConverter (a common pair): the key
    # is JSON text, the value base64. One flag for both decoded "12345678" as base64 (b'\xd7m\xf8...').
    topic = f"aiven-keys-{uuid.uuid4().hex[:6]}"
    records = {0: [Record(topic, 0, 5 + i, key, b"\x00\xffv%d" % i, BASE + i, 0, ())
                   for i, key in enumerate([b"12345678", b"user-1", None, b"abcd"])]}

    def encode(rows: list[Record]) -> bytes:
        return b"\n".join(json.dumps({"key": None if r.key is None else r.key.decode(), "value": b64(r.value),
                                      "offset": r.offset, "timestamp": r.timestamp_ms}).encode() for r in rows)

    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}", encode, redeliver=False)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "aiven", "--peer-key-encoding", "none",
            "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records)


def test_aiven_parquet_keeps_headers_as_a_map(bootstrap, spark, tmp_path):
    topic = f"aiven-parquet-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic, headers=False)
    for rows in records.values():
        rows[1] = Record(topic, rows[1].partition, rows[1].offset, rows[1].key, rows[1].value, rows[1].timestamp_ms, 0,
                         (("a", b"1"), ("b", None)))
    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}", aiven_parquet)
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "aiven",
                  "--rename", f"{topic}={topic}-r")
    assert "headers as a map" in out
    assert_restored(bootstrap, f"{topic}-r", records)


CONFLUENT_HEADERS = {"type": "array", "items": {"type": "record", "name": "ConnectDefault", "fields": [
    {"name": "key", "type": "string"}, {"name": "value", "type": ["null", "string"]}]}}


def avro_bytes(schema, rows) -> bytes:
    sink = io.BytesIO()
    fastavro.writer(sink, fastavro.parse_schema(schema), rows)
    return sink.getvalue()


def confluent_name(topic: str, p: int, first: Record, role: str = "", ext: str = "avro", folder: str = "") -> str:
    folder = folder or f"partition={p}"
    return f"topics/{topic}/{folder}/{topic}+{p}+{first.offset:010d}{role}.{ext}"


def write_confluent(root: Path, records: dict[int, list[Record]], ext: str, keys: bool, headers: bool, folder=None,
                    sibling_ext: str | None = None):
    """Confluent files of `records`; `.keys`/`.headers` siblings in `sibling_ext` (keys.format.class and
    headers.format.class: AvroFormat unless set), else in the value's `ext`."""
    for p, rows in records.items():
        # Confluent files are contiguous runs of offsets: start a file after each gap.
        runs, run = [], [rows[0]]
        for before, after in zip(rows, rows[1:]):
            if after.offset != before.offset + 1 or len(run) == 4:
                runs.append(run)
                run = []
            run.append(after)
        runs.append(run)
        for chunk in runs:
            where = folder(p, chunk[0]) if folder else ""
            files = {"": [r.value for r in chunk]}
            if keys:
                files[".keys"] = [r.key for r in chunk]
            if headers:
                files[".headers"] = [[{"key": k, "value": None if v is None else b64(v)} for k, v in r.headers]
                                     for r in chunk]
            for role, rows_of_file in files.items():
                file_ext = sibling_ext if role and sibling_ext else ext
                path = root / confluent_name(r_topic(chunk), p, chunk[0], role, file_ext, where)
                path.parent.mkdir(parents=True, exist_ok=True)
                if file_ext == "avro":
                    schema = CONFLUENT_HEADERS if role == ".headers" else ["null", "bytes"]
                    path.write_bytes(avro_bytes(schema, rows_of_file))
                elif file_ext == "json":  # header lists are wrapped as {"headers": [...]} (RecordHeaders)
                    path.write_bytes(b"".join(json.dumps(
                        {"headers": row} if role == ".headers" else (None if row is None else b64(row))).encode() + b"\n"
                        for row in rows_of_file))
                else:
                    column = "headers" if role == ".headers" else "key" if role == ".keys" else "value"
                    data_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])) \
                        if role == ".headers" else pa.binary()
                    sink = io.BytesIO()
                    pq.write_table(pa.table({column: pa.array(rows_of_file, data_type)}), sink)
                    path.write_bytes(sink.getvalue())


def r_topic(chunk: list[Record]) -> str:
    return chunk[0].topic


def test_confluent_avro_with_keys_and_headers(bootstrap, spark, tmp_path):
    topic = f"confluent-avro-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic)
    write_confluent(tmp_path, records, "avro", keys=True, headers=True)
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--peer-header-encoding", "base64",
                  "--rename", f"{topic}={topic}-r")
    assert "layout confluent (detected)" in out and "timestamps" in out
    assert "header values stored as text read as base64 (--peer-header-encoding)" in out
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


def test_confluent_json_time_partitioned_with_keys_and_headers(bootstrap, spark, tmp_path):
    topic = f"confluent-json-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic)
    write_confluent(tmp_path, records, "json", keys=True, headers=True,
                    folder=lambda p, first: f"year=2023/month=11/day={14 + first.offset % 2}/hour=07")
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "confluent",
            "--peer-header-encoding", "base64", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


def test_confluent_json_values_with_keys_and_headers_in_the_default_avro_restore_them(bootstrap, spark, tmp_path):
    # keys.format.class and headers.format.class default to AvroFormat whatever format.class is:
    # a JSON value file's siblings are .keys.avro and .headers.avro (they were not looked for).
    topic = f"confluent-mixed-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic)
    write_confluent(tmp_path, records, "json", keys=True, headers=True, sibling_ext="avro")
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "confluent",
            "--peer-header-encoding", "base64", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


def test_confluent_keys_without_a_value_file_stop_the_restore_before_anything_is_produced(bootstrap, tmp_path):
    # behavior.on.null.values=write puts a tombstone's key alone in a tombstone folder: restoring
    # without it would drop the tombstone in silence.
    topic = f"confluent-tomb-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic, partitions=1)
    write_confluent(tmp_path, records, "avro", keys=True, headers=False)
    lonely = tmp_path / f"topics/{topic}/tombstone/{topic}+0+0000000099.keys.avro"
    lonely.parent.mkdir(parents=True)
    lonely.write_bytes(avro_bytes(["null", "bytes"], [b"gone"]))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
                  expect_exit=1)
    error = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and lonely.name in error[0] and "value file" in error[0], out
    assert not topic_exists(bootstrap, f"{topic}-r")


def test_confluent_bytearray_values_come_back_byte_for_byte(bootstrap, spark, tmp_path):
    # ByteArrayFormat writes each value's bytes as they are, then the separator (a newline by default).
    topic = f"confluent-bin-{uuid.uuid4().hex[:6]}"
    values = [b'{"name": "Jos\xc3\xa9", "x": 1.50}', b"", b"x", b'"aGVsbG8="', b"\x00\xff binary"]
    path = tmp_path / f"topics/{topic}/partition=0/{topic}+0+0000000007.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(value + b"\n" for value in values))
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    restored = consume_all(bootstrap, f"{topic}-r")[0]
    assert [r.value for r in restored] == values and all(r.key is None for r in restored)


def test_confluent_parquet_value_only_restores_null_keys(bootstrap, spark, tmp_path):
    # Confluent's Parquet values are structs (its writer takes a record per value): they come
    # back as JSON text, one-field ones too.
    topic = f"confluent-parquet-{uuid.uuid4().hex[:6]}"
    rows = {0: [{"id": i, "name": f"n{i}"} for i in range(6)], 1: [{"id": 9}] * 3}
    for p, values in rows.items():
        for start in range(0, len(values), 4):
            path = tmp_path / confluent_name(topic, p, Record(topic, p, 12 + start, None, None, 0, 0, ()),
                                             ext="snappy.parquet")
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(values[start:start + 4]), path)
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert "null keys" in out
    value_only = {p: [Record(topic, p, 12 + i, None, json.dumps(v, separators=(",", ":")).encode(), 0, 0, ())
                      for i, v in enumerate(values)] for p, values in rows.items()}
    assert_restored(bootstrap, f"{topic}-r", value_only, timestamps=False)


def test_unknown_objects_ask_for_a_layout(bootstrap, tmp_path):
    (tmp_path / "some-file.txt").write_text("hello")
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, expect_exit=1)
    assert "pass --layout" in out


LENSES_AVRO = {"type": "record", "name": "Envelope", "fields": [
    {"name": "key", "type": ["null", "bytes"]},
    {"name": "value", "type": ["null", "bytes"]},
    {"name": "headers", "type": ["null", {"type": "map", "values": ["null", "bytes"]}]},
    {"name": "metadata", "type": {"type": "record", "name": "Metadata", "fields": [
        {"name": "timestamp", "type": "long"}, {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"}]}},
]}


def lenses_rows(rows: list[Record]) -> list[dict]:
    return [{"key": r.key, "value": r.value, "headers": dict(r.headers) or None,
             "metadata": {"timestamp": r.timestamp_ms, "topic": r.topic, "partition": r.partition, "offset": r.offset}}
            for r in rows]


def lenses_json(rows: list[Record]) -> bytes:
    def encoded(data):
        return None if data is None else base64.b64encode(data).decode()

    return b"".join(json.dumps({
        "key": encoded(r.key), "keyIsArray": True, "value": encoded(r.value), "valueIsArray": True,
        "headers": {k: encoded(v) for k, v in r.headers},
        "metadata": {"timestamp": r.timestamp_ms, "topic": r.topic, "partition": r.partition, "offset": r.offset},
    }).encode() + b"\n" for r in rows)


def lenses_parquet(rows: list[Record]) -> bytes:
    table = pa.Table.from_pylist(lenses_rows(rows), schema=pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("headers", pa.map_(pa.string(), pa.binary())),
        ("metadata", pa.struct([("timestamp", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
                                ("offset", pa.int64())])),
    ]))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def lenses_records(topic: str) -> dict[int, list[Record]]:
    """Lenses keeps headers as one entry per name: no repeated names here."""
    return {p: [Record(topic, p, r.offset, r.key, r.value, r.timestamp_ms, 0, (("h", b"\x00\x01"), ("o", None))
                       if r.headers else ()) for r in rows]
            for p, rows in archive_records(topic).items()}


def test_lenses_envelope_avro_default_names(bootstrap, spark, tmp_path):
    topic = f"lenses-avro-{uuid.uuid4().hex[:6]}"
    records = lenses_records(topic)
    write_chunks(tmp_path, records, lambda p, r: f"{topic}/{p}/{r.offset:012d}_{r.timestamp_ms}_{r.timestamp_ms + 9}.avro",
                 lambda rows: avro_bytes(LENSES_AVRO, lenses_rows(rows)))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert "layout lenses (detected)" in out
    assert_restored(bootstrap, f"{topic}-r", records)


def test_lenses_envelope_parquet_partitionby(bootstrap, spark, tmp_path):
    topic = f"lenses-parquet-{uuid.uuid4().hex[:6]}"
    records = lenses_records(topic)
    write_chunks(tmp_path, records, lambda p, r: f"region=eu-{r.offset % 2}/{topic}({p:012d}_{r.offset:012d}).parquet",
                 lenses_parquet)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "lenses", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records)


def test_lenses_envelope_json(bootstrap, spark, tmp_path):
    topic = f"lenses-json-{uuid.uuid4().hex[:6]}"
    records = lenses_records(topic)
    write_chunks(tmp_path, records, lambda p, r: f"{topic}/{p}/{r.offset:012d}.json", lenses_json)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "lenses", "--peer-header-encoding",
            "base64", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records)


def quix_records(topic: str) -> dict[int, list[Record]]:
    """Quix keeps keys as text, values as deserialized JSON, no headers, offsets as start + row."""
    found = {}
    for p in (0, 1):
        found[p] = [Record(topic, p, 12 + i, None if i % 3 == 0 else b"key-%d" % i,
                           None if i == 4 else b'{"n":%d,"s":"v%d"}' % (i, p), BASE + i, 0, ()) for i in range(9)]
    return found


def test_quix_jsonl_gzip(bootstrap, spark, tmp_path):
    topic = f"quix-json-{uuid.uuid4().hex[:6]}"
    records = quix_records(topic)

    def encode(rows):
        return gzip.compress(b"".join(json.dumps({
            "_timestamp": r.timestamp_ms, "_value": None if r.value is None else json.loads(r.value),
            # What Quix writes for a null key: the repr of its SinkItem.
            "_key": r.key.decode() if r.key is not None else "<quixstreams.sinks.base.item.SinkItem object at 0x7f3a1c2b>",
        }).encode() + b"\n" for r in rows))

    write_chunks(tmp_path, records, lambda p, r: f"{topic}/{p}/{r.offset:019d}.jsonl.gz", encode, redeliver=False)
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert "layout quix (detected)" in out
    assert_restored(bootstrap, f"{topic}-r", records)


def test_quix_parquet(bootstrap, spark, tmp_path):
    topic = f"quix-parquet-{uuid.uuid4().hex[:6]}"
    records = {p: [r for r in rows if r.value is not None] for p, rows in quix_records(topic).items()}
    records = {p: [Record(topic, p, 12 + i, r.key, r.value, r.timestamp_ms, 0, ()) for i, r in enumerate(rows)]
               for p, rows in records.items()}

    def encode(rows):
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_pylist([{"_timestamp": r.timestamp_ms,
                                              "_key": r.key.decode() if r.key is not None
                                              else "<quixstreams.sinks.base.item.SinkItem object at 0x7f3a1c2b>",
                                              **json.loads(r.value)} for r in rows]), sink)
        return sink.getvalue()

    write_chunks(tmp_path, records, lambda p, r: f"{topic}/{p}/{r.offset:019d}.parquet", encode, redeliver=False)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "quix", "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records)


def test_confluent_field_partitioned_interleaving_is_refused(bootstrap, spark, tmp_path):
    # A FieldPartitioner puts offsets 12, 14, 16 in one folder and 13, 15, 17 in another, both named
    # by their first offset: records carry no offsets, so their order cannot be recovered.
    topic = f"confluent-field-{uuid.uuid4().hex[:6]}"
    rows = archive_records(topic, partitions=1, count=6, headers=False)[0]
    rows = [Record(topic, 0, 12 + i, r.key, r.value, r.timestamp_ms, 0, ()) for i, r in enumerate(rows)]
    for name, chunk in (("color=red", rows[0::2]), ("color=blue", rows[1::2])):
        path = tmp_path / confluent_name(topic, 0, chunk[0], folder=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(avro_bytes(["null", "bytes"], [r.value for r in chunk]))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r", expect_exit=1)
    assert "order cannot be recovered" in out


def test_aiven_csv_value_only_without_encoding(bootstrap, spark, tmp_path):
    # Aiven's defaults keep the value only; with value.encoding=none it is written raw (commas kept).
    topic = f"aiven-value-only-{uuid.uuid4().hex[:6]}"
    records = {p: [Record(topic, p, 12 + i, None, b"v,%d-%d" % (p, i), 0, 0, ()) for i in range(7)] for p in (0, 1)}
    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}",
                 lambda rows: b"\n".join(r.value for r in rows), redeliver=False)
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--peer-value-encoding", "none",
                  "--rename", f"{topic}={topic}-r")
    assert "default: value only" in out
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


def test_aiven_csv_raw_values_that_are_json_objects_are_restored_as_they_are(bootstrap, spark, tmp_path):
    # value.encoding=none writes JSON payloads raw: they start with "{" like jsonl rows, but are no
    # Aiven rows (their fields are the payload's); read as jsonl, every value came back null.
    topic = f"aiven-raw-json-{uuid.uuid4().hex[:6]}"
    values = [b'{"a":1}', b'{"timestamp": 5, "b": [1, 2]}', b'{"value": null, "x": "y"}']
    records = {0: [Record(topic, 0, 3 + i, None, value, 0, 0, ()) for i, value in enumerate(values)]}
    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}",
                 lambda rows: b"\n".join(r.value for r in rows), redeliver=False)
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--peer-value-encoding", "none",
            "--rename", f"{topic}={topic}-r")
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


# ---- #17: archives written with the sinks' default settings ----

def test_aiven_default_csv_restores_tombstones_and_reports_gaps(bootstrap, spark, tmp_path):
    # Aiven defaults: format.output.fields=value, base64; no offsets, so each record's offset is
    # the object's start offset + its line. Offsets cross 100; tombstones are empty lines, one at
    # an object's end and one alone in an (empty) object; objects 104.. leave a gap of 2.
    topic = f"aiven-default-{uuid.uuid4().hex[:6]}"
    values = [b"a", None, b"\x00\xff", None, None, b"b", b"c", None, b"d", b"e", None]
    spans = {0: [(95, 0, 4), (99, 4, 5), (100, 5, 8), (103, 8, 9), (106, 9, 11)], 1: [(7, 0, 11)]}
    expected = {}
    for p, objects in spans.items():
        expected[p] = []
        for start, first, end in objects:
            chunk = values[first:end]
            (tmp_path / f"{topic}-{p}-{start}").write_bytes("\n".join(b64(v) for v in chunk).encode())
            expected[p] += [Record(topic, p, start + i, None, v, 0, 0, ()) for i, v in enumerate(chunk)]
    summary = json.loads(run_cli_stdout("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename",
                                         f"{topic}={topic}-r", "--json"))
    assert summary["produced"] == 22
    assert_restored(bootstrap, f"{topic}-r", expected, timestamps=False)
    assert {"partition": f"{topic}[0]", "duplicates": 0, "gaps": 1, "missing_offsets": 2} in summary["peer_findings"]


def test_aiven_time_bucketed_interleaved_offsets_merge_by_offset(bootstrap, spark, tmp_path):
    # {{timestamp}} from record time: offsets 12, 14, 16 in one folder and 13, 15, 17 in another,
    # plus an at-least-once re-delivery; every record carries its offset.
    topic = f"aiven-hourly-{uuid.uuid4().hex[:6]}"
    records = {p: [Record(topic, p, r.offset, r.key, r.value, r.timestamp_ms, 0,
                          tuple((k, v if v is not None else b"") for k, v in r.headers)) for r in rows]
               for p, rows in archive_records(topic, count=10).items()}
    template = "hour={{timestamp:unit=HH}}/{{topic}}-{{partition}}-{{start_offset}}"
    for p, rows in records.items():
        for hour in (7, 8):
            mine = rows[hour - 7::2]
            for chunk in (mine[:3], mine[3:], mine[1:3]):  # the last one re-delivered under its own name
                path = tmp_path / f"hour={hour:02d}" / f"{topic}-{p}-{chunk[0].offset}"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(path.read_bytes() + b"\n" + aiven_csv(chunk) if path.exists() else aiven_csv(chunk))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--key-template", template, "--peer-fields",
                  FIELDS, "--rename", f"{topic}={topic}-r")
    assert "layout aiven (detected)" in out and "restored once" in out
    assert_restored(bootstrap, f"{topic}-r", records)


def test_confluent_default_header_converter_stores_text(bootstrap, spark, tmp_path):
    # store.kafka.keys=true, store.kafka.headers=true, Connect's default SimpleHeaderConverter:
    # header values are text in the .headers file ("web", not base64).
    topic = f"confluent-text-headers-{uuid.uuid4().hex[:6]}"
    records = {p: [Record(topic, p, r.offset, r.key, r.value, 0, 0,
                          (("source", b"web"), ("source", b"app"), ("empty", None)) if i % 2 else ())
                   for i, r in enumerate(rows)] for p, rows in archive_records(topic, headers=False).items()}
    for p, rows in records.items():
        for i in range(0, len(rows), 4):
            chunk = rows[i:i + 4]
            for role, schema, items in (("", ["null", "bytes"], [r.value for r in chunk]),
                                        (".keys", ["null", "bytes"], [r.key for r in chunk]),
                                        (".headers", CONFLUENT_HEADERS, [[{"key": k, "value": None if v is None
                                                                           else v.decode()} for k, v in r.headers]
                                                                         for r in chunk])):
                path = tmp_path / confluent_name(topic, p, chunk[0], role)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(avro_bytes(schema, items))
    # Offsets as the file's start + row: the archive_records gap is not seen, so expect contiguous rows.
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert "header values stored as text read as text (default" in out
    assert_restored(bootstrap, f"{topic}-r", records, timestamps=False)


def test_lenses_json_partitionby_default_headers_interleaved(bootstrap, spark, tmp_path):
    # PARTITIONBY a field: one partition's offsets alternate between folders; file names carry an
    # offset of the file (here the last); header values are text (SimpleHeaderConverter).
    topic = f"lenses-field-{uuid.uuid4().hex[:6]}"
    records = {p: [Record(topic, p, r.offset, r.key, r.value, r.timestamp_ms, 0, (("source", b"web"),) if i % 2 else ())
                   for i, r in enumerate(rows)] for p, rows in archive_records(topic, count=10).items()}

    def encode(rows):
        return b"".join(json.dumps({
            "key": None if r.key is None else b64(r.key), "keyIsArray": True,
            "value": None if r.value is None else b64(r.value), "valueIsArray": True,
            "headers": {k: v.decode() for k, v in r.headers},
            "metadata": {"timestamp": r.timestamp_ms, "topic": r.topic, "partition": r.partition, "offset": r.offset},
        }).encode() + b"\n" for r in rows)

    for p, rows in records.items():
        for color, mine in (("red", rows[0::2]), ("blue", rows[1::2])):
            for chunk in (mine[:3], mine[3:]):
                path = tmp_path / f"color={color}" / f"{topic}({p:012d}_{chunk[-1].offset:012d}).json"
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(encode(chunk))
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert "layout lenses (detected)" in out
    assert_restored(bootstrap, f"{topic}-r", records)


def test_aiven_raw_values_holding_newlines_are_refused(bootstrap, spark, tmp_path):
    # value.encoding=none: the value at offset 11 held a newline, so the object has one line more
    # than the offsets before the next object; splitting it would invent a record.
    topic = f"aiven-raw-newline-{uuid.uuid4().hex[:6]}"
    (tmp_path / f"{topic}-0-10").write_bytes(b"one\ntwo\nlines")
    (tmp_path / f"{topic}-0-12").write_bytes(b"three")
    out = run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--peer-value-encoding", "none",
                  "--rename", f"{topic}={topic}-r", expect_exit=1)
    assert "a value holding a newline cannot be told from two records" in out


def test_dataframe_reader_reads_peer_archives(spark, tmp_path):
    topic = f"aiven-df-{uuid.uuid4().hex[:6]}"
    records = archive_records(topic, partitions=2, count=7)
    write_chunks(tmp_path, records, lambda p, r: f"{topic}-{p}-{r.offset}", aiven_jsonl, size=3)
    for layout in ("aiven", "auto"):
        rows = (spark.read.format("topicvault").option("layout", layout).option("peer_header_encoding", "base64")
                .load(str(tmp_path)).collect())
        got = {(r.partition, r.offset): (r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in rows}
        want = {(p, r.offset): (r.key, r.value, list(r.headers)) for p, rs in records.items() for r in rs}
        assert got == want and len(rows) == len(want), layout


def test_aiven_jsonl_without_envelope_restores_each_line_as_the_value(bootstrap, spark, tmp_path):
    # Issue #48 case 2: format.output.fields=value, format.output.envelope=false, JsonConverter values
    # whose JSON happens to hold fields named key, value and offset; a tombstone is the line `null`.
    topic = f"aiven-bare-{uuid.uuid4().hex[:6]}"
    lines = [b'{"key":"reader-a","value":"file-1.csv","offset":0}', None,
             b'{"key":"reader-b","value":"file-2.csv","offset":1}', b'{"value":"file-3.csv"}']
    (tmp_path / f"{topic}-0-0").write_bytes(b"\n".join(line or b"null" for line in lines))
    run_cli("restore", "--from", str(tmp_path), "-b", bootstrap, "--layout", "aiven", "--peer-envelope", "false",
            "--peer-value-encoding", "json", "--rename", f"{topic}={topic}-r")
    assert [(r.key, r.value) for r in consume_all(bootstrap, f"{topic}-r")[0]] == [(None, line) for line in lines]
    rows = (spark.read.format("topicvault").option("layout", "aiven").option("peer_envelope", "false")
            .option("peer_value_encoding", "json").load(str(tmp_path)).collect())
    assert [(r.offset, r.value) for r in sorted(rows, key=lambda r: r.offset)] == list(enumerate(lines))
