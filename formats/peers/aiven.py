"""Aiven's S3 sink (Aiven-Open/cloud-storage-connectors-for-apache-kafka).

Names (commons/.../config/FileNameFragment.java): `file.name.template`, default
`{{topic}}-{{partition}}-{{start_offset}}`, plus `.avro` for avro and the compression suffix
(`.gz`, `.snappy`, `.zst`, CompressionType.java); `{{partition:padding=true}}` pads to 10 digits,
`{{start_offset:padding=true}}` to 20. The whole key below the archive root is the rendered
template, so it is matched whole (objects in other folders are not this archive's). The name's
offset is the object's first record's, except under `{{timestamp}}` (see AivenLayout). Only the
default template gets the compression suffix: under the user's own, the bytes say it.
`{{key}}` is the key's text (StringConverter), `null`, or Java's `[B@<hash>` for byte arrays
(every record an object of its own); with it, a partition's objects interleave.

Contents (commons/src/main/java/io/aiven/kafka/connect/common/output/):
* csv (plainwriter/): fields in `format.output.fields` order (default: value only) joined by
  ",", records separated by "\\n" (OutputWriter.writeRecord writes the separator before every
  record but the first; nothing after the last), no header row. A null key or value is written
  as nothing (AbstractValuePlainWriter), so every line is a record, an empty last one included.
  key: base64; value: base64 or raw (`format.output.fields.value.encoding=none`); offset and
  timestamp (epoch ms) as decimal text; headers `base64(key):base64(value);` per header, in
  order, through ByteArrayConverter (HeadersPlainWriter), so always base64.
* jsonl (jsonwriter/): one object per line with the chosen fields; key/value through Connect's
  JsonConverter without schemas, so bytes are base64 strings and null is null; `timestamp` is
  ISO-8601 (ISO_INSTANT); headers `[{"key": k, "value": v}, ...]`, v as the header converter
  left it (text with Connect's default SimpleHeaderConverter).
* parquet and avro (SinkSchemaBuilder.java, SinkRecordConverter.java): record `connector_records`
  with the chosen fields; offset and timestamp are long (epoch ms); headers a map<string, value>
  of one Connect type per record (null when a record has none), so header order and repeated
  header keys are lost; the types say bytes, text or a typed value (rendered back as Connect
  wrote it: formats/peers/connect_values.py).
* format.output.envelope=false (one output field): json and jsonl hold each record's field alone
  (AbstractJsonOutputStreamWriter.getFields), `null` for a tombstone; parquet and avro make a
  struct or map value's fields the row's columns (SinkRecordConverter.tryUnwrapEnvelope); csv is
  unchanged.
* file names carry no format suffix, so the format is recognised from the content: json or
  jsonl only when every row is an object of Aiven's field names alone (a csv's raw values,
  value.encoding=none, may be JSON too: they are read as csv). A raw csv whose every value is
  such an object would be read as jsonl.
"""

from __future__ import annotations

import csv
from typing import Any, Callable

import pyarrow as pa

from ...core.envelope import Record
from ...core.errors import CorruptObject
from ...core.instants import iso_to_epoch_ms
from ...keys.codec import AIVEN_DEFAULT_TEMPLATE, TemplateCodec
from ..object_format import parse_json
from ..parquet import read_bounded
from .connect_values import arrow_rows, avro_rows, typed_fields
from .layout import (
    AIVEN_FIELDS,
    Decoded,
    PeerKey,
    PeerLayout,
    PeerOptions,
    b64,
    connect_bytes,
    decompress,
    header_value,
    headers_hint,
    json_bytes,
    strip_compression,
    table_of,
    typed_header_bytes,
    typed_hint,
    values_hint,
)


