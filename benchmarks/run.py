"""Backup and restore throughput against a bare consumer and a bare producer, side by side.

    .venv/bin/python benchmarks/run.py [--records 1000000] [--size 200] [--partitions 4] [--s3] [--linearity]

One run, one machine, the same data: (a) a bare confluent-kafka consumer reads everything,
(b) `topicvault backup`, (c) a bare idempotent producer writes everything to a fresh topic,
(d) `topicvault restore` to a fresh topic. Then wide topics: backup of 8 and of 256
partitions x 20 records (job time and Spark tasks; issue #18 item 5). Spark start-up is measured separately and left
out of the ratios. Peak RSS of the driver and of the Python workers is sampled from /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from topicvault.core.embedded_broker import EmbeddedBroker
from topicvault.core.kafka import KafkaSettings, create_topics
from topicvault.core.spark import get_spark
from topicvault.sink.backup import BackupJob, plan_run, run_backup
from topicvault.source.restore import RestoreJob, plan_restore, run_restore


class WorkerRssSampler(threading.Thread):
    """Samples the peak resident memory of PySpark's Python worker processes (the daemon and
    the workers it forks) and, apart, of Spark's JVM."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kib = 0
        self.jvm_peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    python_worker = b"-m\x00pyspark." in cmdline
                    jvm = not python_worker and b"java" in cmdline and b"pyspark" in cmdline
                    if not (python_worker or jvm) or int(pid) == os.getpid():
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            kib = int(line.split()[1])
                            if python_worker:
                                self.peak_kib = max(self.peak_kib, kib)
                            else:
                                self.jvm_peak_kib = max(self.jvm_peak_kib, kib)
                except (OSError, ValueError):
                    continue


