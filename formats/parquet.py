"""Parquet objects (the default): columnar, zstd, written from Arrow without per-row Python."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.envelope import ARROW_SCHEMA, HEADERS_TYPE, TIMESTAMP_TYPE, timestamps_ms
from .base import METADATA_TYPE, ObjectFormat

CODECS = ("zstd", "snappy", "gzip", "none")
FILE_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("metadata", METADATA_TYPE),
    ]
)


class ParquetFormat(ObjectFormat):
    """Columns key, value, headers, metadata{topic, partition, offset, timestamp, timestampType}."""

    name = "parquet"
    extension = "parquet"

    def __init__(self, compression: str = "zstd") -> None:
        self.compression = compression

    def write(self, table: pa.Table) -> bytes:
        table = table.combine_chunks()
        metadata = pa.StructArray.from_arrays(
            [
                table.column("topic").combine_chunks(),
                table.column("partition").combine_chunks(),
                table.column("offset").combine_chunks(),
                timestamps_ms(table).combine_chunks(),
                table.column("timestampType").combine_chunks(),
            ],
            fields=list(METADATA_TYPE),
        )
        physical = pa.Table.from_arrays(
            [table.column("key"), table.column("value"), table.column("headers"), metadata], schema=FILE_SCHEMA
        )
        sink = io.BytesIO()
        pq.write_table(physical, sink, compression=self.compression, row_group_size=1 << 20)
        return sink.getvalue()

    def read(self, data: bytes, object_key: str) -> pa.Table:
        try:
            physical = pq.read_table(io.BytesIO(data))
            physical = physical.select(FILE_SCHEMA.names).cast(FILE_SCHEMA)
        except (pa.ArrowException, KeyError, OSError) as exc:
            raise self.corrupt(object_key, exc) from None
        metadata = physical.column("metadata").combine_chunks()
        micros = pc.multiply(metadata.field("timestamp"), 1000).cast(TIMESTAMP_TYPE)
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
