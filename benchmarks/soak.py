"""A soak of continuous backup: a follower, a standby, compact and expire under live traffic.

    python benchmarks/soak.py --minutes 30 [--broker kafka|embedded] [--rate 230] [--partitions 4]
                              [--flush-interval 3] [--compact-every 25] [--master local[2]] [--logs DIR]
    make soak MINUTES=30 [SOAK_ARGS="--broker embedded"]

It starts its own broker (Apache Kafka, one KRaft node, as benchmarks/run.py does; or the
embedded one) and S3 server (moto, core/local/local_s3.py), then for the given time: a producer
writes about `--rate` records a second of users' shape (benchmarks/records.py: random binary
keys, values of 100 B to 1 KB, five headers on one record in five, timestamps jittered by up to
5 s) to a topic of `--partitions` partitions; `topicvault backup --follow` (a micro-batch every
`--flush-interval` s) backs it up into the bucket; `topicvault restore --follow` beside it keeps
a standby topic; `topicvault compact` runs every `--compact-every` s (merging into objects of
`--compact-max-records`) and `topicvault expire` once, half-way, dropping whole objects older
than a tenth of the run (at least 90 s). At the end the traffic stops,
the follower and the standby catch up and are stopped with SIGTERM, and a fresh `restore`
writes a third topic. Checked record by record, per partition, in order (no record missing,
added or repeated): the standby's topic equals the source (key, value, headers, timestamp and
its type), and the fresh restore equals the source from the archive's start (after the
expire) on.

Reported: crashes (Python faulthandler output and crashed workers in the logs, segfaults in the
kernel log where `dmesg` is readable), restarts (the follower's topicvault_restarts_total and
the standby's JSON restart lines), lag over time (source end minus the follower's committed
end, and minus the standby topic's end, sampled every few seconds), and the resident memory of
every process it started (sampled from /proc every few seconds: each CLI's Python driver, its
Spark JVM and its Python workers, the broker, the S3 server), the peak and the peak in each
quarter of the run (flat or growing). Every process logs to a file in `--logs` and is stopped
at the end, on Ctrl-C, SIGTERM or an error too. The figures go to `--logs`/soak.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from topicvault.core.cluster.kafka import KafkaSettings, create_topics
from topicvault.core.local.embedded_broker import DIE_WITH_PARENT, EmbeddedBroker, free_port
from topicvault.core.local.local_kafka import LocalKafka, kafka_jars
from topicvault.core.local.local_s3 import moto_server
from topicvault.core.local.sandbox import SANDBOX_CREDENTIALS

sys.path.insert(0, str(Path(__file__).parent))
import procfs  # noqa: E402  (benchmarks/ is not a package)

TOPIC = "soak.orders"
STANDBY_TOPIC = "soak.orders.standby"
FRESH_TOPIC = "soak.orders.restored"
BUCKET = "soak"
LOCATION = f"s3://{BUCKET}/orders"
SAMPLE_EVERY_S = 3.0
USER_JITTER_MS = 5_000
# Lines in a CLI's log that mean a process crashed (faulthandler's header, Spark's worker-crash error).
CRASH_PATTERNS = ("Fatal Python error", "Python worker exited unexpectedly", "Segmentation fault",
                  "SIGSEGV", "core dumped", "hs_err_pid")


# --- processes --------------------------------------------------------------------------------


@dataclass
class Started:
    """A process the soak started: its role, log and Popen."""

    role: str
    log: Path
    process: subprocess.Popen

    def stop(self, grace_s: float = 120.0) -> int | None:
        """SIGTERM the topicvault process only (a graceful stop: the running micro-batch or round
        finishes and commits), then SIGKILL its whole session (JVM, workers) after `grace_s`."""
        if self.process.poll() is None:
            try:
                self.process.send_signal(signal.SIGTERM)
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        else:  # the driver ended: whatever of its session is left (a JVM, a worker) goes too
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return self.process.returncode


class Launcher:
    """Starts topicvault commands, each in a session of its own with its output in a log file."""

    def __init__(self, logs: Path, env: dict[str, str], sampler: "RssSampler") -> None:
        self.logs, self.env, self.sampler = logs, env, sampler
        self.started: list[Started] = []
        self._counts: dict[str, int] = {}

    def start(self, role: str, *args: str) -> Started:
        """`topicvault *args` as a new process of `role`; its log is `role`(-n).log."""
        n = self._counts[role] = self._counts.get(role, 0) + 1
        log = self.logs / (f"{role}.log" if n == 1 else f"{role}-{n}.log")
        with open(log, "ab") as out:
            process = subprocess.Popen([sys.executable, "-m", "topicvault", *args], stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=out, start_new_session=True, env=self.env,
                                       preexec_fn=DIE_WITH_PARENT)
        started = Started(role, log, process)
        self.started.append(started)
        self.sampler.watch(role, process.pid)
        return started

    def run(self, role: str, *args: str, timeout_s: float = 600.0) -> Started:
        """`topicvault *args` to its end (killed after `timeout_s`)."""
        started = self.start(role, *args)
        try:
            started.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            started.stop(10)
        return started

    def stop_all(self) -> None:
        for started in reversed(self.started):
            if started.process.poll() is None:
                started.stop(30)


def start_broker(kind: str, logs: Path):
    """The broker, as benchmarks/run.py starts it: Apache Kafka (one KRaft node, a 1 GiB heap) or
    the embedded one; its log stays in `logs`."""
    if kind == "embedded":
        return EmbeddedBroker(log_dir=str(logs))
    return LocalKafka(nodes=1, heap="1g", jvm_options=("-XX:+UseG1GC",), folder=logs / "kafka")


def broker_pids(broker) -> list[int]:
    if isinstance(broker, EmbeddedBroker):
        return [broker.process.pid]
    return [node.process.pid for node in broker.members]


# --- memory ---------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = procfs.parent_pid(int(pid))
        except OSError:
            continue
        tree.setdefault(parent, []).append(int(pid))
    return tree


def _kind(pid: int, root: int) -> str:
    """driver (the process started), jvm (Spark's), worker (a PySpark daemon or worker), source-runner or other."""
    if pid == root:
        return "driver"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "other"
    if b"python_streaming_source_runner" in cmdline:
        return "source-runner"  # the Python process of the stream's source (offsets, planning)
    if b"pyspark.daemon" in cmdline or b"pyspark.worker" in cmdline:
        return "worker"
    if b"java" in cmdline:
        return "jvm"
    return "other"


class RssSampler(threading.Thread):
    """Resident memory of every process under the watched roots, by role and kind, every
    SAMPLE_EVERY_S from its start until `stop` is set: the peak of one process of each (role,
    kind), and the peak per sample time for the curve. It reads /proc only."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="rss")
        self.stop = threading.Event()
        self.started_at = time.monotonic()
        self.roots: list[tuple[str, int]] = []
        self.peak_kib: dict[str, int] = {}  # "role/kind" -> the largest one process reached
        self.samples: list[tuple[float, dict[str, int]]] = []  # (seconds, role/kind -> largest process now)
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY_S):
            self.sample(time.monotonic() - self.started_at)

    def watch(self, role: str, pid: int) -> None:
        with self._lock:
            self.roots.append((role, pid))

    def sample(self, elapsed_s: float) -> None:
        tree = _children()
        now: dict[str, int] = {}
        with self._lock:
            roots = list(self.roots)
        root_pids = {pid for _, pid in roots}
        for role, root in roots:
            stack = [root]
            while stack:
                pid = stack.pop()
                # Another role's process (the broker and the S3 server are the soak's children) counts there.
                stack.extend(child for child in tree.get(pid, ()) if child not in root_pids)
                kib = procfs.rss_kib(pid)
                if kib is None:
                    continue
                name = f"{role}/{_kind(pid, root)}"
                now[name] = max(now.get(name, 0), kib)
        with self._lock:
            for name, kib in now.items():
                self.peak_kib[name] = max(self.peak_kib.get(name, 0), kib)
            self.samples.append((elapsed_s, now))

    def quarters(self, duration_s: float) -> dict[str, list[int]]:
        """Per role/kind, the peak (MiB) in each quarter of the traffic's time: flat or growing."""
        out: dict[str, list[int]] = {}
        for elapsed, now in self.samples:
            quarter = max(0, min(int(4 * elapsed / duration_s), 3)) if duration_s > 0 else 0
            for name, kib in now.items():
                row = out.setdefault(name, [0, 0, 0, 0])
                row[quarter] = max(row[quarter], round(kib / 1024))
        return out


# --- traffic --------------------------------------------------------------------------------


class Traffic(threading.Thread):
    """An idempotent producer writing about `rate` records a second of users' shape, round-robin
    over the partitions, until `stop` is set; `.acked` counts delivered records. Its producer is
    used from this thread only."""

    def __init__(self, bootstrap: str, partitions: int, rate: float, seed: int = 41) -> None:
        super().__init__(daemon=True, name="traffic")
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.sent = self.acked = 0
        self.errors: list[str] = []

    def record(self, i: int) -> tuple[bytes | None, bytes, list | None, int]:
        rng = self.rng
        kind = i % 20
        key = None if kind == 0 else b"" if kind == 1 else rng.randbytes(16)
        headers = None
        size = rng.randrange(100, 1024)
        if i % 5 == 2:
            trace = rng.randbytes(16)
            headers = [("trace", trace), ("trace", trace[:8]), ("gelöscht", None), ("größe-名前", b"%d" % size),
                       ("empty", b"")]
        timestamp = int(time.time() * 1000) + rng.randrange(-USER_JITTER_MS, USER_JITTER_MS)
        return key, rng.randbytes(size), headers, timestamp

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked += 1
        elif len(self.errors) < 20:
            self.errors.append(str(error))

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "log_level": 3})
        tick, started, i = 0.1, time.monotonic(), 0
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while i < due:
                key, value, headers, timestamp = self.record(i)
                try:
                    producer.produce(TOPIC, value, key, partition=i % self.partitions, timestamp=timestamp,
                                     headers=headers, on_delivery=self._delivered)
                except BufferError:
                    break
                i += 1
            self.sent = i
            producer.poll(tick)
        producer.flush(60)
        # One single-record batch per partition last: the embedded broker's high watermark is only
        # right when a partition ends with one (benchmarks/records.py).
        for partition in range(self.partitions):
            producer.produce(TOPIC, b"end", b"end", partition=partition, on_delivery=self._delivered)
            producer.flush(30)
        self.sent = i + self.partitions


