"""The pure-logic half of tests/integration/test_wide_topics.py (its docstring covers both halves):
Wide topics (issue #18 item 5): one backup task reads many partitions through one consumer.
"""

from __future__ import annotations

import pytest
from topicvault.core.errors import TopicvaultError
from topicvault.sink.kafka_reader import OffsetRange


def ordered(ranges) -> list[OffsetRange]:
    return sorted(ranges, key=lambda r: (r.topic, r.partition, r.start))


def test_group_ranges_packs_small_ranges_per_core_and_keeps_big_ones_apart():
    from topicvault.sink.plan import group_ranges

    small = [OffsetRange("t", p, 0, 20) for p in range(256)]
    groups = group_ranges(small, 2, 1_000_000)
    assert len(groups) == 2 and sorted(len(g) for g in groups) == [128, 128]
    assert ordered(r for g in groups for r in g) == ordered(small)
    # Big partitions keep their parallelism: full-size ranges are tasks of their own, and no
    # group holds two ranges of one partition (one consumer cannot assign a partition twice).
    big = [OffsetRange("big", 0, s, s + 100) for s in range(0, 1000, 100)] + [OffsetRange("big", 1, 0, 30)]
    groups = group_ranges(big + small[:50], 2, 100)
    assert all(sum(r.end - r.start for r in g) <= 100 for g in groups)
    assert all(len({(r.topic, r.partition) for r in g}) == len(g) for g in groups)
    assert sum(1 for g in groups for r in g if r.topic == "big" and r.partition == 0) == 10
    assert ordered(r for g in groups for r in g) == ordered(big + small[:50])
    assert group_ranges([], 4, 100) == []


def test_grouped_follow_batch_reads_many_partitions_per_input_partition():
    from topicvault.sink.stream import KafkaStreamReader

    reader = KafkaStreamReader({"kafka.bootstrap.servers": "unused:9092", "minPartitions": "2"})
    start = {"offsets": {f"t:{p}": 0 for p in range(300)}}
    end = {"offsets": {f"t:{p}": 20 for p in range(300)}}
    partitions = reader.partitions(start, end)
    assert len(partitions) == 2
    assert ordered(r for part in partitions for r in part.tasks) == ordered(OffsetRange("t", p, 0, 20) for p in range(300))


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_bad_min_partitions_is_a_one_line_error(value):
    from topicvault.sink.backup_datasource import KafkaRangeReader
    from topicvault.sink.stream import KafkaStreamReader

    options = {"kafka.bootstrap.servers": "unused:9092", "minPartitions": value}
    for reader in (KafkaRangeReader, KafkaStreamReader):
        with pytest.raises(TopicvaultError, match=rf"option minPartitions must be a positive whole number, not '{value}'"):
            reader(options)
