"""The pure-logic half of tests/integration/test_backup_integrity.py (its docstring covers both halves):
Issue #16 (backup side): topic identity, commit what was read, lost ranges, isolation level.
"""

from __future__ import annotations

import json

import pytest
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.errors import TopicvaultError
from topicvault.sink.kafka_reader import OffsetRange
from topicvault.sink.plan import ClusterRead, PartitionPlan, plan_backup


def test_commits_without_topic_ids_still_load_and_are_accepted():
    old = {"format_version": 1, "sequence": 1, "created_ms": 0, "topics": {},
           "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": 5}], "objects": []}
    record = CommitRecord.from_json(json.dumps(old).encode(), "k")
    assert record.topic_ids is None and record.lost == ()
    state = BackupState()
    state.apply(record, "k")
    plan = plan_backup(ClusterRead({"t": 1}, {("t", 0): (0, 9)}, topic_ids={"t": "ID1"}), state)
    assert [(t.start, t.end) for t in plan.tasks] == [(5, 9)] and plan.topic_ids == {"t": "ID1"}
    with pytest.raises(TopicvaultError, match="deleted and re-created"):
        state.apply(CommitRecord(2, 0, (), (), topic_ids={"t": "ID1"}), "k2")
        plan_backup(ClusterRead({"t": 1}, {("t", 0): (0, 9)}, topic_ids={"t": "ID2"}), state)


def entry(first: int, last: int) -> ObjectEntry:
    return ObjectEntry(f"o{first}", "t", 0, first, last, last - first + 1, 1, 0, 0, "x")


def test_read_extent_commits_only_the_contiguous_prefix_of_a_partition():
    from topicvault.sink.plan import TaskResult, read_extent

    partitions = [PartitionPlan("t", 0, 0, 30, 0)]
    results = [
        TaskResult(OffsetRange("t", 0, 0, 10), 10, [entry(0, 9)]),
        TaskResult(OffsetRange("t", 0, 10, 20), 14, [entry(10, 13)]),  # EOF at 14
        TaskResult(OffsetRange("t", 0, 20, 30), 30, [entry(20, 29)]),  # after the gap: not committed
    ]
    extent = read_extent(partitions, list(reversed(results)))
    assert extent.ranges == [PartitionRange("t", 0, 0, 14)]
    assert [o.first_offset for o in extent.objects] == [0, 10]
    assert "committed up to 14" in extent.warnings[0]
    whole = read_extent(partitions, [results[0], TaskResult(OffsetRange("t", 0, 10, 30), 30, [entry(10, 25)])])
    assert whole.ranges == [PartitionRange("t", 0, 0, 30)] and not whole.warnings


def test_plan_records_offsets_deleted_before_they_were_read():
    from topicvault.sink.plan import TaskResult, read_extent

    state = BackupState()
    state.apply(CommitRecord(1, 0, (PartitionRange("t", 0, 0, 10),), ()), "k")
    plan = plan_backup(ClusterRead({"t": 1}, {("t", 0): (25, 30)}), state)
    assert plan.lost == [PartitionRange("t", 0, 10, 25)]
    assert [(t.start, t.end) for t in plan.tasks] == [(25, 30)]
    extent = read_extent(plan.partitions, [TaskResult(plan.tasks[0], 30, [])])
    assert extent.ranges == [PartitionRange("t", 0, 10, 30)]  # continues the history; the hole is `lost`
    only_lost = plan_backup(ClusterRead({"t": 1}, {("t", 0): (25, 25)}), state)
    assert only_lost.needs_commit and read_extent(only_lost.partitions, []).ranges == [PartitionRange("t", 0, 10, 25)]


def test_a_last_record_is_kept_until_the_end_moves_without_one():
    from topicvault.core.archive.commits import BackupState, PartitionRange

    state = BackupState()
    first = CommitRecord(1, 0, (PartitionRange("t", 0, 0, 10),), (), last_records={"t:0": (9, 4)})
    assert CommitRecord.from_json(first.to_json(), "k") == first
    state.apply(first, "k1")
    assert state.last_records == {("t", 0): (9, 4)}
    state.apply(CommitRecord(2, 0, (), (), kind="compact"), "k2")  # maintenance moves no end
    assert state.last_records == {("t", 0): (9, 4)}
    # A DataFrame write or a micro-batch records none: checking the old one would re-read all it wrote.
    state.apply(CommitRecord(3, 0, (PartitionRange("t", 0, 10, 20),), ()), "k3")
    assert state.last_records == {}
    old = json.loads(first.to_json())
    del old["last_records"]  # commits written before last records were recorded
    assert CommitRecord.from_json(json.dumps(old).encode(), "k").last_records is None
    old["last_records"] = ["damaged"]
    with pytest.raises(TopicvaultError, match="unreadable"):
        CommitRecord.from_json(json.dumps(old).encode(), "k")
