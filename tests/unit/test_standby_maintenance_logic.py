"""The pure-logic half of tests/integration/test_standby_maintenance.py (its docstring covers both halves):
A warm standby (`restore --follow`) beside `compact` and `expire` of the archive it follows.
"""

from __future__ import annotations

import pytest
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.restore.restore_plan import check_not_expired
from topicvault.source.restore.restore_state import (
    STATE_NAME,
    RestoreRecords,
    RestoreState,
    add_source_starts,
    load_restore_state,
    save_restore_state,
)
from topicvault.source.restore.selection import Selection


def test_an_archive_start_past_what_was_restored_is_a_gap_only_within_the_selection():
    def check(start: int, through: int | None, selection: Selection = Selection()) -> None:
        check_not_expired("r1", "s", 0, "t", start, through, selection.after("s", 0, through))

    check(100, 99)  # expired exactly what was restored
    check(50, 99)
    check(500, None)  # nothing restored yet: a first round starts at the archive's start
    check(500, 99, Selection(to_offsets=(("s:0", 99),)))  # nothing after 99 is selected
    with pytest.raises(TopicvaultError, match=r"s\[0\]: offsets 100\.\.149 were expired .* restore r1 .* starts at "
                                              r"offset 150"):
        check(150, 99)
    with pytest.raises(TopicvaultError, match=r"offsets 100\.\.120 were expired"):
        check(150, 99, Selection(to_offsets=(("*", 120),)))


def test_starts_of_partitions_planned_later_are_added_to_the_state_and_a_saved_start_never_moves(tmp_path):
    records_ = RestoreRecords(LocalStore(str(tmp_path / "state")), LocalStore(str(tmp_path / "archive")))
    save_restore_state(records_, RestoreState("r1", "b:9092", {"s": "t"}, {"t:0": 0, "t:1": 0}, {}, {}, {"s:0": 7}))
    add_source_starts(records_, "r1", {"s:0": 50, "s:1": 20})
    assert load_restore_state(records_, "r1").source_starts == {"s:0": 7, "s:1": 20}
    legacy = records_.read("r1", STATE_NAME)
    del legacy["source_starts"]
    records_.write("r2", STATE_NAME, legacy)
    add_source_starts(records_, "r2", {"s:1": 20})  # a state older than source_starts: nothing known, left alone
    assert load_restore_state(records_, "r2").source_starts is None
