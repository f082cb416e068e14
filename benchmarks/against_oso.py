"""topicvault against osodevops/kafka-backup and Kafka's own Java clients, on the same topic (issue #51 item 4).

    python benchmarks/run.py --oso PATH/kafka-backup --only-oso [--cases user:200:1000000,…] [--repeats 3]

The peer is OSO's `kafka-backup` binary, built from its public repository with `cargo build
--release` (its version is printed; the benchmark never builds it). For each case, on a fresh
Apache Kafka node: the topic is written once; then, `--repeats` times in alternation (the order
swapped every other round), a `topicvault backup` process, an OSO backup with zstd (its default)
and one without compression (both to the filesystem backend, snapshot mode:
`stop_at_current_offsets`, the rest OSO's defaults), and Kafka's ConsumerPerformance; then, the
same way, a `topicvault restore` process, an OSO restore of its zstd backup (into a new topic it
creates, OSO's defaults otherwise) and Kafka's ProducerPerformance (records of the case's value size,
no keys or headers: it cannot send others; idempotent, acks=all, linger.ms 20, 1 MiB batches, as a
restore's producer). Before each timed run the files it reads are dropped from the page cache (the
broker's log of the topic, or the archive: benchmarks/page_cache.evict), so no side reads what
another cached. Each process runs under benchmarks/reaped.py: wall time, CPU seconds of its whole
process tree, peak RSS of its largest process. topicvault's job time (its `--json` summary's
elapsed_s, Spark start left out) and the Java clients' own time (what they print) are recorded too.

Every restore, topicvault's and OSO's, is then checked record by record against the source topic
(benchmarks/restored.py: count per partition; key, value, headers in order with duplicates and
nulls, timestamp and its type), and the run prints what each tool lost or altered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import median
from typing import Callable

sys.path.insert(0, str(Path(__file__).parent))
import page_cache  # noqa: E402  (benchmarks/ is not a package)
import records as bench_records  # noqa: E402
import restored  # noqa: E402

REAPED = Path(__file__).with_name("reaped.py")
KAFKA_JARS = Path.home() / ".cache" / "topicvault" / "kafka-4.4.0" / "jars"
KAFKA_TOOLS_JARS = Path.home() / ".cache" / "topicvault" / "kafka-tools-4.4.0" / "jars"
# The restore producer's settings topicvault uses (see benchmarks/run.py bare_produce), for ProducerPerformance.
PRODUCER_PROPS = ("acks=all", "enable.idempotence=true", "linger.ms=20", f"batch.size={1 << 20}")
OSO_COMPRESSIONS = ("zstd", "none")


def reaped(command: list[str], log: Path, environment: dict[str, str] | None = None) -> tuple[dict, str]:
    """Run `command` under benchmarks/reaped.py: (its figures: exit, wall_s, cpu_s, max_rss_mib, …;
    its stdout without reaped's line). Its stderr is appended to `log`."""
    with open(log, "ab") as errors:
        done = subprocess.run([sys.executable, str(REAPED), *command], stdout=subprocess.PIPE, stderr=errors,
                              env=environment, text=True, timeout=1800)
    lines = done.stdout.strip().splitlines()
    figures = json.loads(lines[-1]) if lines else {"exit": done.returncode}
    return figures, "\n".join(lines[:-1])


def _checked(figures: dict, what: str, log: Path) -> dict:
    if figures["exit"] != 0:
        raise RuntimeError(f"{what} failed (exit {figures['exit']}); see {log}")
    return {k: figures[k] for k in ("wall_s", "cpu_s", "max_rss_mib")}


class Oso:
    """osodevops/kafka-backup's CLI with generated configs (keys as in its docs/configuration.md)."""

    def __init__(self, binary: Path, scratch: Path) -> None:
        self.binary, self.scratch = binary, scratch
        self.log = scratch / "oso.log"
        # Its offset database and any temporary file go to the scratch folder, not /tmp.
        self.environment = {**os.environ, "TMPDIR": str(scratch), "RUST_LOG": "warn"}

    def version(self) -> str:
        done = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=60)
        return done.stdout.strip() or done.stderr.strip()

    def _config(self, name: str, config: dict) -> Path:
        path = self.scratch / f"{name}.yaml"
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML: serde_yaml reads it
        return path

    def backup(self, bootstrap: str, topic: str, directory: Path, backup_id: str, compression: str) -> dict:
        """One snapshot backup of `topic` into `directory`: its figures (wall, CPU, peak RSS)."""
        config = self._config(backup_id, {
            "mode": "backup", "backup_id": backup_id,
            "source": {"bootstrap_servers": [bootstrap], "topics": {"include": [topic]}},
            "storage": {"backend": "filesystem", "path": str(directory)},
            "backup": {"compression": compression, "stop_at_current_offsets": True}})
        figures, _ = reaped([str(self.binary), "backup", "--config", str(config)], self.log, self.environment)
        return _checked(figures, f"OSO backup {backup_id}", self.log)

    def restore(self, bootstrap: str, topic: str, target: str, directory: Path, backup_id: str) -> dict:
        """A restore of `topic` from the backup `backup_id` in `directory` into the new topic `target`."""
        config = self._config(f"{backup_id}-restore-{target}", {
            "mode": "restore", "backup_id": backup_id,
            "target": {"bootstrap_servers": [bootstrap], "topics": {"include": [topic]}},
            "storage": {"backend": "filesystem", "path": str(directory)},
            "restore": {"topic_mapping": {topic: target}, "create_topics": True}})
        figures, _ = reaped([str(self.binary), "restore", "--config", str(config)], self.log, self.environment)
        if figures["exit"] != 0:  # what it restored is still checked: a failed restore is a figure, not a crash
            # Its last lines that are not frames of a backtrace (those are indented): the error itself.
            tail = [line for line in self.log.read_text(errors="replace").strip().splitlines()
                    if line and not line[0].isspace()][-3:]
            return {"wall_s": figures["wall_s"], "cpu_s": figures["cpu_s"], "max_rss_mib": figures["max_rss_mib"],
                    "failed": f"exit {figures['exit']}: {' / '.join(tail)[-600:]}"}
        return _checked(figures, f"OSO restore of {backup_id}", self.log)


