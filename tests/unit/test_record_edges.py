"""Records at the edges of what Kafka allows, through every format (no broker, no Spark)."""

from __future__ import annotations

import functools
import gzip
import io
import json
import zlib

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
from topicvault.core.errors import CorruptObject, TopicvaultError
from topicvault.formats import FORMAT_NAMES, resolve_format
from topicvault.formats.avro import SCHEMA as AVRO_SCHEMA
from topicvault.formats.csv import COLUMNS as CSV_COLUMNS
from topicvault.formats.object_format import MAX_INFLATED_BYTES, METADATA_TYPE, gunzip_bytes
from topicvault.source.inspect import text_line

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


@functools.cache
def gzip_bomb(inflated_bytes: int) -> bytes:
    """A valid gzip member of `inflated_bytes` zeros, built in 1 MiB steps (about 1 KiB per MiB)."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk, parts, left = bytes(1 << 20), [], inflated_bytes
    while left:
        parts.append(deflater.compress(chunk[: min(left, len(chunk))]))
        left -= min(left, len(chunk))
    return b"".join(parts) + deflater.flush()


@pytest.mark.parametrize("name", ["jsonl", "csv"])
def test_a_gzip_bomb_is_refused_not_inflated(name):
    bomb = gzip_bomb(MAX_INFLATED_BYTES + 1)
    assert len(bomb) < 2 * 1024 * 1024
    with pytest.raises(TopicvaultError, match=r"object b/x inflates to more than 1,073,741,824 bytes"):
        resolve_format(name, "gzip").read(bomb, "b/x")


def test_gunzip_keeps_every_member_and_checks_them():
    one, two = gzip.compress(b"first\n"), gzip.compress(b"second\n")
    assert gunzip_bytes(one + two + b"\0\0", "k", "jsonl") == b"first\nsecond\n"
    assert gunzip_bytes(gzip_bomb(1000), "k", "jsonl", limit=1000) == bytes(1000)
    with pytest.raises(TopicvaultError, match="inflates to more than 999 bytes"):
        gunzip_bytes(gzip_bomb(1000), "k", "jsonl", limit=999)
    damaged = bytearray(one + two)
    damaged[-5] ^= 1  # the second member's CRC
    for bad in (bytes(damaged), (one + two)[:-3], one + b"garbage"):
        with pytest.raises(CorruptObject, match="object k is not a complete jsonl file"):
            gunzip_bytes(bad, "k", "jsonl")


def test_inspect_escapes_control_characters_in_header_names_too():
    names = ["\x1b[2J", "a\nb", "tab\there", "\u2028", "\x00", "\x85", "\u202e"]
    record = Record("t", 0, 1, b"k\x1b", b"v\n", 0, 0, tuple((name, name.encode()) for name in names))
    line = text_line(record)
    assert line.isprintable(), repr(line)
    for name in names:
        assert repr(name)[1:-1] + "=" in line, (name, line)
