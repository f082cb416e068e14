"""The maintenance planners (source/maintenance/): compact, expire and garbage collection planned from an
in-memory state and listing, with no store round trip; each plan is frozen and says exactly what
its execute would write and delete."""

from __future__ import annotations

import dataclasses

import pytest
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionState
from topicvault.core.errors import TopicvaultError
from topicvault.core.rotation import Rotation
from topicvault.core.stores.store import ObjectInfo
from topicvault.source.maintenance.compact import CompactFacts, CompactJob, CompactPlan, Merge, plan_compact
from topicvault.source.maintenance.expire import ExpireFacts, ExpirePlan, Expiry, HeldBack, plan_expire
from topicvault.source.maintenance.garbage import CollectionFacts, GarbagePlan, plan_collection

T = "orders"
RUN = "r000000000001"
HOUR = 3_600_000
NOW = 1_700_000_000_000


def obj(first: int, last: int, max_ts: int = 0, run: str = RUN, key_id: str | None = None,
        ext: str = "parquet") -> ObjectEntry:
    return ObjectEntry(f"topic={T}/partition=0/{first:019d}-{run}.{ext}", T, 0, first, last, last - first + 1,
                       100, 0, max_ts, "00", key_id)


def state_of(*objects: ObjectEntry, committed_ms: int = 0, retired: dict[str, int] | None = None) -> BackupState:
    end = objects[-1].last_offset + 1
    ps = PartitionState(T, 0, objects[0].first_offset, end, list(objects), commit_times=[(end, 0, committed_ms)])
    return BackupState(partitions={(T, 0): ps}, retired=dict(retired or {}))


def job(max_records: int = 100) -> CompactJob:
    return CompactJob("/unused", rotation=Rotation(max_records=max_records))


def test_compact_plans_runs_of_small_adjacent_objects_of_one_format_and_leaves_full_ones():
    small = [obj(0, 9), obj(10, 19), obj(20, 29)]
    full, lone, other_format = obj(30, 229), obj(230, 239), obj(240, 249, ext="avro")
    plan = plan_compact(CompactFacts(state_of(*small, full, lone, other_format, obj(250, 259, ext="avro"))), job())
    assert plan == CompactPlan(plan.job, plan.state, (Merge(T, 0, tuple(small)),
                                            Merge(T, 0, (other_format, obj(250, 259, ext="avro")))))
    assert plan.merges[0].records == 30 and plan.collection is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.merges = ()  # type: ignore[misc]


def test_compact_with_a_sealing_key_plans_every_object_it_did_not_wrap_even_alone():
    wrapped, plain, full = obj(0, 9, key_id="k1"), obj(10, 19), obj(20, 219, key_id="old")
    plan = plan_compact(CompactFacts(state_of(wrapped, plain, full), "k1"), job())
    assert plan.merges == (Merge(T, 0, (wrapped, plain), reencrypt=True), Merge(T, 0, (full,), reencrypt=True))
    assert plan_compact(CompactFacts(state_of(obj(0, 9, key_id="k1")), "k1"), job()).merges == ()


def test_compact_plan_refuses_objects_named_by_another_template_before_anything_is_written():
    odd = dataclasses.replace(obj(10, 19), key=f"{T}-0-10.parquet")
    with pytest.raises(TopicvaultError, match="--key-template"):
        plan_compact(CompactFacts(state_of(obj(0, 9), odd)), job())


def test_compact_dry_result_reports_the_plan_and_what_its_collection_would_delete():
    plan = dataclasses.replace(plan_compact(CompactFacts(state_of(obj(0, 9), obj(10, 19))), job()),
                               collection=GarbagePlan(retired=("a",), orphans=("b",), waiting=2))
    result = plan.dry_result()
    assert result.merges == plan.merges and result.commit_key is None and result.written == ()
    assert (result.collected.retired, result.collected.orphans, result.collected.waiting) == (["a"], ["b"], 2)


def test_expire_plans_the_old_prefix_and_holds_back_what_was_committed_too_recently():
    old, young_commit, young = obj(0, 9, max_ts=50), obj(10, 19, max_ts=60), obj(20, 29, max_ts=500)
    state = state_of(old, young_commit, young)
    state.partitions[(T, 0)].commit_times = [(10, 0, 10), (30, 0, 200)]  # the second object committed at 200
    plan = plan_expire(ExpireFacts(state), 100)
    assert plan == ExpirePlan(100, state, (Expiry(T, 0, (old,), 10),), (HeldBack(T, 0, 1, 10, 200),))
    assert plan.expiries[0].records == 10
    dry = plan.dry_result()
    assert (dry.before_ms, dry.expiries, dry.commit_key, dry.held) == (100, plan.expiries, None, plan.held)
    assert plan_expire(ExpireFacts(state), 10).expiries == ()  # nothing wholly older than TIME


def info(key: str, modified_ms: int | None = NOW - 2 * HOUR) -> ObjectInfo:
    return ObjectInfo(key, 10, None, modified_ms)


def test_garbage_plan_sorts_the_listing_into_retired_orphans_waiting_and_never_touches_the_rest():
    live, gone_long, gone_now = obj(20, 29), obj(0, 9, run="r0000000000aa"), obj(10, 19, run="r0000000000bb")
    state = state_of(live, retired={gone_long.key: NOW - 2 * HOUR, gone_now.key: NOW - 60_000})
    orphan, young_orphan = obj(30, 39, run="r0000000000cc"), obj(30, 39, run="r0000000000dd")
    leased = obj(30, 39, run="r0000000000ee")
    listing = [
        info(live.key), info(gone_long.key), info(gone_now.key), info(orphan.key),
        info(young_orphan.key, NOW - 60_000), info(leased.key),
        info("_topicvault/leases/r0000000000ee", NOW - 60_000),  # a live lease spares its run's objects
        info("_topicvault/leases/r0000000000ff", NOW - 3 * HOUR),  # expired longer than the grace
        info("_topicvault/commits/00000000000000000001.json"),
        info(f"topic={T}/partition=0/00000000000000000040.parquet"),  # no run id: not topicvault's
        info(f"other/topic={T}/partition=0/00000000000000000040-r0000000000ab.parquet"),
        info("other/_topicvault/commits/00000000000000000001.json"),  # a location nested in this one
        info("topic=unknown/partition=0/00000000000000000000-r0000000000ac.parquet"),  # not one of its topics
    ]
    plan = plan_collection(CollectionFacts(tuple(listing), state), HOUR, NOW)
    assert plan == GarbagePlan((gone_long.key,), (orphan.key,), 3, ("_topicvault/leases/r0000000000ff",),
                               frozenset({live.key}))
    assert plan_collection(CollectionFacts(tuple(listing), state), 0, NOW).retired == (gone_long.key, gone_now.key)


def test_garbage_plan_counts_what_a_dry_run_would_retire_and_an_empty_state_plans_nothing():
    live, merged_away = obj(0, 9), obj(10, 19)
    state = state_of(live, merged_away)
    listing = [info(live.key), info(merged_away.key), info("_topicvault/leases/r0000000000ff", NOW - 3 * HOUR)]
    plan = plan_collection(CollectionFacts(tuple(listing), state), 0, NOW, would_retire=[merged_away.key])
    assert (plan.retired, plan.live) == ((merged_away.key,), frozenset({live.key}))
    assert plan_collection(CollectionFacts(tuple(listing), state), HOUR, NOW, would_retire=[merged_away.key]).waiting == 1
    assert plan_collection(CollectionFacts(tuple(listing), BackupState()), 0, NOW) == GarbagePlan()