# --- observation ----------------------------------------------------------------------------


def scrape(port: int) -> dict[str, float]:
    """The follower's metrics: `name{labels}` -> value (summed over labels under `name`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            number = float(value)
        except ValueError:
            continue
        out[name_labels] = number
        if "{" in name_labels:
            out[name] = out.get(name, 0.0) + number
    return out


class Watermarks:
    """High watermarks of a topic's partitions (consumers used from one thread only)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.consumers: dict[str, Consumer] = {}
        self.errors: dict[str, str] = {}  # the last failure per topic, for the report

    def ends(self, topic: str, partitions: int) -> list[int] | None:
        """The partitions' high watermarks, or None (the standby's topic before its first round, a
        slow broker); a consumer that failed is replaced, so it does not keep a stale view."""
        consumer = self.consumers.get(topic)
        if consumer is None:
            consumer = self.consumers[topic] = Consumer({"bootstrap.servers": self.bootstrap, "log_level": 3,
                                                         "group.id": f"soak-watermarks-{topic}"})
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        except Exception as exc:
            self.errors[topic] = str(exc)
            self.consumers.pop(topic).close()
            return None

    def close(self) -> None:
        for consumer in self.consumers.values():
            consumer.close()


def json_lines(log: Path) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def json_output(log: Path) -> dict:
    """The JSON document a command printed (its log may hold other lines before it)."""
    text = log.read_text(errors="replace")
    return json.loads(text[text.index("{"):])


