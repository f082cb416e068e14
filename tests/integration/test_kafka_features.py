"""Apache Kafka features a backup and restore meet on a real broker (issue 33 item 3): transactions
(committed, aborted, one left open), a compacted topic with the log cleaner running, LogAppendTime,
client quotas and records near the size limit. None needs replication: they run on the suite's
one-node Apache Kafka (`bootstrap`), the compaction one on a node of its own (its cleaner must
run every few hundred milliseconds, a broker setting)."""

from __future__ import annotations

import io
import os
import time
import uuid

import pyarrow.parquet as pq
import pytest
from clitools import run_cli
from compactiontools import COMPACTED, cleaning_kafka, view, wait_until_compacted, write_keyed_wave  # noqa: F401
from confluent_kafka import Producer
from harness_broker import TANSU_KINDS
from kafkatools import (
    LiveTraffic,
    as_tuple,
    commit_offsets,
    committed,
    consume_all,
    create_topic,
    produce_records,
    record_at,
    set_client_quotas,
    transactional_producer,
)
from restoretools import describe
from topicvault.core.archive.commits import fold_commits
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LocalStore


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


# --- 8. a compacted topic with the log cleaner running ----------------------------------------

def first_gap(records: list[Record]) -> tuple[int, Record]:
    """An offset the cleaner removed inside the partition, and the record that survives after it."""
    return next((r.offset + 1, nxt) for r, nxt in zip(records, records[1:]) if nxt.offset > r.offset + 1)


def test_a_compacted_topic_restores_as_compacted_and_groups_land_on_the_next_surviving_record(
        cleaning_kafka, spark, tmp_path):  # noqa: F811 - the fixture of compactiontools
    bootstrap = cleaning_kafka
    topic = create_topic(bootstrap, f"compacted-{uuid.uuid4().hex[:8]}", 2, COMPACTED)
    write_keyed_wave(bootstrap, topic, 0)
    write_keyed_wave(bootstrap, topic, 1)
    seen = wait_until_compacted(bootstrap, topic)
    for records in seen.values():
        assert records[0].offset > 0 and any(r.value is None for r in records), "expected a removed head, tombstones"
        assert len(records) < records[-1].offset, "expected offset gaps"

    # Groups: one at an offset the cleaner removed inside the log, one at the removed head, one at the end.
    inside, head, done = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("inside", "head", "done"))
    gaps = {p: first_gap(rs) for (_, p), rs in seen.items()}
    commit_offsets(bootstrap, inside, {(topic, p): removed for p, (removed, _) in gaps.items()})
    commit_offsets(bootstrap, head, {(topic, 0): 0})
    ends = {p: rs[-1].offset + 1 for (_, p), rs in seen.items()}
    commit_offsets(bootstrap, done, {(topic, 1): ends[1]})

    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "7")
    assert with_offsets(archived(location)) == with_offsets(seen)
    target = f"{topic}-r"
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--restore-id", "compacted", "--groups")
    restored_equals(bootstrap, target, seen)
    assert f"group {inside}: committed 2 offsets" in out, out
    resumed = committed(bootstrap, inside, target, 2)
    for partition, (_, survivor) in gaps.items():
        assert record_at(bootstrap, target, partition, resumed[partition]) == as_tuple(survivor)
    assert record_at(bootstrap, target, 0, committed(bootstrap, head, target, 1)[0]) == as_tuple(seen[(topic, 0)][0])
    assert committed(bootstrap, done, target, 2)[1] == len(seen[(topic, 1)])


def test_a_backup_while_the_cleaner_compacts_under_live_traffic_keeps_what_it_read(
        cleaning_kafka, spark, tmp_path):  # noqa: F811 - the fixture of compactiontools
    """Backups while records are written and the cleaner removes older ones: every record the
    topic still holds is archived unchanged at its offset; an archived record it no longer
    holds was overwritten by a later record of its key (compacted away, not invented); the
    restore gives back exactly the archive."""
    bootstrap = cleaning_kafka
    topic = create_topic(bootstrap, f"cleaning-{uuid.uuid4().hex[:8]}", 2, COMPACTED)
    location = str(tmp_path / "b")
    write_keyed_wave(bootstrap, topic, 0)
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.05, per_round=5) as traffic:
        for _ in range(3):
            run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "40")
    assert not traffic.failed
    write_keyed_wave(bootstrap, topic, 1)
    seen = wait_until_compacted(bootstrap, topic)
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "40")
    archive = archived(location)
    for tp, records in seen.items():
        kept = {r.offset: r for r in archive[tp]}
        assert [r.offset for r in archive[tp]] == sorted(kept), "archive out of offset order or duplicated"
        assert [(r.offset, *exact(r)) for r in records] == [(r.offset, *exact(kept[r.offset])) for r in records
                                                           if r.offset in kept], "a surviving record differs"
        assert set(r.offset for r in records) <= set(kept), "a record the topic holds is missing"
        latest = {r.key: r.offset for r in records}
        gone = [r for r in archive[tp] if r.offset not in latest.values()]
        assert gone, "the cleaner removed nothing the backups had read"
        assert all(latest[r.key] > r.offset for r in gone), "an archived record neither held nor overwritten"
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--restore-id", "live")
    restored_equals(bootstrap, f"{topic}-r", archive)


