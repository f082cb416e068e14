"""Aiven's S3 sink, run for real in a Kafka Connect worker, restored by `topicvault restore --layout auto`.

The worker is Apache Kafka Connect 4.4.0 (standalone, `core.local.local_connect`); the sink writes
every byte through the libraries Aiven's S3 sink 2.15.0 bundles (commons-for-apache-kafka-connect
0.12.0, aws-java-sdk-s3 1.12.542), driven by tests/connect/aiven (the connector's own jar is not
on Maven Central). It reads one topic of the tests' nasty records and writes to the tests' S3
server; each configuration's archive is restored and compared, field by field, with the source
for every field that configuration keeps. One worker per module; each case is one connector.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field

import boto3
import pytest
from clitools import assert_one_line_error, run_cli
from confluent_kafka import Consumer, TopicPartition
from harness_broker import _like_tansu
from kafkatools import consume_all, create_topic, ends_of, produce_records
from nasty import nasty_records
from topicvault.core.envelope import Record
from topicvault.core.local.local_connect import LocalConnect

PARTITIONS = 2
PER_PARTITION = 22  # two rounds of nasty.py's eleven kinds, and one 1 MiB value per partition
ALL_FIELDS = "key,value,offset,timestamp,headers"
NO_HEADERS = "key,value,offset,timestamp"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
DATE_TEMPLATE = ("{{topic}}/{{partition}}/{{timestamp:unit=yyyy}}-{{timestamp:unit=MM}}-{{timestamp:unit=dd}}/"
                 "{{start_offset:padding=true}}")
YEAR_TEMPLATE = "{{topic}}/{{partition}}/{{timestamp:unit=yyyy}}/{{start_offset}}"
KEY_TEMPLATE = "{{topic}}/{{partition}}/{{key}}/{{start_offset}}"


@pytest.fixture(scope="module")
def connect(bootstrap, s3_endpoint, tmp_path_factory):
    """One standalone Connect worker for the module (its log stays in pytest's tmp dir)."""
    with LocalConnect(bootstrap, folder=tmp_path_factory.mktemp("connect")) as worker:
        yield worker


@pytest.fixture(scope="module")
def source(bootstrap) -> tuple[str, dict[int, list[Record]]]:
    """The nasty topic every case's connector reads from the start, and its records as read back."""
    topic = f"aiven-real-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS, _like_tansu(bootstrap))  # 1 MiB values, year-2100 timestamps
    produce_records(bootstrap, topic, nasty_records(topic, PARTITIONS, PER_PARTITION))
    return topic, consume_all(bootstrap, topic)


@dataclass(frozen=True)
class Case:
    """One sink configuration, what a restore of it needs, and what it keeps."""

    name: str
    config: dict[str, str] = field(default_factory=dict)
    restore_args: tuple[str, ...] = ()
    fields: tuple[str, ...] = ("value",)
    csv: bool = True  # csv cannot tell a null key or value from an empty one
    json_order_lost: bool = False  # schemaless JsonConverter values: Connect holds objects in a HashMap
    names: str = ""  # a pattern every object name matches, if the case says how the sink names them


def committed_up_to(bootstrap: str, group: str, topic: str, ends: dict[int, int]) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
    finally:
        consumer.close()
    return all(tp.offset >= ends[tp.partition] for tp in committed)


def connector_config(topic: str, bucket: str, config: dict[str, str]) -> dict[str, str]:
    """Aiven's sink over `topic` into `bucket` (ByteArrayConverter keys and values unless `config` says)."""
    return {
        "connector.class": "topicvault.harness.AivenS3SinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "key.converter": BYTES,
        "value.converter": BYTES,
        "aws.access.key.id": "testing",
        "aws.secret.access.key": "testing",
        "aws.s3.bucket.name": bucket,
        "aws.s3.endpoint": boto3.session.Session().client("s3").meta.endpoint_url,
        "aws.s3.region": "us-east-1",
        **config,
    }


def sink(connect: LocalConnect, bootstrap: str, topic: str, ends: dict[int, int], bucket: str,
         config: dict[str, str], timeout_s: float = 60.0, name: str | None = None) -> str:
    """Run Aiven's sink over `topic` into `bucket` until it committed every offset; its name."""
    name = name or f"aiven-{uuid.uuid4().hex[:8]}"
    connect.put(name, connector_config(topic, bucket, config))
    deadline = time.monotonic() + timeout_s
    try:
        while not committed_up_to(bootstrap, f"connect-{name}", topic, ends):
            status = connect.status(name)
            failed = [t.get("trace", "") for t in status.get("tasks", []) if t["state"] == "FAILED"]
            assert not failed, f"the sink failed:\n{failed[0][:3000]}"
            stuck = commit_failure(connect, name)
            assert stuck is None, f"the sink cannot commit: {stuck}"
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(f"the sink did not commit {ends} within {timeout_s} s; see {connect.log_path}")
            time.sleep(0.5)
    finally:
        connect.delete(name)
    return name


def commit_failure(connect: LocalConnect, name: str) -> str | None:
    """Why the connector's task rewinds on every commit (the exception after the worker's
    "Offset commit failed" line), or None: such a task is never FAILED, it just writes nothing."""
    lines = connect.log_path.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines[:-1]):
        if f"{{id={name}-0}} Offset commit failed" in line:
            return lines[i + 1]
    return None


