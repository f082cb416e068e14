"""Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a one-shot restore
and backup: one line saying how to go on, no tracebacks, a non-zero exit, and nothing committed
that was not finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafkatools import consume_all, produce_records, topic_exists
from topicvault.core.envelope import Record

CLI = str(Path(sys.executable).with_name("topicvault"))


def recent_records(topic: str, partitions: int, count: int) -> list[Record]:
    """Records stamped now (the target takes them whatever its timestamp limits), headers repeated."""
    now = int(time.time() * 1000)
    return [Record(topic, i % partitions, 0, b"k%d" % i, b"v%d" % i, now + i, 0, (("h", b"1"), ("h", b"2")))
            for i in range(count)]


def start_cli(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([CLI, *args, "--master", "local[2]"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=out, start_new_session=True)


def interrupt_when(process: subprocess.Popen, ready, log: Path, timeout_s: float = 120) -> int:
    """SIGINT the process group once `ready()` holds (mid-run); its exit status."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert process.poll() is None, f"ended ({process.returncode}) before it was interrupted:\n{log.read_text()}"
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"not mid-run within {timeout_s} s:\n{log.read_text()}")
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    try:
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def assert_one_quiet_line(stderr: str, line: str) -> None:
    assert "Traceback" not in stderr and "Exception while sending command" not in stderr, stderr
    assert "reentrant call" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == line, stderr


def test_ctrl_c_during_a_restore_prints_how_to_resume(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="interrupt-restore")
    produce_records(bootstrap, topic, recent_records(topic, 2, 3_000))
    location = tmp_path / "backup"
    assert subprocess.run([CLI, "backup", "-b", bootstrap, "-t", topic, "--to", str(location), "--quiet",
                           "--master", "local[2]"], capture_output=True, timeout=240).returncode == 0
    target = f"{topic}-restored"
    log = tmp_path / "restore.err"
    restore = start_cli(["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                         "--restore-id", "ctrl-c", "--max-records-per-second", "200", "--json"], log)

    def producing() -> bool:  # (a consumer of a topic not there yet would have it auto-created)
        return topic_exists(bootstrap, target) and sum(map(len, consume_all(bootstrap, target).values())) > 0

    status = interrupt_when(restore, producing, log)

    assert status != 0
    stderr = log.read_text()
    assert "restore id ctrl-c" in stderr  # with --json too
    assert_one_quiet_line(stderr, "interrupted; resume with --restore-id ctrl-c")
    # The line's advice finishes the restore exactly.
    done = subprocess.run([CLI, "restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                           "--restore-id", "ctrl-c", "--json", "--master", "local[2]"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["restore_id"] == "ctrl-c"
    strip = lambda records: [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]  # noqa: E731
    assert ({p: strip(r) for p, r in consume_all(bootstrap, target).items()}
            == {p: strip(r) for p, r in consume_all(bootstrap, topic).items()})


def test_ctrl_c_during_a_backup_says_nothing_was_committed(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="interrupt-backup")
    produce_records(bootstrap, topic, recent_records(topic, 1, 10_000))
    location = tmp_path / "backup"
    log = tmp_path / "backup.err"
    # One object per record: thousands of writes, so the run is still going once the first lands.
    backup = start_cli(["backup", "-b", bootstrap, "-t", topic, "--to", str(location), "--max-records", "1"], log)

    def writing() -> bool:
        return any(p.is_file() and "_topicvault" not in p.parts for p in location.rglob("*"))

    status = interrupt_when(backup, writing, log)

    assert status != 0
    assert_one_quiet_line(log.read_text(), f"interrupted: this run committed nothing; {location} holds what "
                                           "earlier backups committed; run again to back up the rest")
    assert not list((location / "_topicvault" / "commits").glob("*.json"))
