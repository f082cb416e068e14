"""What a directory store's dropping of written objects from the page cache saves, side by side.

    python benchmarks/page_cache.py [--objects 8] [--mib 64] [--repeats 3]

Writes `--objects` new files of `--mib` MiB through `LocalStore.put` (fsynced, then dropped from
the page cache: what a backup does) and the same through a store whose drop is switched off
(pages stay cached), in alternation, each run into a fresh directory; prints each side's kernel
and wall time (medians) and their ratio. Kept files grow the page cache into memory the system
may not have touched yet, which is what costs on a fresh virtual machine.

`evict(directory)` drops a directory's files from the page cache: benchmarks/against_oso.py
calls it before each timed run, so that every side starts with cold caches.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path
from statistics import median
from unittest import mock

from topicvault.core.stores import local_store


def evict(directory: str | Path) -> int:
    """Drop every file under `directory` from the page cache (written back first: dirty pages
    cannot be dropped), so that the next reader of it starts cold; returns the bytes evicted.
    What a benchmark does before each timed run of a side that reads those files (the broker's
    log of a topic, a backup's archive), so that no side reads what an earlier side cached."""
    evicted = 0
    for path in Path(directory).rglob("*"):
        if not path.is_file():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile (a broker's temporary file)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            evicted += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return evicted


def _write(directory: str, count: int, data: bytes, drop: bool) -> tuple[float, float]:
    """(kernel seconds, wall seconds) of putting `count` objects of `data` into a new store."""
    store = local_store.LocalStore(directory)
    before, started = resource.getrusage(resource.RUSAGE_SELF).ru_stime, time.monotonic()
    with mock.patch.object(local_store, "DROP_CACHED_BYTES", local_store.DROP_CACHED_BYTES if drop else 1 << 62):
        for index in range(count):
            store.put(f"topic=t/partition=0/{index:019d}.parquet", data, if_none_match=True)
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime - before, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=8)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = os.urandom(args.mib << 20)
    figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as scratch:
        for attempt in range(args.repeats):
            for drop in ((True, False) if attempt % 2 == 0 else (False, True)):
                figures[drop].append(_write(f"{scratch}/{attempt}-{drop}", args.objects, data, drop))
    mb = args.objects * args.mib * 1.048576
    for drop, label in ((False, "kept cached"), (True, "dropped")):
        kernel, wall = median(f[0] for f in figures[drop]), median(f[1] for f in figures[drop])
        print(f"{label:12} {mb:6.0f} MB: kernel {kernel:.2f} s ({kernel / mb * 1000:.2f} ms/MB), wall {wall:.2f} s")
    kept, dropped = (median(f[0] for f in figures[d]) for d in (False, True))
    print(f"kernel time kept cached / dropped = {kept / max(dropped, 1e-9):.1f}x")


if __name__ == "__main__":
    main()
