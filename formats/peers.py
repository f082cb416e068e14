"""Objects other Kafka-to-S3 sinks write, decoded into envelope tables (read only).

Evidence (read from the sinks' source):
- Aiven, Aiven-Open/cloud-storage-connectors-for-apache-kafka, commons/src/main/java/io/aiven/
  kafka/connect/common/output/:
  * csv (plainwriter/): fields in `format.output.fields` order joined by ",", records by "\\n",
    no header row. key: base64 (null written as nothing); value: base64 or raw
    (`format.output.fields.value.encoding=none`), null as nothing; offset and timestamp (epoch
    ms) as decimal text; headers: `base64(key):base64(value);` per header, in order.
  * jsonl (jsonwriter/): one object per line with the chosen fields; key/value/header values
    through Connect's JsonConverter without schemas, so bytes are base64 strings and null is
    null; `timestamp` is ISO-8601 (ISO_INSTANT); headers `[{"key": k, "value": v}, ...]`.
  * parquet (SinkSchemaBuilder.java): record `connector_records` with the chosen fields in
    order; offset and timestamp are long (epoch ms); headers a map<string, value> (or null when
    a record has none), so header order and repeated header keys are lost.
  * file names carry no format suffix (only `.avro` and the compression suffix), so the
    format is recognised from the content.
- Confluent, confluentinc/kafka-connect-storage-cloud, kafka-connect-s3/.../format/RecordViews.java:
  value files hold the value only; `.keys.*` files hold the key (Parquet: struct {key});
  `.headers.*` files hold an array of {key: string, value: string} (JSON and Parquet: struct
  {headers}), the value converted to a string by Connect's Values (bytes as base64). No file
  holds offsets or timestamps: record i of a file has offset start + i, and timestamps are lost.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.envelope import Record, records_to_batch
from ..core.errors import CorruptObject, TopicvaultError
from .base import gunzip_bytes

AIVEN_FIELDS = ("key", "value", "offset", "timestamp", "headers")


@dataclass(frozen=True)
class PeerOptions:
    """What a peer's objects do not say about themselves (its connector settings)."""

    fields: tuple[str, ...] = ("value",)  # Aiven csv: format.output.fields, in order
    # base64: bytes were written base64-encoded (Aiven csv default; JSON from ByteArrayConverter);
    # none: written as text (Aiven value.encoding=none; JSON from StringConverter)
    value_encoding: str = "base64"

    def __post_init__(self) -> None:
        unknown = [f for f in self.fields if f not in AIVEN_FIELDS]
        if unknown or not self.fields:
            raise TopicvaultError(f"bad --peer-fields {','.join(self.fields)}: use some of {','.join(AIVEN_FIELDS)}")
        if self.value_encoding not in ("base64", "none"):
            raise TopicvaultError(f"bad --peer-value-encoding {self.value_encoding!r}: use base64 or none")


def _decompress(data: bytes, key: str) -> bytes:
    if key.endswith(".gz") or data[:2] == b"\x1f\x8b":
        return gunzip_bytes(data, key, "gzip")
    if key.endswith(".zst"):
        from backports import zstd  # noqa: PLC0415 - optional codec, loaded only for zstd objects

        return zstd.decompress(data)
    if key.endswith(".snappy"):
        import cramjam  # noqa: PLC0415

        return bytes(cramjam.snappy.decompress(data))
    return data


