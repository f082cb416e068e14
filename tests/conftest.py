"""Shared fixtures. Each harness module owns one real service; all are stopped at session end."""

from harness_broker import *  # noqa: F401,F403  (bootstrap, broker_kind)
from harness_s3 import *  # noqa: F401,F403  (s3_endpoint, s3_uri)
from harness_spark import *  # noqa: F401,F403  (spark)
