"""One point in time for data and consumer groups: group snapshots are kept over time and
`restore --until TIME --groups` commits each group's position as of TIME (issue #19 item 5)."""
from __future__ import annotations

import json
import threading
import time
import uuid

from clitools import run_cli
from confluent_kafka import Producer
from kafkatools import as_tuple, commit_offsets, committed, consume_all, produce_records, record_at
from topicvault.core.envelope import Record
from topicvault.sink.continuous_backup import ContinuousBackupRequest


def _now_ms() -> int:
    return int(time.time() * 1000)


def _gapped_records(bootstrap: str, topic: str, count: int) -> None:
    """`count` records per partition (0, 1) with wall-clock timestamps, in transactions, so the
    source offsets have gaps (commit markers) and the offset map is not the identity."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    for txn in range(count // 5):
        producer.begin_transaction()
        for partition in (0, 1):
            for i in range(5):
                producer.produce(topic, b"v%d-%d-%d" % (partition, txn, i), b"k%d" % i, partition=partition,
                                 timestamp=_now_ms())
        producer.commit_transaction(30)


def test_until_with_groups_commits_each_groups_position_at_that_time(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="pitgroups")
    early, late = f"early-{uuid.uuid4().hex[:6]}", f"late-{uuid.uuid4().hex[:6]}"
    _gapped_records(bootstrap, topic, 10)
    first = consume_all(bootstrap, topic)
    # At time 1: `early` has read part of both partitions, `late` only partition 1.
    at_1 = {early: {0: first[0][3].offset, 1: first[1][7].offset}, late: {1: first[1][2].offset}}
    for group, offsets in at_1.items():
        commit_offsets(bootstrap, group, {(topic, p): o for p, o in offsets.items()})
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    time.sleep(1.2)
    until = _now_ms()
    time.sleep(1.2)
    # After TIME: more data, and both groups move on.
    _gapped_records(bootstrap, topic, 10)
    produce_records(bootstrap, topic, [Record(topic, p, 0, b"last", b"last", _now_ms(), 0, ()) for p in (0, 1)])
    everything = consume_all(bootstrap, topic)
    commit_offsets(bootstrap, early, {(topic, 0): everything[0][15].offset, (topic, 1): everything[1][12].offset})
    commit_offsets(bootstrap, late, {(topic, 0): everything[0][11].offset, (topic, 1): everything[1][14].offset})
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)

    target = f"{topic}-pit"
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--until", str(until), "--groups", "--restore-id", "pit")
    restored = consume_all(bootstrap, target)
    assert [as_tuple(r) for r in restored[0]] == [as_tuple(r) for r in first[0]]  # the data as of TIME
    for group, offsets in at_1.items():
        assert f"group {group}: committed {len(offsets)} offsets" in out
        resumed = committed(bootstrap, group, target, 2)
        for partition, source_offset in offsets.items():
            next_unread = next(r for r in first[partition] if r.offset >= source_offset)
            assert resumed[partition] == restored[partition].index(
                next(r for r in restored[partition] if as_tuple(r) == as_tuple(next_unread)))
            assert record_at(bootstrap, target, partition, resumed[partition]) == as_tuple(next_unread)
    assert committed(bootstrap, late, target, 2)[0] < 0  # `late` had no offset on partition 0 at TIME

    # Without --until the latest snapshot counts, as before.
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-now",
                  "--groups", "--restore-id", "now")
    assert committed(bootstrap, late, f"{topic}-now", 2) == {0: 11, 1: 14}  # the source has gaps; the target none

    listing = json.loads(run_cli("ls", str(location), "--json"))
    snapshots = listing["group_snapshots"]
    assert snapshots[early]["count"] == 2 and snapshots[late]["count"] == 2
    assert snapshots[early]["first_time"] < snapshots[early]["last_time"]
    assert "consumer-group snapshots:" in run_cli("ls", str(location))


def _group_first_saved_after_until(bootstrap, topic_factory, tmp_path, prefix: str) -> tuple[str, str, str, int]:
    """A topic of 5 records backed up twice, and a group that first committed between the two
    backups, after the moment returned: (topic, group, location, until)."""
    topic = topic_factory(1, prefix=prefix)
    group = f"young-{uuid.uuid4().hex[:6]}"
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"v%d" % i, _now_ms(), 0, ()) for i in range(5)])
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    time.sleep(1.2)
    until = _now_ms()
    time.sleep(1.2)
    commit_offsets(bootstrap, group, {(topic, 0): 2})
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    return topic, group, location, until


def test_until_before_a_groups_first_snapshot_is_an_error_when_named(bootstrap, spark, topic_factory, tmp_path):
    topic, group, location, until = _group_first_saved_after_until(bootstrap, topic_factory, tmp_path, "pitnamed")
    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--until",
                  str(until), "--groups", "--group", group, "--restore-id", "y1", expect_exit=1)
    assert f"consumer group {group} has no saved offsets at or before --until" in out


def test_follow_saves_group_offsets_with_each_micro_batch_that_changed_them(bootstrap, spark, topic_factory, tmp_path):
    from topicvault.core.archive.checkpoints import load_state
    from topicvault.core.archive.commits import load_commits
    from topicvault.core.cluster.kafka import KafkaSettings
    from topicvault.core.stores.locations import open_store
    from topicvault.sink.backup import BackupJob
    from topicvault.sink.continuous_backup import run_follow

    topic = topic_factory(1, prefix="followgroups")
    group = f"reader-{uuid.uuid4().hex[:6]}"
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"a%d" % i, _now_ms(), 0, ()) for i in range(5)])
    commit_offsets(bootstrap, group, {(topic, 0): 2})
    location = str(tmp_path / "b")
    job = BackupJob(KafkaSettings.of(bootstrap, {}), location)
    store = open_store(location, {})

    def records() -> int:
        return sum(ps.records for ps in load_state(store).partitions.values())

    def saved_offsets() -> list[int]:
        return [s["offsets"][topic]["0"] for s in load_state(store).group_history.get(group, [])]

    # The query runs in this thread (Spark looks its data sources up there); the cluster moves in another.
    stop, failures = threading.Event(), []

    def meanwhile() -> None:
        try:
            _wait(lambda: records() == 5, "the first micro-batch")
            commit_offsets(bootstrap, group, {(topic, 0): 4})
            produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"b%d" % i, _now_ms(), 0, ()) for i in range(3)])
            _wait(lambda: saved_offsets() == [2, 4], "the moved group in a micro-batch commit")
            produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"c%d" % i, _now_ms(), 0, ()) for i in range(3)])
            _wait(lambda: records() == 11, "the last micro-batch")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            stop.set()

    actor = threading.Thread(target=meanwhile, daemon=True)
    actor.start()
    run_follow(spark, job, ContinuousBackupRequest((topic,), None, 1.0, None), stop.is_set, lambda line: None)
    actor.join(60)
    assert not failures, failures
    assert saved_offsets() == [2, 4]  # the unchanged group was not saved again
    streamed = [c for _, c in load_commits(store) if c.stream is not None]
    assert [c.groups is not None for c in streamed].count(True) == 1


def _wait(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.5)


def test_ls_says_when_a_group_snapshots_time_is_uncertain_by_more_than_a_second(bootstrap, spark, topic_factory,
                                                                              tmp_path):
    """A snapshot's time is the backing-up host's clock; `--until` compares it with record times. Records
    stamped later than the host's clock when it read them (a broker whose clock runs ahead, on a
    LogAppendTime topic; a producer's) show the host's clock behind theirs by at least that much."""
    hour = 3_600_000
    skewed, steady = topic_factory(1, prefix="skewed-groups"), topic_factory(1, prefix="steady-groups")
    group = f"g-{uuid.uuid4().hex[:6]}"
    for topic, offset_ms in ((skewed, hour), (steady, 0)):
        produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"v%d" % i, _now_ms() + offset_ms, 0, ())
                                           for i in range(10)])
        commit_offsets(bootstrap, group, {(topic, 0): 5})
    for topic in (skewed, steady):
        run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / topic), "-t", topic)
    out = run_cli("ls", str(tmp_path / skewed))
    assert "1 consumer-group snapshot has a time uncertain by more than a second (up to 3," in out, out
    snapshot = json.loads(run_cli("ls", str(tmp_path / skewed), "--json"))["group_snapshots"][group]
    assert snapshot["uncertain"] == 1 and hour - 60_000 < snapshot["max_uncertain_ms"] <= hour
    steady_out = run_cli("ls", str(tmp_path / steady))
    assert "consumer-group snapshots: 1 from" in steady_out and "uncertain" not in steady_out


def test_groups_missing_at_until_are_refused_before_writing_and_named_when_skipped(bootstrap, spark, topic_factory,
                                                                                    tmp_path):
    """issue 40.6: `--group G --until T` with no offsets of G at T failed after the topic was
    created and every record written; plain `--groups` left G out without a word."""
    from kafkatools import topic_exists

    topic, group, location, until = _group_first_saved_after_until(bootstrap, topic_factory, tmp_path, "pitcheck")
    restore = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r", "--until", str(until)]

    for dry_run in (["--dry-run"], []):
        out = run_cli(*restore, "--groups", "--group", group, *dry_run, expect_exit=1)
        assert f"consumer group {group} has no saved offsets at or before --until" in out
        assert not topic_exists(bootstrap, f"{topic}-r")  # refused before anything was written

    out = run_cli(*restore, "--groups", "--dry-run")
    assert f"note: consumer group {group} has no saved offsets at or before --until" in out
    out = run_cli(*restore, "--groups", "--restore-id", "named")
    assert f"note: consumer group {group} has no saved offsets at or before --until" in out
    assert "no consumer-group offsets saved for the restored topics" in out
    assert committed(bootstrap, group, f"{topic}-r", 1)[0] < 0
