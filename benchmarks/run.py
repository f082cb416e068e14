"""Backup and restore throughput against a bare consumer and a bare producer, side by side.

    PYTHONPATH=… python benchmarks/run.py [--cases user:200:1000000,…] [--partitions 4] [--s3]
                                          [--broker kafka|embedded] [--no-spark-kafka]
                                          [--linearity] [--no-encryption] [--no-fixed-cost | --only-fixed-cost]
                                          [--no-wide] [--oso PATH/kafka-backup [--only-oso]]
                                          [--repeats 3]

One run, one machine, the same data. For each case (record shape, value size, records), in a
fresh broker (Apache Kafka, one KRaft node, by default; `--broker embedded` for the embedded
one): (a) a bare confluent-kafka consumer reads everything, (b) backup, (c) Spark's own Kafka
source reads the topic with its headers into Parquet, each `--repeats` times in alternation;
then (d) a bare idempotent producer writes the same records to a fresh topic, (e) restore to a
fresh topic, (f) Spark's Kafka sink writes (c)'s rows to a fresh topic, each `--repeats` times
in alternation. Each figure is the median of its runs: one run of anything here varies by up
to 40% (the broker shares the two cores). Shapes (see benchmarks/records.py): user (unique
random values and binary keys, five headers on a fifth of the records, timestamps out of
order), header-heavy, like the test suite's records (null and empty keys and values, binary
bytes, duplicate, null and unicode headers on two records in five), and plain (key and value,
no headers). The first case is also backed up and restored encrypted (a key file from
`topicvault keygen`), reported as a ratio to its unencrypted run.

Spark's Kafka source and sink (spark-sql-kafka-0-10 4.2.0, the newest on Maven Central, on the
installed pyspark) run in a process of their own (benchmarks/spark_kafka.py): their jars go to
Spark with spark.jars, resolved beforehand by ci/spark-kafka-jars.sh.

Each job runs in a fresh Spark context started as the CLI starts its own (no Spark SQL session;
the driver JVM with the CLI's options); Spark start-up is measured apart and left out of the
ratios. Each side's fixed part is measured too, on a topic of one record per
partition: the bare consumer spends about 0.6 s of any read waiting for its EOF (the last fetch
is held for fetch.wait.max.ms), which flatters a backup's ratio at 2 KB; so backup / bare
consume is also printed with each side's fixed part taken off. The fixed cost of one CLI run is
measured apart too: the wall time and the CPU seconds of the whole process tree of `topicvault
backup` and `topicvault restore` (each its own process: interpreter, imports, planning, metadata
calls, topic creation, the tasks, the commit; on Spark also the JVM and Spark start) on a topic of
one record per partition, with the executor `auto` picks (in process) and on Spark. Then wide topics: backup of 8 and of 256 partitions x 20 records
(job time and Spark tasks; issue #18 item 5). Peak RSS of the driver and of the Python
workers is sampled from /proc.

`--oso PATH` also runs osodevops/kafka-backup (the binary of `cargo build --release` of its public
repository; skipped with one line when absent) against topicvault and Kafka's own Java clients
on each case and on one record per partition (benchmarks/against_oso.py: cold caches, every
restore checked record by record); `--only-oso` runs only that. `--cases small` and `--cases
large` name the sizes of issue #51 (1M x 200 B and 250k x 2 KB; 10M x 200 B and 2.5M x 2 KB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from statistics import median
from typing import Callable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from topicvault.core.cluster.kafka import KafkaSettings, create_topics
from topicvault.core.errors import TopicvaultError
from topicvault.core.local.embedded_broker import EmbeddedBroker
from topicvault.core.local.local_kafka import LocalKafka, kafka_jars
from topicvault.core.spark import get_task_session
from topicvault.sink.backup import BackupJob, plan_run, run_backup
from topicvault.source.restore.restore_job import RestoreJob, RestoreRequest, plan_restore, run_restore

sys.path.insert(0, str(Path(__file__).parent))
import against_oso  # noqa: E402  (benchmarks/ is not a package)
import procfs  # noqa: E402
import records as bench_records  # noqa: E402  (benchmarks/ is not a package)

# Named sets of cases for --cases: "large" is where a command's fixed cost no longer dominates (issue #51 item 4).
CASE_SETS = {"small": "user:200:1000000,user:2048:250000", "large": "user:200:10000000,user:2048:2500000"}
DEFAULT_CASES = ("user:200:1000000,user:2048:250000,header-heavy:200:1000000,header-heavy:2048:250000,"
                 "plain:200:1000000,plain:2048:250000")
# Targets of issue #20 (steady ratios) and its fixed cost; issue #33's on users' data.
TARGETS = {(200, "backup"): 1.2, (2048, "backup"): 0.9, (200, "restore"): 0.9, (2048, "restore"): 0.9}
USER_TARGETS = {"backup": 1.5, "restore": 1.0}
# Issue #51 item 1: a 1-record backup and restore each at most 3 s end to end and 4 CPU-s.
FIXED_COST_TARGET_S = 3.0
FIXED_COST_TARGET_CPU_S = 4.0
SPARK_KAFKA_JARS = Path.home() / ".cache" / "topicvault" / "spark-sql-kafka-4.2.0" / "jars"


def start_broker(kind: str):
    """A fresh broker, as a context manager with `.bootstrap`: Apache Kafka (one KRaft node, a 1 GiB
    heap and the JVM's full compilers, as a production broker runs) or the embedded one."""
    if kind == "embedded":
        return EmbeddedBroker()
    return LocalKafka(nodes=1, heap="1g", jvm_options=("-XX:+UseG1GC",))


class SparkKafka:
    """Spark's own Kafka source and sink in a process of their own (benchmarks/spark_kafka.py),
    started once per benchmark run; each call returns the job's seconds (Spark start left out)."""

    def __init__(self, master: str, jars: Path, log: Path) -> None:
        import spark_kafka

        self.answer = spark_kafka.ANSWER
        self._log = open(log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("spark_kafka.py")), "--jars", str(jars), "--master", master],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True)
        self._next()

    def _next(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(self.answer):
                return json.loads(line[len(self.answer):])
        raise RuntimeError(f"benchmarks/spark_kafka.py ended (exit {self.process.wait()}); see {self._log.name}")

    def _ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._next()

    def read(self, bootstrap: str, topic: str, path: str) -> tuple[float, int]:
        """Spark's Kafka source: the topic with headers into Parquet at path; (seconds, rows)."""
        answer = self._ask(op="read", bootstrap=bootstrap, topic=topic, path=path)
        return answer["seconds"], answer["rows"]

    def write(self, bootstrap: str, path: str, topic: str) -> float:
        """Spark's Kafka sink: the Parquet rows at path into topic; seconds."""
        return self._ask(op="write", bootstrap=bootstrap, path=path, topic=topic)["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


class WorkerRssSampler(threading.Thread):
    """Samples the peak resident memory of PySpark's Python worker processes (the daemon and
    the workers it forks) and, apart, of Spark's JVM; processes under `excluded` (the Spark
    session of Spark's own Kafka source and sink) are not topicvault's and left out."""

    def __init__(self, excluded: int | None = None) -> None:
        super().__init__(daemon=True)
        self.excluded = excluded
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
                    if not (python_worker or jvm) or int(pid) == os.getpid() or self._excluded(int(pid)):
                        continue
                    kib = procfs.rss_kib(int(pid)) or 0
                    if python_worker:
                        self.peak_kib = max(self.peak_kib, kib)
                    else:
                        self.jvm_peak_kib = max(self.jvm_peak_kib, kib)
                except (OSError, ValueError):
                    continue

    def _excluded(self, pid: int) -> bool:
        """Whether `pid` is the excluded process or one of its descendants."""
        while self.excluded is not None and pid > 1:
            if pid == self.excluded:
                return True
            pid = procfs.parent_pid(pid)
        return False


# The bare consumers' settings: the fastest bare reader found here (1M records of 200 B, Apache
# Kafka, one KRaft node: 1.2 s, where librdkafka's defaults took 7-8 s). With the defaults a
# partition's fetching pauses for fetch.queue.backoff.ms (1 s) each time its local queue holds
# queued.min.messages (100,000) records, and a fetch takes at most 1 MiB of a partition: the
# consumer sat idle most of the time (0.3 of 2 cores busy) and flattered a backup's ratio 5-6x.
BARE_CONSUMER_SETTINGS = {
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": 16 << 20,  # topicvault's backup fetches 8 MiB: it holds its memory down
    "queued.max.messages.kbytes": 256 << 10,
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 10,
}
# Messages per consume() call: 1,000 took 1.2 s of CPU for the 1M records, 20,000 took 1.8-2.1 s.
BARE_CONSUME_BATCH = 1_000


def _assigned_consumer(bootstrap: str, topic: str, partitions: int) -> tuple[Consumer, float]:
    """The bare consumers' client, assigned every partition from offset 0, and when it started."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.partition.eof": True,
                         "enable.auto.commit": False, **BARE_CONSUMER_SETTINGS})
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer, started


def bare_consume(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    """Read every record with one consumer, to EOF on all partitions."""
    consumer, started = _assigned_consumer(bootstrap, topic, partitions)
    done, count = set(), 0
    while len(done) < partitions:
        for message in consumer.consume(num_messages=BARE_CONSUME_BATCH, timeout=0.2):
            if message.error() is None:
                message.key(), message.value(), message.headers(), message.timestamp()
                count += 1
            elif message.error().code() == KafkaError._PARTITION_EOF:
                done.add(message.partition())
    elapsed = time.monotonic() - started
    consumer.close()
    return count, elapsed


def bare_consume_to_file(bootstrap: str, topic: str, partitions: int, path: str) -> tuple[int, float]:
    """bare_consume, also writing each record's key and value bytes (nothing else: no framing,
    headers or timestamps) to a local file, fsynced before the clock stops: the least a durable
    copy of the data costs, which a backup pays too (its objects are fsynced before its commit)."""
    consumer, started = _assigned_consumer(bootstrap, topic, partitions)
    done, count = set(), 0
    with open(path, "wb", buffering=8 << 20) as out:
        write = out.write
        while len(done) < partitions:
            for message in consumer.consume(num_messages=BARE_CONSUME_BATCH, timeout=0.2):
                if message.error() is None:
                    key, value = message.key(), message.value()
                    message.headers(), message.timestamp()
                    write(key or b"")
                    write(value or b"")
                    count += 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    done.add(message.partition())
        out.flush()
        os.fsync(out.fileno())
    elapsed = time.monotonic() - started
    consumer.close()
    return count, elapsed


def bare_produce(bootstrap: str, topic: str, partitions: int, data: list) -> float:
    """Write the records (key, value, headers) with one idempotent producer."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.messages": 500_000})
    started = time.monotonic()
    bench_records.produce_round_robin(producer, topic, partitions, data)
    return time.monotonic() - started


