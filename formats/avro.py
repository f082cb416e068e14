"""Avro objects via fastavro: the physical record shape as an Avro record."""

from __future__ import annotations

import io
import zlib

import cramjam
import fastavro
import pyarrow as pa

from .object_format import (
    MAX_BLOCK_BYTES,
    InflatesTooMuch,
    ObjectFormat,
    check_inflated_size,
    from_rows,
    inflate_bounded,
    inflate_limit_error,
    snappy_stated_size,
    to_rows,
)

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
        except InflatesTooMuch:
            raise inflate_limit_error(object_key, MAX_BLOCK_BYTES) from None  # named by the block: say the object
        except Exception as exc:  # fastavro raises many types on damaged input
            raise self.corrupt(object_key, f"{type(exc).__name__}: {exc}") from None
        return from_rows(rows)


_BLOCK = "(an Avro block)"  # named by the reader, which knows the object (AvroFormat.read)


def _read_long(fo) -> int:
    """An Avro long (zigzag varint) from `fo`."""
    value = shift = 0
    while True:
        byte = fo.read(1)
        if not byte:
            raise EOFError("a block length is cut short")
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7


def _inflate_deflate(data: bytes) -> bytes:
    # Raw deflate, as Avro's deflate codec writes it.
    return bytes(inflate_bounded(zlib.decompressobj(-15), data, _BLOCK, MAX_BLOCK_BYTES))


def _inflate_snappy(data: bytes) -> bytes:
    check_inflated_size(snappy_stated_size(data[:-4]), _BLOCK, MAX_BLOCK_BYTES)  # the last 4 bytes: its CRC
    out = bytes(cramjam.snappy.decompress_raw(data[:-4]))
    if zlib.crc32(out).to_bytes(4, "big") != data[-4:]:
        raise ValueError("a snappy block fails its CRC")
    return out


def _inflate_zstd(data: bytes) -> bytes:
    from .peers.layout import unzstd_bounded

    return unzstd_bounded(data, _BLOCK, MAX_BLOCK_BYTES)


def _bounded_block_reader(inflate):
    """A fastavro block reader (fastavro.read.BLOCK_READERS, its documented hook for codecs)
    that inflates each block at most to MAX_BLOCK_BYTES: fastavro's own inflate a block whole."""

    def read_block(fo) -> io.BytesIO:
        return io.BytesIO(inflate(fo.read(_read_long(fo))))

    return read_block


for _codec, _inflate in (("deflate", _inflate_deflate), ("snappy", _inflate_snappy), ("zstandard", _inflate_zstd)):
    fastavro.read.BLOCK_READERS[_codec] = _bounded_block_reader(_inflate)
