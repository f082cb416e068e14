"""Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during a one-shot restore
and backup: one line saying how to go on, no tracebacks, a non-zero exit, and nothing committed
that was not finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from clitools import CLI
from kafkatools import consume_all, end_offsets, produce_records, topic_exists
from topicvault.core.envelope import Record


def recent_records(topic: str, partitions: int, count: int) -> list[Record]:
    """Records stamped now (the target takes them whatever its timestamp limits), headers repeated."""
    now = int(time.time() * 1000)
    return [Record(topic, i % partitions, 0, b"k%d" % i, b"v%d" % i, now + i, 0, (("h", b"1"), ("h", b"2")))
            for i in range(count)]


def start_cli(args: list[str], log: Path, executor: str = "spark") -> subprocess.Popen:
    """`topicvault ARGS` with its tasks on Spark (local[2]) or in its own process (--executor local)."""
    where = ["--master", "local[2]"] if executor == "spark" else ["--executor", "local"]
    with open(log, "wb") as out:
        return subprocess.Popen([CLI, *args, *where], stdin=subprocess.DEVNULL,
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


@pytest.mark.parametrize("executor", ["spark", "local"])
def test_ctrl_c_during_a_restore_prints_how_to_resume(bootstrap, topic_factory, tmp_path, executor):
    topic = topic_factory(2, prefix="interrupt-restore")
    produce_records(bootstrap, topic, recent_records(topic, 2, 3_000))
    location = tmp_path / "backup"
    assert subprocess.run([CLI, "backup", "-b", bootstrap, "-t", topic, "--to", str(location), "--quiet",
                           "--master", "local[2]"], capture_output=True, timeout=240).returncode == 0
    target = f"{topic}-restored"
    log = tmp_path / "restore.err"
    restore_id = f"ctrl-c-{executor}"  # the suite's restores share one state store
    restore = start_cli(["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                         "--restore-id", restore_id, "--max-records-per-second", "200", "--json"], log, executor)

    def producing() -> bool:  # (a consumer of a topic not there yet would have it auto-created)
        return topic_exists(bootstrap, target) and sum(map(len, consume_all(bootstrap, target).values())) > 0

    status = interrupt_when(restore, producing, log)

    assert status != 0
    stderr = log.read_text()
    assert f"restore id {restore_id}" in stderr  # with --json too
    assert_one_quiet_line(stderr, f"interrupted; resume with --restore-id {restore_id}")
    # The line's advice finishes the restore exactly.
    done = subprocess.run([CLI, "restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                           "--restore-id", restore_id, "--json", "--master", "local[2]"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["restore_id"] == restore_id
    strip = lambda records: [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]  # noqa: E731
    assert ({p: strip(r) for p, r in consume_all(bootstrap, target).items()}
            == {p: strip(r) for p, r in consume_all(bootstrap, topic).items()})


@pytest.mark.parametrize("executor", ["spark", "local"])
def test_ctrl_c_during_a_backup_says_nothing_was_committed(bootstrap, topic_factory, tmp_path, executor):
    topic = topic_factory(1, prefix="interrupt-backup")
    produce_records(bootstrap, topic, recent_records(topic, 1, 10_000))
    location = tmp_path / "backup"
    log = tmp_path / "backup.err"
    # One object per record: thousands of writes, so the run is still going once the first lands.
    backup = start_cli(["backup", "-b", bootstrap, "-t", topic, "--to", str(location), "--max-records", "1"], log,
                       executor)

    def writing() -> bool:
        return any(p.is_file() and "_topicvault" not in p.parts for p in location.rglob("*"))

    status = interrupt_when(backup, writing, log)

    assert status != 0
    assert_one_quiet_line(log.read_text(), f"interrupted: this run committed nothing; {location} holds what "
                                           "earlier backups committed; run again to back up the rest")
    assert not list((location / "_topicvault" / "commits").glob("*.json"))


def children_of(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc (each thread's `children` file)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as children:
                    for child in map(int, children.read().split()):
                        if child not in found:
                            found.add(child)
                            pending.append(child)
            except OSError:
                continue
    return found


def command_line(pid: int) -> str:
    """`pid` and its command line, for a message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as line:
            words = line.read().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {b' '.join(words).decode(errors='replace')[:200]}"


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def starting(bootstrap: str, target: str, pid: int) -> bool:
    """The CLI has started a process (its Spark driver JVM, through spark-submit): Spark is starting."""
    return bool(children_of(pid))


def producing(bootstrap: str, target: str, pid: int) -> bool:
    """The restore has produced records into its target."""
    return topic_exists(bootstrap, target) and end_offsets(bootstrap, target, [0])[0][1] > 0


@pytest.mark.parametrize("moment, signum, records", [(starting, signal.SIGINT, 1_000),
                                                      (starting, signal.SIGTERM, 1_000),
                                                      (producing, signal.SIGINT, 200_000)],
                         ids=["SIGINT-while-Spark-starts", "SIGTERM-while-Spark-starts", "SIGINT-while-producing"])
