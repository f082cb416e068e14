"""Records at the edges of what Kafka allows, through every format (no broker, no Spark)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from topicvault.core.envelope import (
    HEADERS_TYPE,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    Record,
    TimestampOutOfRange,
    batch_to_records,
    records_to_batch,
)
from topicvault.formats import FORMAT_NAMES, resolve_format
from topicvault.formats.avro import SCHEMA as AVRO_SCHEMA
from topicvault.formats.base import METADATA_TYPE
from topicvault.formats.csv import COLUMNS as CSV_COLUMNS

CODECS = {"parquet": ["zstd"], "avro": ["deflate"], "jsonl": ["none", "gzip"], "csv": ["none", "gzip"]}
ALL = [(name, codec) for name in FORMAT_NAMES for codec in CODECS[name]]
# Every character str.splitlines() breaks on, besides "\n".
LINE_BREAKERS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n"]


def line_breaking_records() -> list[Record]:
    return [
        Record("t", 0, offset, f"k{char}".encode(), f"v{char}".encode(), 1_700_000_000_000 + offset, 0,
               ((f"name{char}end", f"value{char}".encode()), (char, None), ("plain", char.encode())))
        for offset, char in enumerate(LINE_BREAKERS)
    ]


@pytest.mark.parametrize("name,codec", ALL)
def test_header_names_with_line_separators_read_back(name, codec):
    fmt = resolve_format(name, codec)
    records = line_breaking_records()
    data = fmt.write(pa.Table.from_batches([records_to_batch(records)]))
    assert batch_to_records(fmt.read(data, "k")) == records


EDGE_TIMESTAMPS = [-1, 0, MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS, 9_200_000_000_000_000]


@pytest.mark.parametrize("name,codec", ALL)
def test_every_timestamp_the_envelope_holds_round_trips_exactly(name, codec):
    fmt = resolve_format(name, codec)
    records = [Record("t", 0, i, b"k", b"v", ts, 0, ()) for i, ts in enumerate(EDGE_TIMESTAMPS)]
    data = fmt.write(pa.Table.from_batches([records_to_batch(records)]))
    assert [r.timestamp_ms for r in batch_to_records(fmt.read(data, "k"))] == EDGE_TIMESTAMPS


@pytest.mark.parametrize("timestamp", [MAX_TIMESTAMP_MS + 1, 9_300_000_000_000_000, 2**63 - 1, MIN_TIMESTAMP_MS - 1])
def test_a_timestamp_beyond_the_envelope_is_refused_not_wrapped(timestamp):
    records = [Record("t", 3, 7, b"k", b"v", 5, 0, ()), Record("t", 3, 8, b"k", b"v", timestamp, 0, ())]
    with pytest.raises(TimestampOutOfRange, match=rf"t\[3\]@8 has timestamp {timestamp} ms"):
        records_to_batch(records)


def _object_with_timestamp(name: str, timestamp: int) -> bytes:
    """An object (as another writer could have made it) whose one record has `timestamp`."""
    meta = {"topic": "t", "partition": 0, "offset": 4, "timestamp": timestamp, "timestampType": 0}
    if name == "jsonl":
        return (json.dumps({"key": None, "value": "dg==", "headers": [], "metadata": meta}) + "\n").encode()
    if name == "csv":
        return f"{','.join(CSV_COLUMNS)}\n,dg==,t,0,4,{timestamp},0,[]\n".encode()
    if name == "avro":
        out = io.BytesIO()
        fastavro.writer(out, AVRO_SCHEMA, [{"key": None, "value": b"v", "headers": [],
                                                                        "metadata": meta}])
        return out.getvalue()
    table = pa.table({"key": pa.array([None], pa.binary()), "value": pa.array([b"v"]),
                      "headers": pa.array([[]], HEADERS_TYPE), "metadata": pa.array([meta], METADATA_TYPE)})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_reading_an_object_with_a_timestamp_beyond_the_envelope_is_refused(name):
    data = _object_with_timestamp(name, 9_300_000_000_000_000)
    fmt = resolve_format(name)
    with pytest.raises(TimestampOutOfRange, match=r"t\[0\]@4 has timestamp 9300000000000000 ms"):
        fmt.read(data, "k")
    with pytest.raises(TimestampOutOfRange):
        offsets, batches = fmt.read_stream(data, "k", 100)
        list(batches)
