"""The pure-logic half of tests/integration/test_backup_edges.py (its docstring covers both halves):
Backup edge cases: offset gaps, transactions, and the DataFrame API writing the same bytes.
"""

from __future__ import annotations


def test_a_transaction_holding_back_a_partition_since_the_last_backup_is_warned_about():
    """read_committed reads stop at the last stable offset (LSO): a transaction left open (a
    producer that died mid-transaction until transaction.timeout.ms; a hanging one, KIP-890)
    holds back everything after it while the high watermark runs on, and retention may delete
    those records before they are backed up. A run whose LSO did not move since the last commit
    says so; one that moved (transactions commit and new ones open) says nothing."""
    from topicvault.core.archive.commits import BackupState, CommitRecord, PartitionRange
    from topicvault.sink.plan import ClusterRead, plan_backup

    state = BackupState()
    state.apply(CommitRecord(1, 0, (PartitionRange("t", 0, 0, 40), PartitionRange("t", 1, 0, 40)), ()), "k")
    offsets = {("t", 0): (0, 40), ("t", 1): (0, 55)}  # low, last stable offset
    plan = plan_backup(ClusterRead({"t": 2}, offsets, log_ends={("t", 0): 70, ("t", 1): 70}), state)
    held = [w for w in plan.warnings if "transaction" in w]
    assert len(held) == 1 and "t[0]" in held[0] and "40..69" in held[0], plan.warnings
    assert not [w for w in plan_backup(ClusterRead({"t": 2}, offsets, log_ends={("t", 0): 40, ("t", 1): 55}), state).warnings
                if "transaction" in w]