def crash_lines(logs: Path) -> list[str]:
    """Lines of any log that say a process crashed."""
    found = []
    for log in sorted(logs.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(pattern in line for pattern in CRASH_PATTERNS):
                found.append(f"{log.name}: {line.strip()[:300]}")
    return found


def kernel_log() -> list[str] | None:
    """`dmesg` lines, or None where it is not readable."""
    try:
        done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.splitlines() if done.returncode == 0 else None


# --- the check ------------------------------------------------------------------------------


def digests(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, digest of key, value, headers, timestamp and its type) of every record, per
    partition in order: a digest instead of the record keeps three copies of a long soak small."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-check-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "log_level": 3,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    at_eof: set[int] = set()
    deadline = time.monotonic() + 600
    try:
        while len(at_eof) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no end of {topic} within 600 s")
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {error.str()}")
                    at_eof.add(message.partition())
                    continue
                kind, timestamp = message.timestamp()
                digest = hashlib.blake2b(repr((message.key(), message.value(), message.headers(), timestamp,
                                               kind)).encode(), digest_size=16).digest()
                found[message.partition()].append((message.offset(), digest))
    finally:
        consumer.close()
    return found


def compare(source: dict[int, list[tuple[int, bytes]]], other: dict[int, list[tuple[int, bytes]]],
            starts: dict[int, int]) -> list[str]:
    """Differences between `other` and the source's records from `starts` on, per partition;
    none when every record is there once, in order and equal."""
    problems = []
    for partition, records in sorted(source.items()):
        want = [digest for offset, digest in records if offset >= starts.get(partition, 0)]
        got = [digest for _, digest in other.get(partition, [])]
        if got == want:
            continue
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        problems.append(f"partition {partition}: {len(got)} records, expected {len(want)}; first difference at "
                        f"record {first}; {len(got) - len(set(got))} repeated")
    return problems


# --- the soak -------------------------------------------------------------------------------


@dataclass
class Figures:
    lag: list[dict] = field(default_factory=list)  # one per sample
    compacts: list[int] = field(default_factory=list)  # exit status of each compact
    compacts_skipped: int = 0  # a compact still running when the next was due
    expire: dict | None = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the traffic runs")
    parser.add_argument("--broker", choices=("kafka", "embedded"), default="kafka")
    parser.add_argument("--rate", type=float, default=230.0, help="records per second")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--flush-interval", type=float, default=3.0, help="the follower's micro-batch interval")
    parser.add_argument("--poll-interval", type=float, default=3.0, help="the standby's poll interval")
    parser.add_argument("--compact-every", type=float, default=25.0, help="seconds between compacts")
    parser.add_argument("--compact-max-records", type=int, default=2000,
                        help="compact's --max-records: merged objects of about 35 s of a partition's records, "
                             "so that expire finds whole objects to drop")
    parser.add_argument("--grace", default="2m", help="compact's and expire's --grace")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--logs", default=None, help="folder for every log and soak.json (default .tv-run/soak-<time>)")
    args = parser.parse_args()
    if args.broker == "kafka":
        kafka_jars()
    logs = Path(args.logs or f".tv-run/soak-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}").resolve()
    logs.mkdir(parents=True, exist_ok=True)
    # Ctrl-C and SIGTERM both end the soak through the same clean-up.
    signal.signal(signal.SIGTERM, interrupted)
    print(f"soak: {args.minutes:g} min on {args.broker}, logs in {logs}", flush=True)
    try:
        result = soak(args, logs)
    except KeyboardInterrupt:
        print("soak: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    (logs / "soak.json").write_text(json.dumps(result, indent=1))
    print_summary(result)
    print(f"figures: {logs / 'soak.json'}")
    return 0 if result["exact"] and not result["crashes"] and result["followers_alive"] else 1


def interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def soak(args: argparse.Namespace, logs: Path) -> dict:
    sampler = RssSampler()
    sampler.watch("soak", os.getpid())
    kernel_before = kernel_log()
    load_at_start = os.getloadavg()
    with ExitStack() as stack:
        stack.callback(sampler.stop.set)
        endpoint = stack.enter_context(moto_server(logs))
        broker = stack.enter_context(start_broker(args.broker, logs))
        for pid in broker_pids(broker):
            sampler.watch("broker", pid)
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):  # moto_server: our child on its port
            try:
                if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1] == str(os.getpid()) and \
                        b"moto_server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    sampler.watch("s3", pid)
            except (OSError, IndexError):
                continue
        sampler.start()  # once the broker and the S3 server count as roles of their own, not the soak's
        env = {**os.environ, "AWS_ENDPOINT_URL": endpoint, **SANDBOX_CREDENTIALS,
               "TOPICVAULT_STATE_DIR": str(logs / "state")}
        import boto3

        boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in SANDBOX_CREDENTIALS.items()
                                                     if k != "AWS_DEFAULT_REGION"},
                     region_name=SANDBOX_CREDENTIALS["AWS_DEFAULT_REGION"]).create_bucket(Bucket=BUCKET)
        bootstrap = broker.bootstrap
        create_topics(KafkaSettings.of(bootstrap), {TOPIC: args.partitions})
        launcher = Launcher(logs, env, sampler)
        stack.callback(launcher.stop_all)
        traffic = Traffic(bootstrap, args.partitions, args.rate)
        stack.callback(traffic.stop.set)
        watermarks = Watermarks(bootstrap)
        stack.callback(watermarks.close)
        traffic.start()

        metrics_port = free_port()
        follower = launcher.start("follower", "backup", "--follow", "-b", bootstrap, "--to", LOCATION, "-t", TOPIC,
                                  "--flush-interval", f"{args.flush_interval:g}", "--metrics-port", str(metrics_port),
                                  "--master", args.master)
        # The standby and compact need a location with a commit: the follower's first micro-batch.
        wait_for_first_commit(follower, metrics_port)
        standby = launcher.start("standby", "restore", "--follow", "--from", LOCATION, "-b", bootstrap,
                                 "--rename", f"{TOPIC}={STANDBY_TOPIC}", "--restore-id", "soak-standby", "--json",
                                 "--poll-interval", f"{args.poll_interval:g}", "--master", args.master)
        figures = Figures()
        duration_s = args.minutes * 60
        started = sampler.started_at = time.monotonic()  # the sampler's curve is on this clock too
        compact: Started | None = None
        expire_done = False
        next_sample, next_compact = started, started + args.compact_every
        load_samples = []
        while time.monotonic() - started < duration_s:
            now = time.monotonic()
            elapsed = now - started
            if now >= next_sample:
                next_sample += SAMPLE_EVERY_S
                figures.lag.append(observe(elapsed, watermarks, args.partitions, metrics_port, traffic))
                if int(elapsed) % 60 < SAMPLE_EVERY_S:
                    load_samples.append(os.getloadavg()[0])
                    progress(figures.lag[-1], sampler)
            if now >= next_compact:
                next_compact += args.compact_every
                if compact is not None and compact.process.poll() is None:
                    figures.compacts_skipped += 1
                else:
                    if compact is not None:
                        figures.compacts.append(compact.process.returncode)
                    compact = launcher.start("compact", "compact", LOCATION, "--grace", args.grace, "--json",
                                             "--max-records", str(args.compact_max_records))
            if not expire_done and elapsed >= duration_s / 2 and (compact is None or compact.process.poll() is not None):
                expire_done = True
                # What the compacts merged into full objects a while ago goes: records and commits
                # older than TIME (expire counts commits to the minute).
                before = dt.datetime.fromtimestamp(time.time() - max(90.0, duration_s / 10), dt.timezone.utc)
                done = launcher.run("expire", "expire", LOCATION, "--before", before.isoformat(timespec="seconds"),
                                    "--grace", args.grace, "--json")
                figures.expire = {"before": before.isoformat(timespec="seconds"), "exit": done.process.returncode,
                                  "at_s": round(elapsed)}
            if follower.process.poll() is not None or standby.process.poll() is not None:
                print("soak: a follower ended before the end; stopping the traffic", file=sys.stderr)
                break
            time.sleep(0.2)
        traffic_s = time.monotonic() - started
        traffic.stop.set()
        traffic.join(120)
        if compact is not None:
            compact.process.wait(600)
            figures.compacts.append(compact.process.returncode)
        source_ends = watermarks.ends(TOPIC, args.partitions) or []
        print(f"soak: traffic stopped after {traffic_s:.0f} s ({traffic.acked:,} records acked); "
              "waiting for the follower and the standby to catch up", flush=True)
        caught_up_s = catch_up(follower, standby, source_ends, watermarks, args.partitions, metrics_port,
                               sampler, started, figures, traffic)
        last_metrics = safe_scrape(metrics_port)
        follower_alive = follower.process.poll() is None
        standby_alive = standby.process.poll() is None
        follower_exit, standby_exit = follower.stop(), standby.stop()
        listing = json_output(launcher.run("ls", "ls", LOCATION, "--json").log)
        starts = {p["partition"]: p["start"] for p in listing["partitions"] if p["topic"] == TOPIC}
        fresh = launcher.run("restore", "restore", "--from", LOCATION, "-b", bootstrap,
                             "--rename", f"{TOPIC}={FRESH_TOPIC}", "--master", args.master, timeout_s=1800)
        source = digests(bootstrap, TOPIC, args.partitions)
        standby_problems = compare(source, digests(bootstrap, STANDBY_TOPIC, args.partitions), {})
        fresh_problems = compare(source, digests(bootstrap, FRESH_TOPIC, args.partitions), starts) \
            if fresh.process.returncode == 0 else [f"the fresh restore exited {fresh.process.returncode}"]
    kernel_after = kernel_log()
    standby_restarts = [line for line in json_lines(standby.log) if "restart" in line]
    rounds = [line for line in json_lines(standby.log) if "round" in line]
    segfaults = None
    if kernel_before is not None and kernel_after is not None:
        seen = set(kernel_before)
        segfaults = [line for line in kernel_after if line not in seen and re.search(r"segfault|traps:", line)]
    produced = sum(len(records) for records in source.values())
    return {
        "broker": args.broker, "minutes": args.minutes, "traffic_s": round(traffic_s), "rate": args.rate,
        "partitions": args.partitions, "flush_interval_s": args.flush_interval, "master": args.master,
        "records": produced, "records_acked": traffic.acked, "producer_errors": traffic.errors,
        "load_average": {"start": load_at_start, "end": os.getloadavg(),
                         "max_1min": round(max(load_samples), 2) if load_samples else None,
                         "mean_1min": round(sum(load_samples) / len(load_samples), 2) if load_samples else None},
        "crashes": crash_lines(logs), "kernel_segfaults": segfaults,
        "follower_restarts": last_metrics.get("topicvault_restarts_total"),
        "follower_task_attempts_failed": last_metrics.get('topicvault_errors_total{kind="task_attempt"}'),
        "follower_commits": last_metrics.get("topicvault_commits_total"),
        "standby_restarts": len(standby_restarts), "standby_rounds": len(rounds),
        "followers_alive": follower_alive and standby_alive,
        "follower_exit": follower_exit, "standby_exit": standby_exit,
        "caught_up_s": caught_up_s,
        "max_follower_lag": max((s["follower_lag"] for s in figures.lag if s["follower_lag"] is not None), default=None),
        "max_standby_lag": max((s["standby_lag"] for s in figures.lag if s["standby_lag"] is not None), default=None),
        "lag_per_minute": per_minute(figures.lag),
        "compacts": len(figures.compacts), "compacts_failed": sum(1 for c in figures.compacts if c != 0),
        "compacts_skipped": figures.compacts_skipped, "expire": figures.expire,
        "archive": {"commits": listing["commits"], "objects": listing["objects"], "starts": starts},
        "peak_rss_mib": {name: round(kib / 1024) for name, kib in sorted(sampler.peak_kib.items())},
        "rss_quarters_mib": sampler.quarters(traffic_s),
        "standby_exact": not standby_problems, "standby_problems": standby_problems,
        "fresh_restore_exact": not fresh_problems, "fresh_problems": fresh_problems,
        "exact": not standby_problems and not fresh_problems,
        "watermark_errors": watermarks.errors,
        "logs": str(logs),
    }


