"""The ObjectStore interface both stores implement (core.local_store, core.s3_store); core.locations opens one by URI."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import TopicvaultError

__all__ = ["ObjectInfo", "ObjectStore", "check_key"]


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


class ObjectStore(ABC):
    """Objects under one root (a directory or an S3 bucket/prefix), addressed by relative keys.

    Implementations are picklable and cheap to pickle: they are shipped to Spark workers.
    """

    uri: str

    @abstractmethod
    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> str:
        """Store `data` under `key` and return its new ETag.

        `if_none_match` writes only if no object exists; `if_match` only if the current ETag
        equals it. A failed condition raises PreconditionFailed and leaves the object as it was.
        """

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes. Raises ObjectNotFound."""

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


def check_key(key: str) -> str:
    """Return `key` if it is a usable relative key, else raise TopicvaultError."""
    if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        raise TopicvaultError(f"bad object key {key!r}: keys are relative, '/'-separated paths")
    if "\0" in key:
        raise TopicvaultError(f"bad object key {key!r}: NUL characters are not allowed")
    return key