def new_bucket() -> str:
    bucket = f"tv-aiven-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3").create_bucket(Bucket=bucket)
    return bucket


def object_keys(bucket: str) -> list[str]:
    pages = boto3.session.Session().client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def kept(record: Record, case: Case) -> tuple:
    """What of a record this configuration keeps (and so what a restore must give back)."""
    def plain(data: bytes | None) -> bytes | None:
        return None if case.csv and data == b"" else data

    def value(data: bytes | None) -> bytes | None:
        if case.json_order_lost and data is not None:
            return json.dumps(json.loads(data), sort_keys=True).encode()
        return plain(data)

    return (plain(record.key) if "key" in case.fields else None,
            value(record.value) if "value" in case.fields else None,
            record.headers if "headers" in case.fields else (),
            record.timestamp_ms if "timestamp" in case.fields else None)


def assert_restores_what_it_kept(bootstrap: str, source: tuple[str, dict[int, list[Record]]], bucket: str,
                                 case: Case) -> str:
    topic, records = source
    target = f"{topic}-{case.name}-{uuid.uuid4().hex[:4]}"
    create_topic(bootstrap, target, PARTITIONS, _like_tansu(bootstrap))  # takes the 1 MiB values
    out = run_cli("restore", "--from", f"s3://{bucket}", "-b", bootstrap, "--layout", "auto",
                  "--rename", f"{topic}={target}", *case.restore_args)
    assert "layout aiven" in out, out
    restored = consume_all(bootstrap, target)
    for p, rows in records.items():
        got = [kept(r, case) for r in restored[p]]
        want = [kept(r, case) for r in rows]
        if "timestamp" not in case.fields:
            got = [g[:3] + (None,) for g in got]
        assert len(got) == len(want), f"partition {p}: {len(got)} records restored, {len(want)} in the source"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"partition {p} record {i} (offset {rows[i].offset}): restored {g!r:.300}, source {w!r:.300}"
    return out