def wait_for_first_commit(follower: Started, metrics_port: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not safe_scrape(metrics_port).get("topicvault_commits_total"):
        if follower.process.poll() is not None:
            raise RuntimeError(f"the follower exited {follower.process.returncode}; see {follower.log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no commit of the follower within {timeout_s:.0f} s; see {follower.log}")
        time.sleep(1)


def safe_scrape(port: int) -> dict[str, float]:
    try:
        return scrape(port)
    except OSError:
        return {}


def observe(elapsed: float, watermarks: Watermarks, partitions: int, metrics_port: int, traffic: Traffic) -> dict:
    """One sample: records produced, the source's end, and how far the follower's committed end
    and the standby topic's end are behind it."""
    source = watermarks.ends(TOPIC, partitions)
    standby = watermarks.ends(STANDBY_TOPIC, partitions)
    got = safe_scrape(metrics_port)
    committed = [got.get(f'topicvault_committed_end_offset{{partition="{p}",topic="{TOPIC}"}}') for p in range(partitions)]
    source_end = sum(source) if source else None
    follower_lag = None
    if source_end is not None and None not in committed:
        follower_lag = int(source_end - sum(committed))
    return {"t": round(elapsed), "acked": traffic.acked, "source_end": source_end, "follower_lag": follower_lag,
            "committed": committed,
            "standby_lag": None if source_end is None or standby is None else source_end - sum(standby),
            "restarts": got.get("topicvault_restarts_total"), "commits": got.get("topicvault_commits_total")}


def progress(sample: dict, sampler: RssSampler) -> None:
    rss = sampler.samples[-1][1] if sampler.samples else {}
    print(f"t={sample['t']:5d}s acked={sample['acked']:,} follower lag={sample['follower_lag']} "
          f"standby lag={sample['standby_lag']} commits={sample['commits']} restarts={sample['restarts']} "
          f"load={os.getloadavg()[0]:.1f} rss MiB: "
          + ", ".join(f"{k}={v // 1024}" for k, v in sorted(rss.items()) if not k.startswith(("compact", "expire"))),
          flush=True)


def catch_up(follower: Started, standby: Started, source_ends: list[int], watermarks: Watermarks, partitions: int,
             metrics_port: int, sampler: RssSampler, started: float, figures: Figures, traffic: Traffic,
             timeout_s: float = 600.0) -> float | None:
    """Wait until the follower committed and the standby restored the whole topic; the seconds it took.

    The standby is caught up when its topic's end is the source's, or when its last round
    restored each partition to the follower's committed end: the embedded broker reports a high
    watermark below the end of a partition that does not end with a single-record batch, and a
    restore's last batch is not one."""
    begun = time.monotonic()
    while time.monotonic() - begun < timeout_s:
        if follower.process.poll() is not None or standby.process.poll() is not None:
            return None
        sample = observe(time.monotonic() - started, watermarks, partitions, metrics_port, traffic)
        figures.lag.append(sample)
        rounds = [line for line in json_lines(standby.log) if "round" in line]
        restored = {p["partition"]: p["restored_end"] for p in rounds[-1]["partitions"]} if rounds else {}
        standby_done = sample["standby_lag"] == 0 or (
            None not in sample["committed"]
            and all(restored.get(p) == int(end) for p, end in enumerate(sample["committed"])))
        if sample["follower_lag"] == 0 and standby_done:
            return round(time.monotonic() - begun, 1)
        time.sleep(SAMPLE_EVERY_S)
    return None


def per_minute(samples: list[dict]) -> list[dict]:
    """The largest lag of each minute."""
    minutes: dict[int, dict] = {}
    for s in samples:
        row = minutes.setdefault(s["t"] // 60, {"minute": s["t"] // 60, "follower_lag": 0, "standby_lag": 0})
        for key in ("follower_lag", "standby_lag"):
            if s[key] is not None:
                row[key] = max(row[key], s[key])
    return [minutes[m] for m in sorted(minutes)]


def print_summary(r: dict) -> None:
    print(f"--- soak: {r['minutes']:g} min on {r['broker']} ({r['traffic_s']} s of traffic at {r['rate']:g} records/s, "
          f"{r['partitions']} partitions, a micro-batch every {r['flush_interval_s']:g} s, {r['master']})")
    print(f"records: {r['records']:,}; archive: {r['archive']['commits']} commits, {r['archive']['objects']} objects; "
          f"{r['compacts']} compacts ({r['compacts_failed']} failed, {r['compacts_skipped']} skipped), expire "
          f"{r['expire']}")
    print(f"crashes: {len(r['crashes'])} in the logs; kernel segfaults: "
          f"{'dmesg not readable' if r['kernel_segfaults'] is None else len(r['kernel_segfaults'])}")
    for line in r["crashes"][:20]:
        print(f"  {line}")
    print(f"restarts: follower {r['follower_restarts']}, standby {r['standby_restarts']}; failed task attempts "
          f"{r['follower_task_attempts_failed']}; followers alive at the end: {r['followers_alive']} "
          f"(exit {r['follower_exit']}, {r['standby_exit']})")
    print(f"max lag: follower {r['max_follower_lag']} records, standby {r['max_standby_lag']} records; caught up "
          f"{r['caught_up_s']} s after the traffic stopped")
    print("lag per minute (follower/standby max): " + " ".join(
        f"{m['follower_lag']}/{m['standby_lag']}" for m in r["lag_per_minute"]))
    print("peak RSS MiB (per quarter of the run): ")
    for name, peak in r["peak_rss_mib"].items():
        print(f"  {name:24} {peak:6}  {r['rss_quarters_mib'].get(name)}")
    print(f"load average (1 min): start {r['load_average']['start'][0]:.1f}, mean {r['load_average']['mean_1min']}, "
          f"max {r['load_average']['max_1min']}, end {r['load_average']['end'][0]:.1f}")
    print(f"exact: standby {r['standby_exact']} {r['standby_problems']}; fresh restore {r['fresh_restore_exact']} "
          f"{r['fresh_problems']}")


if __name__ == "__main__":
    sys.exit(main())
