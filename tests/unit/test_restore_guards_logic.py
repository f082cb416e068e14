"""The pure-logic half of tests/integration/test_restore_guards.py (its docstring covers both halves):
Restore guards of issue #16: renames, targets safe while data goes in, speculation, re-runs.
"""

from __future__ import annotations

import pytest
from restoretools import LOADING
from topicvault.core.cluster.cluster_admin import (
    LOADING_CONFIGS,
    NO_LIMIT_MS,
    lifted_timestamp_limits,
    loading_configs,
    retention_from_broker_configs,
)
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.restore_plan import check_log_starts, parse_renames


def test_one_topic_renamed_twice_is_refused():
    with pytest.raises(TopicvaultError, match=r"--rename names 'a' twice \(a=x, a=y\)"):
        parse_renames(["a=x", "a=y"])
    assert parse_renames(["a=x", "a=x", "b=y"]) == {"a": "x", "b": "y"}  # the same pair twice is harmless




def test_loading_configs_keep_every_record_and_the_saved_record_size():
    saved = {"cleanup.policy": "compact", "retention.ms": "60000", "retention.bytes": "1000",
             "message.timestamp.type": "LogAppendTime", "max.message.bytes": "2000000", "segment.ms": "1000"}
    assert loading_configs(saved) == {**LOADING, "max.message.bytes": "2000000"}
    assert loading_configs({}) == LOADING


def test_a_restore_lifts_every_timestamp_limit_its_target_cluster_knows_and_no_other():
    kafka_4 = ["log.retention.ms", "log.message.timestamp.after.max.ms", "log.message.timestamp.before.max.ms"]
    assert lifted_timestamp_limits(kafka_4) == {"message.timestamp.after.max.ms": NO_LIMIT_MS,
                                                "message.timestamp.before.max.ms": NO_LIMIT_MS}
    kafka_3_6 = [*kafka_4, "log.message.timestamp.difference.max.ms"]
    assert set(lifted_timestamp_limits(kafka_3_6)) == {"message.timestamp.after.max.ms",
                                                       "message.timestamp.before.max.ms",
                                                       "message.timestamp.difference.max.ms"}
    # Before 3.6 only the one limit exists: naming the others would fail the topic's creation.
    assert lifted_timestamp_limits(["log.retention.ms", "log.message.timestamp.difference.max.ms"]) == {
        "message.timestamp.difference.max.ms": NO_LIMIT_MS}
    assert lifted_timestamp_limits([]) == {}  # tansu describes no broker configs (and enforces no limit)
    assert NO_LIMIT_MS == "9223372036854775807"
    lifted = {**LOADING_CONFIGS, **lifted_timestamp_limits(kafka_4)}
    assert loading_configs({"max.message.bytes": "2000000", "retention.ms": "60000"}, lifted) == {
        **lifted, "max.message.bytes": "2000000"}


def test_default_retention_follows_kafkas_precedence():
    # A topic created without retention.ms gets the broker's log.retention.ms, else minutes, else hours.
    assert retention_from_broker_configs({"log.retention.ms": None, "log.retention.minutes": None,
                                          "log.retention.hours": "168"}) == 168 * 3_600_000
    assert retention_from_broker_configs({"log.retention.minutes": "30", "log.retention.hours": "168"}) == 1_800_000
    assert retention_from_broker_configs({"log.retention.ms": "-1", "log.retention.hours": "168"}) == -1
    assert retention_from_broker_configs({}) is None  # tansu describes no broker configs


def test_resume_refuses_a_target_whose_log_start_moved_past_the_saved_start():
    starts = {("t", 0): 0, ("t", 1): 500, ("u", 0): 7}
    check_log_starts("rid", starts, {("t", 0): 0, ("t", 1): 500, ("u", 0): 3})
    with pytest.raises(TopicvaultError, match=r"t\[1\] now starts at offset 900, past offset 500 .* restore rid"):
        check_log_starts("rid", starts, {("t", 0): 0, ("t", 1): 900, ("u", 0): 3})


def test_a_resume_on_a_replicated_target_waits_for_what_the_killed_attempt_sent_before_counting():
    """A killed attempt's last produce request may be in the leader's log but not yet replicated:
    a read_uncommitted count stops at the high watermark, so it misses those records, and the
    resume produces them a second time. Followers take up to replica.lag.time.max.ms to copy them
    (or leave the ISR). Without replicas the high watermark moves at the append: no wait."""
    from topicvault.core.cluster.cluster_admin import resume_settle_s

    assert resume_settle_s(1, {"replica.lag.time.max.ms": "30000"}) == 0
    assert resume_settle_s(3, {"replica.lag.time.max.ms": "10000"}) == 15
    assert resume_settle_s(3, None) == 35  # Kafka's default, when the broker does not say
    assert resume_settle_s(3, {}) == 35
