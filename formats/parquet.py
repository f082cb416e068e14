"""Parquet objects (the default): columnar, zstd, written from Arrow without per-row Python."""

from __future__ import annotations

import io
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..core.envelope import ARROW_SCHEMA, HEADERS_TYPE, record_sizes, timestamp_column, timestamps_ms
from ..core.rotation import Rotation, cut_points
from .object_format import METADATA_TYPE, ObjectFormat, ObjectWriter, check_inflated_size, records_per_batch

CODECS = ("zstd", "snappy", "gzip", "none")
FILE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("metadata", METADATA_TYPE),
    ]
)
# A row group ends at this many records, or before the record that would take its payload past
# ROW_GROUP_BYTES: a backup holds one group's records (and a copy made contiguous) before encoding
# it, so large records must not make it larger than a few MiB (65,536 records of 2 KB were 128 MiB).
ROW_GROUP_RECORDS = 65_536
ROW_GROUP_BYTES = 8 * 1024 * 1024
ROW_GROUP = Rotation(ROW_GROUP_RECORDS, ROW_GROUP_BYTES)
# Columns whose min/max statistics are written: the ones a reader prunes row groups by. Those of
# key, value and headers would be copies of the largest and smallest values (three more copies of
# a 64 MiB value while it is encoded: tests/unit/test_large_record_memory.py) that nothing reads.
STATISTICS_COLUMNS = ["metadata.partition", "metadata.offset", "metadata.timestamp"]
# Records decoded first to learn the decoded size of an object's records (see read_stream).
SIZE_PROBE_RECORDS = 256


def _physical(table: pa.Table) -> pa.Table:
    """The file's columns from an envelope table whose columns are single chunks."""
    metadata = pa.StructArray.from_arrays(
        [
            table.column("topic").chunk(0),
            table.column("partition").chunk(0),
            table.column("offset").chunk(0),
            timestamps_ms(table).combine_chunks(),
            table.column("timestampType").chunk(0),
        ],
        fields=list(METADATA_TYPE),
    )
    return pa.Table.from_arrays(
        [table.column("key"), table.column("value"), table.column("headers"), metadata], schema=FILE_SCHEMA
    )


class ParquetObjectWriter(ObjectWriter):
    """Encodes row groups (see ROW_GROUP) as records arrive.

    Row groups are cut record by record and each is made contiguous before encoding, so the
    bytes depend only on the records, not on how they arrived in batches; only one row group's
    records wait in memory.
    """

    def __init__(self, compression: str) -> None:
        self._sink = io.BytesIO()
        self._writer = pq.ParquetWriter(self._sink, FILE_SCHEMA, compression=compression,
                                        write_statistics=STATISTICS_COLUMNS)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0

    def add(self, batch: pa.RecordBatch, sizes: Sequence[int]) -> None:
        start = 0
        for cut in cut_points(sizes, self._pending_rows, self._pending_bytes, ROW_GROUP):
            if cut > start:
                self._pending.append(batch.slice(start, cut - start))
            self._write_group()
            start = cut
        if start < batch.num_rows:
            self._pending.append(batch.slice(start))
            self._pending_rows += batch.num_rows - start
            self._pending_bytes += sum(sizes[start:])

    def finish(self) -> bytes:
        if self._pending_rows:
            self._write_group()
        self._writer.close()
        return self._sink.getvalue()

    def _write_group(self) -> None:
        """Encode the pending records as one row group. They are let go of as soon as they are
        combined, so their batches are freed before encoding (records are not held twice)."""
        pending, self._pending, self._pending_rows, self._pending_bytes = self._pending, [], 0, 0
        combined = pa.Table.from_batches(pending).combine_chunks()
        del pending
        self._writer.write_table(_physical(combined), row_group_size=ROW_GROUP_RECORDS)


