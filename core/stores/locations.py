"""Which object store a location names: `s3://bucket/prefix`, `file:///dir` or a directory path.

Kept apart from core.stores.store (the interface both stores implement) so the interface imports no
implementation; boto3 is imported only when an s3:// location is opened.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import TopicvaultError
from .store import ObjectStore


def open_store(uri: str, options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store for `s3://bucket/prefix`, `file:///dir` or a plain directory path."""
    options = dict(options or {})
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("s3", "s3a"):
        from .s3_store import S3Store

        return S3Store(uri, options)
    if scheme not in ("", "file"):
        raise TopicvaultError(
            f"unsupported location {uri!r}: use s3://bucket/prefix, file:///dir or a directory path"
        )
    if options:
        raise TopicvaultError(
            f"store option(s) {', '.join(sorted(options))} apply to s3:// locations only, "
            f"not to {uri}"
        )
    from .local_store import LocalStore

    return LocalStore(uri)


def open_store_beside(uri: str, options: Mapping[str, str] | None) -> ObjectStore:
    """A store named beside a location (restore --state, --import-state, verify --state), opened
    with that location's store options (-S, a store profile) when it is on S3 too: an endpoint
    other than AWS is then found without AWS_ENDPOINT_URL. A local path takes none."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return open_store(uri, options if scheme in ("s3", "s3a") else None)
