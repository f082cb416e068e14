"""Lenses Stream Reactor's S3 sink (lensesio/stream-reactor) with `store.envelope=true`.

Names (kafka-connect-cloud-common/.../sink/naming/FileNamer.scala, .../config/padding/
PaddingService.scala): `<topic>/<partition>/<offset, 12 digits>_<earliest ts>_<latest ts>.<ext>`
(OffsetFileNamer; older releases: `<offset>.<ext>`), or with PARTITIONBY
`<folders>/<topic>(<partition>_<offset>).<ext>` (TopicPartitionOffsetFileNamer); an optional
suffix before the extension. A file is named when it is committed, so the name's offset is not
taken to be its first record's: the reader finds each object's first offset itself.

Envelope (kafka-connect-cloud-common/.../sink/transformers/EnvelopeWithSchemaTransformer.scala
and SchemalessEnvelopeTransformer.scala): `key`, `value`, `headers` (a struct or map: one entry
per header name, so repeated names and order are lost), `metadata` {timestamp, topic, partition,
offset}. Avro and Parquet carry each header's Connect type (bytes or string), so they say how a
value was stored; the JSON form marks byte keys and values with `keyIsArray` / `valueIsArray`
(base64) but not header values, which are text with Connect's default SimpleHeaderConverter.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pyarrow as pa

from ...core.envelope import Record
from ...core.errors import CorruptObject
from ..object_format import parse_json
from ..parquet import read_bounded
from .connect_values import arrow_rows, avro_rows, typed_fields
from .layout import (
    Decoded,
    PeerKey,
    PeerLayout,
    PeerOptions,
    b64,
    connect_bytes,
    header_value,
    headers_hint,
    table_of,
    typed_header_bytes,
    typed_hint,
)
from .quix import NAME as QUIX_NAME

_NAMES = (
    re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)/(?P<partition>\d+)/(?P<offset>\d+)(?:_\d+_\d+)?[^/.]*"
               r"\.(?P<ext>avro|parquet|json)"),
    re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)\((?P<partition>\d+)_(?P<offset>\d+)\)[^/.]*\.(?P<ext>avro|parquet|json)"),
)


class LensesLayout(PeerLayout):
    """Lenses envelope objects (Avro, Parquet or JSON)."""

    name = "lenses"
    keeps = ("keeps key, value, timestamp, partition and offset from the envelope; headers are a map (order and "
             "repeated names lost); non-bytes values come back as JSON text")
    name_offset_is_first = False

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and the offset in the name, or None."""
        if QUIX_NAME.fullmatch(key):  # a 19-digit offset with a Quix extension is a Quix name
            return None
        for pattern in _NAMES:
            match = pattern.fullmatch(key)
            if match:
                return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]))
        return None

    def header_note(self, options: PeerOptions) -> str | None:
        """Only the JSON form leaves the header encoding unsaid."""
        return f"JSON {super().header_note(options)}; Avro and Parquet header values say their type"

    def content_hints(self, data: bytes, key: str, options: PeerOptions,
                      companion: Callable[[str], bytes | None]) -> dict[str, str | None]:
        """Typed keys and values in Avro and Parquet; JSON header values all base64."""
        try:
            typed = typed_fields(data)
            if typed is not None:
                return typed_hint(self.name, key, [f for f in typed if f in ("key", "value")])
            rows = [parse_json(line, key) for line in data.splitlines() if line.strip()]
        except (ValueError, pa.ArrowInvalid):
            return {}
        values = [v for row in rows if isinstance(row, dict) for _, v in _header_items(row.get("headers"))]
        return headers_hint(self.name, key, values, options)

    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """An envelope object as envelope rows, with the offsets its metadata holds."""
        key = obj.key
        header_encoding = options.header_encoding or self.default_header_encoding
        try:
            if data[:4] == b"Obj\x01":
                rows, as_json = avro_rows(data), False
            elif data[:4] == b"PAR1":
                rows, as_json = arrow_rows(read_bounded(data, key)), False
            else:
                rows, as_json = [parse_json(line, key) for line in data.splitlines() if line.strip()], True
            records = []
            for row in rows:
                metadata = row.get("metadata") or {}
                if "offset" not in metadata:
                    raise CorruptObject(f"Lenses object {key} has no metadata.offset: it was not written with "
                                        "store.envelope=true (with metadata), which restore needs")
                records.append(Record(
                    obj.topic, obj.partition, int(metadata["offset"]),
                    _bytes(row.get("key"), as_json, row.get("keyIsArray", False), key),
                    _bytes(row.get("value"), as_json, row.get("valueIsArray", False), key),
                    int(metadata.get("timestamp") or 0), 0,
                    tuple((name, header_value(value, header_encoding, key, options.wording) if as_json else typed_header_bytes(value))
                          for name, value in _header_items(row.get("headers"))),
                ))
        except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
            raise CorruptObject(f"Lenses object {key} cannot be read ({exc})") from None
        return Decoded(table_of(records), record_offsets=True)


def _header_items(headers: Any) -> list[tuple[str, Any]]:
    if not headers:
        return []
    return list(headers.items()) if isinstance(headers, dict) else [tuple(item) for item in headers]


def _bytes(node: Any, as_json: bool, is_array: bool, where: str) -> bytes | None:
    """Avro/Parquet carry bytes as bytes; JSON carries them base64-encoded (flagged for key and value)."""
    if node is None or isinstance(node, bytes):
        return node
    if as_json and isinstance(node, str):
        return b64(node, where) if is_array else node.encode()
    return connect_bytes(node)


LAYOUT = LensesLayout()