def alternated(repeats: int, *sides: Callable[[int], object]) -> tuple[list, ...]:
    """Each side's `run(attempt)` for each attempt, in the other order every other time (ABBA:
    no side always runs on a warmer machine); their results, each side's in order."""
    results: tuple[list, ...] = tuple([] for _ in sides)
    for attempt in range(repeats):
        order = list(zip(sides, results))
        for run, side_results in order if attempt % 2 == 0 else reversed(order):
            side_results.append(run(attempt))
    return results


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic a timed run wrote, so that later runs do not meet a fuller broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the deletion is done
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def fresh_spark(master: str) -> tuple[object, float]:
    """A new Spark context started as the CLI's backup and restore start theirs
    (core.spark.get_task_session: no Spark SQL session; the driver JVM, launched once per
    process, with the CLI's TASK_DRIVER_JVM_OPTIONS), so its Python workers start empty: the
    CLI runs one job per process, and a worker reused from an earlier job would carry that job's
    memory into the figures. Returns the session and its start-up time (workers started and
    imports loaded)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    started = time.monotonic()
    spark = get_task_session(master)
    # Start the Python workers and load what a job imports, as the first task of any job would.
    spark.sparkContext.parallelize(range(4), 4).map(_load_topicvault).count()
    return spark, time.monotonic() - started


def _load_topicvault(_: int) -> int:
    import topicvault.sink.backup  # noqa: F401
    import topicvault.source.restore.restore_job  # noqa: F401

    return 0


class CpuMeter:
    """CPU seconds spent while a side runs: the whole machine's (every core's busy time, from
    /proc/stat) and the broker's (its process, from /proc/PID/stat). The rest is the client's:
    the bare client, or topicvault with its Spark workers and JVM. On 2 shared cores this says
    whether a side was short of CPU (the machine near 2 busy cores) and what each side costs,
    which its wall time alone cannot tell apart."""

    def __init__(self, broker) -> None:
        process = broker.members[0].process if hasattr(broker, "members") else broker.process
        self.broker_pid = process.pid
        self.sides: dict[str, list[dict[str, float]]] = {}

    def _now(self) -> tuple[float, float, float]:
        return time.monotonic(), procfs.machine_busy_s(), procfs.cpu_s(self.broker_pid)

    def metered(self, side: str, run: Callable[[], object]) -> object:
        """run(), its CPU seconds recorded under `side`; returns what run() returned."""
        before = self._now()
        result = run()
        after = self._now()
        wall, machine, broker = (b - a for a, b in zip(before, after))
        self.sides.setdefault(side, []).append(
            {"wall_s": wall, "machine_busy_cpu_s": machine, "broker_cpu_s": broker, "client_cpu_s": machine - broker})
        return result

    def summary(self) -> dict[str, dict[str, float]]:
        """Each side's medians: wall, machine, broker and client CPU seconds, and busy cores."""
        return {side: {**{name: median(r[name] for r in runs) for name in runs[0]},
                       "busy_cores": median(r["machine_busy_cpu_s"] / r["wall_s"] for r in runs)}
                for side, runs in self.sides.items()}