class AivenLayout(PeerLayout):
    """Aiven names (a file-name template) and its csv, jsonl, json and parquet objects."""

    name = "aiven"
    keeps = ("keeps what format.output.fields chose (default: value only); csv cannot tell a null key or value "
             "from an empty one (restored as null); parquet keeps headers as a map (order and repeated names lost); "
             "without offset the record's offset is the file's start offset + its row; without timestamp the "
             "restore time is used")

    def __init__(self, template: str = AIVEN_DEFAULT_TEMPLATE) -> None:
        self.template = template
        self._codec = TemplateCodec(template)
        # Under {{timestamp}} the sink names every object of a flush for the partition's first
        # record of that flush, while each record goes to the object of its own time (with
        # file.name.timestamp.source=event, or at an hour's turn): a name's offset may come
        # before its object's first record (TopicPartitionRecordGrouper, commons 0.12.0).
        self.name_offset_is_first = not self._codec.has_field("timestamp")

    def with_template(self, template: str) -> "AivenLayout":
        """The same layout with a user's `file.name.template`."""
        return AivenLayout(template)

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and start offset of an Aiven object, or None."""
        parsed = self._codec.parse(strip_compression(key))
        if parsed is None or (parsed.extension and parsed.extension != "avro"):
            return None
        return PeerKey(key, parsed.topic, parsed.partition, parsed.start_offset)

    def header_note(self, options: PeerOptions) -> str | None:
        """csv headers are always base64 and parquet says; jsonl header text takes the option."""
        note = super().header_note(options)
        return f"jsonl {note}; csv header values are base64, parquet's say their type"

    def content_hints(self, data: bytes, key: str, options: PeerOptions,
                      companion: Callable[[str], bytes | None]) -> dict[str, str | None]:
        """Typed parquet/avro fields; jsonl/json header values and values all base64; lines that are
        JSON but not envelopes (format.output.envelope=false)."""
        try:
            data = decompress(data, key, by_content=True)
            typed = typed_fields(data)
            if typed is not None:
                return typed_hint(self.name, key, [f for f in typed if f in ("key", "value")])
            if not options.envelope:
                return values_hint(self.name, key, _unwrapped_json_values(data, key, options) or [], options)
            nodes = _aiven_json_rows(data, key)
        except (ValueError, CorruptObject, pa.ArrowInvalid):
            return {}
        if nodes is None:
            return _envelope_hint(data, key, options)
        headers = [h.get("value") for node in nodes for h in node.get("headers") or () if isinstance(h, dict)]
        values = [node.get("value") for node in nodes if "value" in node]
        return {**headers_hint(self.name, key, headers, options), **values_hint(self.name, key, values, options),
                **(_envelope_hint(data, key, options) if len({frozenset(n) for n in nodes}) > 1 else
                   {"envelope": None})}

    def overlap_hint(self, options: PeerOptions) -> str:
        """Objects without offsets overlap under a time-based template, or when raw values held newlines."""
        if options.value_encoding == "none" and "offset" not in options.fields:
            return (f"with {options.flag('peer_value_encoding', 'none')} a value holding a newline cannot be told from two records, "
                    "and this archive holds more lines than offsets; it cannot be restored exactly")
        return ("was it written with a {{timestamp}} (event time) or {{key}} template? add offset to "
                "format.output.fields")

    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """An Aiven object (csv, jsonl, json or parquet; compressed or not) as envelope rows."""
        # Only the default template gets a compression suffix (AivenCommonConfig): under the user's
        # own the name does not say, the bytes do.
        data = decompress(data, obj.key, by_content=True)
        try:
            if data[:4] == b"PAR1":
                table = read_bounded(data, obj.key)
                rows = _typed(arrow_rows(table), table.column_names, options)
            elif data[:4] == b"Obj\x01":  # format.output.type=avro (AvroOutputWriter)
                items = avro_rows(data)
                rows = _typed(items, list(items[0]) if items else [], options)
            elif not options.envelope and (values := _unwrapped_json_values(data, obj.key, options)) is not None:
                rows = [{"value": json_bytes(node, obj.key, options.value_encoding, options.wording)} for node in values]
            else:
                nodes = _aiven_json_rows(data, obj.key)
                rows = (_csv(data, obj.key, options) if nodes is None
                        else [_json(node, obj.key, options) for node in nodes])
        except (ValueError, KeyError, csv.Error, pa.ArrowInvalid) as exc:
            raise CorruptObject(f"Aiven object {obj.key} cannot be read ({exc})") from None
        record_offsets = bool(rows) and all("offset" in row for row in rows)
        return Decoded(table_of([
            Record(obj.topic, obj.partition, row["offset"] if record_offsets else obj.offset_hint + i,
                   row.get("key"), row.get("value"), row.get("timestamp", 0), 0, tuple(row.get("headers", ())))
            for i, row in enumerate(rows)
        ]), record_offsets)


def _aiven_json_rows(data: bytes, key: str) -> list[dict] | None:
    """The rows of a json (one array) or jsonl object; None when it is not one: csv, whose raw
    values (value.encoding=none) may be JSON too, but are not objects made of Aiven's fields only."""
    text = data.lstrip()
    if text[:1] not in (b"[", b"{"):
        return None
    try:
        nodes = parse_json(data, key) if text[:1] == b"[" else [parse_json(line, key) for line in data.splitlines()
                                                           if line.strip()]
    except ValueError:
        return None
    if isinstance(nodes, list) and all(isinstance(node, dict) and node and set(node) <= set(AIVEN_FIELDS)
                                       for node in nodes):
        return nodes
    return None


def _unwrapped_json_values(data: bytes, key: str, options: PeerOptions) -> list[Any] | None:
    """The values of a json or jsonl object written with format.output.envelope=false (each record the
    value's JSON alone, a tombstone `null`), or None when it is csv (which the envelope leaves as it is):
    every line JSON, and, unless the values are JsonConverter's, each a JSON string (base64 or text) or null."""
    if data.startswith(b"[\n") and data.rstrip().endswith(b"]"):  # JsonOutputStreamWriter: "[\n" ... "\n]"
        try:
            nodes = parse_json(data, key)
        except ValueError:
            nodes = None
        if isinstance(nodes, list):
            return nodes
    try:
        nodes = [parse_json(line, key) for line in data.split(b"\n")]
    except ValueError:
        return None
    if options.value_encoding != "json" and not all(node is None or isinstance(node, str) for node in nodes):
        return None
    return nodes


