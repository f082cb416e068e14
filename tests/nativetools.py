"""Data shared by the tests of the native record loops (sink/_kafka_arrow*.c, issue #51.2)."""

from __future__ import annotations

from topicvault.core.envelope import Record

# A record just under the tests' 8 MiB topic limit (harness_broker.topic_factory, _like_tansu).
ALMOST_8_MIB = 8 * 2**20 - 4096


def with_huge_records(records: list[Record], topic: str, partitions: int) -> list[Record]:
    """`records` with one record of almost 8 MiB per partition in the middle (duplicate headers, one null)."""
    records = list(records)
    for partition in range(partitions):
        records.insert(len(records) // 2, Record(topic, partition, 0, b"huge", bytes(ALMOST_8_MIB), 5, 0,
                                                 (("size", b"8MiB"), ("size", None))))
    return records
