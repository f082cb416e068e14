"""Spark fixture: one local[2] session for the whole test run."""

from __future__ import annotations

import pytest
from topicvault.core.spark import get_spark


@pytest.fixture(scope="session")
def spark(s3_endpoint):
    """The shared Spark session (workers run this interpreter; see core.spark.get_spark).

    It starts after the S3 server because Python workers inherit the environment (AWS_*)
    the JVM had when it started, as they would for a user running the CLI.
    """
    session = get_spark("local[2]")
    from topicvault.datasources import register

    register(session)
    yield session
    session.stop()