def _b64(text: str | None, where: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise CorruptObject(f"{where}: {text[:40]!r} is not base64") from None


def _json_bytes(node: Any, where: str, base64_strings: bool) -> bytes | None:
    """A JsonConverter-written key/value/header: a JSON string is base64 of bytes (ByteArrayConverter,
    `base64_strings`) or text (StringConverter); other JSON is kept as compact JSON text."""
    if node is None:
        return None
    if isinstance(node, str):
        return _b64(node, where) if base64_strings else node.encode()
    return json.dumps(node, separators=(",", ":")).encode()


def _iso_ms(text: Any) -> int:
    if text is None:
        return 0
    if isinstance(text, int):
        return text
    moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


def _table(records: list[Record]) -> pa.Table:
    return pa.Table.from_batches([records_to_batch(records)])


def decode_aiven(data: bytes, key: str, topic: str, partition: int, start_offset: int, options: PeerOptions) -> pa.Table:
    """An Aiven S3 sink object (csv, jsonl, json or parquet; compressed or not) as envelope rows."""
    data = _decompress(data, key)
    try:
        if data[:4] == b"PAR1":
            rows = _aiven_parquet(data)
        elif data.lstrip()[:1] == b"[":
            rows = [_aiven_json(row, key, options) for row in json.loads(data)]
        elif data.lstrip()[:1] == b"{":
            rows = [_aiven_json(json.loads(line), key, options) for line in data.splitlines() if line.strip()]
        else:
            rows = _aiven_csv(data, key, options)
    except (ValueError, KeyError, csv.Error, pa.ArrowInvalid) as exc:
        raise CorruptObject(f"Aiven object {key} cannot be read ({exc})") from None
    return _table([
        Record(topic, partition, row.get("offset", start_offset + i), row.get("key"), row.get("value"),
               row.get("timestamp", 0), 0, tuple(row.get("headers", ())))
        for i, row in enumerate(rows)
    ])


def _aiven_csv(data: bytes, key: str, options: PeerOptions) -> list[dict]:
    rows = []
    for line in data.decode().split("\n"):
        if not line:
            continue
        cells = line.split(",")
        if len(cells) > len(options.fields) and options.value_encoding == "none" and "value" in options.fields:
            at = options.fields.index("value")  # a raw value may hold commas
            extra = len(cells) - len(options.fields)
            cells = cells[:at] + [",".join(cells[at:at + extra + 1])] + cells[at + extra + 1:]
        if len(cells) != len(options.fields):
            raise CorruptObject(f"Aiven csv object {key}: a row has {len(cells)} fields, --peer-fields names "
                                f"{len(options.fields)} ({','.join(options.fields)})")
        row: dict[str, Any] = {}
        for name, cell in zip(options.fields, cells):
            if name == "key":
                row["key"] = _b64(cell, key) if cell else None
            elif name == "value":
                if not cell:
                    row["value"] = None
                else:
                    row["value"] = _b64(cell, key) if options.value_encoding == "base64" else cell.encode()
            elif name in ("offset", "timestamp"):
                row[name] = int(cell) if cell else 0
            else:
                row["headers"] = [
                    (_b64(k, key).decode(), _b64(v, key)) for k, _, v in (h.partition(":") for h in cell.split(";") if h)
                ]
        rows.append(row)
    return rows


def _aiven_json(node: dict, key: str, options: PeerOptions) -> dict:
    encoded = options.value_encoding == "base64"
    row: dict[str, Any] = {}
    if "key" in node:
        row["key"] = _json_bytes(node["key"], key, encoded)
    if "value" in node:
        row["value"] = _json_bytes(node["value"], key, encoded)
    if "offset" in node:
        row["offset"] = int(node["offset"])
    if "timestamp" in node:
        row["timestamp"] = _iso_ms(node["timestamp"])
    if node.get("headers"):
        row["headers"] = [(h["key"], _json_bytes(h.get("value"), key, encoded)) for h in node["headers"]]
    return row


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode() if isinstance(value, str) else json.dumps(value, separators=(",", ":")).encode()


def _aiven_parquet(data: bytes) -> list[dict]:
    rows = []
    for item in pq.read_table(io.BytesIO(data)).to_pylist():
        row: dict[str, Any] = {}
        for name in ("key", "value"):
            if name in item:
                row[name] = _as_bytes(item[name])
        for name in ("offset", "timestamp"):
            if name in item and item[name] is not None:
                row[name] = int(item[name])
        if item.get("headers"):
            row["headers"] = [(k, _as_bytes(v)) for k, v in item["headers"]]
        rows.append(row)
    return rows


def _confluent_rows(data: bytes, key: str) -> list[Any]:
    """Records of one Confluent file (value, keys or headers view) as Python values."""
    data = _decompress(data, key) if key.endswith(".gz") else data
    if data[:4] == b"Obj\x01":
        return list(fastavro.reader(io.BytesIO(data)))
    if data[:4] == b"PAR1":
        table = pq.read_table(io.BytesIO(data))
        if table.num_columns == 1:  # the struct envelope Parquet needs: {key}, {headers} or a one-field value
            return table.column(0).to_pylist()
        return table.to_pylist()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def decode_confluent(data: bytes, key: str, topic: str, partition: int, start_offset: int,
                     companion: Callable[[str], bytes | None], options: PeerOptions) -> pa.Table:
    """A Confluent S3 sink value file (and its `.keys`/`.headers` siblings, if any) as envelope rows."""
    try:
        values = _confluent_rows(data, key)
        keys_data = companion("keys")
        headers_data = companion("headers")
        keys = _confluent_rows(keys_data, key) if keys_data is not None else [None] * len(values)
        headers = _confluent_rows(headers_data, key) if headers_data is not None else [[]] * len(values)
        # JSON header files wrap each list as {"headers": [...]} (RecordHeaders); Parquet's one column unwraps it.
        headers = [h.get("headers") if isinstance(h, dict) else h for h in headers]
    except (ValueError, KeyError, pa.ArrowInvalid, StopIteration) as exc:
        raise CorruptObject(f"Confluent object {key} cannot be read ({exc})") from None
    if not (len(values) == len(keys) == len(headers)):
        raise CorruptObject(f"Confluent object {key}: {len(values)} values but {len(keys)} keys and "
                            f"{len(headers)} header lists in its sibling files")
    encoded = options.value_encoding == "base64"
    as_json = data[:4] not in (b"Obj\x01", b"PAR1")
    return _table([
        Record(topic, partition, start_offset + i,
               _json_bytes(k, key, encoded) if as_json else _as_bytes(k),
               _json_bytes(v, key, encoded) if as_json else _as_bytes(v),
               0, 0,
               tuple((h["key"], _json_bytes(h.get("value"), key, encoded)) for h in (hs or [])))
        for i, (k, v, hs) in enumerate(zip(keys, values, headers))
    ])


def decode_lenses(data: bytes, key: str, topic: str, partition: int, options: PeerOptions) -> pa.Table:
    """A Lenses Stream Reactor object written with `store.envelope=true` (Avro, Parquet or JSON).

    Envelope (lensesio/stream-reactor, kafka-connect-cloud-common/.../sink/transformers/
    EnvelopeWithSchemaTransformer.scala and SchemalessEnvelopeTransformer.scala): `key`, `value`,
    `headers` (a struct or map: one entry per header name, so repeated names and order are
    lost), `metadata` {timestamp, topic, partition, offset}; the JSON form marks byte arrays
    with `keyIsArray` / `valueIsArray` and writes them base64-encoded.
    """
    try:
        if data[:4] == b"Obj\x01":
            rows, as_json = list(fastavro.reader(io.BytesIO(data))), False
        elif data[:4] == b"PAR1":
            rows, as_json = pq.read_table(io.BytesIO(data)).to_pylist(), False
        else:
            rows, as_json = [json.loads(line) for line in data.splitlines() if line.strip()], True
        records = []
        for row in rows:
            metadata = row.get("metadata") or {}
            if "offset" not in metadata:
                raise CorruptObject(f"Lenses object {key} has no metadata.offset: it was not written with "
                                    "store.envelope=true (with metadata), which restore needs")
            records.append(Record(
                topic, partition, int(metadata["offset"]),
                _lenses_bytes(row.get("key"), as_json, row.get("keyIsArray", False), key),
                _lenses_bytes(row.get("value"), as_json, row.get("valueIsArray", False), key),
                int(metadata.get("timestamp") or 0), 0,
                # JSON header values have no bytes flag: --peer-value-encoding says how they were written.
                tuple((name, _lenses_bytes(value, as_json, options.value_encoding == "base64", key))
                      for name, value in _header_items(row.get("headers"))),
            ))
    except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
        raise CorruptObject(f"Lenses object {key} cannot be read ({exc})") from None
    return _table(records)


def _header_items(headers: Any) -> list[tuple[str, Any]]:
    if not headers:
        return []
    return list(headers.items()) if isinstance(headers, dict) else [tuple(item) for item in headers]


def _lenses_bytes(node: Any, as_json: bool, is_array: bool, where: str) -> bytes | None:
    """Avro/Parquet carry bytes as bytes; JSON carries them base64-encoded (flagged for key and value)."""
    if node is None or isinstance(node, bytes):
        return node
    if as_json and isinstance(node, str):
        return _b64(node, where) if is_array else node.encode()
    return _as_bytes(node)


# Quix writes `str(item)` for a key that is not bytes, a null key included (formats/json.py):
# "<quixstreams.sinks.base.item.SinkItem object at 0x7f…>". That text is no key anyone wrote.
_QUIX_NON_BYTES_KEY = re.compile(r"<[\w.]*SinkItem object at 0x[0-9a-fA-F]+>")


def _quix_key(text: Any) -> bytes | None:
    if text is None or _QUIX_NON_BYTES_KEY.fullmatch(str(text)):
        return None
    return str(text).encode()


def decode_quix(data: bytes, key: str, topic: str, partition: int, start_offset: int) -> pa.Table:
    """A Quix Streams FileSink object (JSON lines, optionally gzip, or Parquet).

    Fields (quixio/quix-streams, quixstreams/sinks/community/file/formats/json.py, parquet.py):
    `_timestamp` (ms), `_key` (the key decoded as UTF-8), `_value` (the deserialized value) in
    JSON; in Parquet the value's fields are columns beside `_timestamp` and `_key`. No offsets
    (record i has start offset + i) and no headers.
    """
    data = _decompress(data, key)
    try:
        if data[:4] == b"PAR1":
            rows = pq.read_table(io.BytesIO(data)).to_pylist()
            values = [{k: v for k, v in sorted(row.items()) if k not in ("_timestamp", "_key")} for row in rows]
        else:
            rows = [json.loads(line) for line in data.splitlines() if line.strip()]
            values = [row.get("_value") for row in rows]
    except (ValueError, pa.ArrowInvalid) as exc:
        raise CorruptObject(f"Quix object {key} cannot be read ({exc})") from None
    return _table([
        Record(topic, partition, start_offset + i, _quix_key(row.get("_key")),
               _as_bytes(value), int(row.get("_timestamp") or 0), 0, ())
        for i, (row, value) in enumerate(zip(rows, values))
    ])


KEEPS = {
    "aiven": "keeps what format.output.fields chose (default: value only); csv cannot tell a null key or value "
             "from an empty one (restored as null); parquet keeps headers as a map (order and repeated names lost); "
             "without offset the record's offset is the file's start offset + its row; without timestamp the "
             "restore time is used",
    "confluent": "keeps values; keys and headers only with store.kafka.keys/store.kafka.headers (else null keys, "
                 "no headers); never offsets (file start offset + row, so gaps are not seen) nor timestamps "
                 "(the restore time is used); structured values come back as JSON text, not their original bytes",
    "lenses": "keeps key, value, timestamp, partition and offset from the envelope; headers are a map (order and "
              "repeated names lost); non-bytes values come back as JSON text",
    "quix": "keeps keys as text, values as the JSON it deserialized (not the original bytes), timestamps; no headers, "
            "no offsets (file start offset + row, so gaps are not seen); null keys (written as a SinkItem repr) come back null",
}
