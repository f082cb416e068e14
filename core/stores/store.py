"""The ObjectStore interface both stores implement (core.stores.local_store, core.stores.s3_store); core.stores.locations opens one by URI."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import TopicvaultError

__all__ = ["ObjectInfo", "ObjectStore", "ReadBuffer", "check_key", "missing_objects"]


@dataclass(frozen=True)
class ObjectInfo:
    """One object: its key relative to the store root, its size in bytes and its ETag.

    A listing's ETag is None where the store learns it only by reading the whole object
    (the local store hashes files): ask `head` for it. `modified_ms` (epoch ms of the last write,
    when the listing says) tells garbage collection how old an uncommitted object is.
    """

    key: str
    size: int
    etag: str | None
    modified_ms: int | None = None


class ReadBuffer:
    """Memory a reader reuses for the objects it reads one after another (ObjectStore.get_into).

    A new bytes object per object is new memory each time, and the kernel charges for touching
    each page of it first (about 3.8 µs a page here: 0.07 s per 190 MiB read, a sixteenth of a
    restore worker's CPU at 2 KB records). What a view of it holds is valid until the next read
    into the same buffer: only for readers that copy what they keep (a Parquet decode does).
    """

    def __init__(self) -> None:
        self._memory = bytearray()

    def sized(self, size: int) -> memoryview:
        """A writable view of `size` bytes of the buffer, grown if needed."""
        if len(self._memory) < size:
            # A new one, not a resize: a view of the old memory may still be alive.
            self._memory = bytearray(size)
        return memoryview(self._memory)[:size]


class ObjectStore(ABC):
    """Objects under one root (a directory or an S3 bucket/prefix), addressed by relative keys.

    Implementations are picklable and cheap to pickle: they are shipped to Spark workers.
    """

    uri: str
    # Puts worth running at once (e.g. a wide backup storing hundreds of small objects): each
    # costs a round trip to S3, so many overlap well; a directory's puts are local work and
    # fsyncs, and more threads than a few only contend for the CPU.
    concurrent_puts: int = 16
    # The ways a put reaches the store: one request ("put"), or S3's upload in parts
    # ("multipart"), whose condition rides on CompleteMultipartUpload. Some stores honour a
    # condition on one and not the other: core.conditional_writes probes each (put_through).
    upload_kinds: tuple[str, ...] = ("put",)

    @abstractmethod
    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> None:
        """Store `data` under `key`.

        `if_none_match` writes only if no object exists; `if_match` only if the current ETag
        (see `head`) equals it. A failed condition raises PreconditionFailed and leaves the
        object as it was. No ETag is returned: a local directory would have to hash every
        object it stores for one (its ETag is an MD5, as S3's), which cost a backup of large
        records a tenth of its time, and no writer needs it.
        """

    def put_through(self, kind: str, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        """`put` through upload path `kind` (one of `upload_kinds`), whatever the size of `data`."""
        if kind not in self.upload_kinds:
            raise ValueError(f"put_through: {self!r} has no {kind} uploads")
        self.put(key, data, if_none_match=if_none_match)

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The `keys` this store does not hold, sorted (one listing per folder: missing_objects)."""
        return missing_objects(self, keys)

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes. Raises ObjectNotFound."""

    def get_into(self, key: str, buffer: ReadBuffer) -> bytes | memoryview:
        """The object's bytes, read into `buffer` where the store can (a read-only view, valid until
        the next read into it), else as `get` returns them. Raises ObjectNotFound."""
        return self.get(key)

    def get_head(self, key: str, size: int) -> bytes:
        """The object's first `size` bytes (all of it, if shorter). Raises ObjectNotFound."""
        return self.get(key)[:size]

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's size and ETag, or None if absent."""

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix` and sorts after `start_after`.

        Keys come in lexicographic (code point) order; results are produced lazily.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object (absent is fine)."""

    def identity(self) -> str:
        """Which store (server and bucket, or directory) holds the location, not where in it:
        what a probe of its behaviour is true of (core.archive.conditional_writes)."""
        return self.uri

    def within(self, seconds: float) -> "ObjectStore":
        """This store with every request of one call, its retries included, given up within
        `seconds` (client side): a commit written under a turn must not land after the turn may
        have passed to another committer (core.archive.conditional_writes). A store whose calls
        make no network round trips (a directory) returns itself."""
        return self


def check_key(key: str) -> str:
    """Return `key` if it is a usable relative key, else raise TopicvaultError."""
    if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        raise TopicvaultError(f"bad object key {key!r}: keys are relative, '/'-separated paths")
    if "\0" in key:
        raise TopicvaultError(f"bad object key {key!r}: NUL characters are not allowed")
    return key


# Keys a listing may pass in one folder beyond the ones it looks for before the rest are asked
# for one by one (HEAD): a template that puts every partition in one folder must not make a
# check walk the folder's whole history.
_LISTED_PAST_WANTED = 1000
# Folders checked at once: each listing is a round trip (S3), so 256 partitions in a row would
# take 256 of them (about 5 s at 20 ms); in-process servers gain nothing (moto: 0.75 vs 0.87 s).
_CHECKING_THREADS = 16


def missing_objects(store: ObjectStore, keys: Iterable[str]) -> list[str]:
    """The `keys` the store does not hold, sorted.

    One listing per folder, from just before its first wanted key to its last (a run's objects
    of one partition sit side by side: 256 partitions cost 256 requests, however many objects
    each has); past _LISTED_PAST_WANTED unwanted keys a folder's remaining keys are HEADed.
    Folders are asked in parallel (each request is a round trip)."""
    by_folder: dict[str, list[str]] = {}
    for key in sorted(set(keys)):
        by_folder.setdefault(key[:key.rfind("/") + 1], []).append(key)
    if len(by_folder) <= 1:
        return [m for wanted in by_folder.values() for m in _missing_in_folder(store, wanted)]
    with ThreadPoolExecutor(min(_CHECKING_THREADS, len(by_folder)), thread_name_prefix="check") as pool:
        # Sorted again: a folder's keys and a subfolder's interleave ("a/a", "a/b/x", "a/c").
        return sorted(m for found in pool.map(lambda wanted: _missing_in_folder(store, wanted), by_folder.values())
                      for m in found)


def _missing_in_folder(store: ObjectStore, wanted: list[str]) -> list[str]:
    """`wanted` (sorted keys of one folder) that the store lacks."""
    # Start just before the first key: its own prefix minus one character sorts before it.
    listing = store.list(wanted[0][:wanted[0].rfind("/") + 1], start_after=wanted[0][:-1])
    missing, index, passed = [], 0, 0
    for info in listing:
        while index < len(wanted) and wanted[index] < info.key:
            missing.append(wanted[index])
            index += 1
        if index == len(wanted):
            break
        if info.key == wanted[index]:
            index += 1
        else:
            passed += 1
            if passed > _LISTED_PAST_WANTED:
                break
    else:  # the listing ended: whatever is left is not there
        return missing + wanted[index:]
    return missing + [key for key in wanted[index:] if store.head(key) is None]