class ParquetFormat(ObjectFormat):
    """Columns key, value, headers, metadata{topic, partition, offset, timestamp, timestampType}."""

    name = "parquet"
    extension = "parquet"
    reads_views = True  # decoding copies values out of the pages (tests/unit/test_memory_reuse.py)

    def __init__(self, compression: str = "zstd") -> None:
        self.compression = compression

    def write(self, table: pa.Table) -> bytes:
        writer = self.open_writer()
        for batch in table.to_batches():
            writer.add(batch, record_sizes(batch))
        return writer.finish()

    def open_writer(self) -> "ParquetObjectWriter":
        return ParquetObjectWriter(self.compression)

    def read(self, data: bytes, object_key: str) -> pa.Table:
        try:
            physical = read_bounded(data, object_key)
            physical = physical.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
        except (pa.ArrowException, KeyError, OSError) as exc:
            raise self.corrupt(object_key, exc) from None
        return _envelope(physical)

    def read_stream(self, data: bytes, object_key: str, batch_records: int,
                    batch_bytes: int | None = None) -> tuple[pa.Array, Iterator[pa.RecordBatch]]:
        # Only the offset column is decoded up front; records are decoded a batch at a time.
        try:
            parquet = pq.ParquetFile(pa.BufferReader(data))  # no copy, of bytes or of a view
            check_row_groups(parquet.metadata, object_key)
            offsets = parquet.read(columns=["metadata.offset"]).column("metadata").combine_chunks().field("offset")
        except (pa.ArrowException, KeyError, OSError) as exc:
            raise self.corrupt(object_key, exc) from None
        return offsets, self._batches(parquet, object_key, batch_records, batch_bytes)

    def _batches(self, parquet: pq.ParquetFile, object_key: str, batch_records: int,
                 batch_bytes: int | None) -> Iterator[pa.RecordBatch]:
        try:
            if batch_bytes is not None:
                # The file does not say how large its records decode (dictionary pages, codecs):
                # the first few tell, then the batch size is set.
                probe = next(parquet.iter_batches(batch_size=SIZE_PROBE_RECORDS, columns=FILE_SCHEMA.names), None)
                if probe is not None:
                    batch_records = records_per_batch(batch_records, batch_bytes, probe.nbytes, probe.num_rows)
                del probe
            # A row group at a time, in even batches of about batch_records (at most half as
            # many again): a batch that spans two row groups is assembled by copying its records,
            # and each batch costs its own conversions (a group of 5,084 records read as 4,934 +
            # 150 took a fifth longer than whole).
            for group in range(parquet.num_row_groups):
                rows = parquet.metadata.row_group(group).num_rows
                if rows == 0:
                    continue  # pyarrow writes an empty group for an empty table: nothing to read
                even = -(-rows // max(1, round(rows / batch_records)))
                for batch in parquet.iter_batches(batch_size=even, row_groups=[group], columns=FILE_SCHEMA.names):
                    physical = pa.Table.from_batches([batch]).cast(FILE_SCHEMA)
                    yield from _envelope(physical).to_batches()
        except (pa.ArrowException, KeyError, OSError) as exc:
            raise self.corrupt(object_key, exc) from None


def check_row_groups(metadata: pq.FileMetaData, object_key: str) -> None:
    """Refuse a file with a row group whose columns inflate (as its metadata says) beyond
    MAX_INFLATED_BYTES, before any page is decompressed. The sizes are the file's word: a file
    crafted to state less than its pages inflate to is not caught here (see
    docs/threat-model-encryption.md: an encrypted archive's objects cannot be crafted)."""
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        inflated = sum(row_group.column(c).total_uncompressed_size for c in range(row_group.num_columns))
        check_inflated_size(inflated, object_key)


def read_bounded(data: bytes, object_key: str) -> pa.Table:
    """A whole Parquet file (any schema) as a table, its row groups checked first (check_row_groups)."""
    parquet = pq.ParquetFile(pa.BufferReader(data))
    check_row_groups(parquet.metadata, object_key)
    return parquet.read()


def _envelope(physical: pa.Table) -> pa.Table:
    """Envelope table (ARROW_SCHEMA) from the file's columns."""
    metadata = physical.column("metadata").combine_chunks()
    micros = timestamp_column(metadata.field("timestamp"), metadata.field("topic"), metadata.field("partition"),
                              metadata.field("offset"))
    return pa.Table.from_arrays(
        [
            physical.column("key"),
            physical.column("value"),
            metadata.field("topic"),
            metadata.field("partition"),
            metadata.field("offset"),
            micros,
            metadata.field("timestampType"),
            physical.column("headers"),
        ],
        schema=ARROW_SCHEMA,
    )
