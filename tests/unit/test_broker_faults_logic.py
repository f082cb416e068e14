"""The pure-logic half of test_broker_faults (no broker, S3 server or Spark).

Broker faults: the broker goes away mid-restore and comes back, or stays away past a deadline.

A TCP proxy sits between clients and a broker of the test's own (the broker advertises the
proxy's port), so the outage is real to every client: connections dropped, new ones refused.
"""

from __future__ import annotations

from topicvault.core.kafka import KafkaSettings, idle_limit_s
from topicvault.sink.kafka_reader import range_consumer_config


def test_idle_limits_outlast_the_clients_own_timeouts():
    """Pure: whatever socket timeout a user sets, a reader's idle limit exceeds two request
    timeouts plus the longest reconnect backoff."""
    for properties in ({}, {"socket.timeout.ms": "60000"}, {"socket.timeout.ms": "120000", "fetch.wait.max.ms": "5000"}):
        config = range_consumer_config(KafkaSettings.of("localhost:9092", properties))
        needed_s = (2 * int(config["socket.timeout.ms"]) + 10_000 + int(config["fetch.wait.max.ms"])) / 1000
        assert idle_limit_s(config, 60.0) > needed_s
        assert idle_limit_s(config, 60.0) >= 60.0
