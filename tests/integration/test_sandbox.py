"""`topicvault sandbox`: started as a user would, README's quick start run verbatim in a shell with
the line it prints pasted (#40 item 9), then stopped with Ctrl-C (SIGINT): one line, exit 0, and its
Kafka and S3 server gone."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from clitools import CLI
from kafkatools import consume_all

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start() -> list[str]:
    """The command lines of README's quick start (its first code block)."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("\n```\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]
pytestmark = pytest.mark.network  # starts its own broker and S3 server: not the unit tier


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (from /proc's children lists)."""
    found: set[int] = set()
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            pending.extend(children - found)
            found |= children
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def read_until(stream, marker: str, process: subprocess.Popen, timeout_s: float) -> list[str]:
    """Lines of `stream` up to the one holding `marker` (the sandbox prints them once it is up)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            pytest.fail(f"sandbox ended ({process.poll()}) before `{marker}`: {lines}")
        lines.append(line.rstrip("\n"))
        if marker in line:
            return lines
    pytest.fail(f"no `{marker}` from the sandbox within {timeout_s} s: {lines}")


def test_sandbox_backs_up_and_restores_then_stops_on_ctrl_c(tmp_path):
    errors = tmp_path / "sandbox.err"
    with open(errors, "wb") as err:
        sandbox = subprocess.Popen([CLI, "sandbox"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=err, text=True, start_new_session=True)
    try:
        lines = read_until(sandbox.stdout, "Ctrl-C", sandbox, 120)
        text = "\n".join(lines)
        bootstrap = re.search(r"-b (\S+)", text).group(1)
        export = next(line.strip() for line in lines if line.strip().startswith("export "))
        environment = dict(word.split("=", 1) for word in shlex.split(export)[1:])
        assert environment["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= environment.keys()
        assert re.search(r"--to (s3://\S+)", text).group(1) == "s3://topicvault/backups"  # what README uses
        servers = descendants(sandbox.pid)
        assert servers, "the sandbox started no processes"

        # The user's shell, the venv activated: only what the sandbox printed points at its servers.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TOPICVAULT_", "PYSPARK_"))}
        env |= environment | {"PATH": f"{Path(CLI).parent}{os.pathsep}{os.environ['PATH']}"}
        assert environment["TOPICVAULT_BOOTSTRAP_SERVERS"] == bootstrap
        assert "orders" in text and "1,000 sample records" in text
        lines = quick_start()
        assert [line.split()[:2] for line in lines] == [["topicvault", "backup"], ["topicvault", "ls"],
                                                        ["topicvault", "restore"]]
        for line in lines:
            done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=300,
                                  stdin=subprocess.DEVNULL, cwd=tmp_path)
            assert done.returncode == 0, line + "\n" + done.stdout + done.stderr
        strip = lambda records: [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]  # noqa: E731
        source, restored = consume_all(bootstrap, "orders"), consume_all(bootstrap, "orders.restored")
        assert sum(map(len, source.values())) == 1_000
        assert {p: strip(r) for p, r in restored.items()} == {p: strip(r) for p, r in source.items()}

        sandbox.send_signal(signal.SIGINT)
        assert sandbox.wait(timeout=60) == 0, errors.read_text()
    finally:
        if sandbox.poll() is None:
            os.killpg(sandbox.pid, signal.SIGKILL)
            sandbox.wait()
    stderr = errors.read_text()
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("sandbox stopped"), stderr
    assert not [pid for pid in servers if alive(pid)], f"left running: {servers}"