CASES = [
    Case("defaults"),
    # csv cannot keep these records' headers: see test_aiven_csv_headers_never_commit_nasty_records.
    Case("csv-key-value-offset-timestamp", {"format.output.fields": NO_HEADERS, "file.compression.type": "none"},
         ("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(","))),
    Case("csv-gzip", {"format.output.fields": NO_HEADERS, "file.compression.type": "gzip"},
         ("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(","))),
    Case("csv-snappy", {"format.output.fields": NO_HEADERS, "file.compression.type": "snappy"},
         ("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(","))),
    Case("csv-zstd-max-3-records", {"format.output.fields": NO_HEADERS, "file.compression.type": "zstd",
                                    "file.max.records": "3"},
         ("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(","))),
    Case("csv-value-offset-padded-folders",
         {"format.output.fields": "value,offset", "file.compression.type": "none",
          "file.name.template": "{{topic}}/{{partition:padding=true}}/{{start_offset:padding=true}}"},
         ("--peer-fields", "value,offset", "--key-template",
          "{{topic}}/{{partition:padding=true}}/{{start_offset:padding=true}}"), fields=("value",)),
    Case("jsonl-value-only-unpadded", {"format.output.type": "jsonl", "file.compression.type": "none",
                                       "file.name.template": "{{topic}}-{{partition}}-{{start_offset}}"},
         fields=("value",), csv=False),
    Case("json-all-fields-gzip", {"format.output.type": "json", "format.output.fields": ALL_FIELDS,
                                  "header.converter": BYTES}, ("--peer-header-encoding", "base64"),
         fields=tuple(ALL_FIELDS.split(",")), csv=False),
    Case("jsonl-all-fields", {"format.output.type": "jsonl", "format.output.fields": ALL_FIELDS,
                              "header.converter": BYTES}, ("--peer-header-encoding", "base64"),
         fields=tuple(ALL_FIELDS.split(",")), csv=False),
    # Under a template of its own the sink adds no compression suffix (only its default template
    # gets one): these zstd and snappy objects are known by their bytes alone.
    Case("value-zstd-wallclock-date-folders", {"file.compression.type": "zstd", "file.name.template": DATE_TEMPLATE},
         ("--key-template", DATE_TEMPLATE), fields=("value",)),
    Case("csv-snappy-event-time-years-max-3", {"format.output.fields": NO_HEADERS, "file.compression.type": "snappy",
                                               "file.name.timestamp.source": "event", "file.max.records": "3",
                                               "file.name.template": YEAR_TEMPLATE},
         ("--peer-fields", NO_HEADERS, "--key-template", YEAR_TEMPLATE), fields=tuple(NO_HEADERS.split(","))),
    # {{key}} of ByteArrayConverter keys is Java's byte[].toString(), "[B@<identity hash>": every
    # record an object of its own ("null" for null keys, one object per flush for those).
    Case("csv-key-grouped-bytes", {"format.output.fields": NO_HEADERS, "file.compression.type": "none",
                                   "file.name.template": KEY_TEMPLATE},
         ("--peer-fields", NO_HEADERS, "--key-template", KEY_TEMPLATE), fields=tuple(NO_HEADERS.split(",")),
         names=r".+/\d+/(\[B@[0-9a-f]+|null)/\d+"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_aiven_sink_archive_restores_what_it_kept(connect, bootstrap, s3_endpoint, source, case):
    topic, records = source
    bucket = new_bucket()
    ends = ends_of(records)
    sink(connect, bootstrap, topic, ends, bucket, case.config)
    assert object_keys(bucket), "the sink wrote nothing"
    if case.names:
        assert all(re.fullmatch(case.names, k) for k in object_keys(bucket)), object_keys(bucket)[:5]
    assert_restores_what_it_kept(bootstrap, source, bucket, case)


@pytest.mark.parametrize("header_converter, error", [
    (None, "Invalid schema type for ByteArrayConverter: INT8"),
    (BYTES, "NullPointerException"),
])
def test_aiven_csv_headers_never_commit_nasty_records(connect, bootstrap, s3_endpoint, source, header_converter, error):
    # format.output.fields with headers, csv: under Connect's default header converter
    # (SimpleHeaderConverter) a header b"1" arrives as INT8 and commons' csv header writer
    # (ByteArrayConverter) refuses it; under ByteArrayConverter a null header value is a
    # NullPointerException (Base64 of null). Either way the task rewinds on every commit and
    # writes nothing, for ever, in state RUNNING: such a topic has no Aiven csv archive to restore.
    topic, records = source
    bucket = new_bucket()
    config = {"format.output.fields": ALL_FIELDS, **({"header.converter": header_converter} if header_converter else {})}
    with pytest.raises(AssertionError, match="cannot commit") as failure:
        sink(connect, bootstrap, topic, ends_of(records), bucket, config)
    assert error in str(failure.value)
    assert object_keys(bucket) == []


@pytest.fixture(scope="module")
def text_source(bootstrap) -> tuple[str, dict[int, list[Record]]]:
    """A topic of text keys and values (no commas, no newlines), for value.encoding=none."""
    topic = f"aiven-text-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce_records(bootstrap, topic, [
        Record(topic, p, 0, None if i % 5 == 0 else b"key-%d-%d" % (p, i), b"value %d of %d" % (i, p),
               1_700_000_000_000 + i, 0, ()) for p in range(PARTITIONS) for i in range(12)])
    return topic, consume_all(bootstrap, topic)


def test_aiven_csv_value_encoding_none_keeps_keys_base64(connect, bootstrap, s3_endpoint, text_source):
    # 2.15.0's S3SinkConfig.getOutputFields gives the key field the value encoding as well, but
    # commons 0.12.0's csv key writer base64-encodes regardless: raw values beside base64 keys,
    # as the reader assumes (a raw key such as "key-0-1" is no base64 and would be refused).
    topic, records = text_source
    bucket = new_bucket()
    fields = "key,value,offset"
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.fields": fields, "format.output.fields.value.encoding": "none", "file.compression.type": "none"})
    case = Case("csv-raw", restore_args=("--peer-fields", fields, "--peer-value-encoding", "none"),
                fields=("key", "value"))
    assert_restores_what_it_kept(bootstrap, text_source, bucket, case)


def test_aiven_redelivered_objects_are_restored_once(connect, bootstrap, s3_endpoint, source):
    # A sink task that restarts after writing objects but before committing their offsets reads
    # them again: the bucket then holds objects whose offset ranges overlap under other names.
    # Here a second connector on the same bucket starts from offset 5 (its group's committed
    # offset), with file.max.records=3: objects 5-7, 8-10, ... beside the first run's 3-5, 6-8, ...
    topic, records = source
    bucket = new_bucket()
    ends = ends_of(records)
    config = {"format.output.fields": NO_HEADERS, "file.max.records": "3"}
    sink(connect, bootstrap, topic, ends, bucket, config)
    first = set(object_keys(bucket))
    second = f"aiven-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"connect-{second}", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 5) for p in ends], asynchronous=False)
    finally:
        consumer.close()
    sink(connect, bootstrap, topic, ends, bucket, config, name=second)
    assert len(set(object_keys(bucket)) - first) >= 2 * PARTITIONS, "the second run re-delivered nothing under new names"
    case = Case("redelivered", restore_args=("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(",")))
    assert_restores_what_it_kept(bootstrap, source, bucket, case)


def test_aiven_jsonl_from_string_converters_restores_text(connect, bootstrap, s3_endpoint, text_source):
    # StringConverter keys and values: jsonl holds them as JSON text strings, not base64.
    topic, records = text_source
    bucket = new_bucket()
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": NO_HEADERS, "key.converter": STRING,
          "value.converter": STRING})
    case = Case("jsonl-text", restore_args=("--peer-value-encoding", "none"), fields=tuple(NO_HEADERS.split(",")),
                csv=False)
    assert_restores_what_it_kept(bootstrap, text_source, bucket, case)


def test_aiven_event_time_objects_without_offsets_are_refused(connect, bootstrap, s3_endpoint, source):
    # Event-time objects interleave and, without `offset`, their records carry none: the order
    # cannot be recovered, so the restore refuses (naming the fix) and writes nothing.
    topic, records = source
    bucket = new_bucket()
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"file.name.timestamp.source": "event", "file.name.template": YEAR_TEMPLATE})
    target = f"{topic}-refused-{uuid.uuid4().hex[:4]}"
    create_topic(bootstrap, target, PARTITIONS, _like_tansu(bootstrap))
    out = run_cli("restore", "--from", f"s3://{bucket}", "-b", bootstrap, "--layout", "auto",
                  "--rename", f"{topic}={target}", "--key-template", YEAR_TEMPLATE, expect_exit=1)
    assert_one_line_error(out, "cannot be merged", "add offset to format.output.fields")
    assert all(not rows for rows in consume_all(bootstrap, target).values())


def test_aiven_key_grouped_text_keys_restore(connect, bootstrap, s3_endpoint, text_source):
    # {{key}} of StringConverter keys is the key's text ("null" for a null key): one object per
    # key and flush, named for that key's first record, so a partition's objects interleave.
    topic, records = text_source
    bucket = new_bucket()
    template = "{{topic}}/{{partition}}/{{key}}-{{start_offset}}"
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": NO_HEADERS, "key.converter": STRING,
          "value.converter": STRING, "file.name.template": template})
    assert any(k.endswith("/key-0-1-1") for k in object_keys(bucket)), object_keys(bucket)[:5]
    case = Case("key-text", restore_args=("--peer-value-encoding", "none", "--key-template", template),
                fields=tuple(NO_HEADERS.split(",")), csv=False)
    assert_restores_what_it_kept(bootstrap, text_source, bucket, case)


def test_aiven_latest_per_key_templates_are_refused(connect, bootstrap, s3_endpoint, text_source):
    # {{key}} without {{start_offset}}: the sink keeps one record per key (the latest of each
    # flush, written over the one before), so the archive is no copy of the topic.
    topic, records = text_source
    bucket = new_bucket()
    template = "{{topic}}/{{partition}}/{{key}}"
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": NO_HEADERS, "key.converter": STRING,
          "value.converter": STRING, "file.name.template": template})
    assert object_keys(bucket)
    out = run_cli("restore", "--from", f"s3://{bucket}", "-b", bootstrap, "--layout", "aiven",
                  "--key-template", template, expect_exit=1)
    assert_one_line_error(out, "{{start_offset}}", "latest record")


def test_aiven_event_time_objects_named_for_the_flush_restore(connect, bootstrap, s3_endpoint, source):
    # file.name.timestamp.source=event: one flush's records go to one object per year of their
    # own timestamp (1970, 2023, 2100 here), each named for the partition's first record of the
    # flush (TopicPartitionRecordGrouper), so names repeat across years, most objects' names are
    # not their first record's offset, and a partition's objects interleave.
    topic, records = source
    bucket = new_bucket()
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": NO_HEADERS, "file.name.timestamp.source": "event",
          "file.name.template": YEAR_TEMPLATE})
    names = object_keys(bucket)
    starts = [(k.split("/")[1], k.rsplit("/", 1)[1]) for k in names]
    assert len(set(starts)) < len(starts), f"no two years' objects share a name's offset: {names}"
    case = Case("event-years", restore_args=("--key-template", YEAR_TEMPLATE), fields=tuple(NO_HEADERS.split(",")),
                csv=False)
    assert_restores_what_it_kept(bootstrap, source, bucket, case)


