"""`topicvault compact`: merge each partition's small committed objects into rotation-size ones.

A followed backup commits an object per partition per micro-batch, so a location fills with
small objects. Per partition, runs of adjacent committed objects smaller than the rotation
(`--max-records` / `--max-bytes`) are read in offset order and written again through the
same writer backups use (sink.objects.PartitionObjects), so a merged object holds exactly the
records, bytes and key a backup of those records with that rotation would have written, under
a fresh run id (a committed key is never overwritten). With an encryption key, objects wrapped
by another key (or none) are rewritten too, so compact also re-encrypts with the current key.

One commit per run replaces the merged objects (commits.CommitRecord kind "compact", format
version 2). It is a conditional put like every commit: when a follower committed first, the
state is read forward and the commit rebuilt, as long as every object this run replaces is
still there (a racing compact or expire that removed one makes this run give up, committing
nothing; what it wrote is collected as orphans later). Only after the commit are replaced
objects retired; they are deleted by a later run after the grace period (maintenance.garbage).

Killed anywhere, the location stays consistent: before the commit nothing it wrote is named
by any commit (orphans); after it, the state already holds the merged objects and the retired
ones wait for their grace. A rerun finishes the job.

Compaction runs on the driver, one partition run at a time (memory: one stored object read
plus the object being written), without Spark: it moves only what the archive already holds.
`--follow` does not compact as it goes: compaction would compete with the micro-batches for
the follower's time and its commit slot; run `compact` beside it (say, hourly) instead.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field

from ...core.archive.checkpoints import load_state
from ...core.archive.commit_log import append, maintenance_record
from ...core.archive.commits import BackupState, CommitRecord, ObjectEntry, RemovedObject
from ...core.archive.leases import RunLease
from ...core.crypto import Keyring, keyring_of
from ...core.errors import NoBackup, TopicvaultError
from ...core.local.faults import crash_after, crash_now
from ...core.rotation import Rotation
from ...core.stores.locations import open_store
from ...core.stores.store import ObjectStore
from ...formats import ObjectFormat, extension_of, format_for_extension, resolve_format
from ...keys import KeyCodec, default_codec, new_run_id, template_codec
from ...sink.objects import PartitionObjects
from ..object_reader import check_keys_open, read_object_batches
from .garbage import (
    DEFAULT_GRACE_MS,
    Collected,
    CollectionFacts,
    GarbagePlan,
    collection_time,
    deleted_retirees,
    execute_collection,
    plan_collection,
    read_collection,
)


@dataclass(frozen=True)
class CompactJob:
    """What a compact run needs."""

    store_uri: str
    store_options: tuple[tuple[str, str], ...] = ()
    rotation: Rotation = field(default_factory=Rotation)
    compression: str | None = None  # None: the default codec of each object's format
    key_template: str | None = None  # the one the backups used, if any
    encryption_keys: tuple[str, ...] = ()  # the first encrypts what compact writes; all of them read
    grace_ms: int = DEFAULT_GRACE_MS

    def __post_init__(self) -> None:
        if self.grace_ms < 0:
            raise TopicvaultError("--grace must not be negative")
        self.codec()  # a bad template fails before anything is read
        self.keyring()  # an unreadable key fails before anything is written

    def codec(self) -> KeyCodec:
        """The codec new objects are named with (the backups' own)."""
        return template_codec(self.key_template) if self.key_template else default_codec()

    def keyring(self) -> Keyring | None:
        return keyring_of(self.encryption_keys)

    def open_store(self) -> ObjectStore:
        return open_store(self.store_uri, dict(self.store_options))


@dataclass(frozen=True)
class Merge:
    """Adjacent committed objects of one partition, to be written again as fewer (or re-encrypted) ones."""

    topic: str
    partition: int
    objects: tuple[ObjectEntry, ...]
    reencrypt: bool = False  # worth writing even when it does not make fewer objects

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)


@dataclass(frozen=True)
class CompactResult:
    """What a compact run did (or, dry, would do)."""

    merges: tuple[Merge, ...]  # the planned ones
    replaced: tuple[ObjectEntry, ...]  # objects the commit retired
    written: tuple[ObjectEntry, ...]  # objects the commit added
    commit_key: str | None
    collected: Collected


