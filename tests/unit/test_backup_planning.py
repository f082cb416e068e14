"""Backup planning and commit building as pure logic: plain data in, a whole plan or record out."""

from __future__ import annotations

import dataclasses

import pytest
from topicvault.core.archive.commit_log import backup_record
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.errors import TopicvaultError
from topicvault.sink.kafka_reader import OffsetRange
from topicvault.sink.plan import ClusterRead, plan_backup, split_range

SETTINGS = {"t": {"partitions": 2, "replication_factor": 1, "configs": {"cleanup.policy": "delete"}}}
GROUPS = {"g": {"read_ms": 5, "offsets": {"t": {"0": 3}}}}


def committed(end: int, topics: dict | None = None, groups: dict | None = None) -> BackupState:
    state = BackupState()
    state.apply(CommitRecord(1, 0, (PartitionRange("t", 0, 0, end), PartitionRange("t", 1, 0, end)), (),
                             topics or {}, groups=groups), "k1")
    return state


def test_split_range_covers_the_range_in_order_with_no_range_over_the_limit():
    assert split_range("t", 3, 5, 17, 5) == [OffsetRange("t", 3, 5, 10), OffsetRange("t", 3, 10, 15),
                                             OffsetRange("t", 3, 15, 17)]
    assert split_range("t", 0, 7, 7, 5) == []
    assert split_range("t", 0, 0, 1, 1_000_000) == [OffsetRange("t", 0, 0, 1)]


def test_plan_is_built_whole_with_cluster_state_and_cannot_be_patched():
    cluster = ClusterRead({"t": 2}, {("t", 0): (0, 10), ("t", 1): (0, 4)}, topic_settings=SETTINGS, groups=GROUPS,
                          warnings=["consumer-group offsets not saved: x"])
    plan = plan_backup(cluster, BackupState(), records_per_task=6)
    assert [(r.partition, r.start, r.end) for r in plan.tasks] == [(0, 0, 6), (0, 6, 10), (1, 0, 4)]
    assert plan.topic_settings == SETTINGS and plan.groups == GROUPS
    assert plan.warnings == ["consumer-group offsets not saved: x"]
    assert plan.state_changed and plan.needs_commit
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.groups = None  # type: ignore[misc]


def test_nothing_new_and_same_cluster_state_needs_no_commit():
    state = committed(10, SETTINGS, GROUPS)
    same = plan_backup(ClusterRead({"t": 2}, {("t", 0): (0, 10), ("t", 1): (0, 10)}, topic_settings=SETTINGS,
                                   groups=GROUPS), state)
    assert not same.has_work and not same.state_changed and not same.needs_commit
    moved = plan_backup(ClusterRead({"t": 2}, {("t", 0): (0, 10), ("t", 1): (0, 10)}, topic_settings=SETTINGS,
                                    groups={"g": {"read_ms": 9, "offsets": {"t": {"0": 7}}}}), state)
    assert moved.state_changed and moved.needs_commit
    unread = plan_backup(ClusterRead({"t": 2}, {("t", 0): (0, 10), ("t", 1): (0, 10)}, topic_settings=SETTINGS,
                                     groups=None), state)
    assert not unread.state_changed  # groups that could not be read change nothing


def test_backup_record_follows_the_state_and_refuses_a_run_that_was_overtaken():
    state = committed(10)
    entry = ObjectEntry("o", "t", 0, 10, 14, 5, 100, 1, 2, "sum")
    record = backup_record(state, [PartitionRange("t", 0, 10, 15)], [entry], topic_ids={"t": "ID"})
    assert (record.sequence, record.ranges, record.objects, record.topic_ids) == \
        (2, (PartitionRange("t", 0, 10, 15),), (entry,), {"t": "ID"})
    assert record.created_ms > 0
    with pytest.raises(TopicvaultError, match=r"another backup committed t\[0\] up to 10 while this one ran"):
        backup_record(state, [PartitionRange("t", 0, 8, 15)], [])


def test_cut_points_close_objects_by_records_bytes_and_time_bucket():
    from topicvault.core.rotation import Rotation, cut_points

    assert list(cut_points([1] * 7, 0, 0, Rotation(max_records=3))) == [3, 6]
    assert list(cut_points([1] * 4, 2, 2, Rotation(max_records=3))) == [1]  # the open object holds 2 already
    # Bytes: an object ends before a record would pass max_bytes; a record bigger than it stands alone.
    assert list(cut_points([4, 4, 10, 1], 0, 0, Rotation(max_bytes=8))) == [2, 3]
    assert list(cut_points([1, 1, 1, 1], 0, 0, Rotation(), ["07", "07", "08", "08"], "07")) == [2]
    assert list(cut_points([1, 1], 1, 1, Rotation(), ["08", "08"], "07")) == [0]  # the open object is of hour 07
    assert list(cut_points([], 5, 5, Rotation(max_records=1))) == []
