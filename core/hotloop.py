"""How the per-record loops of backup and restore tasks run: Python's cyclic collector slowed
down, and freed memory kept for reuse."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from contextlib import contextmanager
from typing import Iterator

# Tracked objects allocated between two collections of the youngest generation (Python's
# default is 700), and how often the older generations follow.
HOT_LOOP_THRESHOLDS = (100_000, 20, 100)


@contextmanager
def rare_cyclic_gc() -> Iterator[None]:
    """Let Python's cyclic garbage collector run rarely while a task makes millions of
    short-lived objects that form no cycles (messages, keys, values, header lists).

    At the default thresholds it walked the young objects every 700 allocations, holding the
    GIL: a restore task of 500k small records took 1.81 s of CPU, 1.61 s with it rare (mean of
    four runs each; its wall time varies more than that from run to run).
    It still runs, so the few cycles other code makes (S3 client responses) are still freed;
    the thresholds are restored afterwards.
    """
    previous = gc.get_threshold()
    gc.set_threshold(*HOT_LOOP_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


# glibc's mallopt parameters (malloc.h) and the values a hot loop runs with: buffers up to
# 64 MiB come from the heap, and up to 256 MiB freed at its top stay for the next ones.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
HOT_LOOP_MALLOC = ((_M_MMAP_THRESHOLD, 64 << 20), (_M_TRIM_THRESHOLD, 256 << 20), (_M_TOP_PAD, 64 << 20))
_malloc_tuned = False


def keep_freed_memory() -> None:
    """Make glibc's malloc keep freed buffers in the process for the next ones (once per process;
    nothing where malloc is not glibc's).

    By default glibc maps every buffer above a threshold (128 KiB rising to 32 MiB) afresh and
    returns the heap's freed top to the kernel: a task that turns fetches of several MiB into
    objects of tens of MiB faults every page of each buffer in again. On this machine a
    first-touched page costs about 3.8 us; a backup task of 125k records of 2 KB faulted in
    65k pages and spent 1.3 CPU-s, 1.1-1.2 CPU-s with these settings. A worker then keeps up
    to 256 MiB it freed (its peak stays what it was).
    """
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    if not sys.platform.startswith("linux") or os.environ.get("GLIBC_TUNABLES"):
        return  # not glibc, or its settings were chosen from outside
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    for parameter, value in HOT_LOOP_MALLOC:
        mallopt(parameter, value)


@contextmanager
def hot_loop() -> Iterator[None]:
    """The settings a backup or restore task's per-record loop runs with: the cyclic collector
    rare (see rare_cyclic_gc) and freed memory kept for reuse (see keep_freed_memory)."""
    keep_freed_memory()
    with rare_cyclic_gc():
        yield
