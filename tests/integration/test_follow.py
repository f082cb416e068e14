"""`backup --follow`: continuous backup survives SIGKILL, stops cleanly on SIGTERM, restores exactly."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

from archivetools import commits, committed_end
from clitools import CLI, run_cli, wait_for
from kafkatools import consume_all, produce_records, produce_until
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


def start_follow(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([CLI, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)








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