def measure(master: str, bootstrap: str, location: str, shape: str, records: int, size: int,
            partitions: int, key_file: str | None = None, repeats: int = 3,
            spark_kafka: SparkKafka | None = None, cpu: CpuMeter | None = None) -> dict:
    """Side-by-side rounds on `records` records of `shape`: bare consume, backup (and Spark's
    Kafka source), then bare produce, restore (and Spark's Kafka sink), each side `repeats`
    times in alternation; the figures are the medians (one run of each varies by up to 40% on
    a shared 2-core machine: the broker runs there too). With `key_file`, also an encrypted
    backup and restore of the same records (once). `cpu` records the CPU each side spends
    (timed runs only, not the fixed parts)."""
    settings = KafkaSettings.of(bootstrap)

    def metered(side: str | None, run: Callable[[], float]) -> float:
        """run(), its CPU recorded under `side` (nothing recorded without a side: the fixed parts)."""
        return cpu.metered(side, run) if cpu is not None and side is not None else run()
    name = f"bench.{shape}.{size}.{records}"
    source = f"{name}.src"
    create_topics(settings, {source: partitions})
    bench_records.produce(bootstrap, source, shape, records, size, partitions)
    # The first idempotent producer of a fresh Apache Kafka waits for its producer-id block
    # ("coordinator load in progress"): one before the timed runs, so no side pays for it.
    warm_up = f"{name}.warm-up"
    create_topics(settings, {warm_up: partitions})
    bare_produce(bootstrap, warm_up, partitions, list(bench_records.records(shape, partitions, size)))
    delete_topic(bootstrap, warm_up)

    def timed_job(run) -> tuple[float, float, float, float]:
        """(job seconds, Spark start seconds, worker and JVM peak RSS MiB) of `run(spark)`."""
        spark, spark_start_s = fresh_spark(master)
        rss = WorkerRssSampler(spark_kafka.process.pid if spark_kafka else None)
        rss.start()
        elapsed_s = run(spark)
        rss.stop.set()
        return elapsed_s, spark_start_s, rss.peak_kib / 1024, rss.jvm_peak_kib / 1024

    def backup_run(keys: tuple[str, ...], to: str, topic: str = source,
                   expected: int = records, side: str | None = None) -> tuple[float, float, float, float]:
        def run(spark) -> float:
            job = BackupJob(kafka=settings, store_uri=to, encryption_keys=keys)
            planned = plan_run(job, [topic])
            result = metered(side, lambda: run_backup(spark, job, planned))
            assert result.records == expected, f"backup wrote {result.records} of {expected}"
            return result.elapsed_s
        return timed_job(run)

    def restore_run(keys: tuple[str, ...], location: str, target: str, topic: str = source,
                    expected: int = records, side: str | None = None) -> tuple[float, float, float, float]:
        def run(spark) -> float:
            job = RestoreJob(settings, location, state_uri=f"{location}-restore-state-{target}", encryption_keys=keys)
            planned = plan_restore(job, RestoreRequest((topic,), {topic: target}))
            result = metered(side, lambda: run_restore(spark, job, planned))
            assert result.produced == expected, f"restore produced {result.produced} of {expected}"
            return result.elapsed_s
        return timed_job(run)

    def consume_run(attempt: int, topic: str = source, expected: int = records, side: str | None = None) -> float:
        count, consume_s = metered(side, lambda: bare_consume(bootstrap, topic, partitions))
        assert count == expected, f"bare consumer read {count} of {expected}"
        return consume_s

    def durable_consume_run(attempt: int) -> float:
        """The bare consumer writing keys and values to a local file, fsynced (see bare_consume)."""
        path = Path(f"{location}-bare-copy-{attempt}")
        path.parent.mkdir(parents=True, exist_ok=True)
        count, consume_s = metered("bare_consume_to_file",
                                   lambda: bare_consume_to_file(bootstrap, source, partitions, str(path)))
        path.unlink()
        assert count == records, f"bare consumer read {count} of {records}"
        return consume_s

    def produce_run(attempt: int, data: list, side: str | None = None) -> float:
        bare = f"{name}.bare.{attempt}"
        create_topics(settings, {bare: partitions})
        produce_s = metered(side, lambda: bare_produce(bootstrap, bare, partitions, data))
        delete_topic(bootstrap, bare)  # the embedded broker keeps every record in memory
        return produce_s

    def restore_attempt(attempt: int, backup: str = f"{location}-0", topic: str = source,
                        expected: int = records, side: str | None = None) -> tuple[float, float, float, float]:
        """A timed restore of `topic` from `backup` into a new topic, deleted after."""
        restored = f"{topic}.restored.{attempt}"
        figures = restore_run((), backup, restored, topic, expected, side)
        delete_topic(bootstrap, restored)
        return figures

    def fixed_parts(count: int) -> dict[str, float]:
        """Each side's time on a topic of one record per partition (the median of `repeats`): what
        it spends whatever the data. The bare consumer's is mostly its wait for the EOF (a fetch at
        the end is held for fetch.wait.max.ms, 500 ms by default), at the end of every read; the
        bare producer's is mostly librdkafka's producer-id timer (500 ms), which a big run spends
        queueing records."""
        tiny = f"{name}.tiny"
        create_topics(settings, {tiny: partitions})
        bench_records.produce(bootstrap, tiny, shape, count, size, partitions)
        tiny_data = list(bench_records.records(shape, count, size))
        sides = {
            "bare_consume_s": lambda attempt: consume_run(attempt, tiny, count),
            "backup_s": lambda attempt: backup_run((), f"{location}-tiny-{attempt}", tiny, count)[0],
            "bare_produce_s": lambda attempt: produce_run(f"tiny.{attempt}", tiny_data),
            "restore_s": lambda attempt: restore_attempt(attempt, f"{location}-tiny-0", tiny, count)[0],
        }
        figures = {side: median(run(attempt) for attempt in range(repeats)) for side, run in sides.items()}
        delete_topic(bootstrap, tiny)
        return figures

    def spark_read_run(attempt: int) -> float:
        seconds, rows = spark_kafka.read(bootstrap, source, f"{location}-spark-{attempt}")
        assert rows == records, f"Spark's Kafka source read {rows} of {records}"
        return seconds

    def spark_write_run(attempt: int) -> float:
        target = f"{name}.spark.{attempt}"
        create_topics(settings, {target: partitions})
        seconds = spark_kafka.write(bootstrap, f"{location}-spark-0", target)
        delete_topic(bootstrap, target)
        return seconds

    spark_read_s = spark_write_s = None
    # The durable copy goes to a local file: beside a backup to S3 it would not compare like with like.
    durable = not location.startswith("s3://")
    sides = [partial(consume_run, side="bare_consume"), lambda attempt: backup_run((), f"{location}-{attempt}", side="backup")]
    sides += [spark_read_run] if spark_kafka is not None else []
    sides += [durable_consume_run] if durable else []
    consumes, backups, *others = alternated(repeats, *sides)
    if spark_kafka is not None:
        spark_reads = others.pop(0)
        spark_read_s = median(spark_reads)
    durable_consumes = others.pop(0) if durable else None
    data = list(bench_records.records(shape, records, size))
    timed_produce = partial(produce_run, data=data, side="bare_produce")
    timed_restore = partial(restore_attempt, side="restore")
    if spark_kafka is None:
        produces, restores = alternated(repeats, timed_produce, timed_restore)
    else:
        produces, restores, spark_writes = alternated(repeats, timed_produce, timed_restore, spark_write_run)
        spark_write_s = median(spark_writes)
    del data, timed_produce  # the records, held by the partial too
    encrypted = {}
    if key_file:
        encrypted["backup_s"] = backup_run((f"file://{key_file}",), location + "-encrypted")[0]
        encrypted["restore_s"] = restore_run((f"file://{key_file}",), location + "-encrypted", f"{name}.enc")[0]

    fixed = fixed_parts(partitions)
    consume_s, backup_s = median(consumes), median(b[0] for b in backups)
    produce_s, restore_s = median(produces), median(r[0] for r in restores)
    if encrypted:
        encrypted["backup_time_over_plain"] = encrypted["backup_s"] / backup_s
        encrypted["restore_time_over_plain"] = encrypted["restore_s"] / restore_s
    return {
        "shape": shape, "records": records, "size": size, "partitions": partitions, "repeats": repeats,
        "bare_consume_s": consume_s, "backup_s": backup_s,
        "bare_produce_s": produce_s, "restore_s": restore_s,
        "bare_consume_runs_s": consumes, "backup_runs_s": [b[0] for b in backups],
        "bare_produce_runs_s": produces, "restore_runs_s": [r[0] for r in restores],
        "backup_over_bare_consume": consume_s / backup_s,
        "bare_consume_to_file_s": median(durable_consumes) if durable else None,
        "bare_consume_to_file_runs_s": durable_consumes,
        "backup_over_bare_consume_to_file": median(durable_consumes) / backup_s if durable else None,
        "load_average": os.getloadavg(),
        "fixed_part_s": fixed,
        "backup_over_bare_consume_fixed_parts_off": _ratio(consume_s - fixed["bare_consume_s"],
                                                           backup_s - fixed["backup_s"]),
        "restore_over_bare_produce": produce_s / restore_s,
        "backup_worker_peak_rss_mib": max(b[2] for b in backups),
        "restore_worker_peak_rss_mib": max(r[2] for r in restores),
        "backup_jvm_peak_rss_mib": max(b[3] for b in backups),
        "restore_jvm_peak_rss_mib": max(r[3] for r in restores),
        "backup_rss_target_mib": 2 * BackupJob(kafka=settings, store_uri=location).rotation.max_bytes / 2**20 + 300,
        "spark_start_s": [backups[0][1], restores[0][1]],
        "encrypted": encrypted,
        "spark_kafka_read_s": spark_read_s, "spark_kafka_write_s": spark_write_s,
        "spark_kafka_read_runs_s": spark_reads if spark_kafka else None,
        "spark_kafka_write_runs_s": spark_writes if spark_kafka else None,
        "backup_over_spark_kafka_read": spark_read_s / backup_s if spark_kafka else None,
        "restore_over_spark_kafka_write": spark_write_s / restore_s if spark_kafka else None,
        "cpu": cpu.summary() if cpu is not None else None,
        "cpu_runs": cpu.sides if cpu is not None else None,
    }


