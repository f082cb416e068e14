"""Apache Kafka features a backup and restore meet on a real broker (issue 33 item 3): transactions
(committed, aborted, one left open), a compacted topic with the log cleaner running, LogAppendTime,
client quotas and records near the size limit. None needs replication: they run on the suite's
one-node Apache Kafka (`bootstrap`), the compaction one on a node of its own (its cleaner must
run every few hundred milliseconds, a broker setting)."""

from __future__ import annotations

import io
import time

import pyarrow.parquet as pq
import pytest
from clitools import run_cli
from harness_broker import TANSU_KINDS
from kafkatools import LiveTraffic, consume_all, transactional_producer
from topicvault.core.commits import fold_commits
from topicvault.core.envelope import Record
from topicvault.core.local_store import LocalStore


@pytest.fixture
def apache_kafka(broker_kind):
    """These tests are about Apache Kafka's own behaviour: they do not run on the embedded broker."""
    if broker_kind in TANSU_KINDS:
        pytest.skip("needs Apache Kafka (the embedded broker has no last stable offset, cleaner, quotas)")


def exact(record: Record) -> tuple:
    """Everything a restore must give back, offsets aside (a restore renumbers them)."""
    return record.key, record.value, record.headers, record.timestamp_ms, record.timestamp_type


def archived(location: str) -> dict[tuple[str, int], list[Record]]:
    """Every record the location's commits hold, per partition in offset order, read from the
    objects themselves (no topicvault reader on the path)."""
    store = LocalStore(location)
    found: dict[tuple[str, int], list[Record]] = {}
    for (topic, partition), state in sorted(fold_commits(store).partitions.items()):
        records = found.setdefault((topic, partition), [])
        for entry in state.objects:
            for row in pq.read_table(io.BytesIO(store.get(entry.key))).to_pylist():
                meta = row["metadata"]
                records.append(Record(topic, partition, meta["offset"], row["key"], row["value"], meta["timestamp"],
                                      meta["timestampType"],
                                      tuple((h["key"], h["value"]) for h in row["headers"] or ())))
    return found


def view(bootstrap: str, topic: str) -> dict[tuple[str, int], list[Record]]:
    """What a read_committed consumer sees of the topic now, keyed as `archived` is."""
    return {(topic, p): records for p, records in consume_all(bootstrap, topic).items()}


def with_offsets(records: dict[tuple[str, int], list[Record]]) -> dict[tuple[str, int], list[tuple]]:
    return {tp: [(r.offset, *exact(r)) for r in rs] for tp, rs in records.items()}


def restored_equals(bootstrap: str, target: str, expected: dict[tuple[str, int], list[Record]]) -> None:
    """The target holds exactly the expected records, partition by partition, in order."""
    got = {p: [exact(r) for r in rs] for p, rs in consume_all(bootstrap, target).items()}
    assert got == {p: [exact(r) for r in rs] for (_, p), rs in expected.items()}


# --- 7. transactions: committed, aborted, and one left open -----------------------------------

def run_transactions(producer, topic: str, rounds: int) -> None:
    """Per round on both partitions: a committed transaction, an aborted one, a committed one."""
    for i in range(rounds):
        for outcome in ("commit", "abort", "commit"):
            producer.begin_transaction()
            for partition in (0, 1):
                for j in range(3):
                    producer.produce(topic, b"tx-%s-%d-%d" % (outcome.encode(), i, j), b"k%d" % j,
                                     partition=partition, headers=[("tx", outcome.encode()), ("tx", None)])
            if outcome == "commit":
                producer.commit_transaction(30)
            else:
                producer.flush(30)  # the aborted records are in the log, then the abort marker
                producer.abort_transaction(30)


def test_transactions_committed_aborted_and_one_left_open(apache_kafka, bootstrap, spark, topic_factory, tmp_path):
    """The archive holds exactly what a read_committed consumer sees: no markers, no aborted
    records, nothing past the last stable offset of partition 1, which a producer hanging in its
    transaction holds back; the next backup says so; the restore equals that view. Once the
    hanging transaction is aborted, the next backup reads on, and a restore equals the new view."""
    topic = topic_factory(2, prefix="tx")
    location, hanging = str(tmp_path / "b"), transactional_producer(bootstrap)
    producer = transactional_producer(bootstrap)
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.05, per_round=5) as traffic:
        run_transactions(producer, topic, 2)
        hanging.begin_transaction()
        hanging.produce(topic, b"held-open", b"h", partition=1)
        hanging.flush(30)
        run_transactions(producer, topic, 2)
        run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "50")
        run_transactions(producer, topic, 1)
        while traffic.count() < 300:
            time.sleep(0.05)
        held = run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "50")
    assert not traffic.failed
    warned = [line for line in held.splitlines() if "open transaction" in line]
    assert len(warned) == 1 and f"{topic}[1]" in warned[0], held

    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "50")
    seen = view(bootstrap, topic)
    assert not any(b"abort" in (r.value or b"") or r.value == b"held-open" for rs in seen.values() for r in rs)
    assert len(seen[(topic, 1)]) < len(traffic.acked[1]), "the open transaction holds nothing back"
    assert with_offsets(archived(location)) == with_offsets(seen)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--restore-id", "tx1")
    restored_equals(bootstrap, f"{topic}-r", seen)

    # The hanging transaction aborted (as kafka-transactions.sh would): the rest is read, its record is not.
    hanging.abort_transaction(30)
    run_transactions(producer, topic, 1)
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "50")
    seen = view(bootstrap, topic)
    for partition in (0, 1):  # 6 rounds of 2 committed transactions of 3 records, and every acked live record
        values = [r.value for r in seen[(topic, partition)]]
        assert sum(v.startswith(b"tx-commit-") for v in values) == 36 and not [v for v in values if b"abort" in v]
        assert [v for v in values if v.startswith(b"live-")] == [v for _, v in traffic.acked[partition]]
    assert with_offsets(archived(location)) == with_offsets(seen)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r2", "--restore-id", "tx2")
    restored_equals(bootstrap, f"{topic}-r2", seen)
