"""Issue 33.3.4: an unclean leader election truncates a partition below what a backup read; the
next backup refuses, naming the partition and the rewritten offsets, and appends nothing.

An unclean election needs both in-sync replicas of a partition down while the controller quorum
lives on: with every node a controller, two of three stopped leave none. So this test runs its
own cluster of four nodes, node 1 the only controller, the topic's three replicas on nodes 2..4.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from clitools import assert_one_line_error, followed_backup, run_cli
from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafkatools import LiveTraffic, consume_all, produce_records
from topicvault.core.envelope import Record
from topicvault.core.local.local_kafka import LocalKafka


@pytest.fixture(scope="module")
def split_cluster(tmp_path_factory):
    """Four nodes: node 1 broker and the only controller, nodes 2..4 brokers only."""
    kafka = LocalKafka(nodes=4, controllers=1, heap="384m", folder=tmp_path_factory.mktemp("kafka4"))
    try:
        yield kafka.start(timeout_s=240)  # four JVMs starting at once on two loaded cores
    finally:
        kafka.stop()


def _partition(kafka: LocalKafka, topic: str) -> tuple[int, list[int]]:
    """(leader, ISR) of partition 0, asked of node 1 (a paused node would hold the request)."""
    admin = AdminClient({"bootstrap.servers": kafka.node(1).address, "log_level": 0})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(15).partitions[0]
    return (described.leader.id if described.leader else -1), [r.id for r in described.isr]


def _wait(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except Exception:  # a metadata request meeting a node just killed: ask again
            pass
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.3)


def _high(kafka: LocalKafka, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": kafka.node(1).address, "log_level": 0})
    part = TopicPartition(topic, 0)
    return admin.list_offsets({part: OffsetSpec.latest()})[part].result(15).offset


def _commits(location) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((location / "_topicvault" / "commits").glob("*.json"))]


def _fields(records: list[Record]) -> list[tuple]:
    return [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]


def _unclean_topic(kafka: LocalKafka, prefix: str) -> str:
    """A one-partition topic on nodes 2..4 that allows an unclean election, its replicas in sync."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[2, 3, 4]], config={
        "unclean.leader.election.enable": "true", "min.insync.replicas": "1"})])[topic].result(30)
    _wait(lambda: len(_partition(kafka, topic)[1]) == 3, "the topic's three replicas in sync")
    return topic


def _leave_a_replica_behind(kafka: LocalKafka, topic: str) -> tuple[int, int, int]:
    """Pause one follower until it leaves the ISR: (leader, the stale follower, the other in sync)."""
    leader, in_sync = _partition(kafka, topic)
    stale = next(n for n in in_sync if n != leader)
    other = next(n for n in in_sync if n not in (leader, stale))
    kafka.pause(stale)  # falls out of the ISR after replica.lag.time.max.ms (5 s)
    _wait(lambda: stale not in _partition(kafka, topic)[1], f"node {stale} leaving the ISR")
    return leader, stale, other


def _tail(topic: str) -> list[Record]:
    """What only the leader and the other in-sync replica get: enough that the stale replica's log,
    once elected, ends below the archive for a while."""
    return [Record(topic, 0, 0, b"t%d" % i, b"tail-%d" % i, 1_700_000_000_000 + i, 0, (("i", b"%d" % i),))
            for i in range(3000)]


def _elect_uncleanly(kafka: LocalKafka, topic: str, leader: int, stale: int, other: int) -> None:
    """Kill the two replicas that hold the tail; the stale one, the only replica left, is elected."""
    kafka.kill(leader)
    kafka.kill(other)
    kafka.resume(stale)
    _wait(lambda: _partition(kafka, topic)[0] == stale, f"node {stale} elected leader uncleanly", 90)


def _restores_as_read(kafka: LocalKafka, location, topic: str, source: list[Record], killed: tuple[int, ...]) -> None:
    """With the killed nodes back, the archive verifies and restores exactly the records it read."""
    for node_id in killed:
        kafka.restart(node_id, timeout_s=180)
    assert run_cli("verify", str(location)).strip().splitlines()[-1].startswith("ok:")
    run_cli("restore", "--from", str(location), "-b", kafka.bootstrap, "--rename", f"{topic}={topic}-r")
    assert _fields(consume_all(kafka.bootstrap, f"{topic}-r")[0]) == _fields(source)


