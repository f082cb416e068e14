"""A restore run's outcome: each task returns what it did, the driver merges the results and saves them once.

Pure logic and the local state store only (no broker, S3 server or Spark): the unit tier.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.source.object_reader import SkippedObject
from topicvault.source.peer_layout import PeerReadReport, PeerTally
from topicvault.source.restore.offset_map import (
    OFFSET_MAP_NAME,
    OffsetMap,
    save_hole,
    saved_holes,
    saved_offset_maps,
)
from topicvault.source.restore.restore_job import (
    RestorePlan,
    RestoreTask,
    TaskResult,
    drained_offset_map,
    merged_outcome,
    save_outcome,
)
from topicvault.source.restore.restore_state import RestoreRecords

RESTORE_ID = "r-results"


def entry(topic: str, partition: int, first: int, last: int) -> ObjectEntry:
    return ObjectEntry(f"{topic}/{partition}/{first:019d}", topic, partition, first, last, last - first + 1, 1, 0, 0, "x")


def hole(topic: str, partition: int, first: int, last: int) -> SkippedObject:
    return SkippedObject(f"{topic}/{partition}/{first:019d}", topic, partition, first, last, last - first + 1,
                         "checksum differs")


def mapped(topic: str, partition: int, target_start: int, *offsets: int, holes=()) -> OffsetMap:
    offset_map = OffsetMap(topic, partition, f"{topic}-copy", target_start, holes=list(holes))
    offset_map.add_offsets(pa.array(offsets, pa.int64()))
    return offset_map


def result(offset_map: OffsetMap, skipped=(), peer: PeerReadReport | None = None) -> TaskResult:
    return TaskResult(offset_map.target_topic, offset_map.partition, 0, offset_map.records, 0, 0, offset_map, peer,
                      tuple(skipped))


HOLE_A1 = hole("a", 1, 10, 19)
EARLIER = {("a", 0): mapped("a", 0, 0, 0, 1, 2)}  # saved by an earlier run: a[0] continues at target offset 3
TASKS = [RestoreTask("a", 0, "a-copy", 3, (entry("a", 0, 3, 5),)),
         RestoreTask("a", 1, "a-copy", 0, (entry("a", 1, 0, 9), entry("a", 1, 20, 24))),
         RestoreTask("b", 0, "b-copy", 0, ())]
PLAN = RestorePlan(RESTORE_ID, TASKS, {"a": "a-copy", "b": "b-copy"}, {}, resumed=True, restored=EARLIER)
RESULTS = [result(mapped("a", 0, 3, 3, 4, 5)),
           result(mapped("a", 1, 0, *range(0, 10), *range(20, 25), holes=[(10, 19)]), [HOLE_A1]),
           result(mapped("b", 0, 0))]  # produced nothing


def records(tmp_path, state: str = "state") -> RestoreRecords:
    return RestoreRecords(open_store(str(tmp_path / state)), open_store(str(tmp_path / "archive")))


def saved_files(tmp_path, state: str = "state") -> dict[str, bytes]:
    root = tmp_path / state
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_results_merged_in_any_order_save_the_same_state(tmp_path):
    saved = []
    for number, order in enumerate(itertools.permutations(RESULTS)):
        outcome = merged_outcome(PLAN, order)
        assert outcome == merged_outcome(PLAN, RESULTS)
        save_outcome(records(tmp_path, f"state-{number}"), RESTORE_ID, outcome)
        saved.append(saved_files(tmp_path, f"state-{number}"))
    assert len(saved) == 6 and all(files == saved[0] for files in saved)
    maps = saved_offset_maps(records(tmp_path, "state-0"), RESTORE_ID)
    assert maps[("a", 0)].ranges == [(0, 0, 6)]  # the earlier run's map followed by this one's
    assert maps[("a", 1)].ranges == [(0, 0, 10), (20, 10, 5)] and maps[("a", 1)].holes == [(10, 19)]
    assert saved_holes(records(tmp_path, "state-0"), RESTORE_ID) == {("a", 1): [HOLE_A1]}


def test_a_task_that_produced_nothing_adds_nothing_to_a_saved_map():
    nothing = result(mapped("a", 0, 3))  # a[0] had nothing new: its map stays the earlier run's
    outcome = merged_outcome(PLAN, [nothing])
    assert [m.to_json() for m in outcome.offset_maps] == [EARLIER[("a", 0)].to_json()]
    assert outcome.new_holes == ()
    assert [m.to_json() for m in merged_outcome(PLAN, []).offset_maps] == [EARLIER[("a", 0)].to_json()]


def test_holes_of_earlier_runs_reported_again_are_not_new():
    earlier_hole = hole("a", 0, 6, 8)
    plan = RestorePlan(RESTORE_ID, [RestoreTask("a", 0, "a-copy", 3, (), earlier_holes=(earlier_hole,))],
                       {"a": "a-copy"}, {}, resumed=True, restored=EARLIER)
    again = result(mapped("a", 0, 3, holes=[(6, 8)]), [earlier_hole])
    assert merged_outcome(plan, [again]).new_holes == ()


def test_each_hole_is_written_once_when_the_task_saved_it_ahead(tmp_path):
    state = records(tmp_path)
    writes: list[str] = []
    put = state.state.put

    def counting_put(key, body, **kwargs):
        writes.append(key)
        return put(key, body, **kwargs)

    state.state.put = counting_put
    save_hole(state, RESTORE_ID, HOLE_A1)  # the task, before producing past it
    save_outcome(state, RESTORE_ID, merged_outcome(PLAN, RESULTS))
    hole_writes = [key for key in writes if "/holes/" in key]
    assert len(hole_writes) == 1, writes
    assert sum(key.endswith(OFFSET_MAP_NAME) for key in writes) == 1


def test_the_driver_saves_a_hole_the_task_saved_elsewhere(tmp_path):
    # A task on another machine wrote its hole to that machine's own state directory.
    state = records(tmp_path)
    save_outcome(state, RESTORE_ID, merged_outcome(PLAN, RESULTS))
    assert saved_holes(state, RESTORE_ID) == {("a", 1): [HOLE_A1]}
    stored = state.read(RESTORE_ID, OFFSET_MAP_NAME)
    assert [p["source_topic"] + str(p["partition"]) for p in stored["partitions"]] == ["a0", "a1", "b0"]


def test_two_results_for_one_partition_save_nothing(tmp_path):
    # A task attempt counted twice would chain two maps of the same records.
    twice = [RESULTS[1], result(mapped("a", 1, 0, *range(0, 10), *range(20, 25), holes=[(10, 19)]), [HOLE_A1])]
    with pytest.raises(TopicvaultError, match=r"two task results for a\[1\]; nothing was saved"):
        merged_outcome(PLAN, twice)


def test_the_task_folds_its_accumulators_once_drained():
    task = RestoreTask("a", 1, "a-copy", 0, (), earlier_holes=(hole("a", 1, 30, 39),))
    taken = mapped("a", 1, 0, 0, 1, 2, 20)
    folded = drained_offset_map(task, taken, [HOLE_A1])
    assert folded.ranges == [(0, 0, 3), (20, 3, 1)] and folded.holes == [(10, 19), (30, 39)]
    assert folded is not taken and taken.holes == []  # the accumulator is read, never handed on


def test_peer_tally_reports_a_frozen_copy():
    tally = PeerTally("p[0]")
    tally.duplicates += 2
    report = tally.report()
    tally.duplicates += 1
    assert report == PeerReadReport("p[0]", duplicates=2)
    with pytest.raises(AttributeError):
        report.duplicates = 5  # type: ignore[misc]
