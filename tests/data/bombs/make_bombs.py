"""Writes the two record bombs tests/unit/test_decompression_bombs.py reads: one record whose value is
1 GiB of zeros, in Parquet (zstd) and Avro (deflate) objects of 34 KB and about 1 MB.

Kept as files because building them takes 3-8 GiB of memory for a moment (Arrow's Parquet writer
holds the plain page, its compressed copy and a dictionary attempt; fastavro a bytes copy), which
on a loaded CI machine invited the OOM killer. Run from the repository root to write them again:
    .venv/bin/python tests/data/bombs/make_bombs.py
"""

from __future__ import annotations

import io
import mmap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from topicvault.core.envelope import Record, records_to_batch
from topicvault.formats import resolve_format
from topicvault.formats.parquet import _physical

HERE = Path(__file__).parent
VALUE_BYTES = 1 << 30


def one_gibibyte_record() -> pa.Table:
    """One record whose value is 1 GiB of zeros, backed by an anonymous mapping (its pages are
    the zero page until written, so building it takes no memory)."""
    table = pa.Table.from_batches([records_to_batch([Record("t", 0, 0, None, b"", 0)])])
    field = table.schema.field("value")
    offsets = pa.array([0, VALUE_BYTES], pa.int64() if field.type == pa.large_binary() else pa.int32())
    value = pa.Array.from_buffers(field.type, 1, [None, offsets.buffers()[1], pa.py_buffer(mmap.mmap(-1, VALUE_BYTES))])
    return table.set_column(table.schema.get_field_index("value"), field, value)


def main() -> None:
    table = one_gibibyte_record()
    parquet = io.BytesIO()
    # topicvault's own writer tries a dictionary and keeps statistics: the same file, less memory without.
    pq.write_table(_physical(table), parquet, compression="zstd", use_dictionary=False, write_statistics=False)
    (HERE / "gibibyte-value.zstd.parquet").write_bytes(parquet.getvalue())
    (HERE / "gibibyte-value.deflate.avro").write_bytes(resolve_format("avro", "deflate").write(table))


if __name__ == "__main__":
    main()
