"""A backup's objects leave the page cache once written; a restore reads objects into one reused buffer (issue #20).

On this machine a file written to a page cache that grows into memory the system has not
touched yet costs 2.5 ms of kernel time per MB (0.25 s per 100 MB; 0.03 s when the pages are
dropped after the fsync and so reused): over a third of a 2 KB backup task's CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import mmap
import os
import sys
from dataclasses import replace

import pyarrow as pa
import pytest
from nasty import nasty_records
from topicvault.core.archive.commits import ObjectEntry
from topicvault.core.envelope import batch_to_records, records_to_batch
from topicvault.core.errors import ObjectNotFound
from topicvault.core.stores.local_store import LocalStore
from topicvault.core.stores.store import ReadBuffer
from topicvault.formats.parquet import CODECS, ParquetFormat
from topicvault.source.object_reader import read_object_batches

PAGE = mmap.PAGESIZE


def _cached_pages(path: str) -> int:
    """Pages of `path` held in the page cache (mincore over a mapping of it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    pages = -(-size // PAGE)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            residency = ctypes.create_string_buffer(pages)
            assert libc.mincore(address, size, residency) == 0, os.strerror(ctypes.get_errno())
            return sum(byte & 1 for byte in residency.raw)
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page-cache residency is read with Linux's mincore")
def test_a_large_object_written_to_a_directory_leaves_the_page_cache_and_a_small_one_stays(tmp_path):
    probe = tmp_path / "probe"
    with open(probe, "wb") as handle:  # tmpfs, for one, keeps every page whatever it is told
        handle.write(os.urandom(1 << 20))
        handle.flush()
        os.fsync(handle.fileno())
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if _cached_pages(str(probe)) > (1 << 20) // PAGE // 2:
        pytest.skip(f"the filesystem of {tmp_path} keeps written pages cached whatever it is told")
    store = LocalStore(str(tmp_path / "store"))
    large, small = os.urandom(8 * 1024 * 1024), b"{}" * 100
    store.put("topic=t/partition=0/large.parquet", large, if_none_match=True)
    store.put("_topicvault/commits/0.json", small, if_none_match=True)
    large_path = tmp_path / "store" / "topic=t" / "partition=0" / "large.parquet"
    assert _cached_pages(str(large_path)) < len(large) // PAGE // 10, "a written object's pages stayed cached"
    assert _cached_pages(str(tmp_path / "store" / "_topicvault" / "commits" / "0.json")) == 1
    assert store.get("topic=t/partition=0/large.parquet") == large  # on disk, whole


def test_objects_read_one_after_another_reuse_one_buffer(tmp_path):
    store = LocalStore(str(tmp_path))
    store.put("a", b"first object")
    store.put("b", b"second")
    buffer = ReadBuffer()
    first = store.get_into("a", buffer)
    assert bytes(first) == b"first object" and first.readonly
    second = store.get_into("b", buffer)
    assert bytes(second) == b"second"
    # The same memory: what a view of the first read held is the second object now.
    assert bytes(first[:6]) == b"second"
    with pytest.raises(ObjectNotFound, match="object c not found"):
        store.get_into("c", buffer)


@pytest.mark.parametrize("codec", CODECS)
def test_parquet_batches_keep_their_records_when_the_buffer_they_were_read_from_is_reused(tmp_path, codec):
    store = LocalStore(str(tmp_path))
    records = [replace(r, offset=i) for i, r in enumerate(nasty_records("t", 1, 3_000, big_values=3))]
    data = ParquetFormat(codec).write(pa.Table.from_batches([records_to_batch(records)]))
    store.put("a.parquet", data)
    entry = ObjectEntry("a.parquet", "t", 0, records[0].offset, records[-1].offset, len(records), len(data), 0, 0,
                        hashlib.sha256(data).hexdigest())
    buffer = ReadBuffer()
    batches = list(read_object_batches(store, entry, buffer=buffer))
    reused = buffer.sized(len(data))
    reused[:] = b"\xa5" * len(data)  # what the next object read into it does
    assert [r for b in batches for r in batch_to_records(b)] == records
