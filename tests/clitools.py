"""Run the topicvault CLI in-process (sharing the test session's Spark) and check its exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from topicvault.cli import app
from typer.testing import CliRunner

CLI = str(Path(sys.executable).with_name("topicvault"))


def run_cli(*args: str, expect_exit: int = 0) -> str:
    """Run `topicvault ARGS`; assert the exit code; return stdout+stderr."""
    result = CliRunner().invoke(app, list(args))
    output = result.output  # click >= 8.2: stdout and stderr interleaved
    assert result.exit_code == expect_exit, f"exit {result.exit_code} for {args}:\n{output}\n{result.exception!r}"
    return output


def assert_one_line_error(output: str, *needles: str) -> None:
    """The output holds exactly one `error:` line, containing every needle, and no traceback."""
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], lines[0]


def run_cli_stdout(*args: str, expect_exit: int = 0) -> str:
    """Run `topicvault ARGS`; assert the exit code; return stdout alone (e.g. --json output, with
    the notes and ids on stderr left out)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == expect_exit, f"exit {result.exit_code} for {args}:\n{result.output}\n{result.exception!r}"
    return result.stdout


@contextmanager
def cli_process(args: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """`topicvault ARGS` as a process in its own session writing to `log`, never to the test's pipes;
    killed with its group on leaving if it still runs (a stopped one too)."""
    with open(log, "ab") as out:
        process = subprocess.Popen([CLI, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                   start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


@contextmanager
def followed_backup(bootstrap: str, location: Path, topic: str, log: Path) -> Iterator[subprocess.Popen]:
    """`topicvault backup --follow` of `topic` (1 s micro-batches, local[1]) as a cli_process."""
    with cli_process(["backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, "--flush-interval",
                      "1", "--master", "local[1]"], log) as follower:
        yield follower


def signal_session(session: int, signum: int) -> None:
    """Send a signal to every process of a session: the CLI, its JVM and Spark's Python workers
    (PySpark's daemon puts workers in process groups of their own)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[3]) == session:
                    os.kill(int(pid), signum)
        except (OSError, ValueError, IndexError):
            continue


@contextmanager
def frozen(process: subprocess.Popen) -> Iterator[None]:
    """A cli_process and everything it started stopped (SIGSTOP) for the block, then continued: what
    happens in the block happens to the run at the point it had reached, whatever the machine's speed."""
    signal_session(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        signal_session(process.pid, signal.SIGCONT)
