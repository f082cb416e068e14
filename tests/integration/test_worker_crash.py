"""Issue 41: a follower survives a Python worker that dies of SIGSEGV in the middle of a micro-batch,
and the crash leaves a Python traceback in the log (faulthandler).

The worker is killed by the fault point TOPICVAULT_SEGV_AT (core/local/faults.py) while it reads a range
of records; the CLI and its JVM go on. The archive must then hold exactly what the source holds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from archivetools import commits, committed_end
from clitools import CLI, run_cli, wait_for
from kafkatools import consume_all, produce_records, produce_until
from metrictools import free_port, scrape, value
from topicvault.core.envelope import Record
from topicvault.core.spark import LOCAL_TASK_ATTEMPTS

BASE = 1_700_000_000_000


SEGV_AFTER = 3  # records a task has read of its range when its worker dies


def follow_with_segfaults(bootstrap: str, topic: str, partitions: tuple[int, ...], master: str, times: int,
                          tmp_path: Path) -> tuple[str, dict]:
    """Run `backup --follow` under live traffic while `times` Python workers die of SIGSEGV mid-batch;
    once it committed twice after the crashes, end the traffic, wait for the whole topic in the
    archive, stop the follower gracefully. Returns its output and its last metrics scrape."""
    location = tmp_path / "b"
    log = tmp_path / "follow.log"
    faults = tmp_path / "faults.log"
    port = free_port()
    env = {**os.environ, "TOPICVAULT_SEGV_AT": f"backup.consume:{SEGV_AFTER}", "TOPICVAULT_SEGV_TIMES": str(times),
           "TOPICVAULT_FAULT_LOG": str(faults)}
    done = threading.Event()
    producer = threading.Thread(target=produce_until, args=(done, bootstrap, topic, lambda i: b"k%d" % (i % 7), 20, 0.1,
                                                            partitions), daemon=True)
    producer.start()
    with open(log, "ab") as out:
        follower = subprocess.Popen(
            [CLI, "backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, "--flush-interval", "1",
             "--metrics-port", str(port), "--master", master],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env)
    try:
        def crashed() -> bool:
            return faults.exists() and len(faults.read_text().splitlines()) >= times

        wait_for(lambda: crashed() or follower.poll() is not None, 120, f"{times} worker crash(es)")
        base = len(commits(location))
        wait_for(lambda: len(commits(location)) >= base + 2 or follower.poll() is not None, 120,
                 "two more commits after the crash")
        assert follower.poll() is None, f"the follower died of a crashed worker:\n{log.read_text()[-3000:]}"
        done.set()
        producer.join(60)
        # tansu: end each partition with a single-record batch so its high watermark is the true end.
        produce_records(bootstrap, topic, [Record(topic, p, 0, b"end", b"end", BASE, 0, ()) for p in partitions])
        source = consume_all(bootstrap, topic)
        for partition, records in source.items():
            end = records[-1].offset + 1
            wait_for(lambda p=partition, e=end: committed_end(location, topic, p) == e, 120,
                     f"the follower to reach the end of partition {partition}")
        got = scrape(port)
        os.kill(follower.pid, signal.SIGTERM)  # the topicvault process only: a graceful stop
        assert follower.wait(120) == 0, log.read_text()[-3000:]
    finally:
        done.set()
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait(30)
    assert len(faults.read_text().splitlines()) == times, faults.read_text()

    target = f"{topic}-r"
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}")
    restored = consume_all(bootstrap, target)
    assert sorted(restored) == sorted(source)
    for partition, records in source.items():
        assert len(records) > 50
        assert [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in restored[partition]] == \
               [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]
    return log.read_text(), got


def test_a_worker_killed_by_sigsegv_mid_batch_costs_a_task_attempt_not_the_follower(bootstrap, spark, topic_factory,
                                                                                    tmp_path):
    """local[2] (no retries in local mode before) becomes local[2,4]: the crashed task runs again."""
    topic = topic_factory(2, prefix="segv")
    output, got = follow_with_segfaults(bootstrap, topic, (0, 1), "local[2]", 1, tmp_path)
    assert "failed task attempt(s) retried" in output
    assert value(got, "topicvault_errors_total", kind="task_attempt") == 1
    assert value(got, "topicvault_restarts_total") == 0
    # faulthandler in the worker: the native crash left the worker's Python stack in the log.
    assert "Fatal Python error: Segmentation fault" in output
    assert "kafka_reader.py" in output.split("Fatal Python error: Segmentation fault", 1)[1]


def test_a_micro_batch_whose_workers_crash_in_every_attempt_restarts_the_query_from_the_last_commit(
        bootstrap, spark, topic_factory, tmp_path):
    """Every attempt of one task dies: the query fails, and the follower starts it again from the last
    commit (reported in its output and metrics) instead of ending."""
    topic = topic_factory(1, prefix="segv-restart")
    output, got = follow_with_segfaults(bootstrap, topic, (0,), "local[1]", LOCAL_TASK_ATTEMPTS, tmp_path)
    assert "restart 1: the query failed (SparkException: Python worker exited unexpectedly (crashed))" in output
    assert "starting again from commit" in output
    assert "restart 2" not in output
    assert value(got, "topicvault_restarts_total") == 1
    assert value(got, "topicvault_errors_total", kind="micro_batch") == 1


def json_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def test_a_standby_round_whose_workers_crash_in_every_attempt_restarts_and_restores_exactly(bootstrap, spark, topic_factory,
                                                                                          tmp_path):
    """restore --follow: every attempt of a round's task dies of SIGSEGV while producing; the round is
    run again from the saved offsets (reported as a JSON line with --json), and the standby is exact."""
    topic = topic_factory(1, prefix="segv-standby")
    source_records = [Record(topic, 0, 0, b"k%d" % (i % 5), b"v%d" % i, BASE + i, 0, (("n", b"%d" % i), ("n", None)))
                      for i in range(300)]
    produce_records(bootstrap, topic, source_records)
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    target = f"{topic}-standby"
    log, faults = tmp_path / "standby.log", tmp_path / "faults.log"
    env = {**os.environ, "TOPICVAULT_SEGV_AT": "restore.produce:100", "TOPICVAULT_SEGV_TIMES": str(LOCAL_TASK_ATTEMPTS),
           "TOPICVAULT_FAULT_LOG": str(faults)}
    with open(log, "ab") as out:
        standby = subprocess.Popen(
            [CLI, "restore", "--follow", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
             "--json", "--poll-interval", "1", "--master", "local[1]"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env)
    try:
        wait_for(lambda: any("round" in line for line in json_lines(log)) or standby.poll() is not None, 240,
                 "a finished round")
        assert standby.poll() is None, f"the standby died of crashed workers:\n{log.read_text()[-3000:]}"
        os.kill(standby.pid, signal.SIGTERM)
        assert standby.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if standby.poll() is None:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait(30)
    assert len(faults.read_text().splitlines()) == LOCAL_TASK_ATTEMPTS
    restarts = [line for line in json_lines(log) if "restart" in line]
    assert [r["restart"] for r in restarts] == [1], log.read_text()[-3000:]
    assert restarts[0]["reason"] == "SparkException: Python worker exited unexpectedly (crashed)"
    assert "Fatal Python error: Segmentation fault" in log.read_text()
    restored = consume_all(bootstrap, target)[0]
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in restored] == \
           [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type)
            for r in consume_all(bootstrap, topic)[0]]
