"""Crash injection for the crash-safety tests.

`TOPICVAULT_CRASH_AT=<point>:<count>` makes the process group die by SIGKILL when `point` has
been passed `count` times: the CLI, its JVM and every Python worker go at once, as in a
machine failure. Points: backup.consume (records read), backup.object (objects stored),
backup.commit (before the commit record), restore.produce (records handed to the producer).
"""

from __future__ import annotations

import os
import signal

ENV = "TOPICVAULT_CRASH_AT"


def crash_after(point: str) -> int | None:
    """The count at which `point` should crash, or None (the normal case)."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    name, _, count = spec.rpartition(":")
    return int(count) if name == point else None


def crash_now() -> None:
    """SIGKILL every process of this session (CLI, JVM, Python workers), then this one.

    The session, not the process group: PySpark's daemon puts workers in groups of their own.
    """
    session = os.getsid(0)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == session and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue
    os.kill(os.getpid(), signal.SIGKILL)
