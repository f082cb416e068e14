"""The pure-logic half of tests/integration/test_restore_follow.py (its docstring covers both halves):
Issue #19 item 4: `restore --follow`, a warm standby that restores what lands in the archive, exactly once.
"""

from __future__ import annotations

import json

import pytest
from clitools import assert_one_line_error, run_cli
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionState
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.offset_map import OffsetMap, continued
from topicvault.source.restore.selection import Selection
from topicvault.source.restore.standby import (
    FollowRound,
    PartitionLag,
    check_follow_options,
    standby_lag,
)

BASE = 1_700_000_000_000


def test_offset_maps_of_rounds_join_into_the_whole_map():
    first = OffsetMap("s", 0, "t", 5)
    first.ranges = [(0, 5, 10)]
    second = OffsetMap("s", 0, "t", 15, [(10, 15, 5), (20, 20, 3)])
    joined = first.followed_by(second)
    assert joined.ranges == [(0, 5, 15), (20, 20, 3)]
    assert joined.target_end == 23 and joined.last_source_offset == 22
    assert joined.translate(12) == 17 and joined.translate(17) == 20

    holed = OffsetMap("s", 0, "t", 23)
    holed.add_hole(23, 40)
    assert joined.followed_by(holed).last_source_offset == 40  # a left-out object counts as passed
    assert OffsetMap("s", 0, "t", 0).last_source_offset is None
    with pytest.raises(ValueError, match="does not follow"):
        joined.followed_by(OffsetMap("s", 0, "t", 99))
    other = OffsetMap("s", 1, "t", 0, [(0, 0, 1)])
    merged = continued({("s", 0): first}, [second, other])
    assert [(m.partition, m.ranges) for m in merged] == [(0, [(0, 5, 15), (20, 20, 3)]), (1, [(0, 0, 1)])]


def test_selection_after_a_restored_offset_keeps_the_users_bounds():
    selection = Selection(from_offsets=(("*", 50),), to_offsets=(("s:0", 90),))
    assert selection.after("s", 0, None) == selection
    assert selection.after("s", 0, 10).bounds("s", 0) == (50, 90)  # the user's first offset is later
    assert selection.after("s", 0, 60).bounds("s", 0) == (61, 90)
    assert selection.after("s", 0, 60).bounds("s", 1) == (50, None)  # other partitions unchanged
    entries = [ObjectEntry(f"o{i}", "s", 0, i * 10, i * 10 + 9, 10, 1, 0, 0, "") for i in range(10)]
    assert [e.first_offset for e in selection.after("s", 0, 69).objects("s", 0, entries)] == [70, 80, 90]


def test_follow_refuses_options_it_cannot_honour():
    with pytest.raises(TopicvaultError, match="--until restores the archive as of a past moment"):
        check_follow_options(Selection(until_ms=BASE), 10)
    with pytest.raises(TopicvaultError, match="bad --poll-interval 0"):
        check_follow_options(Selection(), 0)
    check_follow_options(Selection(from_offsets=(("*", 5),)), 0.5)


def test_follow_flags_are_one_line_errors_before_anything_runs(tmp_path):
    for extra, needle in ((["--follow", "--until", str(BASE)], "--until"), (["--poll-interval", "5"], "--follow"),
                          (["--follow", "--dry-run"], "--dry-run"), (["--follow", "--poll-interval", "-1"],
                                                                      "--poll-interval")):
        out = run_cli("restore", "--from", str(tmp_path / "none"), "-b", "127.0.0.1:1", *extra, expect_exit=1)
        assert_one_line_error(out, needle)
    assert not (tmp_path / "none").exists()


def test_lag_compares_the_archives_newest_offset_with_the_restored_one():
    archive = BackupState(partitions={
        ("s", 0): PartitionState("s", 0, 0, 30, [ObjectEntry("a", "s", 0, 0, 19, 20, 1, 0, 0, ""),
                                                 ObjectEntry("b", "s", 0, 20, 28, 9, 1, 0, 0, "")]),
        ("s", 1): PartitionState("s", 1, 0, 5, [ObjectEntry("c", "s", 1, 0, 4, 5, 1, 0, 0, "")]),
        ("x", 0): PartitionState("x", 0, 0, 5, [ObjectEntry("d", "x", 0, 0, 4, 5, 1, 0, 0, "")]),
    })
    done = OffsetMap("s", 0, "t", 0, [(0, 0, 20)])
    lags = standby_lag(archive, {"s": "t"}, [done])
    assert lags == [PartitionLag("s", 0, "t", 29, 20), PartitionLag("s", 1, "t", 5, 0)]
    finished = FollowRound(2, "r1", 20, 0, 100, 1.5, tuple(lags), 7, 3.25)
    assert finished.behind_by_topic() == {"t": 14}
    assert "14 offsets behind" in finished.line() and "commit 7, written 3.2 s ago" in finished.line()
    assert json.loads(json.dumps(finished.to_json()))["behind"] == {"t": 14}