JSON = "org.apache.kafka.connect.json.JsonConverter"


def compact(node) -> bytes:
    """JSON as Kafka producers typically write it (and as Aiven's writer does): compact, UTF-8."""
    return json.dumps(node, separators=(",", ":"), ensure_ascii=False).encode()


def json_rows(p: int, i: int) -> tuple[str | None, dict | None]:
    """Partition p's i-th record's key and value as JSON nodes (a null key or a tombstone now and then)."""
    key = None if i % 5 == 0 else (f"k-{p}-{i}" if i % 2 else f"名前-{i}")
    value = None if i % 6 == 3 else {"id": i, "name": f"名前 {i}, \"quoted\"\n", "ok": i % 2 == 0, "ratio": i / 4,
                                     "tags": ["a", "b,c"]}
    return key, value


VALUE_SCHEMA = {"type": "struct", "optional": True, "fields": [
    {"field": "id", "type": "int64"}, {"field": "name", "type": "string"}, {"field": "ok", "type": "boolean"},
    {"field": "ratio", "type": "double"}, {"field": "tags", "type": "array", "items": {"type": "string"}}]}
KEY_SCHEMA = {"type": "string", "optional": True}


@pytest.mark.parametrize("schemas", [False, True], ids=["schemas-disabled", "schemas-enabled"])
def test_aiven_jsonl_from_json_converters_restores_the_json(connect, bootstrap, s3_endpoint, schemas):
    # JsonConverter keys and values: the sink keeps the JSON (the payload, without the schema
    # envelope), so a restore gives it back as compact JSON; a JSON string key keeps its quotes.
    # Without schemas Connect holds a JSON object as a HashMap: the sink writes its fields in the
    # map's order, not the record's ({"name":..,"id":..} for {"id":..,"name":..}).
    topic = f"aiven-json-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS)

    def wrapped(schema: dict, node):
        return node if not schemas or node is None else {"schema": schema, "payload": node}

    rows = {(p, i): json_rows(p, i) for p in range(PARTITIONS) for i in range(12)}
    produce_records(bootstrap, topic, [
        Record(topic, p, 0, None if k is None else compact(wrapped(KEY_SCHEMA, k)),
               None if v is None else compact(wrapped(VALUE_SCHEMA, v)), 1_700_000_000_000 + i, 0, ())
        for (p, i), (k, v) in rows.items()])
    records = consume_all(bootstrap, topic)
    bucket = new_bucket()
    enable = "true" if schemas else "false"
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": NO_HEADERS, "key.converter": JSON,
          "value.converter": JSON, "key.converter.schemas.enable": enable, "value.converter.schemas.enable": enable})
    kept_json = {p: [Record(topic, p, r.offset, None if rows[p, i][0] is None else compact(rows[p, i][0]),
                            None if rows[p, i][1] is None else compact(rows[p, i][1]), r.timestamp_ms, 0, ())
                     for i, r in enumerate(rs)] for p, rs in records.items()}
    case = Case("json-converter", restore_args=("--peer-value-encoding", "json"), fields=tuple(NO_HEADERS.split(",")),
                csv=False, json_order_lost=not schemas)
    assert_restores_what_it_kept(bootstrap, (topic, kept_json), bucket, case)