def test_a_signal_to_the_restore_alone_leaves_no_process_holding_its_output(bootstrap, topic_factory, tmp_path,
                                                                             moment, signum, records):
    """Issue #50 item 17: a supervisor or wrapper script signals the topicvault process alone, not
    its group. It must end with every process it started, so whoever reads its output to the end
    (a pipe) gets EOF. A signal while Spark's driver JVM was starting left that JVM running,
    orphaned, holding the caller's stdout (the JVM found the folder it reports its port in deleted
    and its py4j server thread kept it alive)."""
    topic = topic_factory(1, prefix="interrupt-alone")
    produce_records(bootstrap, topic, recent_records(topic, 1, records))
    location = tmp_path / "backup"
    assert subprocess.run([CLI, "backup", "-b", bootstrap, "-t", topic, "--to", str(location), "--quiet",
                           "--master", "local[2]"], capture_output=True, timeout=600).returncode == 0
    target = f"{topic}-restored"
    # Its own session only so that the clean-up below can kill whatever is left; the signal goes to it alone.
    restore = subprocess.Popen([CLI, "restore", "--from", str(location), "-b", bootstrap, "--rename",
                                f"{topic}={target}", "--restore-id", "alone", "--max-records-per-second", "20000",
                                "--master", "local[2]"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(restore.stdout.read()), daemon=True)
    reader.start()
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not moment(bootstrap, target, restore.pid):
            assert restore.poll() is None, f"ended ({restore.returncode}) before it was signalled: {output}"
            if time.monotonic() > deadline:
                raise TimeoutError(f"not {moment.__name__} within 300 s")
            started |= children_of(restore.pid)
            time.sleep(0.05)
        started |= children_of(restore.pid)
        assert started, "the restore started no process (its Spark driver JVM)"
        os.kill(restore.pid, signum)
        reader.join(120)  # a hang detector, not a speed check
        assert not reader.is_alive(), (f"its output was still open 120 s after {signum.name}; processes it "
                                        f"started still running: {sorted(p for p in started if alive(p))}")
        assert restore.wait(60) == 128 + signum, output
        assert b"still ran" not in output[0], output  # they ended when released, not by SIGKILL
        started |= children_of(restore.pid)
        left = {pid for pid in started if alive(pid)}
        assert not left, f"processes it started outlived it: {[command_line(pid) for pid in sorted(left)]}"
    finally:
        if restore.poll() is None:
            os.killpg(restore.pid, signal.SIGKILL)
            restore.wait(30)
        for pid in {p for p in started if alive(p)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# A command's process (start_command, as the CLI's entry point) that started Spark, with a thread
# still calling the JVM when it ends (as a progress poller or a failed job's other thread can be).
CALLING_AT_EXIT = """
import sys, threading, time
from topicvault.core.process import start_command
start_command()
from topicvault.core.spark import get_task_session
context = get_task_session("local[1]").sparkContext
def poll():
    while True:
        context.statusTracker().getActiveJobsIds()
threading.Thread(target=poll, daemon=True).start()
time.sleep(1)
print("ending", flush=True)
"""


def test_a_command_ending_while_a_thread_calls_the_jvm_prints_no_traceback_and_leaves_no_process(tmp_path):
    """A command ends after the processes it started (start_command), so its JVM ends while it
    still runs: a thread calling the JVM then printed py4j's "Answer from Java side is empty"
    tracebacks after the command's last line (seen in CI after a restore's error line)."""
    import sys

    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        command = subprocess.Popen([sys.executable, "-c", CALLING_AT_EXIT], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert command.wait(300) == 0, log.read_text()
        finally:
            if command.poll() is None:
                os.killpg(command.pid, signal.SIGKILL)
    assert "ending" in log.read_text() and "Traceback" not in log.read_text(), log.read_text()
    left = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _session_of(pid) == command.pid]
    assert not [command_line(pid) for pid in left if alive(pid)]


def _session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[3])
    except (OSError, ValueError, IndexError):
        return None


# A command's process with a child that does not end when released (a stuck worker).
STUCK_CHILD_AT_EXIT = """
import subprocess
from topicvault.core.process import start_command
start_command()
child = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
"""


def test_a_signal_while_a_command_waits_for_its_children_kills_them_at_once(tmp_path):
    """A command waits up to 30 s for what it started to end. A second Ctrl-C or a supervisor's
    SIGTERM then raised in the exit hook: Python printed "Exception ignored in atexit callback"
    with a traceback, stopped waiting, and left the children running."""
    import sys

    command = subprocess.Popen([sys.executable, "-c", STUCK_CHILD_AT_EXIT], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        child = int(command.stdout.readline())
        time.sleep(1)  # into the wait (no bound on it: the wait lasts 30 s)
        command.send_signal(signal.SIGTERM)
        output = command.stdout.read().decode()
        command.wait(60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
    try:
        assert "note: 1 processes it started still ran on a signal: killed" in output, output
        assert "Traceback" not in output and not alive(child), output
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
