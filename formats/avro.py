"""Avro objects via fastavro: the physical record shape as an Avro record."""

from __future__ import annotations

import io

import fastavro
import pyarrow as pa

from .base import ObjectFormat, from_rows, to_rows

CODECS = ("null", "deflate", "snappy", "zstandard")
# A fixed sync marker keeps output deterministic: a retried task rewrites identical bytes.
SYNC_MARKER = b"topicvault.sync!"
SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "KafkaRecord",
        "namespace": "topicvault",
        "fields": [
            {"name": "key", "type": ["null", "bytes"]},
            {"name": "value", "type": ["null", "bytes"]},
            {
                "name": "headers",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Header",
                        "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}],
                    },
                },
            },
            {
                "name": "metadata",
                "type": {
                    "type": "record",
                    "name": "Metadata",
                    "fields": [
                        {"name": "topic", "type": "string"},
                        {"name": "partition", "type": "int"},
                        {"name": "offset", "type": "long"},
                        {"name": "timestamp", "type": "long"},
                        {"name": "timestampType", "type": "int"},
                    ],
                },
            },
        ],
    }
)


class AvroFormat(ObjectFormat):
    """Avro container file of KafkaRecord records."""

    name = "avro"
    extension = "avro"

    def __init__(self, compression: str = "deflate") -> None:
        self.codec = {"zstd": "zstandard", "none": "null"}.get(compression, compression)

    def write(self, table: pa.Table) -> bytes:
        sink = io.BytesIO()
        fastavro.writer(sink, SCHEMA, to_rows(table), codec=self.codec, sync_marker=SYNC_MARKER)
        return sink.getvalue()

    def read(self, data: bytes, object_key: str) -> pa.Table:
        try:
            rows = list(fastavro.reader(io.BytesIO(data)))
        except Exception as exc:  # fastavro raises many types on damaged input
            raise self.corrupt(object_key, f"{type(exc).__name__}: {exc}") from None
        return from_rows(rows)
