"""Benchmark data: records shaped like users', like the test suite's (tests/nasty.py), and plain ones.

- user (what a user's topic holds, issue #33): every value its own random bytes, binary keys of
  16 random bytes (one in twenty null, one in twenty empty), five headers on one record in five
  (a name given twice, a null value, a non-ASCII name, an empty value; the traced id differs per
  record) and timestamps that go back and forth by up to 5 s. Nothing repeats, so nothing is
  cheaper than it would be on users' data: compression, Parquet's dictionary pages, caches.
- header-heavy (like the test suite's): null and empty keys and values, binary bytes that are
  not UTF-8, and headers on two records in five (duplicate names with a null value; a unicode
  name, an empty and a null value).
- plain: a key and a random value, no headers.

header-heavy and plain take keys and values from a pool of 1024, so producing the data costs
little before the timed runs; that pool is also why they flatter a backup (Parquet stores a 200 B
value column as a dictionary of 1024 entries) and the bare producer (it sends the same 1024
values over and over from the CPU's cache).
"""

from __future__ import annotations

import random
from typing import Iterable, Iterator

from confluent_kafka import Producer

SHAPES = ("user", "header-heavy", "plain")
Headers = "list[tuple[str, bytes | None]] | None"
Record = "tuple[bytes | None, bytes | None, Headers, int]"

DUPLICATE_HEADERS = [("dup", b"1"), ("dup", b"2"), ("dup", None)]
UNICODE_HEADERS = [("ünïcødé-名前", b"\x00\xff"), ("empty", b""), ("null", None)]
BINARY_VALUE = b"\xff\xfe\x00\x80invalid utf-8\xc3\x28"
POOL = 1024
FIRST_TIMESTAMP_MS = 1_700_000_000_000
USER_JITTER_MS = 5_000


def records(shape: str, count: int, size: int, seed: int = 1) -> Iterator[Record]:
    """`count` (key, value, headers, timestamp ms) records of the given shape, values about `size` bytes."""
    if shape == "user":
        yield from _user_records(count, size, seed)
        return
    rng = random.Random(seed)
    values = [rng.randbytes(size) for _ in range(POOL)]
    keys = [b"key-%d" % i for i in range(POOL)]
    if shape == "plain":
        for i in range(count):
            yield keys[i % POOL], values[i % POOL], None, FIRST_TIMESTAMP_MS + i
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
        yield key, value, headers, FIRST_TIMESTAMP_MS + i


def _user_records(count: int, size: int, seed: int) -> Iterator[Record]:
    rng = random.Random(seed)
    randbytes, randrange = rng.randbytes, rng.randrange
    for i in range(count):
        kind = i % 20
        key = None if kind == 0 else b"" if kind == 1 else randbytes(16)
        headers = None
        if i % 5 == 2:
            trace = randbytes(16)
            headers = [("trace", trace), ("trace", trace[:8]), ("gelöscht", None), ("größe-名前", b"%d" % size),
                       ("empty", b"")]
        yield key, randbytes(size), headers, FIRST_TIMESTAMP_MS + i + randrange(-USER_JITTER_MS, USER_JITTER_MS)


def produce_round_robin(producer: Producer, topic: str, partitions: int,
                        data: Iterable[tuple[bytes | None, bytes | None, list | None, int]]) -> None:
    """Produce (key, value, headers, timestamp) records round-robin over the partitions, waiting
    while the producer's queue is full, then flush."""
    for i, (key, value, headers, timestamp) in enumerate(data):
        while True:
            try:
                producer.produce(topic, value, key, partition=i % partitions, timestamp=timestamp, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()


def produce(bootstrap: str, topic: str, shape: str, count: int, size: int, partitions: int) -> None:
    """Produce `count` records round-robin over the partitions, fast (bulk producer, no
    idempotence), then one single-record batch per partition: the embedded broker's high
    watermark is only right when a partition ends with one."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    produce_round_robin(producer, topic, partitions, records(shape, max(count - partitions, 0), size))
    for partition in range(min(partitions, count)):
        producer.produce(topic, b"last", b"last", partition=partition, timestamp=FIRST_TIMESTAMP_MS + count)
        producer.flush()
