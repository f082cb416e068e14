"""How a command's process meets signals and errors: Ctrl-C as one line, pyspark's SIGINT handler
quietened, a long run stopped by SIGTERM or Ctrl-C after its running step, and an error's frames
freed on the thread that caught it.

The CLI (cli.py) and the long runs (sink.continuous_backup.follow_backup, source.restore.standby.run_standby) use these;
nothing here prints: each caller says what a stop or an interrupt means for its run.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
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


def exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C would (SystemExit 128 + 15), so child processes (an embedded
    broker) are stopped by the code that started them."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


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
