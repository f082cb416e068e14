"""Benchmark data: header-heavy records shaped like the test suite's (tests/nasty.py), and plain ones.

Header-heavy (what users' topics look like): null and empty keys and values, binary bytes that
are not UTF-8, and headers on two records in five (duplicate names with a null value; a unicode
name, an empty and a null value). Plain: a key and a random value, no headers. Both are built
from a small pool of payloads so that producing the data costs little before the timed runs.
"""

from __future__ import annotations

import random
from typing import Iterator

from confluent_kafka import Producer

SHAPES = ("header-heavy", "plain")
Headers = "list[tuple[str, bytes | None]] | None"

DUPLICATE_HEADERS = [("dup", b"1"), ("dup", b"2"), ("dup", None)]
UNICODE_HEADERS = [("ünïcødé-名前", b"\x00\xff"), ("empty", b""), ("null", None)]
BINARY_VALUE = b"\xff\xfe\x00\x80invalid utf-8\xc3\x28"
POOL = 1024


def records(shape: str, count: int, size: int, seed: int = 1) -> Iterator[tuple[bytes | None, bytes | None, Headers]]:
    """`count` (key, value, headers) triples of the given shape, values about `size` bytes."""
    rng = random.Random(seed)
    values = [rng.randbytes(size) for _ in range(POOL)]
    keys = [b"key-%d" % i for i in range(POOL)]
    if shape == "plain":
        for i in range(count):
            yield keys[i % POOL], values[i % POOL], None
        return
    if shape != "header-heavy":
        raise ValueError(f"unknown shape {shape!r}: use one of {', '.join(SHAPES)}")
    for i in range(count):
        key: bytes | None = keys[i % POOL]
        value: bytes | None = values[i % POOL]
        headers = None
        kind = i % 10
        if kind == 0:
            key = None
        elif kind == 1:
            key = b""
        elif kind == 2:
            value = None  # tombstone
        elif kind == 3:
            value = b""
        if kind in (4, 9):  # kinds 4, 5, 7 and 9 carry headers: two records in five
            headers = DUPLICATE_HEADERS
            value = BINARY_VALUE + value
        elif kind in (5, 7):
            headers = UNICODE_HEADERS
        yield key, value, headers


def produce(bootstrap: str, topic: str, shape: str, count: int, size: int, partitions: int) -> None:
    """Produce `count` records round-robin over the partitions, fast (bulk producer, no
    idempotence), then one single-record batch per partition: the embedded broker's high
    watermark is only right when a partition ends with one."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    body = max(count - partitions, 0)
    timestamp = 1_700_000_000_000
    for i, (key, value, headers) in enumerate(records(shape, body, size)):
        while True:
            try:
                producer.produce(topic, value, key, partition=i % partitions, timestamp=timestamp + i, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    for partition in range(min(partitions, count)):
        producer.produce(topic, b"last", b"last", partition=partition, timestamp=timestamp + count)
        producer.flush()