def _ratio(bare_s: float, ours_s: float) -> float | None:
    """bare / ours, or None when either side took no longer than its fixed part (a tiny case)."""
    return bare_s / ours_s if bare_s > 0 and ours_s > 0 else None


def cli_fixed_cost(master: str, bootstrap: str, base: str, partitions: int, repeats: int = 3) -> dict:
    """Wall time and CPU seconds of one `topicvault backup` and one `topicvault restore` process on a
    topic of one record per partition (the CLI's fixed cost: interpreter, imports, planning, metadata
    calls, topic creation, the tasks, the commit), and of a backup of an empty topic (no tasks), each
    with the executor `auto` picks for them (in process: no JVM) and on Spark (`--master`: JVM, Spark
    context, Python workers). CPU is the whole process tree's, orphans included (benchmarks/reaped.py:
    the driver JVM and Spark's Python daemon outlive the CLI's exit); medians of `repeats` runs,
    the executors alternated."""
    settings = KafkaSettings.of(bootstrap)
    tiny, empty = "bench.fixed.tiny", "bench.fixed.empty"
    create_topics(settings, {tiny: partitions, empty: partitions})
    bench_records.produce(bootstrap, tiny, "header-heavy", partitions, 200, partitions)
    environment = {k: v for k, v in os.environ.items() if k != "TOPICVAULT_EXECUTOR"}
    environment["TOPICVAULT_STATE_DIR"] = f"{base}-fixed-state"
    executors = {"auto": ["-b", bootstrap], "spark": ["-b", bootstrap, "--master", master]}
    runs: dict[str, dict[str, list[dict]]] = {executor: {} for executor in executors}
    for attempt in range(repeats):
        for executor, common in executors.items():
            location = f"{base}-fixed-{executor}-{attempt}"
            commands = {
                "backup_empty": ["backup", *common, "--topic", empty, "--to", f"{location}-empty"],
                "backup": ["backup", *common, "--topic", tiny, "--to", location],
                "restore": ["restore", *common, "--topic", tiny, "--from", location,
                            "--rename", f"{tiny}={tiny}.{executor}.{attempt}"],
            }
            for step, command in commands.items():
                runs[executor].setdefault(step, []).append(_reaped(command, environment))
    return {executor: {step: {"wall_s": median(r["wall_s"] for r in done), "cpu_s": median(r["cpu_s"] for r in done),
                              "unqueued_s": median(r["unqueued_s"] for r in done), "runs": done}
                       for step, done in steps.items()}
            for executor, steps in runs.items()}


