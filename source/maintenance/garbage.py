"""Deleting objects no commit needs any more: retired ones and orphans, after a grace period.

Two kinds of object under a location are named by no current commit:

- **retired**: replaced by `compact` or dropped by `expire`. The commit that removed them is the
  moment they stopped being part of the archive (`BackupState.retired`), but a restore planned
  before that commit may still be reading them, so they are deleted only once `grace` has
  passed since that commit. A restore running longer than the grace over such objects stops
  with "object … not found" (never wrong data: every object is checked against its checksum);
  run it again with the same --restore-id and it continues from the current state.
- **orphans**: written by a run that never committed them (killed, lost a commit race, or a
  compact whose merge was not worth it). They are deleted once their last write is older than
  `grace`.

Why a running backup is safe: a backup or a compact writes its objects first and commits them
at its end. While it runs its driver holds a lease (core.archive.leases); the objects of a run with a
live lease are never orphans, however long it runs. Without a live lease (a killed run, one whose
lease lapsed, or a DataFrame write or follower micro-batch, which hold none), an object is an
orphan once it is older than the grace. The state is read forward after the
listing, so any commit that landed before the deletes start is known, and again every
DELETES_PER_STATE_READ deletes. A run whose objects were deleted that way finds them gone just
before its commit (core.archive.leases.check_objects_held) and fails, committing nothing, so a
commit never names a deleted object (a compact retires nothing either). The one window left is
a run without a live lease (lapsed, or a DataFrame write or micro-batch longer than the grace)
committing between a state read and the delete of an object whose check came before that
delete: at most DELETES_PER_STATE_READ deletes long. Only keys that carry a run id
(`<offset>-r<12 hex>`, the names topicvault writes since run ids) and name one of the
location's topics are ever deleted, and nothing under a nested location (a `_topicvault/` below
the root): objects of older versions, peer sinks, other locations or people are never touched.
Under `_topicvault/`, only leases expired for longer than the grace are deleted (killed runs');
commits and checkpoints are left as they are: commits are the truth, and checkpoints are few.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...core.archive.archive_keys import STATE_PREFIX
from ...core.archive.checkpoints import read_forward
from ...core.archive.commits import BackupState
from ...core.archive.leases import expired_leases, live_runs
from ...core.local.faults import crash_after, crash_now
from ...core.stores.store import ObjectInfo, ObjectStore
from ...keys.codec import run_id_of

DEFAULT_GRACE_MS = 24 * 3_600_000
# Deletes between two reads forward of the state (one listing each): a run that commits an orphan
# while a long collection deletes (its check, core.archive.leases.check_objects_held, still saw the
# object) is noticed within this many deletes, not only when the collection started.
DELETES_PER_STATE_READ = 100


@dataclass
class Collected:
    """What a garbage collection deleted (or, dry, would delete), and what it left for later."""

    retired: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    waiting: int = 0  # unreferenced objects younger than the grace period

    @property
    def deleted(self) -> int:
        return len(self.retired) + len(self.orphans)


def deleted_retirees(store: ObjectStore, state: BackupState) -> tuple[str, ...]:
    """Retired objects the store no longer holds (an earlier run deleted them): the next
    maintenance commit lists them as `forgotten`, so the state stops carrying them."""
    if not state.retired:
        return ()
    held = {info.key for info in store.list() if not info.key.startswith(STATE_PREFIX)}
    return tuple(sorted(key for key in state.retired if key not in held))


def collection_time(now_ms: int | None, not_before_ms: int = 0) -> int:
    """The time a collection compares ages with: `now_ms` when given, else the clock, never
    earlier than `not_before_ms` (the run's own commit: what it retired is as old as that
    commit, so with no grace it goes in the same run)."""
    return now_ms if now_ms is not None else max(int(time.time() * 1000), not_before_ms)


@dataclass(frozen=True)
class CollectionFacts:
    """What a collection is planned from: a listing of the location and its state, read forward
    after the listing (read_collection)."""

    listing: tuple[ObjectInfo, ...]
    state: BackupState


@dataclass(frozen=True)
class GarbagePlan:
    """What a collection will delete: retired objects and orphans past the grace, and leases
    expired for longer than it (killed runs'); `live` is what the state named when planned, and
    `state` the state execute_collection reads forward while it deletes."""

    retired: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()
    waiting: int = 0  # unreferenced objects younger than the grace period
    expired_leases: tuple[str, ...] = ()
    live: frozenset[str] = frozenset()
    state: BackupState = field(default_factory=BackupState, compare=False)
    # Planned with objects a dry run would retire counted as retired: it deletes what the state names.
    preview: bool = False

    def collected(self) -> Collected:
        """The plan as the result of a dry run: what would be deleted."""
        return Collected(list(self.retired), list(self.orphans), self.waiting)


def read_collection(store: ObjectStore, state: BackupState) -> CollectionFacts:
    """List the location, then read `state` forward (in place) after the listing: what
    plan_collection decides from."""
    listing = tuple(store.list())
    return CollectionFacts(listing, read_forward(store, state))


def plan_collection(facts: CollectionFacts, grace_ms: int, now_ms: int, would_retire: Iterable[str] = ()) -> GarbagePlan:
    """Pure: what a collection at `now_ms` deletes, from `facts`; see the module doc. `would_retire`
    (a dry run's: what the run would retire, its commit not written) counts as retired at `now_ms`."""
    everything, state, would_retire = list(facts.listing), facts.state, set(would_retire)
    if not state.partitions:
        return GarbagePlan(state=state, preview=bool(would_retire))
    # Another location nested inside this one (its own _topicvault/ below our root) is not ours.
    nested = {i.key[:i.key.index("/" + STATE_PREFIX) + 1] for i in everything if "/" + STATE_PREFIX in i.key}
    # One alternation (longest first), not a loop over topics per key: locations hold many of both.
    names_a_topic = re.compile("|".join(map(re.escape, sorted({t for t, _ in state.partitions}, key=len, reverse=True))))
    listed = [info for info in everything
              if not info.key.startswith(STATE_PREFIX) and run_id_of(info.key)
              and not any(info.key.startswith(root) for root in nested)
              and names_a_topic.search(info.key)]
    live = {o.key for ps in state.partitions.values() for o in ps.objects} - would_retire
    running = live_runs(everything, now_ms)  # runs still writing: their objects are not orphans
    retired, orphans, waiting = [], [], 0
    for info in listed:
        if info.key in live:
            continue
        retired_ms = now_ms if info.key in would_retire else state.retired.get(info.key)
        if retired_ms is not None and retired_ms + grace_ms <= now_ms:
            retired.append(info.key)
        elif (retired_ms is None and info.modified_ms is not None and info.modified_ms + grace_ms <= now_ms
              and run_id_of(info.key) not in running):
            orphans.append(info.key)
        else:
            waiting += 1
    return GarbagePlan(tuple(retired), tuple(orphans), waiting,
                       tuple(expired_leases(everything, now_ms, grace_ms)), frozenset(live), state, bool(would_retire))


def execute_collection(store: ObjectStore, plan: GarbagePlan, dry_run: bool = False) -> Collected:
    """Delete what `plan` found (with `dry_run`, nothing: what would go), reading its state forward
    every DELETES_PER_STATE_READ deletes and sparing what a commit named since. Crash point:
    `retire.delete:N` (after N deletes; 0 is before the first)."""
    if dry_run:
        return plan.collected()
    if plan.preview:
        raise ValueError("a plan counting what a dry run would retire is for dry runs: a real run retires by its commit")
    for lease in plan.expired_leases:
        store.delete(lease)  # a run that never committed: its objects are orphans like any
    crash_at = crash_after("retire.delete")
    live = set(plan.live)
    spared: set[str] = set()  # committed since the collection read the state
    for count, key in enumerate(plan.retired + plan.orphans):
        if crash_at is not None and count >= crash_at:
            crash_now()
        if count and count % DELETES_PER_STATE_READ == 0:
            read_forward(store, plan.state, on_commit=lambda record: live.update(o.key for o in record.objects))
        if key in live:
            spared.add(key)
            continue
        store.delete(key)
    return Collected([k for k in plan.retired if k not in spared], [k for k in plan.orphans if k not in spared],
                     plan.waiting)
