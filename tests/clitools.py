"""Run the topicvault CLI in-process (sharing the test session's Spark) and check its exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
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


def run_cli_process(args: list[str], log: Path, crash_at: str | None = None, fail_first_attempt_at: str | None = None,
                    master: str = "local[2]", executor: str = "spark") -> int:
    """Run the CLI as its own session; return its exit status (-9 when it was killed).
    `executor` "spark" runs its tasks on Spark (`--master master`), "local" in the process itself
    (`--executor local`: no JVM, so a run costs about a fifth of the CPU)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICVAULT_CRASH_AT")}
    if crash_at:
        env["TOPICVAULT_CRASH_AT"] = crash_at
    if fail_first_attempt_at:
        env["TOPICVAULT_FAIL_FIRST_ATTEMPT_AT"] = fail_first_attempt_at
        env["TOPICVAULT_FAULT_LOG"] = str(log.with_suffix(".faults"))
    with open(log, "ab") as out:
        where = ["--master", master] if executor == "spark" else ["--executor", executor]
        process = subprocess.Popen([CLI, *args, *where], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=out, env=env, start_new_session=True)
        return process.wait(timeout=300)


@pytest.fixture(scope="module")
def python_without_topicvault(tmp_path_factory) -> Path:
    """An interpreter that has topicvault's dependencies but not topicvault itself."""
    env_dir = tmp_path_factory.mktemp("exec-env")
    subprocess.run([sys.executable, "-c", "import venv, sys; venv.EnvBuilder(with_pip=False).create(sys.argv[1])",
                    str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # A plain path entry: the dependencies, without the .pth that makes the editable topicvault importable.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import pyarrow, confluent_kafka\nimport topicvault"],
                           capture_output=True, text=True)
    assert "No module named 'topicvault'" in probe.stderr, probe.stderr
    return python


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.5)
