"""Stores for tests: an in-memory store, and wrappers around a real one that count what callers
ask or inject a fault, instead of a subclass of LocalStore per test.

    store = CountingStore(LocalStore(uri))             # store.calls["get"] == [key, ...]
    store = FaultyStore(LocalStore(uri), before_put=refuse_checkpoints)
    store = FaultyStore(LocalStore(uri), drop_conditions=True)   # a store ignoring If-None-Match

A hook gets the call's arguments and may raise (the fault) or act (a racing writer) before the
call reaches the real store; `after_put` runs once the object is stored.
"""

from __future__ import annotations

import hashlib
import threading
from collections import defaultdict
from typing import Callable, Iterable, Iterator

from topicvault.core.errors import ObjectNotFound, PreconditionFailed
from topicvault.core.stores.store import ObjectInfo, ObjectStore, ReadBuffer, check_key


class MemoryStore(ObjectStore):
    """Objects in a dict, with the conditional writes S3 honours (for tests of pure logic)."""

    def __init__(self, uri: str = "memory://test") -> None:
        self.uri = uri
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> None:
        check_key(key)
        with self._lock:
            held = self.objects.get(key)
            if if_none_match and held is not None:
                raise PreconditionFailed(f"conditional write of {key} failed (PreconditionFailed)")
            if if_match is not None and (held is None or _etag(held) != if_match):
                raise PreconditionFailed(f"conditional write of {key} failed (PreconditionFailed)")
            self.objects[key] = bytes(data)

    def get(self, key: str) -> bytes:
        try:
            return self.objects[key]
        except KeyError:
            raise ObjectNotFound(f"no object {key} in {self.uri}") from None

    def head(self, key: str) -> ObjectInfo | None:
        data = self.objects.get(key)
        return None if data is None else ObjectInfo(key, len(data), _etag(data))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        for key in sorted(self.objects):
            if key.startswith(prefix) and (start_after is None or key > start_after):
                yield ObjectInfo(key, len(self.objects[key]), _etag(self.objects[key]))

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def _etag(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


class WrappedStore(ObjectStore):
    """Every call goes to `inner` (a real store); subclasses change what they are about."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.concurrent_puts = inner.concurrent_puts
        self.upload_kinds = inner.upload_kinds

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> None:
        self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)

    def put_through(self, kind: str, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        if kind not in self.upload_kinds:
            raise ValueError(f"put_through: {self!r} has no {kind} uploads")
        self.put(key, data, if_none_match=if_none_match)

    def missing(self, keys: Iterable[str]) -> list[str]:
        return self.inner.missing(keys)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_into(self, key: str, buffer: ReadBuffer) -> bytes | memoryview:
        return self.inner.get_into(key, buffer)

    def get_head(self, key: str, size: int) -> bytes:
        return self.inner.get_head(key, size)

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def identity(self) -> str:
        return self.inner.identity()


class CountingStore(WrappedStore):
    """Remembers every call by kind: `calls["get"]` the keys read, `calls["list"]` the (prefix,
    start_after) listings, `listed` the keys listings handed out (as far as callers read them),
    `calls["head"]`, `calls["put"]`, `calls["delete"]` the keys."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.calls: dict[str, list] = defaultdict(list)
        self.listed: list[str] = []

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> None:
        self.calls["put"].append(key)
        super().put(key, data, if_none_match=if_none_match, if_match=if_match)

    def get(self, key: str) -> bytes:
        self.calls["get"].append(key)
        return super().get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self.calls["head"].append(key)
        return super().head(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        self.calls["list"].append((prefix, start_after))
        for info in super().list(prefix, start_after):
            self.listed.append(info.key)
            yield info

    def delete(self, key: str) -> None:
        self.calls["delete"].append(key)
        super().delete(key)


Hook = Callable[..., None]


class FaultyStore(WrappedStore):
    """A real store with a fault: hooks run before (or after) a call reaches it, and may raise.

    `before_put(key, data)`, `after_put(key, data)`, `before_get(key)`, `before_delete(key)`;
    `drop_conditions`: True ignores If-None-Match and If-Match on every put, "multipart" only on
    multipart uploads (as some S3-compatible stores do); `puts` lists the keys put.
    """

    def __init__(self, inner: ObjectStore, *, before_put: Hook | None = None, after_put: Hook | None = None,
                 before_get: Hook | None = None, before_delete: Hook | None = None,
                 drop_conditions: bool | str = False) -> None:
        super().__init__(inner)
        self.before_put, self.after_put = before_put, after_put
        self.before_get, self.before_delete = before_get, before_delete
        self.drop_conditions = drop_conditions
        self.puts: list[str] = []
        if drop_conditions == "multipart":
            self.upload_kinds = ("put", "multipart")

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> None:
        self.puts.append(key)
        if self.before_put is not None:
            self.before_put(key, data)
        if self.drop_conditions is True:
            if_none_match, if_match = False, None
        super().put(key, data, if_none_match=if_none_match, if_match=if_match)
        if self.after_put is not None:
            self.after_put(key, data)

    def put_through(self, kind: str, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        if kind not in self.upload_kinds:
            raise ValueError(f"put_through: {self!r} has no {kind} uploads")
        self.put(key, data, if_none_match=if_none_match and not (kind == "multipart" and self.drop_conditions))

    def get(self, key: str) -> bytes:
        if self.before_get is not None:
            self.before_get(key)
        return super().get(key)

    def delete(self, key: str) -> None:
        if self.before_delete is not None:
            self.before_delete(key)
        super().delete(key)


class PutsRefused:
    """A fault for FaultyStore: every put after the first is refused (a bucket policy changed, the
    credentials expired) until `healed` is set."""

    def __init__(self) -> None:
        self.puts, self.healed = 0, False

    def __call__(self, key: str, data: bytes) -> None:
        self.puts += 1
        if self.puts > 1 and not self.healed:
            raise PermissionError(f"AccessDenied on {key}")