def produce_data(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> list[bytes]:
    """Produce the data set; each partition ends with a single-record batch (embedded broker's
    high watermark is only right then). Returns the payloads for the bare producer run."""
    rng = random.Random(1)
    payloads = [rng.randbytes(size) for _ in range(1024)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    body = records - partitions
    for i in range(body):
        while True:
            try:
                producer.produce(topic, payloads[i % 1024], b"key-%d" % i, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    for p in range(partitions):
        producer.produce(topic, payloads[p], b"last", partition=p)
        producer.flush()
    return payloads


def bare_consume(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    """Read every record with one consumer, to EOF on all partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.partition.eof": True,
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "queued.max.messages.kbytes": 256 << 10})
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    done, count = set(), 0
    while len(done) < partitions:
        for message in consumer.consume(num_messages=20_000, timeout=0.2):
            if message.error() is None:
                message.key(), message.value(), message.headers(), message.timestamp()
                count += 1
            elif message.error().code() == KafkaError._PARTITION_EOF:
                done.add(message.partition())
    elapsed = time.monotonic() - started
    consumer.close()
    return count, elapsed


def bare_produce(bootstrap: str, topic: str, records: int, partitions: int, payloads: list[bytes]) -> float:
    """Write the same number of records with one idempotent producer."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.messages": 500_000})
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payloads[i % 1024], b"key-%d" % i, partition=i % partitions,
                                 timestamp=1_700_000_000_000 + i)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    return time.monotonic() - started


def fresh_spark(master: str) -> tuple[object, float]:
    """A new Spark session, so its Python workers start empty: the CLI runs one job per process,
    and a worker reused from an earlier job would carry that job's memory into the figures.
    Returns the session and its start-up time (workers started and imports loaded)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    started = time.monotonic()
    spark = get_spark(master)
    # Start the Python workers and load what a job imports, as the first task of any job would.
    spark.sparkContext.parallelize(range(4), 4).map(_load_topicvault).count()
    return spark, time.monotonic() - started


def _load_topicvault(_: int) -> int:
    import topicvault.sink.backup  # noqa: F401
    import topicvault.source.restore  # noqa: F401

    return 0


def measure(master: str, broker: EmbeddedBroker, location: str, records: int, size: int, partitions: int) -> dict:
    """One side-by-side round: bare consume, backup, bare produce, restore, on `records` records."""
    settings = KafkaSettings.of(broker.bootstrap)
    source, bare, restored_topic = (f"bench.{name}.{records}" for name in ("src", "bare", "restored"))
    create_topics(settings, {source: partitions, bare: partitions})
    payloads = produce_data(broker.bootstrap, source, records, size, partitions)

    count, consume_s = bare_consume(broker.bootstrap, source, partitions)
    assert count == records, f"bare consumer read {count} of {records}"

    spark, backup_spark_start_s = fresh_spark(master)
    backup_rss = WorkerRssSampler()
    backup_rss.start()
    job = BackupJob(kafka=settings, store_uri=location)
    backup = run_backup(spark, job, plan_run(job, [source]))
    backup_rss.stop.set()
    assert backup.records == records

    produce_s = bare_produce(broker.bootstrap, bare, records, partitions, payloads)

    spark, restore_spark_start_s = fresh_spark(master)
    restore_rss = WorkerRssSampler()
    restore_rss.start()
    restore_job = RestoreJob(settings, location, state_uri=location.rstrip("/") + "-restore-state")  # beside the run
    restored = run_restore(spark, restore_job, plan_restore(restore_job, [source], {source: restored_topic}, None))
    restore_rss.stop.set()
    assert restored.produced == records

    return {
        "records": records, "size": size, "partitions": partitions,
        "bare_consume_s": consume_s, "backup_s": backup.elapsed_s,
        "bare_produce_s": produce_s, "restore_s": restored.elapsed_s,
        "backup_over_bare_consume": consume_s / backup.elapsed_s,
        "restore_over_bare_produce": produce_s / restored.elapsed_s,
        "backup_worker_peak_rss_mib": backup_rss.peak_kib / 1024,
        "restore_worker_peak_rss_mib": restore_rss.peak_kib / 1024,
        "backup_jvm_peak_rss_mib": backup_rss.jvm_peak_kib / 1024,
        "restore_jvm_peak_rss_mib": restore_rss.jvm_peak_kib / 1024,
        "backup_rss_target_mib": 2 * job.rotation.max_bytes / 2**20 + 300,
        "spark_start_s": [backup_spark_start_s, restore_spark_start_s],
    }


def measure_wide(master: str, broker: EmbeddedBroker, base: str, size: int, per_partition: int = 20) -> dict:
    """Backup job time and Spark tasks of a narrow (8) and a wide (256 partitions) topic holding
    little data, each backed up twice in one session (the faster run counts: the machine is shared)."""
    settings = KafkaSettings.of(broker.bootstrap)
    spark, _ = fresh_spark(master)
    sc = spark.sparkContext
    figures: dict[str, dict] = {}
    for attempt in range(2):
        for partitions in (8, 256):
            topic = f"bench.wide.{partitions}.{attempt}"
            create_topics(settings, {topic: partitions})
            produce_data(broker.bootstrap, topic, partitions * per_partition, size, partitions)
            job = BackupJob(kafka=settings, store_uri=f"{base}-wide-{partitions}-{attempt}")
            planned = plan_run(job, [topic])
            sc.setJobGroup(topic, topic)
            backup = run_backup(spark, job, planned)
            sc.setLocalProperty("spark.jobGroup.id", None)
            assert backup.records == partitions * per_partition
            tracker = sc.statusTracker()
            tasks = sum(tracker.getStageInfo(stage).numTasks
                        for j in tracker.getJobIdsForGroup(topic) for stage in tracker.getJobInfo(j).stageIds)
            best = figures.get(str(partitions))
            if best is None or backup.elapsed_s < best["backup_s"]:
                figures[str(partitions)] = {"partitions": partitions, "records": backup.records,
                                            "backup_s": backup.elapsed_s, "spark_tasks": tasks}
    figures["wide_over_narrow"] = figures["256"]["backup_s"] / figures["8"]["backup_s"]
    return figures


def report_wide(wide: dict) -> None:
    """Print the wide-topic figures."""
    for key in ("8", "256"):
        run = wide[key]
        print(f"wide topics: {run['partitions']:3} partitions x {run['records'] // run['partitions']} records: "
              f"backup {run['backup_s']:.2f} s in {run['spark_tasks']} Spark tasks")
    print(f"wide topics: 256 / 8 partitions backup time = {wide['wide_over_narrow']:.2f}x  (target <= 2.5)")


def report(run: dict) -> None:
    """Print one round's figures."""
    mb = run["records"] * run["size"] / 1e6
    print(f"--- {run['records']:,} records x {run['size']} B over {run['partitions']} partitions")
    for name, key in (("bare consume", "bare_consume_s"), ("backup", "backup_s"),
                      ("bare produce", "bare_produce_s"), ("restore", "restore_s")):
        seconds = run[key]
        print(f"{name:13} {seconds:7.2f} s  {run['records'] / seconds:12,.0f} records/s  {mb / seconds:8.1f} MB/s")
    print(f"backup / bare consume  = {run['backup_over_bare_consume']:.2f}x  (target >= 0.8)")
    print(f"restore / bare produce = {run['restore_over_bare_produce']:.2f}x  (target >= 0.8)")
    print(f"Spark start (excluded): {run['spark_start_s'][0]:.1f} s before backup, {run['spark_start_s'][1]:.1f} s before restore")
    print(f"peak RSS of Python workers: backup {run['backup_worker_peak_rss_mib']:.0f} MiB "
          f"(target <= {run['backup_rss_target_mib']:.0f}), restore {run['restore_worker_peak_rss_mib']:.0f} MiB; "
          f"Spark JVM: backup {run['backup_jvm_peak_rss_mib']:.0f} MiB, restore {run['restore_jvm_peak_rss_mib']:.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--s3", action="store_true", help="back up to the moto S3 server instead of a directory")
    parser.add_argument("--linearity", action="store_true",
                        help="also run 4x the records and print the per-record cost at 4x against 1x")
    parser.add_argument("--output", default="benchmarks/results/latest.json")
    args = parser.parse_args()

    results: dict[str, object] = {"store": "s3" if args.s3 else "local", "master": args.master}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as scratch:
        base = start_s3(scratch) if args.s3 else str(Path(scratch) / "backup")
        sizes = [args.records, 4 * args.records] if args.linearity else [args.records]
        runs = []
        for records in sizes:
            runs.append(measure(args.master, broker, f"{base}-{records}", records, args.size, args.partitions))
            report(runs[-1])
        results["runs"] = runs
        if args.linearity:
            one, four = runs
            results["per_record_cost_4x_over_1x"] = {
                step: (four[f"{step}_s"] / four["records"]) / (one[f"{step}_s"] / one["records"])
                for step in ("bare_consume", "backup", "bare_produce", "restore")
            }
            print("per-record cost at 4x / at 1x (target <= 1.25 for backup and restore): " + ", ".join(
                f"{step} {ratio:.2f}" for step, ratio in results["per_record_cost_4x_over_1x"].items()))
        results["wide"] = measure_wide(args.master, broker, base, args.size)
        report_wide(results["wide"])
        results["driver_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of the driver: {results['driver_peak_rss_mib']:.0f} MiB")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=1))
    print(f"results: {args.output}")
    return 0


def start_moto():
    """Start moto's S3 server in this process and point boto3 at it (AWS_* environment); return the server."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update({"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    return server


def start_s3(scratch: str) -> str:
    """Start moto's S3 server in this process and return a fresh bucket URI."""
    import logging

    import boto3

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    start_moto()
    boto3.client("s3").create_bucket(Bucket="bench-bucket")
    return "s3://bench-bucket/backup"


if __name__ == "__main__":
    sys.exit(main())
