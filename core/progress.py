"""Live progress of Spark tasks: tasks write small counters, a driver thread shows the sum.

Each task rewrites one file `<dir>/<task id>` ("records bytes done") as batches pass; the
driver reads them about once a second. The directory is local to the driver, so on a real
cluster (executors on other machines) the files are not there and the monitor falls back to
Spark's own count of finished tasks.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, TextIO

import pyarrow as pa


def counted(batches: Iterable[pa.RecordBatch], progress_dir: str | None, task_id: str) -> Iterator[pa.RecordBatch]:
    """Pass batches through, recording how many records and bytes went by (no-op without a dir)."""
    if not progress_dir or not os.path.isdir(progress_dir):
        yield from batches
        return
    path = os.path.join(progress_dir, task_id)
    records = size = 0
    last_write = 0.0
    for batch in batches:
        records += batch.num_rows
        size += batch.nbytes
        if time.monotonic() - last_write > 0.5:
            _write(path, records, size, False)
            last_write = time.monotonic()
        yield batch
    _write(path, records, size, True)


def _write(path: str, records: int, size: int, done: bool) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(f"{records} {size} {int(done)}")
    os.replace(temporary, path)


class ProgressMonitor:
    """A driver thread showing records, bytes, rate, ETA and tasks done; a bar on a terminal."""

    def __init__(self, label: str, total_records: int, total_tasks: int, spark=None,
                 stream: TextIO | None = None, quiet: bool = False, interval_s: float | None = None) -> None:
        self.label = label
        self.total_records = max(total_records, 0)
        self.total_tasks = total_tasks
        self.spark = spark
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        default_interval = float(os.environ.get("TOPICVAULT_PROGRESS_INTERVAL_S", 0.5 if self.tty else 10.0))
        self.interval_s = interval_s if interval_s is not None else default_interval
        self.directory = tempfile.mkdtemp(prefix="topicvault-progress-")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> "ProgressMonitor":
        if not self.quiet:
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
            if self.tty:
                self.stream.write("\n")
        shutil.rmtree(self.directory, ignore_errors=True)

    def snapshot(self) -> tuple[int, int, int]:
        """(records, bytes, tasks done) as the task files report them."""
        records = size = done = 0
        for path in Path(self.directory).glob("*"):
            if path.suffix == ".tmp":
                continue
            try:
                parts = path.read_text().split()
                records += int(parts[0])
                size += int(parts[1])
                done += int(parts[2])
            except (OSError, ValueError, IndexError):
                continue
        if done == 0 and records == 0 and self.spark is not None:
            done = self._spark_tasks_done()
        return records, size, done

    def _spark_tasks_done(self) -> int:
        tracker = self.spark.sparkContext.statusTracker()
        finished = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                finished += info.numCompletedTasks
        return finished

    def line(self) -> str:
        """One progress line: records, bytes, rate, ETA, tasks done / total."""
        records, size, done = self.snapshot()
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = records / elapsed
        share = f" ({100 * records / self.total_records:.0f}%)" if self.total_records else ""
        eta = ""
        if rate > 0 and self.total_records > records:
            eta = f", ETA {int((self.total_records - records) / rate)} s"
        return (f"{self.label}: {records:,}/{self.total_records:,} records{share}, {size / 1e6:,.1f} MB, "
                f"{rate:,.0f} records/s{eta}, tasks {done}/{self.total_tasks}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            text = self.line()
            if self.tty:
                self.stream.write("\r" + text[: shutil.get_terminal_size().columns - 1].ljust(40))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
