"""The follower's Prometheus metrics (issue #18 item 7): building them from commit records and
Spark progress reports, and serving them. Pure logic and a loopback socket: no broker, S3 or Spark."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from metrictools import free_port, samples
from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
from topicvault.core.errors import TopicvaultError
from topicvault.sink.metrics import FollowMetrics, MetricsServer, batch_durations, own_commits


def entry(topic: str, partition: int, first: int, last: int, stored: int) -> ObjectEntry:
    return ObjectEntry(f"topic={topic}/partition={partition}/{first:019d}.parquet", topic, partition, first, last,
                       last - first + 1, stored, 0, 0, "00")


def record(sequence: int, stream_id: str, objects: list[ObjectEntry], lag: dict[str, int], created_ms: int,
           batch: int = 0) -> CommitRecord:
    ranges = tuple(PartitionRange(o.topic, o.partition, o.first_offset, o.last_offset + 1) for o in objects)
    return CommitRecord(sequence, created_ms, ranges, tuple(objects), {},
                        stream={"id": stream_id, "batch": batch, "committed_ms": created_ms, "lag": lag})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_metrics_count_what_the_commits_hold():
    clock = Clock(1000.0)
    metrics = FollowMetrics(clock)
    first = record(1, "s", [entry("orders", 0, 0, 9, 700), entry("orders", 1, 0, 4, 300), entry("a:b", 0, 0, 2, 50)],
                   {"orders:0": 5, "orders:1": 0, "a:b:0": 7}, created_ms=1_010_000, batch=0)
    second = record(2, "s", [entry("orders", 0, 10, 29, 900)], {"orders:0": 1}, created_ms=1_020_000, batch=1)
    state = BackupState()
    for r in (first, second):
        state.apply(r, "k")
        metrics.observe_commit(r, {0: 0.75, 1: 3.0}[r.stream["batch"]])
    metrics.observe_state(state)
    clock.now = 1_025.5
    got = samples(metrics.exposition())
    assert got[("topicvault_backup_records_total", (("topic", "orders"),))] == 35
    assert got[("topicvault_backup_records_total", (("topic", "a:b"),))] == 3
    assert got[("topicvault_backup_object_bytes_total", (("topic", "orders"),))] == 1900
    assert got[("topicvault_commits_total", ())] == 2
    # The latest lag of each partition; a topic name with ':' keeps its partition apart.
    assert got[("topicvault_lag_records", (("partition", "0"), ("topic", "orders")))] == 1
    assert got[("topicvault_lag_records", (("partition", "1"), ("topic", "orders")))] == 0
    assert got[("topicvault_lag_records", (("partition", "0"), ("topic", "a:b")))] == 7
    assert got[("topicvault_committed_end_offset", (("partition", "0"), ("topic", "orders")))] == 30
    assert got[("topicvault_committed_end_offset", (("partition", "1"), ("topic", "orders")))] == 5
    assert got[("topicvault_commit_duration_seconds_count", ())] == 2
    assert got[("topicvault_commit_duration_seconds_sum", ())] == 3.75
    assert got[("topicvault_commit_duration_seconds_bucket", (("le", "1.0"),))] == 1
    assert got[("topicvault_seconds_since_last_commit", ())] == 5.5  # computed at scrape time
    assert got[("topicvault_errors_total", (("kind", "task_attempt"),))] == 0
    assert got[("topicvault_errors_total", (("kind", "micro_batch"),))] == 0


def test_seconds_since_last_commit_counts_from_the_start_until_the_first_commit():
    clock = Clock(500.0)
    metrics = FollowMetrics(clock)
    clock.now = 530.0
    assert samples(metrics.exposition())[("topicvault_seconds_since_last_commit", ())] == 30
    # A commit whose clock ran behind never makes it negative.
    metrics.observe_commit(record(1, "s", [entry("t", 0, 0, 0, 1)], {}, created_ms=600_000), None)
    assert metrics.seconds_since_last_commit() == 0
    assert samples(metrics.exposition())[("topicvault_commit_duration_seconds_count", ())] == 0


def test_errors_are_counted_by_kind():
    metrics = FollowMetrics()
    metrics.observe_errors("task_attempt", 2)
    metrics.observe_errors("task_attempt", 0)
    metrics.observe_errors("micro_batch")
    got = samples(metrics.exposition())
    assert got[("topicvault_errors_total", (("kind", "task_attempt"),))] == 2
    assert got[("topicvault_errors_total", (("kind", "micro_batch"),))] == 1


def test_only_this_streams_commits_count():
    mine = record(2, "s", [entry("t", 0, 0, 0, 1)], {}, 0)
    others = [record(1, "other-run", [entry("t", 0, 0, 0, 1)], {}, 0),
              CommitRecord(3, 0, (), (), {})]  # a one-shot backup, a compaction or an expiry
    assert own_commits([others[0], mine, others[1]], "s") == [mine]


def test_batch_durations_leave_out_idle_triggers():
    progresses = [
        {"batchId": 3, "numInputRows": 40, "durationMs": {"triggerExecution": 2500, "addBatch": 2000}},
        # An idle trigger's report: it read nothing, so it is no micro-batch.
        {"batchId": 4, "numInputRows": 0, "durationMs": {"triggerExecution": 3}},
        {"batchId": 4, "numInputRows": 1, "durationMs": {"triggerExecution": 120}},
    ]
    assert batch_durations(progresses) == {3: 2.5, 4: 0.12}
    assert batch_durations([]) == {}




def test_server_serves_the_registry_and_frees_its_port_when_closed():
    metrics = FollowMetrics()
    metrics.observe_errors("micro_batch")
    port = free_port()
    with MetricsServer(metrics, port, "127.0.0.1"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            got = samples(response.read())
        assert got[("topicvault_errors_total", (("kind", "micro_batch"),))] == 1
    with socket.socket() as again:
        # SO_REUSEADDR, as servers set it, binds past TIME_WAIT but never beside a listening socket.
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0"])
def test_a_port_in_use_is_a_one_line_error(address):
    with socket.socket() as taken:
        taken.bind((address, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TopicvaultError, match=rf"^--metrics-port {port} is in use by another process: pick a free port"):
            MetricsServer(FollowMetrics(), port)


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_port_out_of_range_is_a_one_line_error(port):
    with pytest.raises(TopicvaultError, match=rf"^bad --metrics-port {port}: give a TCP port 1-65535"):
        MetricsServer(FollowMetrics(), port)


def test_the_server_listens_on_loopback_unless_told_otherwise():
    port = free_port()
    with MetricsServer(FollowMetrics(), port) as server:
        assert server.address == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            assert response.status == 200


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_only_the_metrics_path_is_served():
    port = free_port()
    with MetricsServer(FollowMetrics(), port, "127.0.0.1"):
        base = f"http://127.0.0.1:{port}"
        assert get_status(base + "/metrics") == 200
        assert get_status(base + "/metrics?name[]=topicvault_commits_total") == 200
        for path in ("/", "/favicon.ico", "/metrics/../etc", "/debug"):
            assert get_status(base + path) == 404, path


def test_a_bad_metrics_address_is_a_one_line_error():
    with pytest.raises(TopicvaultError, match=r"^cannot serve metrics on 'no such host!'"):
        MetricsServer(FollowMetrics(), free_port(), "no such host!")


def test_topic_labels_are_bounded():
    metrics = FollowMetrics(max_topics=3)
    objects = [entry(f"t{i}", 0, 0, 0, 10) for i in range(6)]
    commit = record(1, "s", objects, {f"t{i}:0": i for i in range(6)}, created_ms=0)
    state = BackupState()
    state.apply(commit, "k")
    metrics.observe_commit(commit, None)
    metrics.observe_state(state)
    got = samples(metrics.exposition())
    topics = {dict(labels).get("topic") for (name, labels) in got if name == "topicvault_backup_records_total"}
    assert topics == {"t0", "t1", "t2", "_other"}
    assert got[("topicvault_backup_records_total", (("topic", "_other"),))] == 3  # t3, t4, t5 together
    assert got[("topicvault_backup_object_bytes_total", (("topic", "_other"),))] == 30
    lag_topics = {dict(labels)["topic"] for (name, labels) in got if name == "topicvault_lag_records"}
    assert lag_topics == {"t0", "t1", "t2"}  # a per-partition gauge of "other" topics would mean nothing
    end_topics = {dict(labels)["topic"] for (name, labels) in got if name == "topicvault_committed_end_offset"}
    assert end_topics == {"t0", "t1", "t2"}
    assert got[("topicvault_topics_unlabelled", ())] == 3
