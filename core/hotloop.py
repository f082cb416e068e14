"""Running the per-record loops of backup and restore tasks with Python's cyclic collector slowed down."""

from __future__ import annotations

import gc
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
