"""The pure-logic half of tests/integration/test_groups_over_time.py (its docstring covers both halves):
One point in time for data and consumer groups: group snapshots are kept over time and `restore --until TIME --groups` commits each group's position as of TIME (issue #19 item 5).
"""

from __future__ import annotations

from topicvault.core.archive.commits import BackupState, CommitRecord


def _record(sequence: int, groups: dict | None, topics=("t",), group_topics=None) -> CommitRecord:
    return CommitRecord(sequence, 1000 * sequence, (), (), {t: {"partitions": 1} for t in topics}, groups=groups,
                        group_topics=group_topics)


def test_group_history_keeps_changed_snapshots_and_drops_groups_gone():
    state = BackupState()
    state.apply(_record(1, {"g": {"read_ms": 10, "offsets": {"t": {"0": 1}}}}), "k1")
    state.apply(_record(2, {"g": {"read_ms": 20, "offsets": {"t": {"0": 1}}}}), "k2")  # unchanged: not kept twice
    state.apply(_record(3, {"g": {"read_ms": 30, "offsets": {"t": {"0": 5}}}}), "k3")
    state.apply(_record(4, {}), "k4")  # the group no longer has offsets on t
    assert [s["read_ms"] for s in state.group_history["g"]] == [10, 30, 4000]
    assert state.groups_at(15) == {"g": {"read_ms": 10, "offsets": {"t": {"0": 1}}}}
    assert state.groups_at(35)["g"]["offsets"] == {"t": {"0": 5}}
    assert state.groups_at(5000) == {} and state.groups_at(5) == {}
    assert state.groups_at(None) == state.groups == {}
    state.apply(_record(5, {}), "k5")  # still gone: nothing new to remember
    assert len(state.group_history["g"]) == 3 and set(state.group_history) == {"g"}


def test_group_history_of_other_topics_survives_a_run_on_one_topic():
    state = BackupState()
    state.apply(_record(1, {"g": {"read_ms": 10, "offsets": {"a": {"0": 1}, "b": {"0": 2}}}}, ("a", "b")), "k1")
    state.apply(_record(2, {"g": {"read_ms": 20, "offsets": {"a": {"0": 3}}}}, ("a",)), "k2")
    assert state.groups_at(25)["g"]["offsets"] == {"a": {"0": 3}, "b": {"0": 2}}
    # A streamed commit names the topics whose groups it read in group_topics, not in topics.
    state.apply(_record(3, {"g": {"read_ms": 30, "offsets": {"b": {"0": 4}}}}, (), group_topics=("b",)), "k3")
    assert state.groups_at(35)["g"]["offsets"] == {"a": {"0": 3}, "b": {"0": 4}}
    assert state.groups_at(15)["g"]["offsets"] == {"a": {"0": 1}, "b": {"0": 2}}


def test_group_history_is_capped_by_thinning_the_oldest_half():
    from topicvault.core.archive.commits import MAX_GROUP_SNAPSHOTS

    state = BackupState()
    for sequence in range(1, MAX_GROUP_SNAPSHOTS + 2):
        state.apply(_record(sequence, {"g": {"read_ms": sequence, "offsets": {"t": {"0": sequence}}}}), f"k{sequence}")
    history = state.group_history["g"]
    assert len(history) <= MAX_GROUP_SNAPSHOTS
    assert history[0]["read_ms"] == 1 and history[-1]["read_ms"] == MAX_GROUP_SNAPSHOTS + 1
    assert [s["read_ms"] for s in history[-10:]] == list(range(MAX_GROUP_SNAPSHOTS - 8, MAX_GROUP_SNAPSHOTS + 2))
