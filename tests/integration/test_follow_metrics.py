"""`backup --follow --metrics-port N` (issue #18 item 7): a follower serves Prometheus metrics
that match what it backed up, and stops serving (its port free again) when it stops."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

from clitools import CLI
from kafkatools import produce_records
from metrictools import free_port, scrape, value
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commits import load_commits
from topicvault.core.envelope import Record
from topicvault.core.stores.local_store import LocalStore

FAIL_AT = 5  # a task's first attempt fails once it has read this many records of a range




def wait_for_scrape(port: int, condition, timeout_s: float, what: str, output: Path) -> dict:
    """Scrape until `condition(samples)` holds; fail naming `what` (with the follower's output) at the deadline."""
    deadline = time.monotonic() + timeout_s
    got: dict = {}
    while time.monotonic() < deadline:
        try:
            got = scrape(port)
        except OSError:
            got = {}  # not serving yet
        if got and condition(got):
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last scrape {got}\n{output.read_text()[-3000:]}")


def streamed_commits(location: Path) -> int:
    """Commit records a follower's micro-batches wrote at `location`."""
    return sum(1 for _, record in load_commits(LocalStore(str(location))) if record.stream)




def test_follower_metrics_match_what_it_backed_up_and_stop_with_it(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="metrics")
    location = tmp_path / "loc"
    first = [Record(topic, p, 0, b"k%d" % i, b"v" * (10 + i), 1_700_000_000_000 + i, 0, ())
             for p, count in ((0, 20), (1, 10)) for i in range(count)]
    produce_records(bootstrap, topic, first)  # each partition ends with a single-record batch (tansu)
    port = free_port()
    output = tmp_path / "follow.log"
    # Spark retries a failed task (local[2,2]); every range of 5+ records fails its first attempt once.
    env = {**os.environ, "TOPICVAULT_FAIL_FIRST_ATTEMPT_AT": f"backup.consume:{FAIL_AT}"}
    with open(output, "wb") as out:
        follower = subprocess.Popen(
            [CLI, "backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, "--flush-interval", "1",
             "--metrics-port", str(port), "--master", "local[2,2]"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env)
    try:
        got = wait_for_scrape(port, lambda g: value(g, "topicvault_backup_records_total", topic=topic) == 30, 240,
                              "the first 30 records in the metrics", output)
        state = load_state(LocalStore(str(location)))
        stored = sum(o.bytes for ps in state.partitions.values() for o in ps.objects)
        assert value(got, "topicvault_backup_object_bytes_total", topic=topic) == stored
        assert value(got, "topicvault_committed_end_offset", topic=topic, partition="0") == 20
        assert value(got, "topicvault_committed_end_offset", topic=topic, partition="1") == 10
        assert value(got, "topicvault_lag_records", topic=topic, partition="0") == 0
        assert value(got, "topicvault_lag_records", topic=topic, partition="1") == 0
        commits = value(got, "topicvault_commits_total")
        assert commits == streamed_commits(location) >= 1  # not the run's first commit (topic settings)
        assert value(got, "topicvault_commit_duration_seconds_count") == commits
        assert 0 < value(got, "topicvault_commit_duration_seconds_sum") < 600
        # Both partitions' first ranges (20 and 10 records) failed a first attempt; Spark retried them.
        assert value(got, "topicvault_errors_total", kind="task_attempt") == 2
        assert value(got, "topicvault_errors_total", kind="micro_batch") == 0
        # Idle: no commit, so the seconds since the last one grow (computed at scrape time).
        idle = value(got, "topicvault_seconds_since_last_commit")
        wait_for_scrape(port, lambda g: value(g, "topicvault_seconds_since_last_commit") >= idle + 2, 120,
                        "the seconds since the last commit to grow", output)
        more = [Record(topic, 0, 0, b"m%d" % i, b"w", 1_700_000_100_000 + i, 0, ()) for i in range(FAIL_AT - 1)]
        produced_at = time.time()
        produce_records(bootstrap, topic, more)
        got = wait_for_scrape(port, lambda g: value(g, "topicvault_backup_records_total", topic=topic) == 34, 240,
                              "the next 4 records in the metrics", output)
        assert value(got, "topicvault_committed_end_offset", topic=topic, partition="0") == 24
        assert value(got, "topicvault_committed_end_offset", topic=topic, partition="1") == 10
        assert value(got, "topicvault_commits_total") == streamed_commits(location) > commits
        # The commit of those records came after they were produced: the clock restarted then.
        assert value(got, "topicvault_seconds_since_last_commit") <= time.time() - produced_at + 0.1
        assert value(got, "topicvault_errors_total", kind="task_attempt") == 2  # 4 records: no failed attempt
        os.kill(follower.pid, signal.SIGTERM)  # the topicvault process only: a graceful stop
        assert follower.wait(120) == 0, output.read_text()[-3000:]
        with socket.socket() as again:  # the server stopped with the follower: the port is free
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("0.0.0.0", port))
        assert re.search(rf"serving Prometheus metrics on port {port}", output.read_text())
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait(30)
