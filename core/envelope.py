"""The envelope: one row per Kafka record, the schema of Spark's own Kafka source.

Everything in topicvault moves records as Arrow record batches of ARROW_SCHEMA.
`timestamp` is Kafka milliseconds carried in Spark's microsecond timestamp type,
so the conversion is an exact multiplication and nothing is rounded. That type holds
milliseconds up to ±9,223,372,036,854,775 (year 294247); a Kafka timestamp beyond it (a
producer that sent microseconds as milliseconds) is refused with TimestampOutOfRange, never
wrapped or replaced.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .errors import TopicvaultError

# Kafka's TimestampType ids, as Spark's Kafka source reports them.
CREATE_TIME = 0
LOG_APPEND_TIME = 1

SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, "
    "headers array<struct<key: string, value: binary>>"
)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

Header = tuple[str, "bytes | None"]

# The Kafka milliseconds the envelope's microsecond timestamps can hold.
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
MIN_TIMESTAMP_MS = -MAX_TIMESTAMP_MS


class TimestampOutOfRange(TopicvaultError):
    """A record's Kafka timestamp does not fit the envelope's microsecond timestamp."""


def timestamp_column(millis: pa.Array, topics: pa.Array, partitions: pa.Array, offsets: pa.Array) -> pa.Array:
    """Kafka milliseconds -> the envelope's `timestamp` column, exactly; TimestampOutOfRange names
    the first record (topic, partition, offset: parallel arrays) whose timestamp would not fit."""
    outside = pc.or_(pc.greater(millis, MAX_TIMESTAMP_MS), pc.less(millis, MIN_TIMESTAMP_MS))
    if pc.any(outside).as_py():
        row = pc.index(outside, True).as_py()
        raise TimestampOutOfRange(
            f"record {topics[row].as_py()}[{partitions[row].as_py()}]@{offsets[row].as_py()} has timestamp "
            f"{millis[row].as_py()} ms, beyond the ±{MAX_TIMESTAMP_MS} ms (year 294247) topicvault can carry "
            "exactly (a producer probably sent microseconds as milliseconds); it is refused rather than altered: "
            "fix that record's timestamp at the source, or leave its offsets out of the backup or restore"
        )
    return pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE)


@dataclass(frozen=True)
class Record:
    """One Kafka record. None and b"" are different keys and values."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int = CREATE_TIME
    headers: tuple[Header, ...] = field(default_factory=tuple)


def batch_from_columns(
    *,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    topics: Sequence[str],
    partitions: Sequence[int],
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
    timestamp_types: Sequence[int],
    headers: Sequence[Sequence[Header] | None],
) -> pa.RecordBatch:
    """Build an envelope batch from parallel Python lists, in bulk."""
    topic_array, partition_array = pa.array(topics, pa.string()), pa.array(partitions, pa.int32())
    offset_array = pa.array(offsets, pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            topic_array,
            partition_array,
            offset_array,
            timestamp_column(pa.array(timestamps_ms, pa.int64()), topic_array, partition_array, offset_array),
            pa.array(timestamp_types, pa.int32()),
            headers_column(headers),
        ],
        schema=ARROW_SCHEMA,
    )


def headers_column(headers: Sequence[Sequence[Header] | None]) -> pa.Array:
    """The `headers` column from each record's (name, value) pairs; None is no headers (an
    empty list, as Kafka has no null header list).

    Built flat (names, values and list offsets, then one ListArray): converting a list of
    tuples per record to structs costs several times more and gives the same array.
    """
    names: list[str] = []
    values: list[bytes | None] = []
    offsets = [0]
    for pairs in headers:
        if pairs:
            for name, value in pairs:
                names.append(name)
                values.append(value)
        offsets.append(len(names))
    entries = pa.StructArray.from_arrays([pa.array(names, pa.string()), pa.array(values, pa.binary())],
                                         fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries, type=HEADERS_TYPE)


def records_to_batch(records: Iterable[Record]) -> pa.RecordBatch:
    """Convert records to one envelope batch."""
    records = list(records)
    return batch_from_columns(
        keys=[r.key for r in records],
        values=[r.value for r in records],
        topics=[r.topic for r in records],
        partitions=[r.partition for r in records],
        offsets=[r.offset for r in records],
        timestamps_ms=[r.timestamp_ms for r in records],
        timestamp_types=[r.timestamp_type for r in records],
        headers=[r.headers for r in records],
    )


