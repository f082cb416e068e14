"""Run a command and count the CPU of every process it starts, orphans included.

    python benchmarks/reaped.py COMMAND...   # prints one JSON line: exit, wall_s, cpu_s, max_rss_mib

A `topicvault` command leaves its driver JVM to exit once its stdin closes, and Spark's Python
daemon to exit after the JVM: neither is waited for, so their CPU never reaches the caller's
RUSAGE_CHILDREN. This process makes itself their subreaper (prctl PR_SET_CHILD_SUBREAPER,
Linux >= 3.4), so every descendant orphaned is re-parented to it, and waits for all of them:
RUSAGE_CHILDREN then holds the CPU of the whole tree. Its output goes to this process's stdout
and stderr; the JSON line is the last one on stdout.

On a loaded machine a niced command spends much of its wall time runnable but waiting for a
core. `queued_s` is that wait of the command's main thread (the second field of
/proc/PID/schedstat, sampled every 20 ms while it runs, so the last 20 ms may be missed), and
`unqueued_s` = wall − queued: about the wall time it would take with a core free for its main
thread (its other threads, the JVM's and the workers', are not taken off). `max_rss_mib` is the
peak resident memory of the largest single process of the tree (RUSAGE_CHILDREN's ru_maxrss).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(command: list[str]) -> int:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    started = time.monotonic()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    queued_ns = 0
    while process.poll() is None:
        queued_ns = max(queued_ns, _queued_ns(process.pid))
        time.sleep(0.02)
    exit_code = process.returncode
    wall_s = time.monotonic() - started
    while True:  # the orphans: the driver JVM, Spark's Python daemon and workers
        try:
            os.wait()
        except ChildProcessError:
            break
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"exit": exit_code, "wall_s": wall_s, "tree_s": time.monotonic() - started,
                      "cpu_s": used.ru_utime + used.ru_stime, "queued_s": queued_ns / 1e9,
                      "unqueued_s": wall_s - queued_ns / 1e9,
                      "max_rss_mib": used.ru_maxrss / 1024}), flush=True)
    return 0


def _queued_ns(pid: int) -> int:
    """Nanoseconds thread `pid` has waited on a run queue (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/schedstat") as schedstat:
            return int(schedstat.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