def _merges(state: BackupState, rotation: Rotation, sealing_key_id: str | None) -> list[Merge]:
    """Per partition, the runs of adjacent objects worth rewriting: two or more objects below the
    rotation (by records and stored bytes) of one format, or, with a sealing key, any object
    not wrapped by it (a run of one is re-encrypted alone)."""
    merges = []
    for (topic, partition), ps in sorted(state.partitions.items()):
        for run in _runs(ps.objects, rotation, sealing_key_id):
            reencrypt = sealing_key_id is not None and any(o.key_id != sealing_key_id for o in run)
            if len(run) > 1 or reencrypt:
                merges.append(Merge(topic, partition, tuple(run), reencrypt))
    return merges


def _runs(objects: list[ObjectEntry], rotation: Rotation, sealing_key_id: str | None) -> list[list[ObjectEntry]]:
    """Maximal runs of adjacent objects that may be written again together (see _merges)."""
    runs: list[list[ObjectEntry]] = [[]]
    for entry in objects:
        small = entry.records < rotation.max_records and entry.bytes < rotation.max_bytes
        stale_key = sealing_key_id is not None and entry.key_id != sealing_key_id
        if runs[-1] and (not small or extension_of(runs[-1][-1].key) != extension_of(entry.key)):
            runs.append([])
        if small or stale_key:
            runs[-1].append(entry)
        if not small:  # a full object is only re-encrypted: merging into it would not shrink anything
            runs.append([])
    return [run for run in runs if run]


def check_names(merges: list[Merge], codec: KeyCodec) -> None:
    """Every object to merge is named like the codec names objects, so the new ones follow the
    location's layout (time folders included); otherwise the backups used another template."""
    for merge in merges:
        for entry in merge.objects:
            parsed = codec.parse(entry.key)
            if parsed is None or (parsed.topic, parsed.partition, parsed.start_offset) != (
                    entry.topic, entry.partition, entry.first_offset):
                raise TopicvaultError(
                    f"object {entry.key} is not named like the objects compact would write: pass the "
                    "--key-template (or --time-partition template) the backups used; nothing was written"
                )


@dataclass(frozen=True)
class CompactFacts:
    """What a compact is planned from (read_compact): the location's state, the key what it writes is
    sealed with (None: no encryption), and, for a dry run, what the collection after it would see."""

    state: BackupState
    sealing_key_id: str | None = None
    collection: CollectionFacts | None = None  # dry runs only: a real run reads it after its commit
    now_ms: int | None = None  # the collection's clock (None: the time it runs)


@dataclass(frozen=True)
class CompactPlan:
    """What a compact run will do: write `merges` again and commit them on top of `state`, as `job`
    says (rotation, codec, keys, grace). A dry run's plan also says what the collection after it
    would delete."""

    job: CompactJob
    state: BackupState
    merges: tuple[Merge, ...]
    collection: GarbagePlan | None = None  # planned by dry runs only: a real run plans it after its commit
    now_ms: int | None = None

    def dry_result(self) -> CompactResult:
        """The plan as `compact --dry-run` reports it."""
        collected = self.collection.collected() if self.collection else Collected()
        return CompactResult(self.merges, (), (), None, collected)


def read_compact(job: CompactJob, store: ObjectStore, dry_run: bool = False,
                 now_ms: int | None = None) -> CompactFacts:
    """Read what plan_compact decides from: the state (authenticated with the job's keys); with
    `dry_run`, also the listing the collection after it would plan from. NoBackup when the location
    holds no commit covering offsets."""
    keyring = job.keyring()
    state = load_state(store, keyring)
    if not state.last_sequence:  # commits covering no offsets yet: nothing to merge, said as such
        raise NoBackup(job.store_uri)
    collection = read_collection(store, state) if dry_run else None
    return CompactFacts(state, keyring.sealing.key_id if keyring else None, collection, now_ms)


