"""`topicvault expire URI --before TIME`: drop each partition's oldest whole objects.

Per partition, the longest prefix of committed objects whose records are ALL older than TIME
(the object's max timestamp < TIME; with out-of-order timestamps one young record keeps its
object, and every object after it) and that were committed before TIME is dropped. Record
timestamps are the producers' (a skewed clock, timestamps <= 0, a topic of old data backed up
today): by them alone a backup made a moment ago could go at once; the commit's own time
(PartitionState.committed_ms, to the minute) keeps every object for at least the age asked for
after it was backed up. TIME must lie in the past. What is dropped goes in one commit (kind "expire", format version 2)
removes those objects and records the partition's new start, one past the last dropped
object, so `ls`, `verify` and `restore` agree the archive now starts there. A record at or
after TIME is never dropped, and no object is ever cut. Dropped objects are retired and
deleted after the grace period, as compact's are (maintenance.garbage).

Bucket lifecycle rules are no substitute: they delete objects by age under the commits'
feet, so the state names objects that are gone; restore and verify then fail on them, and a
rule that removes a commit record breaks every later backup. Use `expire` (from cron, say),
and if a lifecycle rule is wanted as a backstop, make it much longer than the expiry and
keep it off `_topicvault/`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.archive.checkpoints import load_state
from ...core.archive.commit_log import append, maintenance_record
from ...core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionStart, RemovedObject
from ...core.crypto import Keyring
from ...core.errors import NoBackup, TopicvaultError
from ...core.instants import before_to_epoch_ms
from ...core.local.faults import crash_after, crash_now
from ...core.stores.store import ObjectStore
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
class Expiry:
    """What expire drops of one partition: its first objects, and where the archive then starts."""

    topic: str
    partition: int
    dropped: tuple[ObjectEntry, ...]
    new_start: int

    @property
    def records(self) -> int:
        return sum(o.records for o in self.dropped)


@dataclass(frozen=True)
class HeldBack:
    """Objects after a partition's expired prefix whose records are all older than TIME but that were
    committed at or after it: kept, until they were committed longer ago than the age asked for."""

    topic: str
    partition: int
    objects: int
    records: int
    committed_ms: int  # when the newest of them was committed (to the minute)


@dataclass(frozen=True)
class ExpireResult:
    """What an expire run did (or, dry, would do)."""

    before_ms: int
    expiries: tuple[Expiry, ...]
    commit_key: str | None
    collected: Collected
    held: tuple[HeldBack, ...] = ()


def _plan(state: BackupState, before_ms: int) -> list[tuple[Expiry | None, HeldBack | None]]:
    """Per partition, the longest prefix of whole objects whose every record is older than `before_ms`
    and that were committed before it, and the objects old by their records that their commit's
    time keeps (see HeldBack)."""
    planned = []
    for (topic, partition), ps in sorted(state.partitions.items()):
        dropped: list[ObjectEntry] = []
        young: list[tuple[ObjectEntry, int]] = []  # old records, committed at or after before_ms
        for entry in ps.objects:  # in offset order
            if entry.max_timestamp_ms >= before_ms:
                break
            committed_ms = ps.committed_ms(entry.first_offset, entry.last_offset)
            if young or committed_ms is None or committed_ms >= before_ms:  # when unknown, kept
                young.append((entry, before_ms if committed_ms is None else committed_ms))
                continue
            dropped.append(entry)
        expiry = Expiry(topic, partition, tuple(dropped), dropped[-1].last_offset + 1) if dropped else None
        held = HeldBack(topic, partition, len(young), sum(e.records for e, _ in young),
                        max(ms for _, ms in young)) if young else None
        if expiry or held:
            planned.append((expiry, held))
    return planned


def before_of(text: str, now_ms: int | None = None) -> int:
    """Epoch ms of --before TEXT (ISO-8601, epoch ms or an age such as 30d) at `now_ms` (None: now),
    refused (one line) unless it lies in the past."""
    now_ms = collection_time(now_ms)
    before_ms = before_to_epoch_ms(text, now_ms)
    check_before(before_ms, now_ms)
    return before_ms


def check_before(before_ms: int, now_ms: int) -> None:
    """Refuse a TIME at or after now: it would drop every object, those just backed up too."""
    if before_ms >= now_ms:
        raise TopicvaultError("--before must lie in the past (an age such as 30d, or an earlier time): at or after "
                              "now it would drop every object of the archive, those just backed up too")


@dataclass(frozen=True)
class ExpireFacts:
    """What an expire is planned from (read_expire): the location's state and, for a dry run, what
    the collection after it would see."""

    state: BackupState
    collection: CollectionFacts | None = None  # dry runs only: a real run reads it after its commit
    now_ms: int | None = None  # the collection's clock (None: the time it runs)


@dataclass(frozen=True)
class ExpirePlan:
    """What an expire run will do: drop `expiries` on top of `state` in one commit, then collect
    with `grace_ms`; `held` is reported. A dry run's plan also says what the collection after it
    would delete."""

    before_ms: int
    state: BackupState
    expiries: tuple[Expiry, ...]
    held: tuple[HeldBack, ...] = ()
    collection: GarbagePlan | None = None  # planned by dry runs only: a real run plans it after its commit
    grace_ms: int = DEFAULT_GRACE_MS
    now_ms: int | None = None

    def dry_result(self) -> ExpireResult:
        """The plan as `expire --dry-run` reports it."""
        collected = self.collection.collected() if self.collection else Collected()
        return ExpireResult(self.before_ms, self.expiries, None, collected, self.held)


def read_expire(store: ObjectStore, before_ms: int, grace_ms: int, dry_run: bool = False, now_ms: int | None = None,
                keyring: Keyring | None = None) -> ExpireFacts:
    """Check the arguments, then read what plan_expire decides from: the state (authenticated with
    `keyring`); with `dry_run`, also the listing the collection after it would plan from. NoBackup
    when the location holds no commit covering offsets."""
    if grace_ms < 0:
        raise TopicvaultError("--grace must not be negative")
    check_before(before_ms, collection_time(now_ms))
    state = load_state(store, keyring)
    if not state.last_sequence:  # commits covering no offsets yet: nothing to expire, said as such
        raise NoBackup(store.uri)
    return ExpireFacts(state, read_collection(store, state) if dry_run else None, now_ms)


def plan_expire(facts: ExpireFacts, before_ms: int, grace_ms: int = DEFAULT_GRACE_MS) -> ExpirePlan:
    """Pure: per partition of `facts.state`, the longest prefix of whole objects whose every record is
    older than `before_ms` and that were committed before it (expiries), and those its commit's time
    keeps (held); for a dry run, the collection that would follow, counting the dropped objects as
    retired now."""
    planned = _plan(facts.state, before_ms)
    expiries = tuple(expiry for expiry, _ in planned if expiry is not None)
    held = tuple(held for _, held in planned if held is not None)
    collection = None
    if facts.collection is not None:
        dropped = (o.key for e in expiries for o in e.dropped)
        collection = plan_collection(facts.collection, grace_ms, collection_time(facts.now_ms), dropped)
    return ExpirePlan(before_ms, facts.state, expiries, held, collection, grace_ms, facts.now_ms)


def execute_expire(store: ObjectStore, plan: ExpirePlan, dry_run: bool = False,
                   keyring: Keyring | None = None) -> ExpireResult:
    """Unless `dry_run` (the plan as its result): drop what `plan` found in one commit (authenticated
    with `keyring`), then delete retired objects and orphans older than the plan's grace period."""
    if dry_run:
        return plan.dry_result()
    state, expiries = plan.state, list(plan.expiries)
    commit_key, committed_ms = None, 0
    if expiries:
        if crash_after("expire.commit") is not None:
            crash_now()
        if keyring is None and any(o.key_id for ps in state.partitions.values() for o in ps.objects):
            # Readers given the key refuse commit records no key vouches for.
            raise TopicvaultError(f"the backup at {store.uri} is encrypted: pass its --encryption-key, so that "
                                  "the expire commit is authenticated like the others; nothing was changed")
        forgotten = deleted_retirees(store, state)
        record = append(store, state, lambda current: _record(current, expiries, forgotten), keyring)
        commit_key, committed_ms = record.key, record.created_ms
    # The clock is read after the commit (read before, what this run retired waited for the
    # next run with no grace whenever the commit was stamped a millisecond later).
    now = collection_time(plan.now_ms, not_before_ms=committed_ms)
    collection = plan_collection(read_collection(store, state), plan.grace_ms, now)
    return ExpireResult(plan.before_ms, plan.expiries, commit_key, execute_collection(store, collection), plan.held)


def _record(state: BackupState, expiries: list[Expiry], forgotten: tuple[str, ...]) -> CommitRecord:
    """The expire commit on top of `state`, if the dropped objects are still each partition's first ones."""
    for expiry in expiries:
        held = state.partitions[(expiry.topic, expiry.partition)].objects[:len(expiry.dropped)]
        if [o.key for o in held] != [o.key for o in expiry.dropped]:
            raise TopicvaultError(
                f"another compact or expire changed {expiry.topic}[{expiry.partition}] while this expire ran: "
                "nothing was committed; run expire again"
            )
    return maintenance_record(
        state, "expire", (RemovedObject(e.topic, e.partition, o.key) for e in expiries for o in e.dropped),
        starts=(PartitionStart(e.topic, e.partition, e.new_start) for e in expiries), forgotten=forgotten,
    )