class Topicvault:
    """`topicvault backup` and `restore` processes, each end to end, with the executor `auto` picks."""

    def __init__(self, scratch: Path) -> None:
        self.log = scratch / "topicvault.log"
        self.environment = {k: v for k, v in os.environ.items() if k != "TOPICVAULT_EXECUTOR"}
        self.environment["TOPICVAULT_STATE_DIR"] = str(scratch / "topicvault-state")

    def _run(self, command: list[str]) -> dict:
        figures, out = reaped([sys.executable, "-m", "topicvault", *command, "--json"], self.log, self.environment)
        summary = json.loads(out[out.index("{"):]) if "{" in out else {}
        return {**_checked(figures, f"topicvault {command[0]}", self.log), "job_s": summary.get("elapsed_s"),
                "spark_start_s": summary.get("spark_start_s")}

    def backup(self, bootstrap: str, topic: str, location: str) -> dict:
        return self._run(["backup", "-b", bootstrap, "--topic", topic, "--to", location])

    def restore(self, bootstrap: str, topic: str, target: str, location: str) -> dict:
        return self._run(["restore", "-b", bootstrap, "--topic", topic, "--from", location,
                          "--rename", f"{topic}={target}"])


class JavaClients:
    """Kafka's own ConsumerPerformance and ProducerPerformance (kafka-tools 4.4.0, ci/kafka-tools-jars.sh)."""

    def __init__(self, scratch: Path) -> None:
        self.log = scratch / "java-clients.log"
        self.classpath = f"{KAFKA_JARS}/*:{KAFKA_TOOLS_JARS}/*"

    @staticmethod
    def available() -> bool:
        return any(KAFKA_TOOLS_JARS.glob("kafka-tools-4.4.0.jar"))

    def consume(self, bootstrap: str, topic: str, records: int, group: str) -> dict:
        """ConsumerPerformance reading `records` records: figures, `own_s` (its fetch time) and `elapsed_s`."""
        figures, out = reaped(["java", "-cp", self.classpath, "org.apache.kafka.tools.ConsumerPerformance",
                               "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                               "--group", group, "--timeout", "30000", "--fetch-size", str(16 << 20)], self.log)
        result = _checked(figures, "ConsumerPerformance", self.log)
        header, values = (line.split(", ") for line in out.strip().splitlines()[-2:])
        stats = dict(zip((h.strip() for h in header), values))
        consumed, per_s = int(stats["data.consumed.in.nMsg"]), float(stats["nMsg.sec"])
        if consumed < records:
            raise RuntimeError(f"ConsumerPerformance read {consumed} of {records}; see {self.log}")
        # Its own time is its fetch time: its elapsed time less its group join (a backup joins no group).
        return {**result, "own_s": float(stats["fetch.time.ms"]) / 1000,
                "elapsed_s": consumed / per_s if per_s else None}

    def produce(self, bootstrap: str, topic: str, records: int, size: int) -> dict:
        """ProducerPerformance writing `records` records of `size` bytes: figures and `own_s`."""
        figures, out = reaped(["java", "-cp", self.classpath, "org.apache.kafka.tools.ProducerPerformance",
                               "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                               "--record-size", str(size), "--throughput", "-1",
                               "--producer-props", *PRODUCER_PROPS], self.log)
        result = _checked(figures, "ProducerPerformance", self.log)
        final = [line for line in out.splitlines() if "records sent" in line][-1]
        sent, per_s = int(final.split()[0]), float(final.split(", ")[1].split()[0])
        return {**result, "own_s": sent / per_s if per_s else None}


def alternated(repeats: int, sides: dict[str, Callable[[int], dict]]) -> dict[str, list[dict]]:
    """Each side's run(attempt), `repeats` times, the order reversed every other round."""
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for attempt in range(repeats):
        order = list(sides.items())
        for name, run in order if attempt % 2 == 0 else reversed(order):
            runs[name].append(run(attempt))
    return runs


def _warm_up_producer_ids(bootstrap: str, topic: str) -> None:
    """The first idempotent producer of a fresh Apache Kafka waits for its producer-id block: one
    before the timed runs, so that no side pays for it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, b"warm-up")
    producer.flush(30)


def measure_case(broker, oso: Oso, java: JavaClients, scratch: Path, shape: str, size: int, records: int,
                 partitions: int, repeats: int) -> dict:
    """One case, every side `repeats` times in alternation (see the module's docstring): each run's
    figures, each restore's check against the source, and the medians."""
    from topicvault.core.cluster.kafka import KafkaSettings, create_topics
    from topicvault.core.local.local_kafka import LocalKafka

    bootstrap, settings = broker.bootstrap, KafkaSettings.of(broker.bootstrap)
    name = f"vs-oso.{shape}.{size}.{records}"
    source = f"{name}.src"
    create_topics(settings, {source: partitions, f"{name}.warm-up": 1})
    bench_records.produce(bootstrap, source, shape, records, size, partitions)
    _warm_up_producer_ids(bootstrap, f"{name}.warm-up")
    logs = broker.members[0].folder / "data" if isinstance(broker, LocalKafka) else None
    work = scratch / name
    work.mkdir()
    topicvault = Topicvault(scratch)

    def cold(*directories: Path) -> None:
        """Drop the source topic's log (or the given archives) from the page cache."""
        for directory in directories or ([d for d in logs.iterdir() if d.name.startswith(f"{source}-")] if logs else []):
            page_cache.evict(directory)

    def run_cold(run: Callable[[], dict], *directories: Path) -> dict:
        cold(*directories)
        return run()

    backups = alternated(repeats, {
        "topicvault": lambda a: run_cold(lambda: topicvault.backup(bootstrap, source, str(work / f"tv-{a}"))),
        **{f"OSO {c}": (lambda a, c=c: run_cold(lambda: oso.backup(bootstrap, source, work / f"oso-{c}-{a}",
                                                                      f"oso-{c}-{a}", c)))
           for c in OSO_COMPRESSIONS},
        "ConsumerPerformance": lambda a: run_cold(lambda: java.consume(bootstrap, source, records, f"perf-{name}-{a}")),
    })

    def checked(run: Callable[[], dict], target: str) -> dict:
        """run() (a restore into `target`), then its check against the source (untimed); the topic deleted."""
        figures = run()
        figures["check"] = restored.check_restore(bootstrap, source, target, partitions).to_json()
        if figures.get("failed"):
            figures["check"]["summary"] = f"FAILED ({figures['failed']}); {figures['check']['summary']}"
        if target in _topics(bootstrap):
            _delete_topic(bootstrap, target)
        return figures

    def produce_perf(attempt: int) -> dict:
        target = f"{name}.perf.{attempt}"
        create_topics(settings, {target: partitions})
        figures = java.produce(bootstrap, target, records, size)
        _delete_topic(bootstrap, target)
        return figures

    restores = alternated(repeats, {
        "topicvault": lambda a: checked(lambda: run_cold(lambda: topicvault.restore(
            bootstrap, source, f"{source}.tv.{a}", str(work / "tv-0")), work / "tv-0"), f"{source}.tv.{a}"),
        "OSO zstd": lambda a: checked(lambda: run_cold(lambda: oso.restore(
            bootstrap, source, f"{source}.oso.{a}", work / "oso-zstd-0", "oso-zstd-0"), work / "oso-zstd-0"),
            f"{source}.oso.{a}"),
        "ProducerPerformance": produce_perf,
    })
    return {"shape": shape, "size": size, "records": records, "partitions": partitions, "repeats": repeats,
            "backup": {side: {"medians": _medians(runs), "runs": runs} for side, runs in backups.items()},
            "restore": {side: {"medians": _medians(runs), "runs": runs} for side, runs in restores.items()},
            "archive_bytes": {side: _bytes(work / path) for side, path in
                              (("topicvault", "tv-0"), ("OSO zstd", "oso-zstd-0"), ("OSO none", "oso-none-0"))}}


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the deletion is done
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def _medians(runs: list[dict]) -> dict[str, float | None]:
    """The median of each figure over the runs (None where a run has none)."""
    names = [k for k, v in runs[0].items() if isinstance(v, (int, float)) or v is None]
    return {k: (median(r[k] for r in runs) if all(r.get(k) is not None for r in runs) else None) for k in names}


# Issue #51 item 5's targets.
JOB_OVER_OSO_TARGET = 1.5
JOB_OVER_JAVA_TARGET = 0.7
FIXED_COST_TARGET_S = 3.0
FIXED_COST_TARGET_CPU_S = 4.0
RSS_TARGET_MIB = 400


def report_case(case: dict) -> list[str]:
    """The case's lines: each side's medians, records/s, what each restore lost, and the item-5 ratios."""
    records = case["records"]
    lines = [f"--- against OSO: {case['shape']} {records:,} records x {case['size']} B over "
             f"{case['partitions']} partitions (medians of {case['repeats']} alternated runs, cold caches)"]
    for direction in ("backup", "restore"):
        for side, figures in case[direction].items():
            m = figures["medians"]
            own = m.get("job_s") or m.get("own_s")
            own_text = f", {'job' if 'job_s' in m else 'own'} {own:.2f} s = {records / own:,.0f} records/s" if own else ""
            lost = ""
            if direction == "restore" and "check" in figures["runs"][0]:
                lost = "; " + " | ".join(sorted({r["check"]["summary"] for r in figures["runs"]}))
            lines.append(f"{direction:7} {side:20} end to end {m['wall_s']:6.2f} s = {records / m['wall_s']:10,.0f} "
                         f"records/s, {m['cpu_s']:5.1f} CPU-s, peak RSS {m['max_rss_mib']:5.0f} MiB{own_text}{lost}")
    lines += ["archive bytes: " + ", ".join(f"{side} {n:,}" for side, n in case["archive_bytes"].items())]
    lines += [f"target: {t}" for t in targets(case)]
    return lines


def targets(case: dict) -> list[str]:
    """Item 5's targets on this case, each 'met' or 'not met' with the figures."""
    out = []
    if case["records"] <= case["partitions"]:
        for direction in ("backup", "restore"):
            m = case[direction]["topicvault"]["medians"]
            met = m["wall_s"] <= FIXED_COST_TARGET_S and m["cpu_s"] <= FIXED_COST_TARGET_CPU_S
            out.append(f"fixed cost of a 1-record {direction}: {m['wall_s']:.2f} s, {m['cpu_s']:.1f} CPU-s "
                       f"(<= {FIXED_COST_TARGET_S} s and {FIXED_COST_TARGET_CPU_S} CPU-s): {'met' if met else 'not met'}")
        return out
    for direction, oso_side, java_side in (("backup", "OSO zstd", "ConsumerPerformance"),
                                           ("restore", "OSO zstd", "ProducerPerformance")):
        ours = case[direction]["topicvault"]["medians"]
        over_oso = case[direction][oso_side]["medians"]["wall_s"] / ours["job_s"]
        over_java = case[direction][java_side]["medians"]["own_s"] / ours["job_s"]
        out.append(f"{direction} job time vs {oso_side} end to end: {over_oso:.2f}x (>= {JOB_OVER_OSO_TARGET}: "
                   f"{'met' if over_oso >= JOB_OVER_OSO_TARGET else 'not met'}); vs {java_side}'s own time: "
                   f"{over_java:.2f} (>= {JOB_OVER_JAVA_TARGET}: {'met' if over_java >= JOB_OVER_JAVA_TARGET else 'not met'})")
        rss = ours["max_rss_mib"]
        out.append(f"{direction} topicvault's largest process peak RSS {rss:.0f} MiB (<= {RSS_TARGET_MIB}: "
                   f"{'met' if rss <= RSS_TARGET_MIB else 'not met'}); OSO's {case[direction][oso_side]['medians']['max_rss_mib']:.0f} MiB")
    return out


def run(binary: Path | None, cases: list[tuple[str, int, int]], partitions: int, repeats: int, scratch: Path,
        results: dict, fixed_cost: bool = True) -> None:
    """The runs against OSO for one record per partition (the fixed cost; unless not `fixed_cost`)
    and for each case, each on a fresh Apache Kafka node; figures into results["against_oso"].
    Without the binary: one line, nothing run."""
    from topicvault.core.local.local_kafka import LocalKafka

    if binary is None or not binary.is_file() or not os.access(binary, os.X_OK):
        print(f"against OSO: skipped ({'no --oso given' if binary is None else f'no executable at {binary}'}; "
              "build osodevops/kafka-backup with `cargo build --release`)")
        return
    if not JavaClients.available():
        raise SystemExit(f"no kafka-tools jar in {KAFKA_TOOLS_JARS}: run `bash ci/kafka-tools-jars.sh`")
    folder = scratch / "against-oso"
    folder.mkdir()
    oso = Oso(binary.resolve(), folder)
    version = oso.version()
    print(f"against OSO: {version} ({binary})")
    figures: dict = {"oso_version": version, "oso_binary": str(binary), "cases": []}
    results["against_oso"] = figures
    for shape, size, records in [("user", 200, partitions)] * fixed_cost + cases:
        # A broker of its own per case, as benchmarks/run.py's cases (1 GiB heap, G1, full JIT).
        with LocalKafka(nodes=1, heap="1g", jvm_options=("-XX:+UseG1GC",)) as broker:
            case = measure_case(broker, oso, JavaClients(folder), folder, shape, size, records, partitions, repeats)
        case["load_average"] = os.getloadavg()
        figures["cases"].append(case)
        print("\n".join(report_case(case)), flush=True)
