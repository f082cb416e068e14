"""Crash injection for the crash-safety tests.

`TOPICVAULT_FAIL_FIRST_ATTEMPT_AT=<point>:<count>` instead fails only a Spark task's first attempt
(noted in the file TOPICVAULT_FAULT_LOG names, if set).
`TOPICVAULT_SEGV_AT=<point>:<count>` instead makes the Python worker running the task die of SIGSEGV,
as a native crash in a C library does (the CLI and its JVM go on); at most TOPICVAULT_SEGV_TIMES
times (default 1) over all processes, counted by files next to TOPICVAULT_FAULT_LOG (required).
`TOPICVAULT_CRASH_AT=<point>:<count>` makes the process group die by SIGKILL when `point` has
been passed `count` times: the CLI, its JVM and every Python worker go at once, as in a
machine failure. Points: backup.consume (records read), backup.object (objects stored),
backup.commit (before the commit record), restore.produce (records handed to the producer),
kafka_writer.partition:1 (a `topicvault-kafka` writer task, after its first partition was delivered),
compact.commit (before compact's commit record; backup.object counts the objects compact writes too),
expire.commit (before expire's commit record), retire.delete (deletes of retired and orphan objects),
registry.import (a preserve restore's target registry in IMPORT mode, its versions registered),
registry.registered (a registry restore's versions registered, before its soft deletes).
"""

from __future__ import annotations

import os
import signal

ENV = "TOPICVAULT_CRASH_AT"
FAIL_ENV = "TOPICVAULT_FAIL_FIRST_ATTEMPT_AT"
SEGV_ENV = "TOPICVAULT_SEGV_AT"


def crash_after(point: str) -> int | None:
    """The count at which `point` should crash (or fail, see `failing_now`), or None (the normal case)."""
    for variable in (ENV, FAIL_ENV, SEGV_ENV):
        spec = os.environ.get(variable)
        if spec:
            name, _, count = spec.rpartition(":")
            if name == point:
                return int(count)
    return None


def crash_now() -> None:
    """Crash as configured: fail the first Spark task attempt (TOPICVAULT_FAIL_FIRST_ATTEMPT_AT), kill
the worker by SIGSEGV (TOPICVAULT_SEGV_AT) or SIGKILL the session.

    A failed first attempt lets Spark retry the task (with a master like local[2,4]): the test of
    task retries inside one job.
    """
    if os.environ.get(FAIL_ENV):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0:
            if os.environ.get("TOPICVAULT_FAULT_LOG"):
                with open(os.environ["TOPICVAULT_FAULT_LOG"], "a") as log:
                    log.write(f"failed attempt 0 of partition {context.partitionId()}\n")
            raise RuntimeError("injected failure of a first task attempt")
        return
    if os.environ.get(SEGV_ENV):
        _segfault_worker()
        return
    _kill_session()


def _segfault_worker() -> None:
    """Die of SIGSEGV if this runs in a Spark task and fewer than TOPICVAULT_SEGV_TIMES workers did.

    Each crash first claims a file of its own (created exclusively), so tasks running at once
    in several workers crash no more times than asked.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return
    log = os.environ["TOPICVAULT_FAULT_LOG"]
    for number in range(int(os.environ.get("TOPICVAULT_SEGV_TIMES", "1"))):
        try:
            os.close(os.open(f"{log}.segv{number}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        with open(log, "a") as out:
            out.write(f"SIGSEGV in attempt {context.attemptNumber()} of partition {context.partitionId()} "
                      f"(pid {os.getpid()})\n")
        os.kill(os.getpid(), signal.SIGSEGV)


def _kill_session() -> None:
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
