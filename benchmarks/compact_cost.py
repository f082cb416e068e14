"""What `topicvault compact` costs: a follower-like archive of many small committed objects
(one commit per object, as micro-batches make them) merged into rotation-size objects.

    PYTHONPATH=… python benchmarks/compact_cost.py --objects 1000 --records 200 [--dir D]

Prints JSON: objects before/after, seconds to compact, records/s and stored MB/s read.
No broker, Spark or S3: records are synthetic envelope rows written through the backup writer.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from topicvault.core.archive.commit_log import commit_with_checkpoint
from topicvault.core.archive.commits import BackupState, CommitRecord, PartitionRange
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.formats import resolve_format
from topicvault.keys import default_codec, new_run_id
from topicvault.sink.objects import write_objects
from topicvault.source.maintenance.compact import CompactJob, execute_compact, plan_compact, read_compact


def build_archive(root: str, objects: int, records: int) -> int:
    """Commit `objects` objects of `records` records each to partition 0 of topic `bench`; return stored bytes."""
    store, codec, parquet = LocalStore(root), default_codec(), resolve_format("parquet")
    state, stored = BackupState(), 0
    for index in range(objects):
        first = index * records
        batch = records_to_batch(Record("bench", 0, first + i, b"key-%d" % (first + i), bytes(200), 1_700_000_000_000 + first + i,
                                        0, (("h", b"v"),)) for i in range(records))
        entries = write_objects([batch], store, codec, parquet, Rotation(), run_id=new_run_id())
        record = CommitRecord(index + 1, index, (PartitionRange("bench", 0, first, first + records),), tuple(entries), {})
        commit_with_checkpoint(store, state, record)
        state.apply(CommitRecord.from_json(record.to_json(), "k"), "k")
        stored += sum(e.bytes for e in entries)
    return stored


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="tv-compact-bench-")
    stored = build_archive(root, args.objects, args.records)
    started = time.monotonic()
    job = CompactJob(root, grace_ms=0)
    store = job.open_store()
    result = execute_compact(store, plan_compact(read_compact(job, store), job))
    seconds = time.monotonic() - started
    total = args.objects * args.records
    print(json.dumps({"objects_before": args.objects, "objects_after": args.objects - len(result.replaced) + len(result.written),
                      "records": total, "stored_mb": round(stored / 1e6, 2), "compact_s": round(seconds, 2),
                      "records_per_s": round(total / seconds), "stored_mb_per_s": round(stored / 1e6 / seconds, 2),
                      "deleted": result.collected.deleted}, indent=1))


if __name__ == "__main__":
    main()
