"""`backup --follow`: continuous backup survives SIGKILL, stops cleanly on SIGTERM, restores exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clitools import run_cli
from kafkatools import consume_all, produce_records, produce_until
from topicvault.core.envelope import Record

CLI = str(Path(sys.executable).with_name("topicvault"))
BASE = 1_700_000_000_000


def start_follow(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([CLI, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)


def commits(location: Path) -> list[dict]:
    folder = location / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def committed_end(location: Path, topic: str, partition: int) -> int:
    ends = [r["end"] for c in commits(location) for r in c["ranges"] if (r["topic"], r["partition"]) == (topic, partition)]
    return max(ends, default=0)


def test_follow_killed_and_restarted_then_stopped_restores_exactly(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="follow")
    location = tmp_path / "b"
    log = tmp_path / "follow.log"
    args = ["backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, "--flush-interval", "1",
            "--max-records", "300", "--master", "local[2]"]
    done = threading.Event()

    producer_thread = threading.Thread(target=produce_until, args=(done, bootstrap, topic, lambda i: b"k%d" % (i % 7),
                                                                  50, 0.05), daemon=True)
    producer_thread.start()
    first = start_follow(args, log)
    try:
        wait_for(lambda: len(commits(location)) >= 2 or first.poll() is not None, 120,
                 "two commits of the first follow run")
        assert first.poll() is None, log.read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # driver, JVM and workers at once, like a machine failure
        assert first.wait(30) == -9
        second = start_follow(args, log)
        wait_for(lambda: len(commits(location)) >= 4 or second.poll() is not None, 120, "commits of the restarted run")
        assert second.poll() is None, log.read_text()[-3000:]  # a follower that failed says why
        done.set()
        producer_thread.join(60)
        # tansu: end each partition with a single-record batch so its high watermark is the true end.
        produce_records(bootstrap, topic, [Record(topic, p, 0, b"end", b"end", BASE, 0, ()) for p in (0, 1)])
        source = consume_all(bootstrap, topic)
        for partition, records in source.items():
            end = records[-1].offset + 1
            wait_for(lambda p=partition, e=end: committed_end(location, topic, p) == e, 120,
                     f"the follow run to reach the end of partition {partition}")
        # SIGTERM to the topicvault process only (`kill PID`): a signal to the whole group would
        # also stop Spark's JVM, which ends the run without the graceful last commit.
        os.kill(second.pid, signal.SIGTERM)
        assert second.wait(120) == 0, log.read_text()[-3000:]
    finally:
        done.set()
        for process in (first, locals().get("second")):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    output = log.read_text()
    assert "stopped:" in output
    assert any(c.get("stream", {}).get("lag") is not None for c in commits(location))
    assert commits(location)[0]["topics"][topic]["partitions"] == 2  # settings saved when following starts

    listing = run_cli("ls", str(location))
    assert "followed backup: last commit" in listing
    target = f"{topic}-r"
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}")
    restored = consume_all(bootstrap, target)
    for partition, records in source.items():
        assert len(records) > 100
        assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored[partition]] == \
               [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]

    # A one-shot backup afterwards continues from the committed position: nothing is new.
    assert "nothing new" in run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)


def test_a_stream_starting_after_retention_moved_the_log_start_fails_instead_of_skipping_offsets():
    """A follow plans (and commits the offsets retention deleted before it), then its stream
    starts reading the watermarks again. Retention that moved a log start in between (real Kafka:
    every 5 minutes by default) must not be stepped over in silence: the micro-batch's commit
    would cover the deleted offsets as a gap, never reported as lost."""
    from topicvault.core.errors import TopicvaultError
    from topicvault.sink.stream import stream_start_offsets

    watermarks = {"t:0": (10, 50), "t:1": (0, 7), "u:0": (3, 9)}
    # Committed ends at or after the log start, and partitions the archive never had: start there.
    assert stream_start_offsets({"t:0": 10, "t:1": 7}, watermarks) == {"t:0": 10, "t:1": 7, "u:0": 3}
    assert stream_start_offsets({"t:0": 30}, watermarks)["t:0"] == 30
    try:
        stream_start_offsets({"t:0": 4, "t:1": 7}, watermarks)
    except TopicvaultError as exc:
        assert "t[0]" in str(exc) and "4..9" in str(exc) and "run again" in str(exc)
    else:
        raise AssertionError("offsets 4..9, deleted after the plan, were stepped over")


def test_a_failed_query_is_reported_by_its_cause_not_by_spark_s_header():
    """Spark's text of a failed stream starts with "[STREAM_FAILED] Query [...] terminated with
    exception:" and the cause follows on later lines: the one-line report printed nothing of it."""
    from topicvault.core.spark import failure_reason as _reason

    spark_text = ("[STREAM_FAILED] Query [id = 6af6, runId = 5106] terminated with exception: \n"
                  "Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times, most recent failure: "
                  "Lost task 0.3 in stage 3.0 (TID 9) (host executor driver): org.apache.spark.api.python."
                  "PythonException: Traceback (most recent call last):\n"
                  '  File "/x/worker.py", line 1, in main\n'
                  "OSError: [Errno 28] No space left on device\n"
                  "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
                  "Driver stacktrace:\n"
                  "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n")
    assert _reason(spark_text) == "OSError: [Errno 28] No space left on device"
    ours = spark_text.replace("OSError: [Errno 28] No space left on device",
                              "topicvault.core.errors.TopicvaultError: t[0] ended at offset 10 SQLSTATE: 39000")
    assert _reason(ours) == "t[0] ended at offset 10"
    assert _reason("something odd happened") == "something odd happened"
