"""Formats and the envelope: nasty records survive every format and codec, damage is detected."""

from __future__ import annotations

import io

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from topicvault.core.envelope import ARROW_SCHEMA, Record, batch_to_records, record_sizes, records_to_batch
from topicvault.core.errors import CorruptObject, TopicvaultError
from topicvault.formats import FORMAT_NAMES, format_for_extension, resolve_format

CODECS = {"parquet": ["zstd", "snappy", "gzip", "none"], "avro": ["null", "deflate", "snappy", "zstd"],
          "jsonl": ["none", "gzip"], "csv": ["none", "gzip"]}
ALL = [(name, codec) for name in FORMAT_NAMES for codec in CODECS[name]]


def nasty() -> list[Record]:
    return [
        Record("t.x-1", 0, 0, None, b"null key", 0, 0, ()),
        Record("t.x-1", 0, 1, b"", b"empty key", 1, 1, ()),
        Record("t.x-1", 0, 2, b"tomb", None, 4_102_444_800_000, 0, ()),
        Record("t.x-1", 0, 5, b"k", b"", 1_700_000_000_000, 1, (("dup", b"1"), ("dup", b"2"), ("dup", None))),
        Record("t.x-1", 0, 9, b"\xff\xfe\x00", b"\x80\xc3\x28 not utf-8", 7, 0, (("ünï-名前", b"\x00"), ("e", b""))),
        Record("t.x-1", 0, 10, b"big", bytes(range(256)) * 4096, 8, 0, ()),
        Record("t.x-1", 0, 2**63 - 1, None, None, 9, 0, (("n", None),)),
    ]


def table() -> pa.Table:
    return pa.Table.from_batches([records_to_batch(nasty())])


def test_envelope_conversions_keep_every_distinction():
    batch = records_to_batch(nasty())
    assert batch.schema == ARROW_SCHEMA
    assert batch_to_records(batch) == nasty()
    assert record_sizes(batch)[3] == 1 + 0 + (3 + 1) + (3 + 1) + 3


def test_record_sizes_count_key_value_and_every_header_in_slices_chunks_and_null_header_lists():
    def expected(records: list[Record]) -> list[int]:
        return [len(r.key or b"") + len(r.value or b"") + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
                for r in records]

    records = nasty() * 3
    batch = records_to_batch(records)
    assert record_sizes(batch) == expected(records)
    for start, length in ((1, 4), (5, 0), (7, 9), (len(records) - 1, 1)):
        assert record_sizes(batch.slice(start, length)) == expected(records[start:start + length])
    chunked = pa.Table.from_batches([batch.slice(0, 4), batch.slice(4)])
    assert record_sizes(chunked) == expected(records)
    # A null headers list (another writer's Arrow data) counts as no headers.
    headers = pa.array([None] + batch.column("headers").to_pylist()[1:], batch.schema.field("headers").type)
    nulled = batch.set_column(batch.schema.get_field_index("headers"), "headers", headers)
    assert record_sizes(nulled) == [expected(records)[0] - sum(len(k.encode()) + len(v or b"") for k, v in records[0].headers),
                                    *expected(records)[1:]]


