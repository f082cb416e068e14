"""How a command's process meets signals and errors: Ctrl-C as one line, pyspark's SIGINT handler
quietened, a long run stopped by SIGTERM or Ctrl-C after its running step, and an error's frames
freed on the thread that caught it.

The CLI (cli.py) and the long runs (sink.continuous_backup.follow_backup, source.restore.standby.run_standby) use these;
nothing here prints: each caller says what a stop or an interrupt means for its run.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable


class Interrupted(Exception):
    """Ctrl-C ended a command; the message is the one line saying what it leaves behind."""


# Set by the handler quiet_spark_interrupts installs: Ctrl-C arrived during this command.
_interrupt_received = threading.Event()


@contextmanager
def interrupt_says(line: Callable[[], str]) -> Iterator[None]:
    """Turn Ctrl-C (SIGINT) inside the block into Interrupted(`line()`) (the CLI exits with 130).

    Also an error raised after Ctrl-C arrived: the KeyboardInterrupt can land in the middle of a
    py4j call, leaving that connection's answer unread, and the next call on it (a job's clean-up)
    then fails with "Py4JNetworkError: Answer from Java side is empty" instead (seen in CI)."""
    previous = signal.getsignal(signal.SIGINT)
    _interrupt_received.clear()
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(line()) from None
    except Exception:
        if _interrupt_received.is_set():
            raise Interrupted(line()) from None
        raise
    finally:
        if in_main_thread():
            signal.signal(signal.SIGINT, previous)


def in_main_thread() -> bool:
    """Whether signal handlers may be set here: Python sets them in the main thread only, and a
    command run on another thread (an embedding program, the fault tests) gets no Ctrl-C there."""
    return threading.current_thread() is threading.main_thread()


def quiet_spark_interrupts() -> None:
    """Once Spark has started: replace the SIGINT handler pyspark installed with one that only
    raises KeyboardInterrupt.

    pyspark's handler cancels the running jobs through py4j while the interrupted main thread
    still holds its connection: that reentrant call printed about 40 lines of tracebacks
    ("Exception while sending command", "reentrant call"). The jobs end with the driver JVM,
    which stops when this process exits. py4j logs the interrupted call's traceback (through the
    root logger), so logging is off from then on: the process is ending, and an error of a call
    still made is reported as usual, as one line."""

    def interrupt(signum, frame) -> None:
        _interrupt_received.set()
        logging.disable(logging.CRITICAL)
        raise KeyboardInterrupt

    if in_main_thread():
        signal.signal(signal.SIGINT, interrupt)


def stop_on_signals(on_first: Callable[[], None], second_ends_process: bool = False) -> None:
    """SIGTERM and SIGINT call `on_first()` (a long run then finishes its running step and stops);
    with `second_ends_process`, a second one ends the process at once, as the default handler
    would (what the last finished step saved stays)."""
    received: list[int] = []

    def handle(signum, frame) -> None:
        if received and second_ends_process:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if not received:
            on_first()
        received.append(signum)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def start_command() -> None:
    """How a command's process (the CLI's entry point) meets SIGTERM and ends: SIGTERM unwinds like
    Ctrl-C would (SystemExit 128 + 15), so child processes (an embedded broker) are stopped by the
    code that started them, and whatever it starts ends before it does (own_descendants)."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    own_descendants()


def release_frames(error: BaseException | None) -> None:
    """Drop the local variables of the finished frames an error (and the errors it chains) passed through.

    A traceback keeps its frames' locals, Kafka clients among them, in a reference cycle that
    Python's cyclic collector frees later, on whatever thread allocates then. One of librdkafka's
    own runs Python (the admin client resolves its futures there); a client freed on it makes
    librdkafka abort the process ("calling rd_kafka_destroy() from librdkafka owned thread is
    prohibited": seen after a rerun during a quorum-less outage stopped on a describe request to a
    stopped broker, tests/faults/test_failover.py). Cleared here, they are freed at once, on this thread.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__



# Linux prctl option: orphaned descendants are re-parented to this process, not to init.
_PR_SET_CHILD_SUBREAPER = 36
# How long an ending command waits for what it started (the driver JVM stops in about 0.5 s).
DESCENDANTS_LIMIT_S = 30.0
# What makes this process's children end (closing the driver JVM's stdin), called at its exit.
_releases: list[Callable[[], None]] = []
_owns_descendants = threading.Event()


def own_descendants() -> None:
    """Make every process this one starts, directly or not, end before it does. For a command's
    process (the CLI's entry point), not a program that imports topicvault.

    From now on this process adopts its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), and
    at exit it calls what release_at_exit was given, waits up to DESCENDANTS_LIMIT_S for each
    child to end, then SIGKILLs what is left. So a command that exits, interrupted or not, leaves
    no Spark Python worker producing beside a rerun, and a supervisor that sees it end sees all of
    it end. Without this, pyspark's daemon and its workers ended a moment after the driver JVM,
    which ends after this process (seen in CI: a worker outlived a restore ended by SIGINT,
    tests/integration/test_interrupt.py). Elsewhere than Linux, only direct children are waited for."""
    try:
        import ctypes  # noqa: PLC0415 - a few ms, for the CLI alone

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    _owns_descendants.set()
    atexit.register(_end_children)


def release_at_exit(release: Callable[[], None]) -> None:
    """Where own_descendants was called, call `release()` at exit, before waiting for the
    children: what makes them end. Elsewhere nothing (the program decides when its children end)."""
    if _owns_descendants.is_set():
        _releases.append(release)


def _end_children() -> None:
    """Release the children, reap each as it ends; SIGKILL those still running after the limit,
    or at once when SIGINT or SIGTERM comes meanwhile (a second Ctrl-C, a supervisor's stop):
    raised here, in an atexit hook, it would end the wait and leave them running."""
    hurry = threading.Event()
    if in_main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, frame: hurry.set())
    for release in _releases:
        with contextlib.suppress(Exception):  # the process is ending: the wait below still bounds it
            release()
    deadline, killed = time.monotonic() + DESCENDANTS_LIMIT_S, False
    while True:
        try:
            ended, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            return
        if ended:
            continue
        if time.monotonic() > deadline or (hurry.is_set() and not killed):
            if killed:  # one stuck in the kernel: nothing more to do
                return
            left = _children()
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            why = "on a signal" if hurry.is_set() else f"{DESCENDANTS_LIMIT_S:.0f} s after it ended"
            with contextlib.suppress(OSError):
                os.write(2, f"note: {len(left)} processes it started still ran {why}: killed\n".encode())
            deadline, killed = time.monotonic() + 5.0, True
        time.sleep(0.02)


def _children() -> set[int]:
    """The live children of this process (every thread's, from /proc; none elsewhere than Linux)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for thread in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{thread}/children") as children:
                found.update(map(int, children.read().split()))
    return found
