"""Records built to break a backup tool: every shape Kafka allows that is easy to get wrong."""

from __future__ import annotations

import random

from topicvault.core.envelope import Record

TS_2100 = 4_102_444_800_000  # 2100-01-01T00:00:00Z
ONE_MIB = 1024 * 1024


def nasty_records(topic: str, partitions: int, per_partition: int, seed: int = 1, big_values: int = 1) -> list[Record]:
    """`per_partition` records for each partition (offsets left 0: the broker assigns them).

    Timestamps start at 1, not 0: librdkafka sends timestamp 0 as "now", so no Kafka client
    built on it can produce a record with timestamp 0 (restore reports such records).
    """
    rng = random.Random(f"{topic}-{seed}")
    records = []
    for partition in range(partitions):
        for i in range(per_partition):
            kind = i % 11
            key: bytes | None = rng.randbytes(rng.randrange(1, 40))
            value: bytes | None = rng.randbytes(rng.randrange(0, 200))
            headers: tuple = ()
            timestamp = 1_700_000_000_000 + i * 7
            if kind == 0:
                key = None
            elif kind == 1:
                key = b""
            elif kind == 2:
                value = None  # tombstone
            elif kind == 3:
                value = b""
            elif kind == 4:
                value = b"\xff\xfe\x00\x80invalid utf-8\xc3\x28"
                headers = (("dup", b"1"), ("dup", b"2"), ("dup", None))
            elif kind == 5:
                headers = (("ünïcødé-名前", b"\x00\xff"), ("empty", b""), ("null", None))
            elif kind == 6:
                timestamp = 1
            elif kind == 7:
                timestamp = TS_2100
            records.append(Record(topic, partition, 0, key, value, timestamp, 0, headers))
        for _ in range(big_values):
            records.insert(
                len(records) - per_partition // 2,
                Record(topic, partition, 0, b"big", rng.randbytes(ONE_MIB), 1_700_000_000_001, 0, (("size", b"1MiB"),)),
            )
    return records
