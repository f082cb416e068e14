"""Backup and restore tasks reuse memory instead of faulting in fresh pages (issue #20).

On this machine a page touched for the first time costs about 3.8 us (a 256 MiB buffer: 0.25 s),
and a file written to a page cache that grows into untouched memory 2.5 ms per MB of kernel
time: over a third of a 2 KB backup task's CPU. These tests pin the two behaviours that avoid it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import subprocess
import sys
import textwrap

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


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.environ.get("GLIBC_TUNABLES"),
                    reason="glibc's malloc thresholds (and no tunables given from outside)")
def test_a_hot_loop_keeps_freed_buffers_for_the_next_instead_of_faulting_in_new_pages():
    # A fresh process: malloc's settings are process-wide. 48 MiB is above glibc's largest
    # dynamic mmap threshold (32 MiB), so by default every such buffer is a new mapping
    # (faulted in page by page) and is unmapped when freed.
    script = textwrap.dedent("""
        import resource
        from topicvault.core.hotloop import hot_loop

        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

        with hot_loop():
            first = bytearray(48 << 20)
            del first
            before = faults()
            second = bytearray(48 << 20)
            print(faults() - before)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    faulted = int(done.stdout)
    assert faulted < (48 << 20) // PAGE // 10, f"the second 48 MiB buffer faulted in {faulted} pages"
