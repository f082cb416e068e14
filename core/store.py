"""The ObjectStore interface and `open_store`, which picks the local or the S3 store by URI."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator, Mapping


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object."""

    key: str
    size: int
    etag: str


class ObjectStore(ABC):
    """Objects under one root (a directory or an S3 bucket/prefix), addressed by relative keys."""

    uri: str

    @abstractmethod
    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        """Store `data` under `key`; return its ETag. Raises PreconditionFailed if a condition fails."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes. Raises ObjectNotFound."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """The object's size and ETag, or None if absent."""

    @abstractmethod
    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose key starts with `prefix`, in lexicographic key order, lazily."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object (absent is fine)."""


def open_store(uri: str, options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store for `s3://bucket/prefix`, `file:///dir` or a plain directory path."""
    if uri.startswith("s3://") or uri.startswith("s3a://"):
        from .s3_store import S3Store

        return S3Store(uri, dict(options or {}))
    from .local_store import LocalStore

    return LocalStore(uri)
