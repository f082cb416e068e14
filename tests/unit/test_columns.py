"""The bulk column conversions of the backup and restore hot paths equal the plain per-record
conversions they replaced, on header-heavy records, sliced and chunked arrays (pure logic)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from topicvault.core.envelope import (
    HEADERS_TYPE,
    Record,
    batch_to_records,
    headers_column,
    record_sizes,
    records_to_batch,
)
from topicvault.core.rotation import Rotation, cut_points
from topicvault.source.restore.kafka_writer import header_lists


def header_rows(count: int, seed: int = 3) -> list:
    """Header lists of every shape: none, null, empty, duplicates, null and empty values, unicode."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        kind = rng.randrange(5)
        rows.append(None if kind == 0 else [] if kind == 1 else [
            (rng.choice(["dup", "ünïcødé-名前", ""]), rng.choice([None, b"", b"\x00\xff", b"v" * rng.randrange(50)]))
            for _ in range(rng.randrange(1, 4))
        ])
    return rows


def pieces(array: pa.Array) -> list:
    """The array whole, sliced in several places (slices keep offsets into the whole child array),
    and as a chunked array."""
    n = len(array)
    return [array, array.slice(0, 1), array.slice(3, 100), array.slice(n // 2), array.slice(n - 1), array.slice(7, 0),
            pa.chunked_array([array.slice(0, 11), array.slice(11, 40)])]


def test_header_lists_equal_the_row_by_row_conversion():
    array = pa.array(header_rows(500), HEADERS_TYPE)
    for piece in pieces(array):
        expected = [[(h["key"], h["value"]) for h in row] if row else None for row in piece.to_pylist()]
        assert header_lists(piece) == expected


def test_headers_column_equals_the_per_record_conversion():
    rows = header_rows(500)
    built = headers_column(rows)
    assert built.equals(pa.array([list(h) if h else [] for h in rows], HEADERS_TYPE))
    assert built.null_count == 0  # no headers is an empty list, as Kafka has no null header list
    assert headers_column([]).equals(pa.array([], HEADERS_TYPE))


def test_record_sizes_sum_each_records_key_value_and_headers():
    rng = random.Random(5)
    records = [Record("t", 0, i, rng.choice([None, b"", b"k" * rng.randrange(30)]),
                      rng.choice([None, b"", b"v" * rng.randrange(300)]), i, 0, tuple(h or ()))
               for i, h in enumerate(header_rows(400))]
    batch = records_to_batch(records)
    table = pa.Table.from_batches([batch.slice(0, 150), batch.slice(150)])
    for piece in [batch, batch.slice(5, 200), batch.slice(399), table, table.slice(100, 120)]:
        expected = [len(r.key or b"") + len(r.value or b"") + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
                    for r in batch_to_records(piece)]
        assert record_sizes(piece) == expected
    no_headers = records_to_batch([Record("t", 0, 0, b"k", b"vv", 1, 0, ())])
    assert record_sizes(no_headers) == [3]


def walk_cut_points(sizes, filled_records, filled_bytes, rotation):
    """The per-record rule (no time buckets): a new object before a record that would pass
    max_records or max_bytes, unless the open object is empty."""
    records, payload = filled_records, filled_bytes
    for index, size in enumerate(sizes):
        if records and (records >= rotation.max_records or payload + size > rotation.max_bytes):
            yield index
            records, payload = 0, 0
        records += 1
        payload += size


@pytest.mark.parametrize("seed", range(200))
def test_cut_points_equal_the_per_record_rule(seed):
    rng = random.Random(seed)
    rotation = Rotation(max_records=rng.choice([1, 2, 5, 50, 1000]), max_bytes=rng.choice([1, 100, 299, 5000, 10**6]))
    largest = rng.choice([1, 300, 3000])
    sizes = [rng.choice([0, rng.randrange(0, largest)]) for _ in range(rng.randrange(0, 200))]
    filled_records = rng.randrange(0, rotation.max_records + 2)
    filled_bytes = 0 if filled_records == 0 else rng.randrange(0, rotation.max_bytes + 50)
    assert list(cut_points(sizes, filled_records, filled_bytes, rotation)) == list(
        walk_cut_points(sizes, filled_records, filled_bytes, rotation))


@pytest.mark.parametrize("sizes, filled_records, filled_bytes, cuts", [
    ([1, 1, 1], 7, 7, []),            # ends at exactly max_records (10)
    ([1, 1, 1, 1], 7, 7, [3]),        # one record more: a new object before it
    ([10], 1, 90, []),                # ends at exactly max_bytes (100)
    ([11], 1, 90, [0]),               # one byte more
    ([150, 1], 0, 0, [1]),            # a record bigger than max_bytes fills an empty object alone
])
def test_cut_points_at_the_edges(sizes, filled_records, filled_bytes, cuts):
    rotation = Rotation(max_records=10, max_bytes=100)
    assert list(cut_points(sizes, filled_records, filled_bytes, rotation)) == cuts
    assert list(walk_cut_points(sizes, filled_records, filled_bytes, rotation)) == cuts