def _reaped(command: list[str], environment: dict[str, str]) -> dict:
    """One `topicvault COMMAND` process under benchmarks/reaped.py: its wall time, its process tree's CPU."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("reaped.py")), sys.executable, "-m",
                           "topicvault", *command], env=environment, capture_output=True, text=True, timeout=600)
    figures = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"exit": done.returncode}
    if figures["exit"] != 0:
        raise RuntimeError(f"topicvault {command[0]} failed ({figures['exit']}): {done.stderr.strip()[-2000:]}")
    return {"wall_s": figures["wall_s"], "cpu_s": figures["cpu_s"], "unqueued_s": figures["unqueued_s"],
            "load": os.getloadavg()[0]}


def report_fixed_cost(fixed: dict) -> None:
    """Print the fixed-cost figures."""
    for executor, steps in fixed.items():
        print(f"fixed cost of one CLI run, {executor} (one record per partition; medians): " + ", ".join(
            f"{step} {steps[step]['wall_s']:.1f} s ({steps[step]['unqueued_s']:.1f} s not queued) / "
            f"{steps[step]['cpu_s']:.1f} CPU-s"
            for step in ("backup", "restore", "backup_empty")) +
            f" (target <= {FIXED_COST_TARGET_S:.0f} s and {FIXED_COST_TARGET_CPU_S:.0f} CPU-s)")


def measure_wide(master: str, bootstrap: str, base: str, size: int, per_partition: int = 20) -> dict:
    """Backup job time and Spark tasks of a narrow (8) and a wide (256 partitions) topic holding
    little data, each backed up twice in one session (the faster run counts: the machine is shared)."""
    settings = KafkaSettings.of(bootstrap)
    spark, _ = fresh_spark(master)
    sc = spark.sparkContext
    figures: dict[str, dict] = {}
    for attempt in range(2):
        for partitions in (8, 256):
            topic = f"bench.wide.{partitions}.{attempt}"
            create_topics(settings, {topic: partitions})
            bench_records.produce(bootstrap, topic, "plain", partitions * per_partition, size, partitions)
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
    """Print one case's figures."""
    mb = run["records"] * run["size"] / 1e6
    print(f"--- {run['shape']}: {run['records']:,} records x {run['size']} B over {run['partitions']} partitions")
    for name, key in (("bare consume", "bare_consume_s"), ("backup", "backup_s"),
                      ("bare produce", "bare_produce_s"), ("restore", "restore_s")):
        seconds = run[key]
        each = ", ".join(f"{x:.2f}" for x in run[key.removesuffix("_s") + "_runs_s"])
        print(f"{name:13} {seconds:7.2f} s  {run['records'] / seconds:12,.0f} records/s  {mb / seconds:8.1f} MB/s"
              f"  (median of {each})")
    if run.get("spark_kafka_read_s") is not None:
        for name, key in (("Spark source", "spark_kafka_read_s"), ("Spark sink", "spark_kafka_write_s")):
            seconds = run[key]
            each = ", ".join(f"{x:.2f}" for x in run[key.removesuffix("_s") + "_runs_s"])
            print(f"{name:13} {seconds:7.2f} s  {run['records'] / seconds:12,.0f} records/s  "
                  f"{mb / seconds:8.1f} MB/s  (median of {each})")
    size = 200 if run["size"] < 1024 else 2048
    backup_target, restore_target = TARGETS[size, "backup"], TARGETS[size, "restore"]
    if run["shape"] == "user":
        backup_target, restore_target = USER_TARGETS["backup"], USER_TARGETS["restore"]
    print(f"backup / bare consume  = {run['backup_over_bare_consume']:.2f}x  (target >= {backup_target})")
    print(f"restore / bare produce = {run['restore_over_bare_produce']:.2f}x  (target >= {restore_target})")
    if run.get("backup_over_bare_consume_to_file") is not None:
        print(f"backup / bare consume writing keys and values to a local file, fsynced = "
              f"{run['backup_over_bare_consume_to_file']:.2f}x  (median of "
              f"{', '.join(f'{x:.2f}' for x in run['bare_consume_to_file_runs_s'])} s; see docs/performance.md)")
    print(f"load average after the case: {', '.join(f'{x:.1f}' for x in run['load_average'])} (2 cores, shared)")
    for side, spent in (run.get("cpu") or {}).items():
        print(f"CPU of {side} (medians): client {spent['client_cpu_s']:.2f} s, broker {spent['broker_cpu_s']:.2f} s, "
              f"{spent['busy_cores']:.2f} of the machine's {os.cpu_count()} cores busy over {spent['wall_s']:.2f} s")
    if run.get("spark_kafka_read_s") is not None:
        print(f"backup / Spark's Kafka source to Parquet = {run['backup_over_spark_kafka_read']:.2f}x, "
              f"restore / Spark's Kafka sink from Parquet = {run['restore_over_spark_kafka_write']:.2f}x "
              "(spark-sql-kafka-0-10 4.2.0 on pyspark 4.3.0; above 1: topicvault is faster)")
    fixed = run["fixed_part_s"]
    print(f"fixed part of each side (one record per partition): bare consume {fixed['bare_consume_s']:.2f} s, backup "
          f"{fixed['backup_s']:.2f} s, bare produce {fixed['bare_produce_s']:.2f} s, restore {fixed['restore_s']:.2f} s")
    steady = run["backup_over_bare_consume_fixed_parts_off"]
    print(f"backup / bare consume with each side's fixed part taken off = "
          f"{'-' if steady is None else f'{steady:.2f}x'}  (the bare consumer waits for its EOF at the end of any "
          "read; the bare producer's wait overlaps its queueing, so no such figure for restore)")
    if run["encrypted"]:
        enc = run["encrypted"]
        print(f"encrypted: backup {enc['backup_s']:.2f} s = {enc['backup_time_over_plain']:.2f}x the unencrypted time, "
              f"restore {enc['restore_s']:.2f} s = {enc['restore_time_over_plain']:.2f}x")
    print(f"Spark start (excluded): {run['spark_start_s'][0]:.1f} s before backup, {run['spark_start_s'][1]:.1f} s before restore")
    print(f"peak RSS of Python workers: backup {run['backup_worker_peak_rss_mib']:.0f} MiB "
          f"(target <= {run['backup_rss_target_mib']:.0f}), restore {run['restore_worker_peak_rss_mib']:.0f} MiB; "
          f"Spark JVM: backup {run['backup_jvm_peak_rss_mib']:.0f} MiB, restore {run['restore_jvm_peak_rss_mib']:.0f} MiB")


