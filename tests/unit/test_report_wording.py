"""Numbers that read right (#40 item 8): counts with their plural, a follower's records per commit
next to the archive's total, a standby's lag per partition instead of offsets summed over
partitions, no empty offset range, and a dry run's notes not saying what it did not do."""

from __future__ import annotations

import types

from topicvault import report
from topicvault.core import text
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionState
from topicvault.core.cluster.cluster_admin import TopicSettings
from topicvault.sink.plan import BackupPlan, PartitionPlan
from topicvault.source.restore.restore_plan import _plan_topic_settings
from topicvault.source.restore.standby import FollowRound, PartitionLag


def entry(first: int, last: int, partition: int = 0) -> ObjectEntry:
    return ObjectEntry(f"o-{partition}-{first}", "orders", partition, first, last, last - first + 1, 10, 0, 0, "")


def commit(sequence: int, *entries: ObjectEntry) -> CommitRecord:
    return CommitRecord(sequence, 0, (), entries, stream={"id": "s", "batch": sequence})


def test_a_follower_line_gives_the_records_of_its_commit_and_the_archive_total_apart():
    line = text.backup_follow_commit([commit(3, entry(2502, 3752))], 3753, {"orders:0": 0})
    assert line == "commit 3: 1,251 records backed up (3,753 in the archive); lag 0 records"
    line = text.backup_follow_commit([commit(4, entry(0, 0)), commit(5, entry(1, 9, 1))], 10,
                                       {"orders:0": 1, "orders:1": 7})
    assert line == ("commits 4..5: 10 records backed up (10 in the archive); lag 8 records "
                    "(most behind: orders:1 by 7)")
    assert text.backup_follow_commit([commit(6, entry(0, 0))], 1, {"orders:0": 1}).startswith(
        "commit 6: 1 record backed up (1 in the archive); lag 1 record ")


def test_a_standby_names_the_partition_most_behind_with_its_own_offsets():
    lag = (PartitionLag("orders", 0, "copy", 1500, 1500), PartitionLag("orders", 1, "copy", 20, 12),
           PartitionLag("pay", 0, "pay", 3, 3))
    line = FollowRound(2, "r-1", 1, 0, 10, 1.0, lag, 7, 3.5).line()
    assert line == ("round 2: restored 1 record in 1.0 s; copy: 8 offsets behind (most: partition 1, restored to "
                    "offset 12 of 20); pay: up to date; as of commit 7, written 3.5 s ago")
    assert "1,520" not in line and "archive offset" not in line  # offsets of two partitions summed


def test_counts_of_one_are_singular():
    state = BackupState(last_sequence=1, partitions={("pay", 0): PartitionState("pay", 0, 0, 1, [entry(0, 0)])})
    assert report.ls(state, False)[1].text == "1 partition, 1 record, 1 object (median 10 bytes), 1 commit"
    stopped = report.backup_follow_stopped(types.SimpleNamespace(commits=1, records=1, lag={("pay", 0): 1}))
    assert stopped.text == "stopped: 1 commit, 1 record backed up in this run; lag 1 record at the last commit"
    assert text.plural(0, "record") == "0 records" and text.plural(2002, "record") == "2,002 records"


def test_a_backup_that_only_saved_group_offsets_lists_no_empty_offset_range():
    plan = BackupPlan(partitions=[PartitionPlan("orders", 0, 1361, 1361, 0), PartitionPlan("orders", 1, 0, 0, 0),
                                  PartitionPlan("orders", 2, 5, 6, 0)], tasks=[], topics={"orders": 3})
    lines = [line.text for line in report.backup_plan(plan, False, "_topicvault/commits/0000000000000000004.json",
                                                      False)]
    assert lines[1:4] == ["  orders[0] nothing new (backed up to offset 1360)", "  orders[1] no records",
                          "  orders[2] offsets 5..5 (up to 1 record)"]
    assert not any("1361..1360" in line or "up to 0 records" in line for line in lines)


def test_a_dry_run_note_says_what_the_topic_gets_not_that_it_was_created():
    """The note is made by the plan, which a dry run prints without creating anything."""
    unreported = TopicSettings(partitions=1, replication_factor=1, configs={}, configs_reported=False)
    _, _, notes = _plan_topic_settings(1, {"copy": 1}, {"copy": unreported}, True)
    assert notes == ["copy: the source broker reported no topic configs, so the topic gets the target's defaults"]
