"""The pure-logic half of tests/integration/test_broker_faults.py (its docstring covers both halves):
Broker faults: the broker goes away mid-restore and comes back, or stays away past a deadline.
"""

from __future__ import annotations

from topicvault.core.cluster.kafka import KafkaSettings, idle_limit_s
from topicvault.sink.kafka_reader import range_consumer_config


def test_idle_limits_outlast_the_clients_own_timeouts():
    """Pure: whatever socket timeout a user sets, a reader's idle limit exceeds two request
    timeouts plus the longest reconnect backoff."""
    for properties in ({}, {"socket.timeout.ms": "60000"}, {"socket.timeout.ms": "120000", "fetch.wait.max.ms": "5000"}):
        config = range_consumer_config(KafkaSettings.of("localhost:9092", properties))
        needed_s = (2 * int(config["socket.timeout.ms"]) + 10_000 + int(config["fetch.wait.max.ms"])) / 1000
        assert idle_limit_s(config, 60.0) > needed_s
        assert idle_limit_s(config, 60.0) >= 60.0
