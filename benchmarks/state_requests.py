"""Store requests of a state read against the number of commits, and wide-topic backup times,
side by side (issue #18 "Done when").

    .venv/bin/python benchmarks/state_requests.py [--histories 10,500,1000] [--no-wide] [--master local[2]]

For each history length, commits small synthetic records through the real committer (so
checkpoints are written as a backup writes them) into a fresh bucket of an in-process moto
S3 server, then counts the requests the server answered (one werkzeug log line each) for:
`topicvault ls`, one `backup --follow` micro-batch (its commit and the follower's read-forward
of it), and a fold of every commit record without checkpoints (what every state read cost
before checkpoints). Then backs up a narrow (8) and a wide (256 partitions) topic of 20
records per partition on the embedded broker (benchmarks/run.py's measure_wide): job time and
Spark tasks.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import boto3
from topicvault.core.archive.checkpoints import read_forward
from topicvault.core.archive.commit_log import commit_with_checkpoint
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange, fold_commits
from topicvault.core.stores.locations import open_store
from topicvault.sink.backup_datasource import ObjectsWritten
from topicvault.sink.stream import ObjectStreamWriter
from typer.testing import CliRunner


class RequestCounter(logging.Handler):
    """Counts the S3 server's request log lines (werkzeug logs one per request)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def synthetic_commits(store, count: int) -> BackupState:
    """`count` commits of one 10-record object on each of two partitions, through the committer."""
    state = BackupState()
    for sequence in range(1, count + 1):
        ranges, objects = [], []
        for partition in (0, 1):
            start = state.end_offset("t", partition) or 0
            ranges.append(PartitionRange("t", partition, start, start + 10))
            objects.append(ObjectEntry(f"topic=t/partition={partition}/{start:019d}.parquet", "t", partition,
                                       start, start + 9, 10, 1000, start, start + 9, "0" * 64))
        record = CommitRecord(sequence, sequence, tuple(ranges), tuple(objects), {"t": {"partitions": 2}},
                              stream={"id": "bench", "batch": sequence, "committed_ms": sequence, "lag": {}})
        commit_with_checkpoint(store, state, record)
        state.apply(CommitRecord.from_json(record.to_json(), "k"), "k")
    return state


def measure(counter: RequestCounter, action) -> tuple[int, float]:
    before, started = counter.count, time.monotonic()
    action()
    return counter.count - before, time.monotonic() - started


def measure_history(counter: RequestCounter, app, history: int) -> tuple[tuple[int, float], ...]:
    """(requests, seconds) of `ls`, of one micro-batch commit and of a fold of every commit."""
    bucket = f"bench-{history}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/loc"
    store = open_store(uri)
    state = synthetic_commits(store, history)
    ls = measure(counter, lambda: CliRunner().invoke(app, ["ls", uri], catch_exceptions=False))
    start = state.end_offset("t", 0)
    entry = ObjectEntry(f"topic=t/partition=0/{start:019d}.parquet", "t", 0, start, start, 1, 10, 0, 0, "0")
    store.put(entry.key, b"object")  # the batch's task wrote it: a commit names only objects that exist
    writer = ObjectStreamWriter({"path": uri, "streamId": "other"})

    def micro_batch() -> None:
        writer.commit([ObjectsWritten([entry])], 1)
        read_forward(store, state)  # the follower's own state, held in memory

    batch = measure(counter, micro_batch)
    fold = measure(counter, lambda: fold_commits(store))
    return ls, batch, fold


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", default="10,500,1000", help="comma-separated commit counts")
    parser.add_argument("--wide", action=argparse.BooleanOptionalAction, default=True,
                        help="also back up 8 and 256 partitions x 20 records (starts the embedded broker and Spark)")
    parser.add_argument("--master", default="local[2]", help="Spark master of the wide-topic backups")
    args = parser.parse_args()
    requests = measure_requests([int(h) for h in args.histories.split(",")])
    wide = measure_wide_topics(args.master) if args.wide else None
    print("--- state reads: S3 requests (and seconds) per history length")
    print(f"{'commits':>8} {'ls req':>7} {'ls s':>6} {'batch req':>9} {'batch s':>7} {'fold-all req':>12} {'fold-all s':>10}")
    for history, (ls, batch, fold) in requests.items():
        print(f"{history:>8} {ls[0]:>7} {ls[1]:>6.2f} {batch[0]:>9} {batch[1]:>7.2f} {fold[0]:>12} {fold[1]:>10.2f}")
    if wide is not None:
        from run import report_wide

        print(f"--- wide topics ({args.master}, embedded broker, local directory)")
        report_wide(wide)
    return 0


def start_counted_moto(counter: RequestCounter):
    """moto's S3 server in this process (see run.start_moto), each request it serves counted by `counter`."""
    from run import start_moto  # benchmarks/ is on sys.path when this runs as a script

    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(counter)
    return start_moto()


def measure_requests(histories: list[int]) -> dict[int, tuple[tuple[int, float], ...]]:
    """measure_history for each history length, against an in-process moto S3 server."""
    from topicvault.cli import app

    counter = RequestCounter()
    server = start_counted_moto(counter)
    try:
        return {history: measure_history(counter, app, history) for history in histories}
    finally:
        server.stop()


def measure_wide_topics(master: str) -> dict:
    """benchmarks/run.py's wide-topic figures: 8 and 256 partitions x 20 records."""
    import tempfile
    from pathlib import Path

    import run  # benchmarks/ is on sys.path when this runs as a script
    from pyspark import cloudpickle
    from topicvault.core.local.embedded_broker import EmbeddedBroker

    # Spark's workers cannot import benchmarks/run.py: ship its functions by value.
    cloudpickle.register_pickle_by_value(run)

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as scratch:
        return run.measure_wide(master, broker, str(Path(scratch) / "backup"), size=200)


if __name__ == "__main__":
    sys.exit(main())