def test_aiven_worker_killed_after_writing_objects_restores_once(bootstrap, s3_endpoint, tmp_path):
    # A worker SIGKILLed after its task wrote a flush's objects but before their offsets were
    # committed (the harness's test-only hold file keeps it there): a new worker reads those
    # records again from the last committed offset and writes them again.
    topic = f"aiven-kill-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, PARTITIONS, _like_tansu(bootstrap))
    produce_records(bootstrap, topic, nasty_records(topic, PARTITIONS, PER_PARTITION))
    first = ends_of(consume_all(bootstrap, topic))
    bucket, name = new_bucket(), f"aiven-{uuid.uuid4().hex[:8]}"
    config = {"format.output.fields": NO_HEADERS, "file.max.records": "3"}
    (tmp_path / "connect").mkdir()
    hold = tmp_path / "hold"
    # The killed worker's consumer stays in the group until its session times out (45 s by default).
    quick_session = {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "1000"}
    with LocalConnect(bootstrap, config=quick_session, folder=tmp_path / "connect") as worker:
        worker.put(name, {**connector_config(topic, bucket, config), "topicvault.harness.hold.after.flush.file": str(hold)})
        wait_for(lambda: committed_up_to(bootstrap, f"connect-{name}", topic, first), 60, "the first half's commit")
        hold.touch()  # from the next flush on, its objects are written and its offsets never committed
        before = set(object_keys(bucket))
        produce_records(bootstrap, topic, nasty_records(topic, PARTITIONS, PER_PARTITION, seed=2))
        source = (topic, consume_all(bootstrap, topic))
        ends = ends_of(source[1])
        wait_for(lambda: set(object_keys(bucket)) - before, 30, "objects of the second half")
        worker.kill()
        written = {k: last_modified(bucket, k) for k in set(object_keys(bucket)) - before}
        assert not committed_up_to(bootstrap, f"connect-{name}", topic, ends), "the killed flush was committed"
        worker.start()
        sink(worker, bootstrap, topic, ends, bucket, config, name=name)
    rewritten = [k for k, when in written.items() if last_modified(bucket, k) > when]
    assert rewritten, "the new worker wrote none of the killed flush's objects again"
    case = Case("killed", restore_args=("--peer-fields", NO_HEADERS), fields=tuple(NO_HEADERS.split(",")))
    assert_restores_what_it_kept(bootstrap, source, bucket, case)


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"no {what} within {timeout_s} s")
        time.sleep(0.2)
    return found


