"""A local directory as an object store: atomic writes by rename, conditional writes by link/lock."""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlparse

from .errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from .store import ObjectInfo, ObjectStore

TEMP_PREFIX = ".tv-tmp-"
LOCK_NAME = ".tv-lock"


def _etag(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


class LocalStore(ObjectStore):
    """Objects are files under a root directory; keys use '/'."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        path = unquote(urlparse(uri).path) if uri.startswith("file://") else uri
        self.root = Path(path).expanduser().absolute()

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise TopicvaultError(f"bad object key {key!r}")
        return self.root / key

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TopicvaultError(f"cannot create directory {path.parent}: {exc.strerror}") from None
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if if_none_match:
                try:
                    os.link(temp, path)  # atomic: fails if the key exists
                except FileExistsError:
                    raise PreconditionFailed(f"object {key} already exists in {self.uri}") from None
            elif if_match is not None:
                with self._lock():
                    current = self.head(key)
                    if current is None or current.etag != if_match:
                        raise PreconditionFailed(f"object {key} in {self.uri} changed since it was read")
                    os.replace(temp, path)
            else:
                os.replace(temp, path)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        return _etag(data)

    def _lock(self):
        self.root.mkdir(parents=True, exist_ok=True)
        return _FileLock(self.root / LOCK_NAME)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(f"object {key} not found in {self.uri}") from None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return ObjectInfo(key, len(data), _etag(data))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        if not self.root.exists():
            return
        keys = []
        for directory, _dirs, files in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            base = "" if relative == "." else relative.replace(os.sep, "/") + "/"
            for name in files:
                if name.startswith(TEMP_PREFIX) or name == LOCK_NAME:
                    continue
                key = base + name
                if key.startswith(prefix) and (start_after is None or key > start_after):
                    keys.append(key)
        for key in sorted(keys):
            path = self.root / key
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            # The ETag is computed lazily by head(); listing reports size only.
            yield ObjectInfo(key, size, "")

    def delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass


class _FileLock:
    """An exclusive flock held for the duration of a `with` block."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> "_FileLock":
        self.handle = open(self.path, "a+")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc_info) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
