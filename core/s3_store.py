"""S3 (and S3-compatible) object store over boto3, with conditional writes and adaptive retries."""

from __future__ import annotations

from typing import Iterator
from urllib.parse import urlparse

from .errors import ObjectNotFound, PreconditionFailed, TopicvaultError
from .store import ObjectInfo, ObjectStore

DEFAULT_MULTIPART_THRESHOLD = 64 * 1024 * 1024
PART_SIZE = 16 * 1024 * 1024
_OPTIONS = {
    "endpoint_url", "region", "path_style", "max_attempts", "connect_timeout", "read_timeout",
    "multipart_threshold", "sse", "sse_kms_key_id",
}


class S3Store(ObjectStore):
    """Objects under s3://bucket/prefix. Picklable: the boto3 client is made lazily per process."""

    def __init__(self, uri: str, options: dict[str, str]) -> None:
        unknown = set(options) - _OPTIONS
        if unknown:
            raise TopicvaultError(f"unknown store option(s) {', '.join(sorted(unknown))}: valid are {', '.join(sorted(_OPTIONS))}")
        parsed = urlparse(uri)
        if not parsed.netloc:
            raise TopicvaultError(f"bad S3 URI {uri!r}: write it as s3://bucket/prefix")
        self.uri = uri
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/") + "/" if parsed.path.strip("/") else ""
        self.options = options
        self.multipart_threshold = int(options.get("multipart_threshold", DEFAULT_MULTIPART_THRESHOLD))
        self._client = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self):
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"max_attempts": int(self.options.get("max_attempts", 10)), "mode": "adaptive"},
                connect_timeout=float(self.options.get("connect_timeout", 10)),
                read_timeout=float(self.options.get("read_timeout", 60)),
                s3={"addressing_style": "path" if self.options.get("path_style", "").lower() == "true" else "auto"},
            )
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.options.get("endpoint_url") or None,
                region_name=self.options.get("region") or None,
                config=config,
            )
        return self._client

    def _full(self, key: str) -> str:
        return self.prefix + key

    def _extra(self) -> dict:
        extra = {}
        if self.options.get("sse"):
            extra["ServerSideEncryption"] = self.options["sse"]
        if self.options.get("sse_kms_key_id"):
            extra["SSEKMSKeyId"] = self.options["sse_kms_key_id"]
        return extra

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        conditions = {}
        if if_none_match:
            conditions["IfNoneMatch"] = "*"
        if if_match is not None:
            conditions["IfMatch"] = if_match
        try:
            if len(data) > self.multipart_threshold:
                return self._put_multipart(key, data, conditions)
            response = self.client.put_object(
                Bucket=self.bucket, Key=self._full(key), Body=data, **conditions, **self._extra()
            )
        except Exception as exc:  # botocore errors are mapped to one line
            raise self._error(exc, key) from None
        return response["ETag"].strip('"')

    def _put_multipart(self, key: str, data: bytes, conditions: dict) -> str:
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=self._full(key), **self._extra())
        upload_id = upload["UploadId"]
        try:
            parts = []
            for number, start in enumerate(range(0, len(data), PART_SIZE), start=1):
                part = self.client.upload_part(
                    Bucket=self.bucket, Key=self._full(key), UploadId=upload_id, PartNumber=number,
                    Body=data[start : start + PART_SIZE],
                )
                parts.append({"PartNumber": number, "ETag": part["ETag"]})
            response = self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self._full(key), UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **conditions,
            )
        except Exception:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self._full(key), UploadId=upload_id)
            raise
        return response["ETag"].strip('"')

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        except Exception as exc:
            raise self._error(exc, key) from None

    def head(self, key: str) -> ObjectInfo | None:
        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._full(key))
        except Exception as exc:
            error = self._error(exc, key)
            if isinstance(error, ObjectNotFound):
                return None
            raise error from None
        return ObjectInfo(key, response["ContentLength"], response["ETag"].strip('"'))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectInfo]:
        arguments = {"Bucket": self.bucket, "Prefix": self._full(prefix)}
        if start_after is not None:
            arguments["StartAfter"] = self._full(start_after)
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**arguments):
                for item in page.get("Contents", []):
                    yield ObjectInfo(item["Key"][len(self.prefix) :], item["Size"], item["ETag"].strip('"'))
        except TopicvaultError:
            raise
        except Exception as exc:
            raise self._error(exc, prefix or "(listing)") from None

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))
        except Exception as exc:
            raise self._error(exc, key) from None

    def _error(self, exc: Exception, key: str) -> TopicvaultError:
        """One-line error naming the object, the S3 error code and what to do."""
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

        where = f"s3://{self.bucket}/{self._full(key)}"
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "404", "NotFound"):
                return ObjectNotFound(f"object {where} not found")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (412, 409):
                return PreconditionFailed(f"conditional write of {where} failed ({code})")
            if code == "NoSuchBucket":
                return TopicvaultError(f"bucket {self.bucket} does not exist (NoSuchBucket): create it or fix the URI")
            if code in ("AccessDenied", "403", "Forbidden"):
                return TopicvaultError(f"access denied to {where} ({code}): check the credentials' permissions")
            if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"):
                return TopicvaultError(f"S3 rejected the credentials for {where} ({code}): check AWS credentials")
            return TopicvaultError(f"S3 error on {where}: {code} (HTTP {status}) {exc.response.get('Error', {}).get('Message', '')}")
        if isinstance(exc, NoCredentialsError):
            return TopicvaultError("no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile")
        if isinstance(exc, EndpointConnectionError):
            return TopicvaultError(f"cannot reach the S3 endpoint for {where} ({exc}): check endpoint_url/AWS_ENDPOINT_URL")
        if isinstance(exc, BotoCoreError):
            return TopicvaultError(f"S3 request for {where} failed: {exc}")
        raise exc