def last_modified(bucket: str, key: str):
    return boto3.session.Session().client("s3").head_object(Bucket=bucket, Key=key)["LastModified"]


def test_aiven_base64_headers_read_as_text_are_named_in_one_note(connect, bootstrap, s3_endpoint, source):
    # header.converter=ByteArrayConverter: jsonl holds every header value as base64, which the
    # default (text, Connect's default SimpleHeaderConverter) restores as the base64 text itself.
    topic, records = source
    bucket = new_bucket()
    sink(connect, bootstrap, topic, ends_of(records), bucket,
         {"format.output.type": "jsonl", "format.output.fields": ALL_FIELDS, "header.converter": BYTES})
    out = run_cli("restore", "--from", f"s3://{bucket}", "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--dry-run")
    hints = [line for line in out.splitlines() if "--peer-header-encoding base64" in line]
    assert len(hints) == 1 and "base64" in hints[0] and "ByteArrayConverter" in hints[0], out


def test_aiven_text_headers_get_no_base64_note(connect, bootstrap, s3_endpoint):
    topic = f"aiven-headers-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"v", 1_700_000_000_000 + i, 0,
                                              (("trace", b"span %d of 3" % i), ("origin", b"eu west")))
                                       for i in range(3)])
    bucket = new_bucket()
    sink(connect, bootstrap, topic, {0: 3}, bucket, {"format.output.type": "jsonl", "format.output.fields": ALL_FIELDS})
    out = run_cli("restore", "--from", f"s3://{bucket}", "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--dry-run")
    assert "--peer-header-encoding base64" not in out, out