def timestamps_ms(batch: pa.RecordBatch | pa.Table) -> pa.Array:
    """The batch's timestamps as int64 Kafka milliseconds (exact)."""
    micros = batch.column("timestamp").cast(pa.int64())
    return pc.divide(micros, 1000)


def batch_to_records(batch: pa.RecordBatch | pa.Table) -> list[Record]:
    """Convert an envelope batch (or table) to records, in row order."""
    cols = {name: batch.column(name).to_pylist() for name in ARROW_SCHEMA.names if name != "timestamp"}
    millis = timestamps_ms(batch).to_pylist()
    return [
        Record(
            topic=cols["topic"][i],
            partition=cols["partition"][i],
            offset=cols["offset"][i],
            key=cols["key"][i],
            value=cols["value"][i],
            timestamp_ms=millis[i],
            timestamp_type=cols["timestampType"][i],
            headers=tuple((h["key"], h["value"]) for h in (cols["headers"][i] or ())),
        )
        for i in range(batch.num_rows)
    ]


def record_sizes(batch: pa.RecordBatch | pa.Table) -> list[int]:
    """Payload bytes per record (key + value + header names and values), for rotation by size."""
    sizes = pc.add(
        pc.binary_length(batch.column("key")).fill_null(0).cast(pa.int64()),
        pc.binary_length(batch.column("value")).fill_null(0).cast(pa.int64()),
    )
    headers = batch.column("headers")
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if len(headers) == 0:
        return sizes.to_pylist()
    # A sliced list array's offsets index into its whole child array: take this slice's part.
    offsets = pc.subtract(headers.offsets, headers.offsets[0])
    flat = headers.values.slice(headers.offsets[0].as_py(), offsets[-1].as_py())
    if len(flat) == 0:
        return sizes.to_pylist()
    header_bytes = pc.add(
        pc.binary_length(pc.struct_field(flat, "key").cast(pa.binary())).fill_null(0).cast(pa.int64()),
        pc.binary_length(pc.struct_field(flat, "value")).fill_null(0).cast(pa.int64()),
    )
    # Each record's header bytes as a difference of running totals at its list offsets.
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(header_bytes)])
    per_record = pc.subtract(running.take(offsets.slice(1)), running.take(offsets.slice(0, len(headers))))
    per_record = pc.if_else(pc.is_valid(headers), per_record, 0)  # a null list holds no headers
    return pc.add(sizes, per_record).to_pylist()


def runs_by_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[Iterator[pa.RecordBatch]]:
    """Split a stream of envelope batches into consecutive runs of one topic-partition each."""
    pending: list[pa.RecordBatch] = []
    current = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch]).sort_by([("topic", "ascending"), ("partition", "ascending")])
        keys = list(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist()))
        start = 0
        for index in range(1, len(keys) + 1):
            if index == len(keys) or keys[index] != keys[start]:
                if current is not None and keys[start] != current:
                    yield iter(pending)
                    pending = []
                current = keys[start]
                pending.extend(table.slice(start, index - start).to_batches())
                start = index
    if pending:
        yield iter(pending)


def content_fingerprint(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> bytes:
    """A digest of a record's key, value and headers (names, values, order), the same whether
    the record comes from Kafka or from an envelope batch."""
    return hashlib.sha256(repr((key, value, tuple(headers))).encode()).digest()


class RecordDigest:
    """Count and sha256 over each record's offset, key, value, timestamp, type and headers, in order.

    Topic and partition are left out, so a backup can be compared with a renamed copy too.
    """

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()
        self.records = 0

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add the batch's records."""
        for record in batch_to_records(batch):
            fields = (record.offset, record.key, record.value, record.timestamp_ms, record.timestamp_type, record.headers)
            self._sha256.update(repr(fields).encode())
            self.records += 1

    def result(self) -> tuple[int, str]:
        """(records, hex digest)."""
        return self.records, self._sha256.hexdigest()
