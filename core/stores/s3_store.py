"""S3 (and S3-compatible) object store over boto3, with conditional writes and adaptive retries."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar
from urllib.parse import urlparse

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from ..errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from .store import ObjectInfo, ObjectStore, check_key

DEFAULT_MULTIPART_THRESHOLD = 64 * 1024 * 1024
MIN_PART_SIZE = 5 * 1024 * 1024  # S3's minimum for every part but the last
MAX_PARTS = 10_000
OPTIONS = {
    "endpoint_url": "S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)",
    "region": "AWS region (default: the standard chain, e.g. AWS_DEFAULT_REGION)",
    "path_style": "true for path-style addressing (http://host/bucket/key)",
    "max_attempts": "attempts per request, with adaptive retry (default 10)",
    "connect_timeout": "seconds (default 10)",
    "read_timeout": "seconds (default 60)",
    "multipart_threshold": "bytes above which uploads are multipart (default 64 MiB)",
    "sse": "server-side encryption: AES256 or aws:kms",
    "sse_kms_key_id": "KMS key for sse=aws:kms",
    "access_key_id": "access key (default: the standard AWS credential chain)",
    "secret_access_key": "secret key belonging to access_key_id",
    "session_token": "session token of temporary credentials",
}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_CONDITION_FAILED = {"PreconditionFailed", "ConditionalRequestConflict", "412"}
_BAD_CREDENTIALS = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
    "TokenRefreshRequired", "InvalidClientTokenId", "UnrecognizedClientException",
}
_DENIED = {"AccessDenied", "AllAccessDisabled", "403", "Forbidden"}
_WRONG_REGION = {
    "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException",
}


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


class S3Store(ObjectStore):
    """Objects under s3://bucket/prefix.

    Picklable: the boto3 client is created lazily in each process and never pickled.
    Multipart uploads honour if_none_match/if_match through CompleteMultipartUpload's
    IfNoneMatch/IfMatch, so the condition is checked atomically when the object appears.
    """

    def __init__(self, uri: str, options: Mapping[str, str] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - set(OPTIONS)
        if unknown:
            raise TopicvaultError(
                f"unknown store option(s) {', '.join(sorted(unknown))}: "
                f"valid are {', '.join(OPTIONS)}"
            )
        parsed = urlparse(uri)
        if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
            raise TopicvaultError(f"bad S3 location {uri!r}: write it as s3://bucket/prefix")
        self.uri = uri
        self.bucket = parsed.netloc
        path = parsed.path.strip("/")
        self.prefix = path + "/" if path else ""
        self.options = options
        self.multipart_threshold = _positive_option(
            options, "multipart_threshold", DEFAULT_MULTIPART_THRESHOLD, int, "a whole number"
        )
        self.max_attempts = _positive_option(options, "max_attempts", 10, int, "a whole number")
        self.connect_timeout = _positive_option(options, "connect_timeout", 10.0, float, "seconds")
        self.read_timeout = _positive_option(options, "read_timeout", 60.0, float, "seconds")
        self.path_style = _bool_option(options, "path_style")
        self.sse = options.get("sse") or None
        self.sse_kms_key_id = options.get("sse_kms_key_id") or None
        if self.sse not in (None, "AES256", "aws:kms"):
            raise TopicvaultError(f"bad store option sse={self.sse}: use AES256 or aws:kms")
        if self.sse_kms_key_id and self.sse != "aws:kms":
            raise TopicvaultError("store option sse_kms_key_id needs sse=aws:kms")
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._retry_mode = "adaptive"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        del state["_client_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r})"

    def identity(self) -> str:
        """The endpoint and bucket (every AWS endpoint counts as one: bucket names are global there)."""
        endpoint = self.client.meta.endpoint_url.rstrip("/")
        host = urlparse(endpoint).hostname or ""
        if host == "amazonaws.com" or host.endswith(".amazonaws.com"):
            endpoint = "AWS"
        return f"{endpoint} bucket {self.bucket}"

    def within(self, seconds: float) -> "S3Store":
        """A copy whose calls make one attempt each, with connect and read timeouts of half of
        `seconds` at most: no retry is sent, and no request waited on, past `seconds` from now.
        (The default client retries up to max_attempts times with read_timeout each: ten
        minutes, far past a commit turn's margin; issue #50.9.)"""
        if seconds <= 0:
            raise TopicvaultError(f"no time left to write to {self.uri} within its bound: nothing was written; "
                                  "run again")
        bounded = copy.copy(self)
        bounded._client, bounded._client_lock = None, threading.Lock()
        bounded.max_attempts = 1
        bounded.connect_timeout = min(self.connect_timeout, seconds / 2)
        bounded.read_timeout = min(self.read_timeout, seconds / 2)
        bounded._retry_mode = "standard"  # adaptive's client-side rate limiter may sleep before a send
        return bounded

    @property
    def client(self) -> Any:
        """The boto3 S3 client of this process, created on first use."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": self.max_attempts, "mode": self._retry_mode},
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            s3={"addressing_style": "path" if self.path_style else "auto"},
        )
        # A fresh session per store: boto3's default session is not thread-safe.
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.options.get("endpoint_url") or None,
            region_name=self.options.get("region") or None,
            aws_access_key_id=self.options.get("access_key_id") or None,
            aws_secret_access_key=self.options.get("secret_access_key") or None,
            aws_session_token=self.options.get("session_token") or None,
            config=config,
        )

    def _full(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _sse(self) -> dict[str, str]:
        extra = {}
        if self.sse:
            extra["ServerSideEncryption"] = self.sse
        if self.sse_kms_key_id:
            extra["SSEKMSKeyId"] = self.sse_kms_key_id
        return extra

    upload_kinds = ("put", "multipart")

    def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None
    ) -> None:
        self._put(key, data, if_none_match, if_match, multipart=len(data) > self.multipart_threshold)

    def put_through(self, kind: str, key: str, data: bytes, *, if_none_match: bool = False) -> None:
        """`put` as one PutObject ("put") or as a multipart upload ("multipart", one part when small)."""
        if kind not in self.upload_kinds:
            raise ValueError(f"put_through: S3 has no {kind} uploads")
        self._put(key, data, if_none_match, None, multipart=kind == "multipart")

    def _put(self, key: str, data: bytes, if_none_match: bool, if_match: str | None, multipart: bool) -> None:
        if if_none_match and if_match is not None:
            raise ValueError("put: give if_none_match or if_match, not both")
        full = self._full(key)
        conditions = {}
        if if_none_match:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = f'"{if_match.strip(chr(34))}"'
        try:
            if multipart:
                self._put_multipart(full, data, conditions)
            else:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=data, **conditions, **self._sse())
        except (ClientError, BotoCoreError) as exc:
            error = self._error(exc, key)
            if isinstance(error, ObjectNotFound) and if_match is not None:
                # If-Match on an absent object: S3 answers NoSuchKey.
                raise PreconditionFailed(f"object s3://{self.bucket}/{full} is absent") from None
            raise error from None

    def _put_multipart(self, full: str, data: bytes, conditions: dict[str, str]) -> None:
        part_size = max(MIN_PART_SIZE, self.multipart_threshold, -(-len(data) // MAX_PARTS))
        upload_id = self.client.create_multipart_upload(
            Bucket=self.bucket, Key=full, **self._sse()
        )["UploadId"]
        try:
            view = memoryview(data)
            parts = []
            for number, start in enumerate(range(0, len(data), part_size), start=1):
                part = self.client.upload_part(
                    Bucket=self.bucket, Key=full, UploadId=upload_id, PartNumber=number,
                    Body=bytes(view[start : start + part_size]),
                )
                parts.append({"PartNumber": number, "ETag": part["ETag"]})
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=full, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **conditions,
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id)
            except (ClientError, BotoCoreError):
                pass  # the original error matters; a lifecycle rule reaps what is left
            raise

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, key) from None

    def get_head(self, key: str, size: int) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._full(key),
                                          Range=f"bytes=0-{size - 1}")["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":  # an empty object
                return b""
            raise self._error(exc, key) from None
        except BotoCoreError as exc:
            raise self._error(exc, key) from None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as exc:
            # HEAD has no error body: a missing bucket also looks like a missing key here.
            error = self._error(exc, key)
            if isinstance(error, ObjectNotFound):
                return None
            raise error from None
        return ObjectInfo(key, response["ContentLength"], response["ETag"].strip('"'))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        arguments = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if start_after is not None:
            arguments["StartAfter"] = self.prefix + start_after
        return self._list(arguments, prefix)

    def _list(self, arguments: dict[str, str], prefix: str) -> Iterator[ObjectInfo]:
        cut = len(self.prefix)
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**arguments):
                for item in page.get("Contents", []):
                    modified = item.get("LastModified")
                    yield ObjectInfo(item["Key"][cut:], item["Size"], item["ETag"].strip('"'),
                                     int(modified.timestamp() * 1000) if modified else None)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, prefix, listing=True) from None

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))
        except (ClientError, BotoCoreError) as exc:
            error = self._error(exc, key)
            if not isinstance(error, ObjectNotFound):
                raise error from None

    def _error(self, exc: Exception, key: str, listing: bool = False) -> TopicvaultError:
        """One line naming the object, the S3 error code and what to do."""
        where = f"s3://{self.bucket}/{self.prefix}{key}" + ("*" if listing else "")
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _NOT_FOUND:
                return ObjectNotFound(f"object {where} not found ({code})")
            if code in _CONDITION_FAILED:
                return PreconditionFailed(f"conditional write of {where} failed ({code})")
            if code == "NoSuchBucket":
                return TopicvaultError(
                    f"bucket {self.bucket} does not exist (NoSuchBucket): create it or fix the URI"
                )
            if code in _BAD_CREDENTIALS:
                return TopicvaultError(
                    f"S3 rejected the credentials used for {where} ({code}): check credentials "
                    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and the clock"
                )
            if code in _DENIED:
                return TopicvaultError(
                    f"access to {where} denied ({code}): check the credentials' permissions "
                    f"and the policy of bucket {self.bucket}"
                )
            if code in _WRONG_REGION:
                return TopicvaultError(
                    f"bucket {self.bucket} is in another region ({code}): set store option region"
                )
            message = _one_line(error.get("Message", ""))
            detail = f"{code} (HTTP {status}) {message}".rstrip()
            return TopicvaultError(f"S3 error on {where}: {detail}")
        endpoint = self._endpoint()
        if isinstance(exc, NoCredentialsError):
            return TopicvaultError(
                f"no AWS credentials found for {where}: check credentials "
                "(set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)"
            )
        if isinstance(exc, EndpointConnectionError):
            return TopicvaultError(
                f"cannot reach S3 endpoint {endpoint} for {where} ({type(exc).__name__}): "
                "check endpoint_url/AWS_ENDPOINT_URL and the network"
            )
        if isinstance(exc, ReadTimeoutError):
            return TopicvaultError(
                f"S3 endpoint {endpoint} timed out on {where}: raise store option read_timeout"
            )
        return TopicvaultError(f"S3 request for {where} failed: {_one_line(exc)}")

    def _endpoint(self) -> str:
        if self._client is not None:
            return self._client.meta.endpoint_url
        return self.options.get("endpoint_url") or "(default AWS endpoint)"


N = TypeVar("N", int, float)


def _positive_option(options: Mapping[str, str], name: str, default: N, parse: Callable[[str], N], expected: str) -> N:
    """A number option above zero (`parse`: int or float), its default when absent, or a one-line error."""
    raw = options.get(name)
    if raw in (None, ""):
        return default
    try:
        value = parse(str(raw).strip())
    except ValueError:
        raise TopicvaultError(f"bad store option {name}={raw}: expected {expected}") from None
    if value <= 0:
        raise TopicvaultError(f"bad store option {name}={raw}: must be positive")
    return value


def _bool_option(options: Mapping[str, str], name: str) -> bool:
    raw = str(options.get(name, "")).strip().lower()
    if raw in ("", "false", "0", "no", "off"):
        return False
    if raw in ("true", "1", "yes", "on"):
        return True
    raise TopicvaultError(f"bad store option {name}={options[name]}: use true or false")
