"""A backup's objects leave the page cache once written (issue #20).

On this machine a file written to a page cache that grows into memory the system has not
touched yet costs 2.5 ms of kernel time per MB (0.25 s per 100 MB; 0.03 s when the pages are
dropped after the fsync and so reused): over a third of a 2 KB backup task's CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys

import pytest
from topicvault.core.local_store import LocalStore

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