def parse_cases(text: str) -> list[tuple[str, int, int]]:
    """`shape:size:records,…` (or a name of CASE_SETS) -> [(shape, size, records)]."""
    cases = []
    for item in CASE_SETS.get(text, text).split(","):
        shape, size, records = item.split(":")
        if shape not in bench_records.SHAPES:
            raise SystemExit(f"bad case {item!r}: shape is one of {', '.join(bench_records.SHAPES)}")
        cases.append((shape, int(size), int(records)))
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="shape:value size:records, comma-separated")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--s3", action="store_true", help="back up to the moto S3 server instead of a directory")
    parser.add_argument("--linearity", action="store_true",
                        help="also run 4x the first case's records and print the per-record cost at 4x against 1x")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each side per case, in alternation; the figures are medians")
    parser.add_argument("--no-encryption", action="store_true", help="skip the encrypted run of the first case")
    parser.add_argument("--no-fixed-cost", action="store_true", help="skip the CLI fixed-cost runs")
    parser.add_argument("--only-fixed-cost", action="store_true", help="only the CLI fixed-cost runs")
    parser.add_argument("--no-wide", action="store_true", help="skip the wide-topic runs")
    parser.add_argument("--broker", choices=("kafka", "embedded"), default="kafka",
                        help="Apache Kafka (one KRaft node, jars from ci/kafka-jars.sh) or the embedded broker")
    parser.add_argument("--no-spark-kafka", action="store_true",
                        help="skip Spark's own Kafka source and sink (jars from ci/spark-kafka-jars.sh)")
    parser.add_argument("--oso", type=Path, help="osodevops/kafka-backup's binary: also run it against topicvault "
                        "and Kafka's Java clients (benchmarks/against_oso.py); skipped when absent")
    parser.add_argument("--only-oso", action="store_true", help="only the runs against OSO (with --oso; "
                        "--no-fixed-cost and --only-fixed-cost apply to them too)")
    parser.add_argument("--output", default="benchmarks/results/latest.json")
    args = parser.parse_args()
    args.no_spark_kafka = args.no_spark_kafka or args.only_fixed_cost or args.only_oso
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    cases = parse_cases(args.cases)
    if args.broker == "kafka":
        try:
            kafka_jars()
        except TopicvaultError as exc:
            parser.error(str(exc))
    jars = Path(os.environ.get("TOPICVAULT_SPARK_KAFKA_JARS") or SPARK_KAFKA_JARS)
    if not args.no_spark_kafka and not any(jars.glob("spark-sql-kafka-*.jar")):
        parser.error(f"no spark-sql-kafka jar in {jars}: run `bash ci/spark-kafka-jars.sh` (or pass --no-spark-kafka)")

    results: dict[str, object] = {"store": "s3" if args.s3 else "local", "master": args.master,
                                  "broker": args.broker, "load_average_at_start": os.getloadavg()}
    spark_kafka = None
    with tempfile.TemporaryDirectory() as scratch:
        if args.oso is not None or args.only_oso:
            against_oso.run(args.oso, [] if args.only_fixed_cost else cases, args.partitions, args.repeats,
                            Path(scratch), results, fixed_cost=not args.no_fixed_cost)
            if args.only_oso:
                return _save(results, args.output)
        if not args.no_spark_kafka:
            spark_kafka = SparkKafka(args.master, jars, Path(scratch) / "spark-kafka.log")
            results["spark_kafka"] = "spark-sql-kafka-0-10_2.13 4.2.0"
        try:
            run_all(args, cases, scratch, results, spark_kafka)
        finally:
            if spark_kafka is not None:
                spark_kafka.close()
    return _save(results, args.output)


