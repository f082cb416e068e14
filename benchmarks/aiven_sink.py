"""Throughput of Aiven's S3 sink (its real writing code in Kafka Connect) beside `topicvault backup`.

    python benchmarks/aiven_sink.py [--records 200000] [--size 500] [--partitions 4] [--master local[2]]
                                    [--fields key,value,offset,timestamp,headers] [--format jsonl]
                                    [--compression gzip] [--logs DIR]

One run, on one topic of users' shape (benchmarks/records.py), on Apache Kafka (one KRaft node,
as benchmarks/run.py starts it) and moto's S3 server (its own process, core/local/local_s3.py):

- Aiven's sink: commons-for-apache-kafka-connect 0.12.0 driven as 2.15.0's task drives it
  (tests/connect/aiven), in a standalone Kafka Connect 4.4.0 worker (core/local/local_connect.py,
  offsets committed every second). Timed from the connector's creation to the moment every
  offset of the topic is committed (polled every 0.1 s): its objects are written by then.
- topicvault backup of the same topic into another bucket, as benchmarks/run.py times it (the
  job's own elapsed time; the Spark start is left out, as the worker's start is).

Both write every field by default (Aiven: jsonl with key, value, offset, timestamp and headers,
header.converter=ByteArrayConverter, gzip; topicvault: its default Parquet). Prints records/s of
each, the ratio, the load average; the figures go to `--logs`/aiven_sink.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import boto3
from confluent_kafka import Consumer, TopicPartition
from topicvault.core.cluster.kafka import KafkaSettings, create_topics
from topicvault.core.local.local_connect import LocalConnect
from topicvault.core.local.local_s3 import moto_server
from topicvault.core.local.sandbox import SANDBOX_CREDENTIALS
from topicvault.core.spark import get_task_session
from topicvault.sink.backup import BackupJob, plan_run, run_backup

sys.path.insert(0, str(Path(__file__).parent))
import records as bench_records  # noqa: E402  (benchmarks/ is not a package)
from run import start_broker  # noqa: E402

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def aiven_sink(worker: LocalConnect, bootstrap: str, endpoint: str, topic: str, bucket: str, ends: dict[int, int],
               args: argparse.Namespace, timeout_s: float = 1800) -> float:
    """Seconds from the connector's creation until it committed every offset of `topic`."""
    name = f"aiven-bench-{uuid.uuid4().hex[:6]}"
    config = {
        "connector.class": "topicvault.harness.AivenS3SinkConnector", "tasks.max": "1", "topics": topic,
        "key.converter": BYTES, "value.converter": BYTES, "header.converter": BYTES,
        "aws.access.key.id": SANDBOX_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws.secret.access.key": SANDBOX_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "aws.s3.bucket.name": bucket, "aws.s3.endpoint": endpoint, "aws.s3.region": "us-east-1",
        "format.output.type": args.format, "format.output.fields": args.fields,
        "file.compression.type": args.compression,
    }
    started = time.monotonic()
    worker.put(name, config)
    try:
        while True:
            done = committed(bootstrap, f"connect-{name}", topic, args.partitions)
            if all(done[p] >= end for p, end in ends.items()):
                return time.monotonic() - started
            states = [t["state"] for t in worker.status(name).get("tasks", [])]
            if "FAILED" in states or time.monotonic() - started > timeout_s:
                raise SystemExit(f"the sink did not finish ({states}); see {worker.log_path}")
            time.sleep(0.1)
    finally:
        worker.delete(name)


def _load_topicvault(_: int) -> int:
    import topicvault.sink.backup  # noqa: F401

    return 0


def fresh_spark(master: str) -> tuple[object, float]:
    """A Spark context started as the CLI's backup starts its own, its workers warmed up (as
    benchmarks/run.py does; defined here, as Spark's workers cannot import run.py); its start seconds."""
    started = time.monotonic()
    spark = get_task_session(master)
    spark.sparkContext.parallelize(range(4), 4).map(_load_topicvault).count()
    return spark, time.monotonic() - started


def topicvault_backup(bootstrap: str, topic: str, uri: str, records: int, master: str) -> tuple[float, float]:
    """(job seconds, Spark start seconds) of `topicvault backup` of `topic` into `uri`."""
    spark, spark_start_s = fresh_spark(master)
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=uri)
    result = run_backup(spark, job, plan_run(job, [topic]))
    assert result.records == records, f"backup wrote {result.records} of {records}"
    return result.elapsed_s, spark_start_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=500, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--fields", default="key,value,offset,timestamp,headers", help="Aiven format.output.fields")
    parser.add_argument("--format", default="jsonl", help="Aiven format.output.type: csv, jsonl or json")
    parser.add_argument("--compression", default="gzip", help="Aiven file.compression.type")
    parser.add_argument("--logs", default=None, help="folder for the logs and aiven_sink.json (default: a temp dir)")
    args = parser.parse_args()
    logs = Path(args.logs or tempfile.mkdtemp(prefix="aiven-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    results: dict = {"args": vars(args), "load_average_at_start": os.getloadavg()}
    with ExitStack() as stack:
        endpoint = stack.enter_context(moto_server(logs))
        os.environ.update({"AWS_ENDPOINT_URL": endpoint, **SANDBOX_CREDENTIALS})
        s3 = boto3.client("s3", endpoint_url=endpoint)
        for bucket in ("aiven", "topicvault"):
            s3.create_bucket(Bucket=bucket)
        broker = stack.enter_context(start_broker("kafka"))
        topic = "bench.aiven.src"
        create_topics(KafkaSettings.of(broker.bootstrap), {topic: args.partitions})
        bench_records.produce(broker.bootstrap, topic, "user", args.records, args.size, args.partitions)
        ends = end_offsets(broker.bootstrap, topic, args.partitions)
        assert sum(ends.values()) == args.records, ends
        worker = stack.enter_context(LocalConnect(broker.bootstrap, heap="1g", folder=logs))
        aiven_s = aiven_sink(worker, broker.bootstrap, endpoint, topic, "aiven", ends, args)
        objects = sum(page.get("KeyCount", 0) for page in s3.get_paginator("list_objects_v2").paginate(Bucket="aiven"))
        backup_s, spark_start_s = topicvault_backup(broker.bootstrap, topic, "s3://topicvault/backup", args.records,
                                                    args.master)
    results.update({
        "records": args.records, "aiven_s": aiven_s, "aiven_objects": objects,
        "aiven_records_per_s": args.records / aiven_s, "backup_s": backup_s, "spark_start_s": spark_start_s,
        "backup_records_per_s": args.records / backup_s, "backup_over_aiven": aiven_s / backup_s,
        "load_average_at_end": os.getloadavg(),
    })
    (logs / "aiven_sink.json").write_text(json.dumps(results, indent=2))
    print(f"{args.records} records of {args.size} B, {args.partitions} partitions; Aiven {args.format} "
          f"[{args.fields}] {args.compression}")
    print(f"Aiven's sink (Kafka Connect): {aiven_s:.1f} s, {results['aiven_records_per_s']:,.0f} records/s, "
          f"{objects} objects")
    print(f"topicvault backup:            {backup_s:.1f} s, {results['backup_records_per_s']:,.0f} records/s "
          f"(Spark start {spark_start_s:.1f} s left out)")
    print(f"topicvault / Aiven records/s: {results['backup_over_aiven']:.2f}; load average at start "
          f"{results['load_average_at_start'][0]:.1f}, at end {results['load_average_at_end'][0]:.1f}; "
          f"figures in {logs / 'aiven_sink.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