def _envelope_hint(data: bytes, key: str, options: PeerOptions) -> dict[str, str | None]:
    """A note when every line of an object is JSON but they are not envelopes of one set of fields (the
    sink writes every output field on every line): values written with format.output.envelope=false."""
    try:
        [parse_json(line, key) for line in data.split(b"\n")]
    except ValueError:
        return {}  # csv
    return {"envelope": f"aiven: the lines of {key} are JSON but not envelopes of one set of output fields: if the "
                        f"sink had format.output.envelope=false, restore with {options.flag('peer_envelope', 'false')}"}


def _csv(data: bytes, key: str, options: PeerOptions) -> list[dict]:
    if options.value_encoding == "json":
        raise CorruptObject(f"Aiven object {key} is csv: its values are base64 or raw bytes, and "
                            f"{options.flag('peer_value_encoding', 'json')} is for jsonl and json objects; use base64 "
                            "or none")
    rows = []
    # Every line is a record: a null value (tombstone) written alone is an empty line, the last one too.
    for number, line in enumerate(data.decode().split("\n"), 1):
        cells = line.split(",")
        if len(cells) > len(options.fields) and options.value_encoding == "none" and "value" in options.fields:
            at = options.fields.index("value")  # a raw value may hold commas
            extra = len(cells) - len(options.fields)
            cells = cells[:at] + [",".join(cells[at:at + extra + 1])] + cells[at + extra + 1:]
        if len(cells) != len(options.fields):
            raise CorruptObject(f"Aiven csv object {key}: line {number} has {len(cells)} fields, {options.flag('peer_fields')} names "
                                f"{len(options.fields)} ({','.join(options.fields)})" + _newline_hint(options))
        row: dict[str, Any] = {}
        for name, cell in zip(options.fields, cells):
            if name == "key":
                row["key"] = b64(cell, key, options.wording) if cell else None
            elif name == "value":
                if not cell:
                    row["value"] = None
                else:
                    row["value"] = b64(cell, key, options.wording) if options.value_encoding == "base64" else cell.encode()
            elif name == "offset":
                if not cell.isdigit():
                    raise CorruptObject(f"Aiven csv object {key}: line {number} has offset {cell[:40]!r}, not a "
                                        "number" + _newline_hint(options))
                row["offset"] = int(cell)
            elif name == "timestamp":
                row["timestamp"] = int(cell) if cell else 0
            else:
                row["headers"] = [
                    (b64(k, key, options.wording).decode(), b64(v, key, options.wording)) for k, _, v in (h.partition(":") for h in cell.split(";") if h)
                ]
        rows.append(row)
    return rows


def _newline_hint(options: PeerOptions) -> str:
    if options.value_encoding == "none":
        return (f"; with {options.flag('peer_value_encoding', 'none')} a value holding a newline splits its record "
                "over two lines, so this archive cannot be restored exactly")
    return ""


def _json(node: dict, key: str, options: PeerOptions) -> dict:
    header_encoding = options.header_encoding or AivenLayout.default_header_encoding
    row: dict[str, Any] = {}
    if "key" in node:
        row["key"] = json_bytes(node["key"], key, options.keys_encoding, options.wording)
    if "value" in node:
        row["value"] = json_bytes(node["value"], key, options.value_encoding, options.wording)
    if "offset" in node:
        row["offset"] = int(node["offset"])
    if "timestamp" in node:
        row["timestamp"] = 0 if node["timestamp"] is None else (
            node["timestamp"] if isinstance(node["timestamp"], int) else iso_to_epoch_ms(str(node["timestamp"])))
    if node.get("headers"):
        row["headers"] = [(h["key"], header_value(h.get("value"), header_encoding, key, options.wording)) for h in node["headers"]]
    return row


def _typed(items: list[dict], columns: list[str], options: PeerOptions) -> list[dict]:
    """Rows of a parquet or avro object (SinkRecordConverter): typed keys and values as JsonConverter
    writes them, typed header values as SimpleHeaderConverter does. With format.output.envelope=false a
    struct or map value's fields are the file's columns (tryUnwrapEnvelope): each row is then the value."""
    if not options.envelope and columns != ["value"]:
        return [{"value": connect_bytes(item)} for item in items]
    rows = []
    for item in items:
        row: dict[str, Any] = {}
        for name in ("key", "value"):
            if name in item:
                row[name] = connect_bytes(item[name])
        for name in ("offset", "timestamp"):
            if name in item and item[name] is not None:
                row[name] = int(item[name])
        if item.get("headers"):
            row["headers"] = [(k, typed_header_bytes(v)) for k, v in item["headers"].items()]
        rows.append(row)
    return rows


LAYOUT = AivenLayout()