def _save(results: dict, output: str) -> int:
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(results, indent=1))
    print(f"results: {output}")
    return 0


def run_all(args: argparse.Namespace, cases: list[tuple[str, int, int]], scratch: str, results: dict,
            spark_kafka: SparkKafka | None) -> None:
    """Every part of the benchmark the arguments ask for, each on a fresh broker; figures into `results`."""
    base = start_s3(scratch) if args.s3 else str(Path(scratch) / "backup")
    key_file = None
    if not args.no_encryption:
        key_file = str(Path(scratch) / "bench.key")
        subprocess.run([sys.executable, "-m", "topicvault", "keygen", key_file], check=True, capture_output=True)
    if not args.no_fixed_cost:
        with start_broker(args.broker) as broker:
            results["cli_fixed_cost"] = cli_fixed_cost(args.master, broker.bootstrap, base, args.partitions,
                                                       args.repeats)
        report_fixed_cost(results["cli_fixed_cost"])
        if args.only_fixed_cost:
            return
    runs = []
    for index, (shape, size, records) in enumerate(cases):
        # A broker of its own per case: the embedded broker keeps every record in memory and
        # slows as it fills, which would favour whichever side ran first.
        with start_broker(args.broker) as case_broker:
            runs.append(measure(args.master, case_broker.bootstrap, f"{base}-{index}", shape, records, size,
                                args.partitions, key_file if index == 0 else None, args.repeats, spark_kafka,
                                CpuMeter(case_broker)))
        report(runs[-1])
    results["runs"] = runs
    if args.linearity:
        shape, size, records = cases[0]
        one = runs[0]
        with start_broker(args.broker) as case_broker:
            four = measure(args.master, case_broker.bootstrap, f"{base}-4x", shape, 4 * records, size,
                           args.partitions, repeats=args.repeats)
        report(four)
        results["run_4x"] = four
        results["per_record_cost_4x_over_1x"] = {
            step: (four[f"{step}_s"] / four["records"]) / (one[f"{step}_s"] / one["records"])
            for step in ("bare_consume", "backup", "bare_produce", "restore")
        }
        print("per-record cost at 4x / at 1x (target <= 1.25 for backup and restore): " + ", ".join(
            f"{step} {ratio:.2f}" for step, ratio in results["per_record_cost_4x_over_1x"].items()))
    if not args.no_wide:
        with start_broker(args.broker) as broker:
            results["wide"] = measure_wide(args.master, broker.bootstrap, base, 200)
        report_wide(results["wide"])
    results["driver_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results["load_average_at_end"] = os.getloadavg()
    print(f"peak RSS of the driver: {results['driver_peak_rss_mib']:.0f} MiB; load average at start "
          f"{results['load_average_at_start'][0]:.1f}, at end {results['load_average_at_end'][0]:.1f}")


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
