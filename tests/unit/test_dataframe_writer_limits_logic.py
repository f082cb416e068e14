"""The pure-logic half of tests/integration/test_dataframe_writer_limits.py (its docstring covers both halves):
The `topicvault-kafka` DataFrame writer is held to the CLI restore's limits: its maxRecordsPerSecond / maxBytesPerSecond options hold for the whole write, and a session with spark.speculation=true is refused before anything is produced.
"""

from __future__ import annotations

import os

import pytest
from topicvault.core.errors import TopicvaultError
from topicvault.source.restore.throttle import RateLimit
from topicvault.source.restore_datasource import KafkaPartitionWriter, rate_limit_from_options, tasks_at_once


@pytest.mark.parametrize("master,given,expected", [
    ("local[2]", None, 2), ("local[3,4]", None, 3), ("local", None, 1), ("local[*]", None, os.cpu_count()),
    ("local[2]", 5, 5), ("spark://h:7077", 16, 16), ("yarn", 8, 8)])
def test_tasks_that_share_the_limit(master, given, expected):
    assert tasks_at_once(master, given) == expected


@pytest.mark.parametrize("master", ["yarn", "k8s://https://k:443", "spark://h:7077", None])
def test_a_limit_on_a_cluster_needs_concurrent_tasks(master):
    with pytest.raises(TopicvaultError, match="give option concurrentTasks"):
        tasks_at_once(master, None)


def test_rate_options_are_read_and_bad_ones_are_one_line_errors():
    assert rate_limit_from_options({}) == RateLimit()
    assert rate_limit_from_options({"maxrecordspersecond": "1000", "maxbytespersecond": "2.5e6"}) == \
        RateLimit(1000, 2.5e6)
    for name, value in (("maxRecordsPerSecond", "0"), ("maxBytesPerSecond", "-1"), ("maxRecordsPerSecond", "fast")):
        with pytest.raises(TopicvaultError, match=rf"^option {name} must be a positive number, not '{value}'"):
            KafkaPartitionWriter({"kafka.bootstrap.servers": "127.0.0.1:1", name: value})
    with pytest.raises(TopicvaultError, match="option concurrentTasks must be a positive whole number"):
        KafkaPartitionWriter({"kafka.bootstrap.servers": "127.0.0.1:1", "concurrentTasks": "0"})