def test_a_log_truncated_by_an_unclean_election_under_live_traffic_is_refused_not_spliced(
        split_cluster, spark, tmp_path):
    kafka, bootstrap = split_cluster, split_cluster.bootstrap
    topic = _unclean_topic(kafka, "unclean")
    location = tmp_path / "b"
    with LiveTraffic(bootstrap, topic) as traffic:
        _wait(lambda: traffic.count() >= 200, "200 records of live traffic")
        leader, stale, other = _leave_a_replica_behind(kafka, topic)
        # Only the leader and the other in-sync replica hold what comes now; enough of it that
        # the new leader's log ends below the archive for a while after the election.
        produce_records(bootstrap, topic, _tail(topic))
        run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
        archived = _commits(location)
        end = archived[-1]["ranges"][0]["end"]
        source = [r for r in consume_all(bootstrap, topic)[0] if r.offset < end]
        assert [r.offset for r in source] == list(range(end))

        _elect_uncleanly(kafka, topic, leader, stale, other)
    # The live producer fails here (the new leader knows none of its sequence numbers): a new one
    # writes on, fewer records than the new leader lacks.
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"after-%d" % i, 1_700_000_000_000 + i, 0, ())
                                       for i in range(50)])
    now = consume_all(bootstrap, topic)[0]
    rewritten = next(r.offset for r, s in zip(now, source) if (r.value, r.offset) != (s.value, s.offset))
    high = _high(kafka, topic)
    assert rewritten < high < end, (rewritten, high, end)

    # The log now ends below the archive: refused, naming the partition and the offsets.
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, f"{topic}[0]", f"offset {high}", f"{high}..{end - 1}", "truncated", "new location")
    assert _commits(location) == archived

    # New records pass the archive's end: the archive's last offset holds another record now.
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"new-%d" % i, 1_700_000_000_000 + i, 0, ())
                                       for i in range(end - high + 10)])
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, f"{topic}[0]", f"offsets {rewritten}..{end - 1}", "rewritten", "new location")
    assert _commits(location) == archived

    # What was archived restores exactly as it was read, beside the rewritten log.
    _restores_as_read(kafka, location, topic, source, (leader, other))



def _archived_end(location) -> int:
    return max((r["end"] for c in _commits(location) for r in c["ranges"]), default=0) \
        if (location / "_topicvault" / "commits").exists() else 0


def test_a_log_truncated_by_an_unclean_election_under_a_followed_backup_stops_it_unspliced(
        split_cluster, spark, tmp_path):
    """Item 3.4 for `backup --follow`: its micro-batches read the tail, an unclean election
    truncates the log below it, the new leader writes past the archive's end: the follower stops,
    naming the partition and the rewritten offsets, and commits none of the new leader's records."""
    kafka, bootstrap = split_cluster, split_cluster.bootstrap
    topic = _unclean_topic(kafka, "uncleanf")
    location, log = tmp_path / "b", tmp_path / "follow.log"
    with followed_backup(bootstrap, location, topic, log) as follower:
        with LiveTraffic(bootstrap, topic) as traffic:
            _wait(lambda: traffic.count() >= 200 and _archived_end(location) >= 100, "the follower committing", 240)
            leader, stale, other = _leave_a_replica_behind(kafka, topic)
        # Only the leader and the other in-sync replica hold the tail; the follower reads it all.
        produce_records(bootstrap, topic, _tail(topic))
        end = _high(kafka, topic)
        _wait(lambda: _archived_end(location) >= end, "the follower archiving the tail", 120)
        source = consume_all(bootstrap, topic)[0]
        assert [r.offset for r in source] == list(range(end)) and follower.poll() is None, log.read_text()[-3000:]
        archived = _commits(location)

        _elect_uncleanly(kafka, topic, leader, stale, other)
        truncated_at = _high(kafka, topic)
        assert truncated_at < end, (truncated_at, end)
        # The new leader writes past the archive's end: the follower's next micro-batch meets it.
        produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"new-%d" % i, 1_700_000_000_000 + i, 0, ())
                                           for i in range(end - truncated_at + 50)])
        assert follower.wait(180) == 1, log.read_text()[-3000:]
    output = log.read_text()
    assert "Traceback" not in output, output[-3000:]
    assert_one_line_error(output, f"{topic}[0]", f"offsets {truncated_at}..{end - 1}",
                          "rewritten", "new location")
    assert _commits(location) == archived  # nothing of the new leader's log committed after the old one's

    _restores_as_read(kafka, location, topic, source, (leader, other))
