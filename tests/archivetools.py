"""Archives made or edited by hand for tests: synthetic commits through the committer, objects
written straight to a store, commits backdated or their saved settings rewritten, and the v1
archive kept in tests/data."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commit_log import commit_with_checkpoint
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.archive.leases import LEASE_TTL_MS
from topicvault.core.crypto import Keyring
from topicvault.core.envelope import Record, records_to_batch
from topicvault.formats import resolve_format
from topicvault.source.maintenance.compact import CompactJob, CompactResult, execute_compact, plan_compact, read_compact
from topicvault.source.maintenance.expire import ExpireResult, execute_expire, plan_expire, read_expire
from topicvault.source.maintenance.garbage import Collected, execute_collection, plan_collection, read_collection

T0 = 1_700_000_000_000


HOUR = 3_600_000


def backdate_commits(location: Path, to_ms: int) -> None:
    """Stamp the location's commits made after `to_ms` as made right after it, in order (to_ms + 1,
    + 2, ...): as if its backups ran then (expire never drops what was committed less than the age
    asked for ago). Checkpoints, derived from the commits, are dropped."""
    stamp = to_ms
    for path in sorted((location / "_topicvault" / "commits").glob("*.json")):
        record = json.loads(path.read_text())
        if record["created_ms"] <= to_ms:
            continue
        stamp += 1
        record["created_ms"] = stamp
        path.with_suffix(".tmp").write_text(json.dumps(record))  # replaced whole: a backup beside may read it
        os.replace(path.with_suffix(".tmp"), path)
    for path in (location / "_topicvault").glob("*checkpoint*"):
        path.unlink() if path.is_file() else [p.unlink() for p in path.iterdir()]


def commits(location: Path) -> list[dict]:
    folder = location / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def committed_end(location: Path, topic: str, partition: int) -> int:
    ends = [r["end"] for c in commits(location) for r in c["ranges"] if (r["topic"], r["partition"]) == (topic, partition)]
    return max(ends, default=0)


def edit_saved_configs(location: Path, topic: str, configs: dict[str, str]) -> None:
    """Saved settings as a broker that reports topic overrides (real Kafka; tansu does not) saves them."""
    path = location / "_topicvault" / "commits" / "0000000000000000001.json"
    record = json.loads(path.read_text())
    record["topics"][topic].update(configs=configs, configs_reported=True)
    path.write_text(json.dumps(record))


TOPICS = ("orders", "pay-ments")


def synthetic_record(sequence: int, state: BackupState) -> CommitRecord:
    """Commit `sequence`: 10 records on one partition per topic, with settings, groups and a stream."""
    ranges, objects = [], []
    for topic in TOPICS:
        partition = sequence % 2
        start = state.end_offset(topic, partition) or 0
        ranges.append(PartitionRange(topic, partition, start, start + 10))
        objects.append(ObjectEntry(f"topic={topic}/partition={partition}/{start:019d}.parquet", topic, partition,
                                   start, start + 9, 10, 1000, 1_700_000_000_000 + start, 1_700_000_000_000 + start + 9,
                                   f"{sequence:064x}"))
    groups = {"g1": {"read_ms": sequence, "offsets": {TOPICS[sequence % 2]: {"0": sequence, "1": sequence}}}}
    return CommitRecord(sequence, 1_700_000_000_000 + sequence, tuple(ranges), tuple(objects),
                        {t: {"partitions": 2, "configs": {"retention.ms": str(sequence)}} for t in TOPICS},
                        groups=groups if sequence % 3 else None,
                        stream={"id": "s", "batch": sequence, "committed_ms": sequence, "lag": {}} if sequence % 5 else None)


def make_commits(store, count: int, state: BackupState | None = None) -> BackupState:
    """Commit `count` synthetic records through the committer (checkpoints included)."""
    state = state or BackupState()
    for _ in range(count):
        record = synthetic_record(state.last_sequence + 1, state)
        commit_with_checkpoint(store, state, record)
        state.apply(CommitRecord.from_json(record.to_json(), "k"), "k")
    return state


T = "orders"


def entry(first: int, last: int, run: str = "r000000000001") -> ObjectEntry:
    return ObjectEntry(f"topic={T}/partition=0/{first:019d}-{run}.parquet", T, 0, first, last, last - first + 1,
                       100, 1_000 + first, 1_000 + last, f"{first:064x}")


def backup(state: BackupState, objects: list[ObjectEntry], stream: dict | None = None) -> CommitRecord:
    start = state.end_offset(T, 0) or 0
    return CommitRecord(state.last_sequence + 1, 1_000 * (state.last_sequence + 1),
                        (PartitionRange(T, 0, start, objects[-1].last_offset + 1),), tuple(objects), {}, stream=stream)


def commit(store, state: BackupState, record: CommitRecord) -> None:
    commit_with_checkpoint(store, state, record)
    state.apply(CommitRecord.from_json(record.to_json(), "k"), "k")
    state.partitions[(T, 0)].objects.sort(key=lambda o: o.first_offset)


def three_small_objects(store) -> BackupState:
    state = BackupState()
    for first in (0, 10, 20):
        commit(store, state, backup(state, [entry(first, first + 9)], stream={"id": "s", "batch": first}))
    return state


def store_object(store, key: str, offsets: list[int], name: str = "parquet") -> tuple[ObjectEntry, list[Record]]:
    records = [Record("t", 0, o, b"k%d" % o, b"v" * (o % 50), 1_000 + o, 0, (("h", b"%d" % o),)) for o in offsets]
    data = resolve_format(name).write(pa.Table.from_batches([records_to_batch(records)]))
    store.put(key, data)
    entry = ObjectEntry(key, "t", 0, min(offsets), max(offsets), len(offsets), len(data), 1_000, 1_000 + max(offsets),
                        hashlib.sha256(data).hexdigest())
    return entry, records


GONE = "deleted by a garbage collection"


def gc_now(store, lease_lapsed: bool = False) -> None:
    """What a compact or expire with --grace 0 deletes right now (or once every lease written
    now has expired)."""
    later = LEASE_TTL_MS if lease_lapsed else 0
    run_collection(store, load_state(store), grace_ms=0, now_ms=int(time.time() * 1000) + 60_000 + later)


def run_compact(job: CompactJob, dry_run: bool = False, now_ms: int | None = None) -> CompactResult:
    """`topicvault compact` as the CLI runs it: read_compact, plan_compact, execute_compact."""
    store = job.open_store()
    return execute_compact(store, plan_compact(read_compact(job, store, dry_run, now_ms), job), dry_run)


def run_expire(store, before_ms: int, grace_ms: int, dry_run: bool = False, now_ms: int | None = None,
               keyring: Keyring | None = None) -> ExpireResult:
    """`topicvault expire` as the CLI runs it: read_expire, plan_expire, execute_expire."""
    facts = read_expire(store, before_ms, grace_ms, dry_run, now_ms, keyring)
    return execute_expire(store, plan_expire(facts, before_ms, grace_ms), dry_run, keyring)


def run_collection(store, state: BackupState, grace_ms: int, now_ms: int, dry_run: bool = False,
                   would_retire: Iterable[str] = ()) -> Collected:
    """A garbage collection as compact and expire run it after their commit: read_collection,
    plan_collection, execute_collection."""
    plan = plan_collection(read_collection(store, state), grace_ms, now_ms, would_retire)
    return execute_collection(store, plan, dry_run)


DATA = Path(__file__).parent / "data"


ARCHIVE = DATA / "archive-v1"


def expected_v1() -> tuple[str, dict[int, list[Record]]]:
    saved = json.loads((DATA / "archive-v1.expected.json").read_text())

    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    topic = saved["topic"]
    return topic, {
        int(p): [Record(topic, int(p), r["offset"], raw(r["key"]), raw(r["value"]), r["timestamp"], r["timestampType"],
                        tuple((k, raw(v)) for k, v in r["headers"])) for r in records]
        for p, records in saved["partitions"].items()
    }


def read_parquet_objects(root: Path) -> dict[tuple[str, int], list[Record]]:
    """Every record of every parquet object under root, read with plain pyarrow (not topicvault)."""
    found: dict[tuple[str, int], list[Record]] = {}
    for path in sorted(root.rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            meta = row["metadata"]
            record = Record(
                topic=meta["topic"],
                partition=meta["partition"],
                offset=meta["offset"],
                key=row["key"],
                value=row["value"],
                timestamp_ms=meta["timestamp"],
                timestamp_type=meta["timestampType"],
                headers=tuple((h["key"], h["value"]) for h in row["headers"]),
            )
            found.setdefault((record.topic, record.partition), []).append(record)
    return found
