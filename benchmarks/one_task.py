"""One backup task and one restore task in this process (no Spark), against the bare clients.

    .venv/bin/python benchmarks/one_task.py [--shape user] [--size 2048] [--records 125000]
                                            [--repeats 3] [--perf SIDE] [--broker kafka|embedded]
                                            [--no-restore]

What one Spark task of benchmarks/run.py does, without Spark around it: a topic of two
partitions (one task's share of a 4-partition topic on 2 cores) is backed up by one
backup_group call and restored by one restore_group call, alternated with a bare consumer and
a bare idempotent producer of the same records. The backup runs twice per round: through the
native record loop (sink/_kafka_arrow.c; "backup") and through confluent-kafka ("backup-py",
TOPICVAULT_NATIVE=0), and so does the restore ("restore": sink/_kafka_arrow_writer.c;
"restore-py"). Prints each side's wall and CPU seconds (CPU
time of this process: on a loaded machine a steadier guide than wall time, though the broker's
work is not in it). `--perf SIDE` records each of that side's runs with `perf record -g` into
perf-SIDE-N.data (read it with `perf report -i perf-SIDE-N.data --no-children`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import topicvault.sink.backup as backup_module
import topicvault.source.restore.restore_job as restore_module
from topicvault.core.cluster.kafka import KafkaSettings, create_topics
from topicvault.core.spark import TaskSession
from topicvault.sink.backup import BackupJob, plan_run, run_backup
from topicvault.sink.native_reader import NATIVE_ENV
from topicvault.source.restore.restore_job import RestoreJob, RestoreRequest, plan_restore, run_restore

sys.path.insert(0, str(Path(__file__).parent))
import records as bench_records  # noqa: E402  (benchmarks/ is not a package)
from run import bare_consume, bare_produce, delete_topic, start_broker  # noqa: E402

PARTITIONS = 2


def in_process(spark, function, specs: list) -> list:
    """core.spark.run_tasks without Spark: each task in this process, one after another."""
    return [function(spec) for spec in specs]


# One task: the jobs see one core, so all partitions go to one backup_group / restore_group call.
ONE_CORE = TaskSession(SimpleNamespace(defaultParallelism=1, getConf=lambda: {}))
backup_module.run_tasks = in_process
restore_module.run_tasks = in_process


def timed(run: Callable[[], object], perf_to: str | None) -> tuple[float, float]:
    """(wall s, CPU s of this process) of run(), under `perf record` of this process if perf_to."""
    recorder = None
    if perf_to:
        recorder = subprocess.Popen(["perf", "record", "-q", *os.environ.get("PERF_CALL_GRAPH", "-g").split(), "-F", "999", "-o", perf_to, "-p", str(os.getpid())],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # perf attaches
    cpu, wall = time.process_time(), time.monotonic()
    run()
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="user", choices=bench_records.SHAPES)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--records", type=int, default=125_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--perf", choices=("consume", "backup", "backup-py", "produce", "restore", "restore-py"))
    parser.add_argument("--broker", choices=("kafka", "embedded"), default="kafka")
    parser.add_argument("--no-restore", action="store_true", help="the backup sides only")
    args = parser.parse_args()
    with start_broker(args.broker) as broker, tempfile.TemporaryDirectory() as scratch:
        bootstrap, settings = broker.bootstrap, KafkaSettings.of(broker.bootstrap)
        source = "one-task.src"
        create_topics(settings, {source: PARTITIONS})
        bench_records.produce(bootstrap, source, args.shape, args.records, args.size, PARTITIONS)
        data = list(bench_records.records(args.shape, args.records, args.size))
        warm = "one-task.warm-up"
        create_topics(settings, {warm: PARTITIONS})
        bare_produce(bootstrap, warm, PARTITIONS, data[:100])
        archive = f"{scratch}/archive"
        sides = ("consume", "backup", "backup-py") + (() if args.no_restore else ("produce", "restore", "restore-py"))
        figures: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}

        def backup(attempt: int, native: bool = True) -> None:
            os.environ[NATIVE_ENV] = "1" if native else "0"
            try:
                job = BackupJob(kafka=settings, store_uri=f"{archive}-{attempt}{'' if native else '-py'}")
                assert run_backup(ONE_CORE, job, plan_run(job, [source])).records == args.records
            finally:
                os.environ.pop(NATIVE_ENV)

        def restore(attempt: int, native: bool = True) -> None:
            os.environ[NATIVE_ENV] = "1" if native else "0"
            try:
                job = RestoreJob(settings, f"{archive}-0", state_uri=f"{scratch}/state-{attempt}{'' if native else '-py'}")
                target = restored_topic(attempt, native)
                result = run_restore(ONE_CORE, job, plan_restore(job, RestoreRequest((source,), {source: target})))
                assert result.produced == args.records
            finally:
                os.environ.pop(NATIVE_ENV)

        def restored_topic(attempt: int, native: bool) -> str:
            return f"{source}.restored.{attempt}{'' if native else '-py'}"

        def produce(attempt: int) -> None:
            target = f"one-task.bare.{attempt}"
            create_topics(settings, {target: PARTITIONS})
            bare_produce(bootstrap, target, PARTITIONS, data)

        def consume(attempt: int) -> None:
            assert bare_consume(bootstrap, source, PARTITIONS)[0] == args.records

        for attempt in range(args.repeats):
            for side, run in (("consume", consume), ("backup", backup), ("backup-py", partial(backup, native=False))):
                figures[side].append(timed(partial(run, attempt), f"perf-{side}-{attempt}.data" if args.perf == side else None))
        for attempt in range(0 if args.no_restore else args.repeats):
            for side, run in (("produce", produce), ("restore", restore), ("restore-py", partial(restore, native=False))):
                figures[side].append(timed(partial(run, attempt), f"perf-{side}-{attempt}.data" if args.perf == side else None))
            delete_topic(bootstrap, f"one-task.bare.{attempt}")
            for native in (True, False):
                delete_topic(bootstrap, restored_topic(attempt, native))
    for side, runs in figures.items():
        print(f"{side:10} wall {' '.join(f'{w:6.2f}' for w, _ in runs)} s   CPU {' '.join(f'{c:6.2f}' for _, c in runs)} s")
    best = {side: (min(w for w, _ in runs), min(c for _, c in runs)) for side, runs in figures.items()}
    print(f"backup / bare consume: wall {best['consume'][0] / best['backup'][0]:.2f}x, "
          f"CPU {best['consume'][1] / best['backup'][1]:.2f}x (fastest runs)")
    print(f"native / Python backup: wall {best['backup-py'][0] / best['backup'][0]:.2f}x, "
          f"CPU {best['backup-py'][1] / best['backup'][1]:.2f}x (fastest runs)")
    if args.no_restore:
        print(f"load average {os.getloadavg()[0]:.1f}")
        return 0
    print(f"restore / bare produce: wall {best['produce'][0] / best['restore'][0]:.2f}x, "
          f"CPU {best['produce'][1] / best['restore'][1]:.2f}x (fastest runs)")
    print(f"native / Python restore: wall {best['restore-py'][0] / best['restore'][0]:.2f}x, "
          f"CPU {best['restore-py'][1] / best['restore'][1]:.2f}x (fastest runs)")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
