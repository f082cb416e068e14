"""Run a command and count the CPU of every process it starts, orphans included.

    python benchmarks/reaped.py COMMAND...   # prints one JSON line: exit, wall_s, cpu_s

A `topicvault` command leaves its driver JVM to exit once its stdin closes, and Spark's Python
daemon to exit after the JVM: neither is waited for, so their CPU never reaches the caller's
RUSAGE_CHILDREN. This process makes itself their subreaper (prctl PR_SET_CHILD_SUBREAPER,
Linux >= 3.4), so every descendant orphaned is re-parented to it, and waits for all of them:
RUSAGE_CHILDREN then holds the CPU of the whole tree. Its output goes to this process's stdout
and stderr; the JSON line is the last one on stdout.
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
    exit_code = subprocess.run(command, stdin=subprocess.DEVNULL).returncode
    wall_s = time.monotonic() - started
    while True:  # the orphans: the driver JVM, Spark's Python daemon and workers
        try:
            os.wait()
        except ChildProcessError:
            break
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"exit": exit_code, "wall_s": wall_s, "tree_s": time.monotonic() - started,
                      "cpu_s": used.ru_utime + used.ru_stime}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