@pytest.mark.parametrize("name, codec", ALL)
def test_round_trip_is_exact_and_deterministic(name, codec):
    fmt = resolve_format(name, codec)
    data = fmt.write(table())
    assert fmt.write(table()) == data, "writing twice must give identical bytes"
    back = format_for_extension(fmt.extension).read(data, f"obj.{fmt.extension}")
    assert back.schema == ARROW_SCHEMA
    assert batch_to_records(back) == nasty()


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_bytes_do_not_depend_on_how_records_were_batched(name):
    # Backup writes an object from whatever batches the consumer returned; a retried task or
    # the DataFrame path must produce the same object. 70,000 records span two Parquet row groups.
    count = 70_000 if name == "parquet" else 7_000
    records = [Record("t", 0, i, b"k%d" % (i % 97) if i % 5 else None, bytes([i % 251]) * (i % 300), i, 0,
                      (("h", b"%d" % i),) if i % 3 == 0 else ()) for i in range(count)]
    whole = pa.Table.from_batches([records_to_batch(records)])
    fmt = resolve_format(name)
    data = fmt.write(whole)
    for size in (count // 3, 777, count - 1):
        assert fmt.write(pa.Table.from_batches(whole.to_batches(max_chunksize=size))) == data, f"batches of {size}"
    assert batch_to_records(format_for_extension(fmt.extension).read(data, "obj")) == records


def test_parquet_row_groups_hold_a_few_mib_of_large_records_whatever_their_batches():
    # A backup holds a row group's records in memory before encoding it: 65,536 records of
    # 2 KB were 128 MiB, more than the object (64 MiB) itself. A row group now also ends before
    # the record that would take its payload past ROW_GROUP_BYTES, decided record by record
    # so the bytes still do not depend on how the records arrived.
    from topicvault.formats.parquet import ROW_GROUP_BYTES

    records = [Record("t", 0, i, b"k%d" % i, bytes([i % 251]) * (1500 + i % 1100), i, 0,
                      (("h", b"%d" % i),) if i % 4 == 0 else ()) for i in range(12_000)]
    whole = pa.Table.from_batches([records_to_batch(records)])
    fmt = resolve_format("parquet")
    data = fmt.write(whole)
    for size in (4_321, 999, 11_999):
        assert fmt.write(pa.Table.from_batches(whole.to_batches(max_chunksize=size))) == data, f"batches of {size}"
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    sizes = record_sizes(whole)
    start, groups = 0, []
    for index in range(metadata.num_row_groups):
        rows = metadata.row_group(index).num_rows
        groups.append(sum(sizes[start:start + rows]))
        # Each group is full: the next record would not have fitted.
        if start + rows < len(records):
            assert groups[-1] + sizes[start + rows] > ROW_GROUP_BYTES
        start += rows
    assert start == len(records) and metadata.num_row_groups >= 3
    assert max(groups) <= ROW_GROUP_BYTES <= 16 * 2**20
    assert batch_to_records(fmt.read(data, "obj")) == records


def test_parquet_streams_each_row_group_in_even_batches_of_about_the_bytes_asked():
    """A restore decodes an object a batch at a time: each batch about `batch_bytes` (at most
    half as much again), none spanning two row groups (one that did was assembled by copying
    its records), every record once and in order."""
    records = [Record("t", 0, i, b"k%d" % i, bytes([i % 251]) * (1500 + i % 1100), i, 0,
                      (("h", b"%d" % i),) if i % 4 == 0 else ()) for i in range(12_000)]
    fmt = resolve_format("parquet")
    data = fmt.write(pa.Table.from_batches([records_to_batch(records)]))
    groups = pq.ParquetFile(io.BytesIO(data)).metadata
    group_rows = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
    offsets, batches = fmt.read_stream(data, "obj", 50_000, 2 * 2**20)
    batches = list(batches)
    assert offsets.to_pylist() == list(range(12_000))
    assert batch_to_records(pa.Table.from_batches(batches)) == records
    assert max(batch.nbytes for batch in batches) < 3 * 2**20
    rows = iter(batch.num_rows for batch in batches)
    for group in group_rows:  # the batches add up to each group in turn, evenly
        parts = [next(rows)]
        while sum(parts) < group:
            parts.append(next(rows))
        assert sum(parts) == group and max(parts) - min(parts) < len(parts), (group, parts)


def test_parquet_with_an_empty_row_group_streams_the_records_of_the_others():
    """pyarrow writes a row group of no rows when given an empty table: such a file is intact."""
    from topicvault.formats.parquet import FILE_SCHEMA, _physical

    records = [Record("t", 0, i, b"k%d" % i, b"v%d" % i, i, 0, ()) for i in range(10)]
    table = _physical(pa.Table.from_batches([records_to_batch(records)]).combine_chunks())
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, FILE_SCHEMA) as writer:
        writer.write_table(table.slice(0, 4))
        writer.write_table(table.slice(4, 0))
        writer.write_table(table.slice(4))
    data = sink.getvalue()
    assert [pq.ParquetFile(io.BytesIO(data)).metadata.row_group(i).num_rows for i in range(3)] == [4, 0, 6]
    offsets, batches = resolve_format("parquet").read_stream(data, "obj", 100, 2**20)
    assert offsets.to_pylist() == list(range(10))
    assert batch_to_records(pa.Table.from_batches(list(batches))) == records


@pytest.mark.parametrize("name, codec", ALL)
def test_empty_table_round_trips(name, codec):
    fmt = resolve_format(name, codec)
    empty = pa.Table.from_batches([records_to_batch([])])
    assert fmt.read(fmt.write(empty), "empty").num_rows == 0


@pytest.mark.parametrize("name, codec", ALL)
def test_truncated_objects_are_reported_with_format_and_key(name, codec):
    fmt = resolve_format(name, codec)
    data = fmt.write(table())
    for cut in (1, len(data) // 3, len(data) // 2, len(data) - 5):
        with pytest.raises(CorruptObject) as caught:
            fmt.read(data[:cut], "topic=t/partition=0/x")
        assert name in str(caught.value) and "topic=t/partition=0/x" in str(caught.value)


def test_parquet_physical_layout_read_with_plain_pyarrow():
    data = resolve_format("parquet").write(table())
    physical = pq.read_table(io.BytesIO(data))
    assert physical.column_names == ["key", "value", "headers", "metadata"]
    row = physical.to_pylist()[3]
    assert row["metadata"] == {"topic": "t.x-1", "partition": 0, "offset": 5, "timestamp": 1_700_000_000_000,
                               "timestampType": 1}
    assert row["headers"] == [{"key": "dup", "value": b"1"}, {"key": "dup", "value": b"2"}, {"key": "dup", "value": None}]
    assert pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0).column(0).compression == "ZSTD"


def test_avro_physical_layout_read_with_plain_fastavro():
    rows = list(fastavro.reader(io.BytesIO(resolve_format("avro").write(table()))))
    assert rows[0]["key"] is None and rows[1]["key"] == b""
    assert rows[2]["value"] is None and rows[3]["value"] == b""
    assert rows[6]["metadata"]["offset"] == 2**63 - 1


@pytest.mark.parametrize("name, codec", [("xml", None), ("parquet", "lz9"), ("jsonl", "zstd")])
def test_unknown_formats_and_codecs_name_the_choices(name, codec):
    with pytest.raises(TopicvaultError, match="choose one of"):
        resolve_format(name, codec)
