"""`topicvault sandbox`: a single-node Apache Kafka and a local S3 server with a bucket, to try
topicvault on a laptop. Everything lives in one temporary folder, deleted when it stops."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from .local_kafka import LocalKafka, kafka_jars
from .local_s3 import moto_executable, moto_server

# moto accepts any credentials; these only have to be set, so boto3 signs its requests.
SANDBOX_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "sandbox",
    "AWS_SECRET_ACCESS_KEY": "sandbox",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class Sandbox:
    """Where the sandbox's broker and S3 server answer."""

    bootstrap: str
    endpoint: str
    bucket: str

    @property
    def environment(self) -> dict[str, str]:
        """The variables that point topicvault at the sandbox: its broker (when no -b is given) and,
        through boto3, its S3 server."""
        return {"TOPICVAULT_BOOTSTRAP_SERVERS": self.bootstrap, "AWS_ENDPOINT_URL": self.endpoint,
                **SANDBOX_CREDENTIALS}

    @property
    def export_line(self) -> str:
        return "export " + " ".join(f"{name}={value}" for name, value in self.environment.items())


@contextmanager
def sandbox(bucket: str) -> Iterator[Sandbox]:
    """Start Apache Kafka (one KRaft node) and moto's S3 server with `bucket`; stop both on exit."""
    import boto3

    kafka_jars(), moto_executable()  # both missing parts named before anything starts
    folder = Path(tempfile.mkdtemp(prefix="topicvault-sandbox-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, True)
        (folder / "s3").mkdir()
        endpoint = stack.enter_context(moto_server(folder / "s3"))
        kafka = stack.enter_context(LocalKafka(nodes=1, folder=folder / "kafka"))
        started = Sandbox(kafka.bootstrap, endpoint, bucket)
        session = boto3.session.Session(aws_access_key_id=SANDBOX_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                                        aws_secret_access_key=SANDBOX_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                                        region_name=SANDBOX_CREDENTIALS["AWS_DEFAULT_REGION"])
        session.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield started
