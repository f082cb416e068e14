"""What the benchmarks read of /proc: a process's parent, CPU and resident memory, and the
machine's busy time (Linux only, like the benchmarks)."""

from __future__ import annotations

import os
from pathlib import Path

# Seconds per clock tick, the unit of /proc's CPU times.
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses):
    [0] is the state, [1] the parent's pid, [11] and [12] user and system CPU ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()


def parent_pid(pid: int) -> int:
    """The parent's pid of `pid` (OSError once `pid` is gone)."""
    return int(_stat_fields(pid)[1])


def cpu_s(pid: int) -> float:
    """The CPU seconds `pid` has spent, user and system (OSError once it is gone)."""
    user, system = _stat_fields(pid)[11:13]
    return (int(user) + int(system)) * TICK_S


def machine_busy_s() -> float:
    """The CPU seconds every core of the machine has been busy (all but idle and iowait), since boot."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) * TICK_S


def rss_kib(pid: int) -> int | None:
    """The resident memory of `pid` in KiB; None once it is gone (or for a kernel thread)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