# --- 9. LogAppendTime ---------------------------------------------------------------------------

def logappendtime_topic_backed_up(bootstrap: str, topic_factory, location: str) -> str:
    """A LogAppendTime topic written under live traffic (the broker stamps every record with its
    append time, whatever the producer sent) and backed up meanwhile, then once more."""
    topic = topic_factory(2, prefix="appendtime", config={"message.timestamp.type": "LogAppendTime"})
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.05, per_round=5) as traffic:
        while traffic.count() < 200:
            time.sleep(0.05)
        run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "60")
    assert not traffic.failed
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "60")
    return topic


def assert_restored_with_their_stored_times(bootstrap: str, topic: str, target: str) -> None:
    """Key, value, headers and timestamp equal, record by record; the timestamp type is the
    target's own (a restore produces with CreateTime: docs/limits.md)."""
    source, restored = consume_all(bootstrap, topic), consume_all(bootstrap, target)
    assert all(r.timestamp_type == 1 for rs in source.values() for r in rs), "the source is not LogAppendTime"
    assert {p: [exact(r)[:3] for r in rs] for p, rs in restored.items()} == {
        p: [exact(r)[:3] for r in rs] for p, rs in source.items()}
    changed = [(s.timestamp_ms, r.timestamp_ms) for p in source for s, r in zip(source[p], restored[p])
               if s.timestamp_ms != r.timestamp_ms]
    assert not changed, f"{len(changed)} records restored with other times (stored, restored): {changed[:3]}"


def test_records_of_a_logappendtime_topic_keep_their_times_in_a_target_saved_as_logappendtime(
        apache_kafka, bootstrap, spark, topic_factory, tmp_path):
    location = str(tmp_path / "b")
    topic = logappendtime_topic_backed_up(bootstrap, topic_factory, location)
    time.sleep(1.5)  # a record stamped by the target's broker now would differ from its stored time
    target = f"{topic}-r"
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}", "--restore-id", "lat")
    assert_restored_with_their_stored_times(bootstrap, topic, target)
    assert describe(bootstrap, target).get("message.timestamp.type") == "LogAppendTime"


def test_a_rerun_of_a_finished_restore_into_a_logappendtime_target_keeps_the_new_records_times(
        apache_kafka, bootstrap, spark, topic_factory, tmp_path):
    """The first run ended by giving the target its saved LogAppendTime; newer records backed up
    since, restored by a rerun with the same id, must keep their stored times too."""
    location = str(tmp_path / "b")
    topic = logappendtime_topic_backed_up(bootstrap, topic_factory, location)
    target = f"{topic}-r"
    args = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}", "--restore-id", "lat"]
    run_cli(*args)
    assert describe(bootstrap, target).get("message.timestamp.type") == "LogAppendTime"
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.05, per_round=5) as traffic:
        while traffic.count() < 100:
            time.sleep(0.05)
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "60")
    time.sleep(1.5)
    run_cli(*args)
    assert_restored_with_their_stored_times(bootstrap, topic, target)
    assert describe(bootstrap, target).get("message.timestamp.type") == "LogAppendTime"


# --- 12. client quotas ----------------------------------------------------------------------------

QUOTA_BYTES_PER_S = 100_000


