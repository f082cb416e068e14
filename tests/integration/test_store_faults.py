"""Object-store faults through a real fault-injecting HTTP proxy in front of the S3 server."""

from __future__ import annotations

from clitools import run_cli
from faultproxy import FaultProxy
from kafkatools import consume_all, produce_records
from nasty import nasty_records


def test_round_trip_survives_throttling_errors_resets_and_timeouts(bootstrap, spark, topic_factory, s3_endpoint, s3_uri):
    topic = topic_factory(2, prefix="faults")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_000, big_values=0))
    with FaultProxy(s3_endpoint, every=3, slow_s=2.5) as proxy:
        through_proxy = ["-S", f"endpoint_url={proxy.url}", "-S", "read_timeout=1", "-S", "max_attempts=12"]
        run_cli("backup", "-b", bootstrap, "--to", s3_uri, "-t", topic, "--max-records", "150", *through_proxy)
        run_cli("restore", "--from", s3_uri, "-b", bootstrap, "--rename", f"{topic}={topic}-r", *through_proxy)
    assert set(proxy.injected) == {"503", "500", "reset", "slow"}, proxy.injected
    assert "2,000 records" in run_cli("ls", s3_uri) or "2,002 records" in run_cli("ls", s3_uri)
    original, restored = consume_all(bootstrap, topic), consume_all(bootstrap, f"{topic}-r")
    strip = lambda rs: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs]  # noqa: E731
    assert {p: strip(r) for p, r in restored.items()} == {p: strip(r) for p, r in original.items()}


def test_permanent_failure_names_the_object_and_the_s3_code(bootstrap, spark, topic_factory, s3_endpoint, s3_uri):
    topic = topic_factory(1, prefix="denied")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 20, big_values=0))
    with FaultProxy(s3_endpoint, deny_puts=True) as proxy:
        out = run_cli("backup", "-b", bootstrap, "--to", s3_uri, "-t", topic, "-S", f"endpoint_url={proxy.url}",
                      expect_exit=1)
    error = [line for line in out.splitlines() if line.startswith("error:")]
    # The run's first write is its lease (core.archive.leases), before any record is read.
    assert len(error) == 1 and "AccessDenied" in error[0] and "_topicvault/leases/r" in error[0], out
    assert "no backup at" in run_cli("ls", s3_uri, expect_exit=1)
