"""The pure-logic half of tests/integration/test_backup_edges.py (its docstring covers both halves):
Backup edge cases: offset gaps, transactions, and the DataFrame API writing the same bytes.
"""

from __future__ import annotations


def test_a_transaction_holding_back_a_partition_since_the_last_backup_is_warned_about():
    """read_committed reads stop at the last stable offset (LSO): a transaction left open (a
    producer that died mid-transaction until transaction.timeout.ms; a hanging one, KIP-890)
    holds back everything after it while the high watermark runs on, and retention may delete
    those records before they are backed up. A run whose LSO did not move since the last commit
    says so; one that moved (transactions commit and new ones open) gets only the note every run
    stopped short by an open transaction gets (issue #50 item 12)."""
    from topicvault.core.archive.commits import BackupState, CommitRecord, PartitionRange
    from topicvault.sink.plan import ClusterRead, plan_backup

    state = BackupState()
    state.apply(CommitRecord(1, 0, (PartitionRange("t", 0, 0, 40), PartitionRange("t", 1, 0, 40)), ()), "k")
    offsets = {("t", 0): (0, 40), ("t", 1): (0, 55)}  # low, last stable offset
    plan = plan_backup(ClusterRead({"t": 2}, offsets, log_ends={("t", 0): 70, ("t", 1): 70}), state)
    held = [w for w in plan.warnings if "has not moved" in w]
    assert len(held) == 1 and "t[0]" in held[0] and "40..69" in held[0], plan.warnings
    moved = [w for w in plan.warnings if "transaction" in w and w not in held]
    assert len(moved) == 1 and "t[1]" in moved[0] and "55..69" in moved[0], plan.warnings
    assert not [w for w in plan_backup(ClusterRead({"t": 2}, offsets, log_ends={("t", 0): 40, ("t", 1): 55}), state).warnings
                if "transaction" in w]


def test_every_run_an_open_transaction_stops_short_says_which_offsets_wait_and_since_when():
    """Issue #50 item 12: the first run beside an open transaction said nothing. A run whose last
    stable offset is below the log's end names the partition, the offsets that wait and how many,
    and the time of the transaction's first record where it was read; a second run with the stable
    offset unmoved gets the stronger warning, once per partition."""
    from topicvault.core.archive.commits import BackupState, CommitRecord, PartitionRange
    from topicvault.sink.plan import ClusterRead, plan_backup

    offsets = {("t", 0): (0, 40), ("t", 1): (0, 55)}  # low, last stable offset
    log_ends = {("t", 0): 70, ("t", 1): 55}
    first = plan_backup(ClusterRead({"t": 2}, offsets, log_ends=log_ends,
                                    held_since={("t", 0): 1_700_000_000_500}), BackupState())
    held = [w for w in first.warnings if "transaction" in w]
    assert len(held) == 1 and "t[0]" in held[0] and "40..69" in held[0] and "30 offsets" in held[0], first.warnings
    assert "2023-11-14T22:13:20.500Z" in held[0] and "has not moved" not in held[0], held[0]
    unknown = plan_backup(ClusterRead({"t": 2}, offsets, log_ends=log_ends), BackupState())
    assert [w for w in unknown.warnings if "transaction" in w and "30 offsets" in w and "since" not in w]

    state = BackupState()
    state.apply(CommitRecord(1, 0, (PartitionRange("t", 0, 0, 40), PartitionRange("t", 1, 0, 55)), ()), "k")
    again = plan_backup(ClusterRead({"t": 2}, offsets, log_ends=log_ends, held_since={("t", 0): 1_700_000_000_500}),
                        state)
    held = [w for w in again.warnings if "transaction" in w]
    assert len(held) == 1 and "has not moved since the last backup" in held[0] and "30 offsets" in held[0], held
    assert "2023-11-14T22:13:20.500Z" in held[0], held[0]