def test_a_backup_under_a_fetch_quota_and_a_restore_under_a_produce_quota_finish_exact(
        apache_kafka, bootstrap, spark, topic_factory, tmp_path):
    """The broker throttles each client.id to 100 kB/s: the backup reads 1.6 MB plus live traffic,
    the restore writes them back, both throttled (unthrottled each takes about 2 s), and
    neither gives up on a read or a delivery that waits. A throttled fetch is answered late; a
    throttled produce is answered at once and the client waits before its next request, so the
    restore sends batches of 64 kB (-X batch.size, as a user's settings may) for a produce quota
    to act on; with its own 1 MiB batches it is done in two requests."""
    topic = topic_factory(2, prefix="quota")
    produce_records(bootstrap, topic, [Record(topic, i % 2, 0, b"k%d" % i, os.urandom(1000), 1_700_000_000_000 + i,
                                              0, (("h", b"%d" % i),)) for i in range(1600)])
    reader, writer = f"tv-backup-{uuid.uuid4().hex[:6]}", f"tv-restore-{uuid.uuid4().hex[:6]}"
    set_client_quotas(bootstrap, {reader: {"consumer_byte_rate": QUOTA_BYTES_PER_S},
                                  writer: {"producer_byte_rate": QUOTA_BYTES_PER_S}})
    location = str(tmp_path / "b")
    backup = ["backup", "-b", bootstrap, "--to", location, "-t", topic, "-X", f"client.id={reader}"]

    started = time.monotonic()
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.5, per_round=5) as traffic:
        run_cli(*backup)
    backed_up_s = time.monotonic() - started
    assert not traffic.failed
    run_cli(*backup)
    source = view(bootstrap, topic)
    assert with_offsets(archived(location)) == with_offsets(source)

    started = time.monotonic()
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--restore-id", "quota",
            "-X", f"client.id={writer}", "-X", "batch.size=65536", "-X", "linger.ms=5")
    restored_s = time.monotonic() - started
    restored_equals(bootstrap, f"{topic}-r", source)
    # Kafka measures a client's rate over its quota window (11 one-second samples, at least 10 s
    # of elapsed time), so a new client runs unthrottled for about 10 s worth of its quota.
    payload = sum(len(r.value) for rs in source.values() for r in rs)
    throttled_s = 0.8 * (payload / QUOTA_BYTES_PER_S - 10)
    assert min(backed_up_s, restored_s) > throttled_s, (payload, backed_up_s, restored_s)
    print(f"throttled to {QUOTA_BYTES_PER_S} B/s: backup {backed_up_s:.1f} s, restore {restored_s:.1f} s "
          f"of {payload} bytes")


# --- 13. records near max.message.bytes -----------------------------------------------------------

def produce_one_by_one(bootstrap: str, records: list[Record]) -> None:
    """Each record in a batch of its own (flushed one by one), so a record just under the
    topic's limit is not refused for sharing a batch with its neighbours."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.max.bytes": 16 * 2**20})
    refused: list[str] = []
    for r in records:
        producer.produce(r.topic, r.value, r.key, partition=r.partition, timestamp=r.timestamp_ms,
                         headers=list(r.headers) or None,
                         on_delivery=lambda error, _: refused.append(error.str()) if error else None)
        assert producer.flush(60) == 0
    assert not refused, refused


def near_the_limit(topic: str, limit: int, count: int = 3) -> list[Record]:
    """Per partition: records whose batch of one is within 200 bytes of `limit` (a record batch's
    header is 61 bytes), each between small records, with key and headers."""
    big = limit - 61 - 200
    records = []
    for i in range(count):
        for partition in (0, 1):
            records.append(Record(topic, partition, 0, b"small-%d" % i, b"s%d" % i, 1_700_000_000_000 + i, 0,
                                  (("h", b"1"),)))
            records.append(Record(topic, partition, 0, b"big-%d" % i, bytes([i + partition]) * big,
                                  1_700_000_000_100 + i, 0, (("h", b"2"), ("h", None))))
    return records


def test_records_near_the_message_size_limit_back_up_and_restore(apache_kafka, bootstrap, spark, topic_factory,
                                                                 tmp_path):
    """Three topics: the cluster's default limit (1 MiB + 12 bytes, no override saved), one
    configured for 8 MiB and one for 256 KiB, each with records a few hundred bytes under it,
    back to back, under live traffic of small records. The restore creates each target with the
    saved limit (or the cluster's default) and must put every record in a batch it accepts."""
    default = create_topic(bootstrap, f"limit-default-{uuid.uuid4().hex[:6]}", 2)
    large = topic_factory(2, prefix="limit-8mib", config={"max.message.bytes": str(8 * 2**20)})
    small = topic_factory(2, prefix="limit-256kib", config={"max.message.bytes": str(256 * 2**10)})
    limits = {default: 1048588, large: 8 * 2**20, small: 256 * 2**10}
    for topic, limit in limits.items():
        produce_one_by_one(bootstrap, near_the_limit(topic, limit, count=2 if topic == large else 4))
    location = str(tmp_path / "b")
    backup = ["backup", "-b", bootstrap, "--to", location, *(f"--topic={t}" for t in limits)]
    with LiveTraffic(bootstrap, default, partitions=(0, 1), pause_s=0.1, per_round=2, value_size=20) as traffic:
        run_cli(*backup)
    assert not traffic.failed
    run_cli(*backup)
    renames = [f"--rename={t}={t}-r" for t in limits]
    run_cli("restore", "--from", location, "-b", bootstrap, *renames, "--restore-id", "limits")
    for topic, limit in limits.items():
        source = view(bootstrap, topic)
        assert max(len(r.value) for rs in source.values() for r in rs) > limit - 300
        assert with_offsets({tp: rs for tp, rs in archived(location).items() if tp[0] == topic}) == \
            with_offsets(source)
        restored_equals(bootstrap, f"{topic}-r", source)
