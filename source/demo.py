"""`topicvault demo`: a full backup and restore on the embedded broker and a local directory."""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from typing import Callable

from confluent_kafka import Producer

from ..core.cluster.kafka import KafkaSettings, confluent_timestamp_type, create_topics, metadata_consumer, read_to_eof
from ..core.local.embedded_broker import EmbeddedBroker
from ..core.local.sandbox import Sandbox, sandbox
from ..core.spark import get_spark
from ..sink.backup import BackupJob, plan_run, run_backup
from .restore.restore_job import RestoreJob, RestoreRequest, plan_restore, run_restore

SOURCE_TOPIC = "demo.orders"
TARGET_TOPIC = "demo.orders.restored"
PARTITIONS = 3


def sample_records(count: int, seed: int = 7) -> list[tuple[int, bytes | None, bytes | None, list, int]]:
    """(partition, key, value, headers, timestamp_ms) with null keys, tombstones, odd headers."""
    rng = random.Random(seed)
    base = 1_760_000_000_000
    records = []
    for i in range(count):
        key = None if i % 17 == 0 else f"customer-{rng.randrange(500)}".encode()
        value = None if i % 23 == 0 else rng.randbytes(rng.randrange(0, 300))
        headers = [("trace", f"{i}".encode()), ("trace", None)] if i % 5 == 0 else []
        records.append((i % PARTITIONS, key, value, headers, base + i))
    return records


def produce(bootstrap: str, records: list, topic: str = SOURCE_TOPIC) -> None:
    """Produce the sample records to `topic`; each partition ends with a single-record batch.

    The embedded broker reports a high watermark of (base offset of the last batch + 1),
    which is only right when that batch holds one record.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    last_per_partition = {}
    for index, (partition, *_rest) in enumerate(records):
        last_per_partition[partition] = index
    held_back = set(last_per_partition.values())
    for index, (partition, key, value, headers, timestamp) in enumerate(records):
        if index not in held_back:
            producer.produce(topic, value, key, partition=partition, timestamp=timestamp, headers=headers or None)
            producer.poll(0)
    producer.flush()
    for index in sorted(held_back):
        partition, key, value, headers, timestamp = records[index]
        producer.produce(topic, value, key, partition=partition, timestamp=timestamp, headers=headers or None)
        producer.flush()


def read_topic(settings: KafkaSettings, topic: str) -> dict[int, list[tuple]]:
    """Every record of every partition, read to partition EOF."""
    consumer = metadata_consumer(settings, **{"enable.partition.eof": True})
    records: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    try:
        for m in read_to_eof(consumer, {(topic, p): 0 for p in range(PARTITIONS)}):
            kind, millis = m.timestamp()
            records[m.partition()].append(
                (m.key(), m.value(), tuple(m.headers() or ()), millis, confluent_timestamp_type(kind))
            )
        return records
    finally:
        consumer.close()


def sample_topic(bootstrap: str, topic: str, count: int) -> None:
    """Create `topic` (PARTITIONS partitions) holding `count` sample records (see sample_records)."""
    create_topics(KafkaSettings.of(bootstrap), {topic: PARTITIONS})
    produce(bootstrap, sample_records(count), topic)


def run_demo(count: int, directory: str | None, master: str | None, say: Callable[[str], None]) -> bool:
    """Run the demo; True when every restored record is identical to its source."""
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="topicvault-demo-") as scratch:
        location = directory or scratch
        settings = KafkaSettings.of(broker.bootstrap)
        say(f"embedded broker at {broker.bootstrap}; backup location {location}")
        create_topics(settings, {SOURCE_TOPIC: PARTITIONS})
        produce(broker.bootstrap, sample_records(count))
        say(f"produced {count:,} records to {SOURCE_TOPIC} ({PARTITIONS} partitions; null keys, tombstones, headers)")

        spark_started = time.monotonic()
        spark = get_spark(master)
        say(f"Spark started in {time.monotonic() - spark_started:.1f} s")

        job = BackupJob(kafka=settings, store_uri=location)
        backup = run_backup(spark, job, plan_run(job, [SOURCE_TOPIC]))
        say(f"backup: {backup.records:,} records, {len(backup.objects)} objects, {backup.bytes:,} bytes "
            f"in {backup.elapsed_s:.1f} s ({backup.records / max(backup.elapsed_s, 1e-9):,.0f} records/s)")

        # The demo's restore state lives and dies with its scratch directory, not in ~/.local/state.
        restore_job = RestoreJob(settings, location, state_uri=os.path.join(scratch, "restore-state"))
        restored = run_restore(spark, restore_job, plan_restore(restore_job, RestoreRequest(renames={SOURCE_TOPIC: TARGET_TOPIC})))
        say(f"restore: {restored.produced:,} records to {TARGET_TOPIC} in {restored.elapsed_s:.1f} s "
            f"({restored.produced / max(restored.elapsed_s, 1e-9):,.0f} records/s)")

        source, target = read_topic(settings, SOURCE_TOPIC), read_topic(settings, TARGET_TOPIC)
        identical, verdict = round_trip_verdict(source, target, count)
        for partition in range(PARTITIONS):
            same = source[partition] == target[partition]
            say(f"  partition {partition}: {len(source[partition]):,} source, {len(target[partition]):,} restored, "
                f"{'identical' if same else 'DIFFERENT'}")
        say(verdict)
        return identical


def round_trip_verdict(source: dict[int, list[tuple]], target: dict[int, list[tuple]], count: int) -> tuple[bool, str]:
    """Whether every record came back (records as read_topic gives them) and the demo's result line, which
    names only what was compared: a LogAppendTime record comes back typed CreateTime (docs/limits.md), so the
    type is compared and claimed only where every source record was CreateTime."""
    kinds = {record[4] for records in source.values() for record in records}
    if kinds <= {0}:
        same = source == target
        fields = "key, value, headers, timestamp, timestamp type CreateTime, order"
    else:  # its values stay; its type cannot (Kafka stamps LogAppendTime with the broker's clock)
        same = ({p: [r[:4] for r in rs] for p, rs in source.items()} == {p: [r[:4] for r in rs] for p, rs in target.items()})
        fields = "key, value, headers, timestamp value, order; LogAppendTime records come back typed CreateTime"
    identical = same and sum(map(len, source.values())) == count
    return identical, (f"result: every record identical ({fields})" if identical
                       else "result: restored topic DIFFERS from the source")


SANDBOX_TOPIC = "orders"  # README's quick start backs it up


def run_sandbox(bucket: str, sample_records: int, say: Callable[[str], None],
                started: Callable[[Sandbox, str | None], None]) -> None:
    """`topicvault sandbox`: a single-node Apache Kafka and a local S3 server with `bucket`, and a
    sample topic SANDBOX_TOPIC of `sample_records` records (0: none), until Ctrl-C or SIGTERM (also
    when started where SIGINT is ignored, as a background job); `started(running, sample topic or
    None)` once both answer."""

    def stop(signum, frame) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    say("starting Apache Kafka (one node) and an S3 server (moto)...")
    try:
        with sandbox(bucket) as running:
            if sample_records > 0:
                sample_topic(running.bootstrap, SANDBOX_TOPIC, sample_records)
            started(running, SANDBOX_TOPIC if sample_records > 0 else None)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        say("sandbox stopped: Kafka and the S3 server are gone, with their data")