def plan_compact(facts: CompactFacts, job: CompactJob) -> CompactPlan:
    """Pure: the merges of `facts.state`, refusing one whose format lacks the job's codec or whose
    objects are not named like the job's codec names them (check_names); for a dry run, the
    collection that would follow, counting the merged objects as retired."""
    merges = _merges(facts.state, job.rotation, facts.sealing_key_id)
    for merge in merges:
        _format_of(merge, job.compression)  # a codec the format lacks fails before anything is written
    check_names(merges, job.codec())
    collection = None
    if facts.collection is not None:
        replaced = (o.key for m in merges for o in m.objects)
        collection = plan_collection(facts.collection, job.grace_ms, collection_time(facts.now_ms), replaced)
    return CompactPlan(job, facts.state, tuple(merges), collection, facts.now_ms)


def execute_compact(store: ObjectStore, plan: CompactPlan, dry_run: bool = False) -> CompactResult:
    """Check that every key the merges need opens (before anything is written; unencrypted objects
    are what a compact with a key encrypts); then, unless `dry_run` (the plan as its result), write
    the merges, commit them in one commit, and delete retired objects and orphans older than the
    grace period."""
    job, state, merges = plan.job, plan.state, plan.merges
    keyring = job.keyring()
    check_keys_open(store, (o for m in merges for o in m.objects), keyring, allow_plaintext=True)
    if dry_run:
        return plan.dry_result()
    run_id = new_run_id()  # per run, never per job: a job run twice must not write under the same keys
    commit_key, done = None, []
    # From before the first merged object to after the commit: another compact or an expire
    # leaves them alone, however long this one runs (core.archive.leases).
    with RunLease(store, run_id) if merges else nullcontext():
        rewritten = [(merge, _rewrite(store, job.codec(), keyring, job, merge, run_id)) for merge in merges]
        done = [(merge, written) for merge, written in rewritten if written]
        if done:
            if crash_after("compact.commit") is not None:
                crash_now()
            forgotten = deleted_retirees(store, state)
            commit_key = append(store, state, lambda current: _record(current, done, forgotten), keyring).key
    collection = plan_collection(read_collection(store, state), job.grace_ms, collection_time(plan.now_ms))
    return CompactResult(merges, tuple(o for m, _ in done for o in m.objects),
                         tuple(o for _, w in done for o in w), commit_key, execute_collection(store, collection))


def _rewrite(store: ObjectStore, codec: KeyCodec, keyring: Keyring | None, job: CompactJob,
             merge: Merge, run_id: str) -> list[ObjectEntry]:
    """Write the merge's records again; [] (and nothing left behind) when that would not make
    fewer objects and re-encrypting is not asked for."""
    writer = PartitionObjects(store, codec, _format_of(merge, job.compression), job.rotation, run_id=run_id, keyring=keyring)
    for entry in merge.objects:  # checked against its commit entry (checksum, count, offsets) first
        # Unencrypted objects are read with a key too: this is how a location backed up without one gets encrypted.
        for batch in read_object_batches(store, entry, keyring, allow_plaintext=True):
            writer.add(batch)
    written = writer.finish()
    if len(written) < len(merge.objects) or merge.reencrypt:
        return written
    for entry in written:  # this run's own, named by no commit: nobody else can need them
        store.delete(entry.key)
    return []


def _format_of(merge: Merge, compression: str | None) -> ObjectFormat:
    """The merge's objects' format (by extension), with `compression` if given."""
    object_format = format_for_extension(extension_of(merge.objects[0].key))
    return resolve_format(object_format.name, compression) if compression else object_format


def _record(state: BackupState, done: list[tuple[Merge, list[ObjectEntry]]], forgotten: tuple[str, ...]) -> CommitRecord:
    """The compact commit on top of `state`, if every object it replaces is still committed."""
    for merge, _ in done:
        held = {o.key for o in state.partitions[(merge.topic, merge.partition)].objects}
        gone = [o.key for o in merge.objects if o.key not in held]
        if gone:
            raise TopicvaultError(
                f"another compact or expire removed {gone[0]} while this compact ran: nothing was committed; "
                "run compact again (what this run wrote is deleted as orphans after the grace period)"
            )
    return maintenance_record(
        state, "compact", (RemovedObject(m.topic, m.partition, o.key) for m, _ in done for o in m.objects),
        objects=(o for _, written in done for o in written), forgotten=forgotten,
    )

