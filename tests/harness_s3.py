"""S3 fixtures: moto's real HTTP S3 server on a free loopback port, stopped at session end."""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from topicvault.core.local.embedded_broker import free_port  # noqa: F401 (tests import it from here)
from topicvault.core.local.local_s3 import moto_server

# conftest star-imports this module: export the fixtures only.
__all__ = ["local_uri", "s3_endpoint", "s3_uri", "store_uri"]

# Every variable that could point boto3 somewhere else than the test server.
_AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
)



def logged_requests(log: Path, bucket: str) -> list[str]:
    """The requests to `bucket` in a moto_server log (one werkzeug line each).

    werkzeug wraps the request line of some statuses (404, 304, …) in ANSI colour escapes, so
    they are matched too. It logs a request when it starts the response, so every request a
    client got an answer to is in the log already: no waiting is needed."""
    pattern = re.compile(rf'"(?:\x1b\[[0-9;]*m)?[A-Z]+ /{re.escape(bucket)}[/? ]')
    return [line for line in log.read_text(errors="replace").splitlines() if pattern.search(line)]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of a moto S3 server; AWS_* variables point every boto3 client at it meanwhile."""
    saved = {name: os.environ.get(name) for name in _AWS_VARIABLES}
    with (
        tempfile.TemporaryDirectory(prefix="tv-moto-") as scratch,
        moto_server(Path(scratch)) as endpoint,
    ):
        for name in _AWS_VARIABLES:
            os.environ.pop(name, None)
        os.environ.update({
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            # No user config or credentials files may redirect or re-sign requests.
            "AWS_CONFIG_FILE": str(Path(scratch) / "absent-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(Path(scratch) / "absent-credentials"),
        })
        try:
            yield endpoint
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture
def s3_uri(s3_endpoint: str) -> str:
    """A fresh, empty bucket on the S3 server, as s3://bucket/prefix."""
    import boto3

    bucket = f"tv-{uuid.uuid4().hex[:16]}"
    boto3.session.Session().client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/backups/run1"


@pytest.fixture
def local_uri(tmp_path: Path) -> str:
    """A fresh local store directory, as a plain path (not yet created)."""
    return str(tmp_path / "store")


@pytest.fixture(params=["local", "s3"])
def store_uri(request: pytest.FixtureRequest) -> str:
    """Each store in turn: a local directory, then a bucket on the S3 server."""
    return request.getfixturevalue("local_uri" if request.param == "local" else "s3_uri")
