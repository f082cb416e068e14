"""Whether a restored topic holds exactly the source topic's records: what a tool lost or altered.

    check_restore(bootstrap, source, restored, partitions) -> Differences

Every record of each partition of the restored topic is compared with the record at the same
position of the same partition of the source topic (not a sample: reading both topics costs a few
seconds per million records, outside any timed run): count per partition; key, value and timestamp
with its type; headers in order, with duplicate names and null values. A header difference is
named by what happened to it (names added, duplicate names collapsed, null values turned empty),
so the run can say what each tool did, not only that it differed. `compare` is pure (plain
tuples in, counts out) and tested in tests/unit/test_bench_restored.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Iterable, Iterator

Headers = "list[tuple[str, bytes | None]]"
# (key, value, headers (None read as []), timestamp type, timestamp ms): what a restore must keep.
Record = "tuple[bytes | None, bytes | None, Headers, int, int]"

# The ways a restored record can differ from its source record, in the order they are printed.
KINDS = ("missing", "extra", "key", "value", "timestamp", "timestamp_type", "headers_added",
         "header_duplicates_collapsed", "header_nulls_became_empty", "headers_other")


@dataclass
class Differences:
    """What a restore lost or altered, counted in records; `added_header_names` names the headers a
    tool put on records that did not have them in the source."""

    expected: int = 0
    restored: int = 0
    per_partition: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (expected, restored)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    added_header_names: set[str] = field(default_factory=set)

    @property
    def exact(self) -> bool:
        return not any(self.counts.values())

    def summary(self) -> str:
        """One line: 'exact' or what differed, e.g. 'headers: duplicate names collapsed on 50,000 records'."""
        if self.exact:
            return f"exact ({self.restored:,} of {self.expected:,} records, every field)"
        words = {"missing": "records lost", "extra": "records added", "key": "keys altered",
                 "value": "values altered", "timestamp": "timestamps altered",
                 "timestamp_type": "timestamp types altered",
                 "headers_added": f"headers {', '.join(sorted(self.added_header_names))} added",
                 "header_duplicates_collapsed": "repeated header names collapsed",
                 "header_nulls_became_empty": "null header values made empty",
                 "headers_other": "headers otherwise altered"}
        return "; ".join(f"{words[kind]} on {count:,}" if kind not in ("missing", "extra") else f"{count:,} {words[kind]}"
                         for kind, count in self.counts.items() if count)

    def to_json(self) -> dict:
        return {"expected": self.expected, "restored": self.restored, "exact": self.exact,
                "per_partition": {str(p): list(c) for p, c in self.per_partition.items()},
                "counts": self.counts, "added_header_names": sorted(self.added_header_names),
                "summary": self.summary()}


def header_changes(expected: list, restored: list) -> tuple[set[str], set[str]]:
    """(kinds of header change, names added) between a source record's headers and its restored
    record's, both lists of (name, bytes | None) in order. Kinds: headers_added (names the source
    record did not have), header_duplicates_collapsed (a name given n times kept fewer times),
    header_nulls_became_empty (a null value now b""), headers_other (anything else: order, values)."""
    if restored == expected:
        return set(), set()
    names = {name for name, _ in expected}
    added = {name for name, _ in restored if name not in names}
    kept = [(name, value) for name, value in restored if name in names]
    kinds = {"headers_added"} if added else set()
    if kept == expected:
        return kinds, added
    nulled = {name for name, value in expected if value is None}
    emptied = {name for name in nulled if (name, b"") in kept and (name, None) not in kept}
    if emptied:
        kinds.add("header_nulls_became_empty")
    nulls_empty = [(name, b"" if value is None and name in emptied else value) for name, value in expected]
    if kept == nulls_empty:
        return kinds, added
    if len(kept) < len(nulls_empty) and _collapsed(nulls_empty, kept):
        kinds.add("header_duplicates_collapsed")
    else:
        kinds.add("headers_other")
    return kinds, added


def _collapsed(expected: list, kept: list) -> bool:
    """Whether `kept` is `expected` with each repeated name kept once (first or last value, the
    first occurrence's place): what a map of headers would make of them."""
    first: dict[str, bytes | None] = {}
    last: dict[str, bytes | None] = {}
    for name, value in expected:
        first.setdefault(name, value)
        last[name] = value
    return kept in (list(first.items()), list(last.items()))


def compare(partition: int, expected: Iterable, restored: Iterable, into: Differences) -> None:
    """Add the differences between one partition's source records and its restored records (each
    an iterable of Record tuples, in offset order) to `into`; records are paired by position."""
    counts = into.counts
    source_count = restored_count = 0
    for want, got in zip_longest(expected, restored):
        if want is None:
            restored_count += 1
            counts["extra"] += 1
            continue
        source_count += 1
        if got is None:
            counts["missing"] += 1
            continue
        restored_count += 1
        key, value, headers, ts_type, ts = want
        for kind, same in (("key", key == got[0]), ("value", value == got[1]),
                           ("timestamp_type", ts_type == got[3]), ("timestamp", ts == got[4])):
            counts[kind] += not same
        kinds, added = header_changes(headers, got[2])
        for kind in kinds:
            counts[kind] += 1
        into.added_header_names |= added
    into.expected += source_count
    into.restored += restored_count
    into.per_partition[partition] = (source_count, restored_count)


def read_partition(bootstrap: str, topic: str, partition: int) -> Iterator:
    """Every record of one partition, to its end, as Record tuples, in offset order."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.partition.eof": True,
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 16 << 20, "fetch.queue.backoff.ms": 10})
    try:
        if topic not in consumer.list_topics(timeout=30).topics:  # all topics: asking for one may create it
            return  # no such topic: a restore that failed before creating it restored nothing
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if high <= low:
            return
        consumer.assign([TopicPartition(topic, partition, low)])
        while True:
            for message in consumer.consume(num_messages=1000, timeout=1.0):
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(f"reading {topic}[{partition}]: {message.error()}")
                ts_type, ts = message.timestamp()
                yield message.key(), message.value(), message.headers() or [], ts_type, ts
    finally:
        consumer.close()


def check_restore(bootstrap: str, source: str, restored: str, partitions: int) -> Differences:
    """Every record of `restored` against `source`, partition by partition (see compare)."""
    differences = Differences()
    for partition in range(partitions):
        compare(partition, read_partition(bootstrap, source, partition),
                read_partition(bootstrap, restored, partition), differences)
    return differences
