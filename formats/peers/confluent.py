"""Confluent's S3 sink (confluentinc/kafka-connect-storage-cloud).

Names (DefaultPartitioner + S3 sink docs): `topics/<topic>/partition=<p>/<topic>+<p>+<start
offset, 10 digits>.<ext>`; with `store.kafka.keys` / `store.kafka.headers` a sibling
`<same>.keys.<ext>` / `.headers.<ext>`. Time- and field-based partitioners replace
`partition=<p>` with their own folders, but the file name still carries `<topic>+<p>+<start>`.

Siblings are looked for in the value's format and in Avro (keys.format.class and
headers.format.class default to AvroFormat); one no value file reads stops the restore before
anything is produced. ByteArrayFormat (`.bin`) files hold each value's bytes as they are, each
followed by a newline (format.bytearray.separator's default).

Contents (kafka-connect-s3/.../format/RecordViews.java): value files hold the value only;
`.keys.*` files the key (Parquet: struct {key}); `.headers.*` files an array of {key: string,
value: string} (JSON and Parquet: struct {headers}), the value converted to a string by
Connect's `Values.convertToString`: text with Connect's default SimpleHeaderConverter, base64
with ByteArrayConverter; the file does not say which. No file holds offsets or timestamps:
record i of a file has offset start + i, and timestamps are lost.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pyarrow as pa

from ...core.envelope import Record
from ...core.errors import CorruptObject, TopicvaultError
from ..object_format import parse_json
from ..parquet import read_bounded
from .connect_values import arrow_rows, avro_rows, typed_fields
from .layout import (
    Decoded,
    PeerKey,
    PeerLayout,
    PeerOptions,
    connect_bytes,
    decompress,
    header_value,
    headers_hint,
    json_bytes,
    table_of,
    typed_hint,
    values_hint,
)

_NAME = re.compile(
    r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d+)(?P<role>\.keys|\.headers)?"
    # Parquet names carry parquet-mr's codec extension (parquet.codec: .snappy, .gz, .zstd, .br,
    # .lz4hadoop, .lz4raw, .lzo) before .parquet.
    r"\.(?P<ext>avro|json|(?:[a-z0-9]+\.)?parquet|bin|json\.gz|bin\.gz)"
)


class ConfluentLayout(PeerLayout):
    """`<topic>+<partition>+<start offset>.<ext>` in any folder layout, with `.keys`/`.headers` siblings."""

    name = "confluent"
    keeps = ("keeps values; keys and headers only with store.kafka.keys/store.kafka.headers (else null keys, "
             "no headers); never offsets (file start offset + row, so gaps are not seen) nor timestamps "
             "(the restore time is used); structured values come back as JSON text, not their original bytes; a .bin "
             "(ByteArrayFormat) value holding a newline reads as two records")

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition, start offset and role (data, keys, headers), or None."""
        match = _NAME.fullmatch(key)
        if match is None:
            return None
        role = (match["role"] or ".data")[1:]
        return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]), role)

    @staticmethod
    def siblings(key: str, role: str) -> list[str]:
        """Where the `.keys` or `.headers` file beside a value file may be: in the value's format,
        or in Avro (keys.format.class and headers.format.class default to AvroFormat whatever
        format.class is)."""
        match = _NAME.fullmatch(key)
        if match is None or match["role"]:
            raise ValueError(f"{key} is not a Confluent value file")
        stem = key[: match.start("ext") - 1]
        return [f"{stem}.{role}.{ext}" for ext in dict.fromkeys((match["ext"], "avro"))]

    def check_companions(self, data_keys: set[str], companion_keys: list[str]) -> None:
        """Every `.keys`/`.headers` file is read beside its value file: one with none (a tombstone's
        key written alone with behavior.on.null.values=write) or in another format than the
        value's or Avro would be left out in silence."""
        read = {sibling for key in data_keys for role in ("keys", "headers") for sibling in self.siblings(key, role)}
        for key in companion_keys:
            if key not in read:
                raise TopicvaultError(
                    f"Confluent object {key} has no value file beside it in its format or in Avro (a tombstone "
                    "written alone with behavior.on.null.values=write, or keys/headers in another format): "
                    "topicvault cannot restore it with its record; restore from an archive written with "
                    "behavior.on.null.values=ignore, or with keys and headers in Avro or the values' format"
                )

    def overlap_hint(self, options: PeerOptions) -> str:
        """Confluent overlaps come from partitioners that spread a partition over folders."""
        return "was it written with a field-based partitioner?"

    def content_hints(self, data: bytes, key: str, options: PeerOptions,
                      companion: Callable[[str], bytes | None]) -> dict[str, str | None]:
        """Typed values in Avro and Parquet; JSON values all base64; header values (its `.headers` sibling)
        all base64."""
        hints: dict[str, str | None] = {}
        try:
            if not _is_bytearray(key):
                typed = typed_fields(decompress(data, key) if key.endswith(".gz") else data)
                hints.update(typed_hint(self.name, key, ["value"] if typed else []) if typed is not None
                             else values_hint(self.name, key, _rows(data, key), options))
            headers_key, headers_data = _first_found(self.siblings(key, "headers"), companion)
            if headers_data is not None:
                lists = [h.get("headers") if isinstance(h, dict) else h for h in _rows(headers_data, headers_key)]
                hints.update(headers_hint(self.name, key, [h.get("value") for hs in lists for h in hs or ()], options))
        except (ValueError, KeyError, AttributeError, pa.ArrowInvalid):
            return hints
        return hints

    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """A value file (and its `.keys`/`.headers` siblings, if any) as envelope rows."""
        key = obj.key
        try:
            values = _rows(data, key)
            keys_key, keys_data = _first_found(self.siblings(key, "keys"), companion)
            headers_key, headers_data = _first_found(self.siblings(key, "headers"), companion)
            keys = _rows(keys_data, keys_key) if keys_data is not None else [None] * len(values)
            headers = _rows(headers_data, headers_key) if headers_data is not None else [[]] * len(values)
            # JSON header files wrap each list as {"headers": [...]} (RecordHeaders); Parquet's one column unwraps it.
            headers = [h.get("headers") if isinstance(h, dict) else h for h in headers]
        except (ValueError, KeyError, pa.ArrowInvalid, StopIteration) as exc:
            raise CorruptObject(f"Confluent object {key} cannot be read ({exc})") from None
        if not (len(values) == len(keys) == len(headers)):
            raise CorruptObject(f"Confluent object {key}: {len(values)} values but {len(keys)} keys and "
                                f"{len(headers)} header lists in its sibling files")
        header_encoding = options.header_encoding or self.default_header_encoding
        keys_as_json = keys_data is not None and _is_json(keys_data, keys_key)
        values_as_json = _is_json(data, key)
        return Decoded(table_of([
            Record(obj.topic, obj.partition, obj.offset_hint + i,
                   json_bytes(k, key, options.keys_encoding, options.wording) if keys_as_json else connect_bytes(k),
                   json_bytes(v, key, options.value_encoding, options.wording) if values_as_json else connect_bytes(v),
                   0, 0,
                   tuple((h["key"], header_value(h.get("value"), header_encoding, key, options.wording)) for h in (hs or [])))
            for i, (k, v, hs) in enumerate(zip(keys, values, headers))
        ]), record_offsets=False)


def _first_found(keys: list[str], companion: Callable[[str], bytes | None]) -> tuple[str, bytes | None]:
    """The first of `keys` the archive holds, and its bytes (the last key and None: none)."""
    for found in keys:
        data = companion(found)
        if data is not None:
            return found, data
    return keys[-1], None


def _is_json(data: bytes, key: str) -> bool:
    """Whether a file holds JSON lines (JsonFormat), not Avro, Parquet or raw bytes (ByteArrayFormat)."""
    return data[:4] not in (b"Obj\x01", b"PAR1") and not _is_bytearray(key)


def _is_bytearray(key: str) -> bool:
    return key.endswith((".bin", ".bin.gz"))


def _rows(data: bytes, key: str) -> list[Any]:
    """Records of one Confluent file (value, keys or headers view) as Python values."""
    data = decompress(data, key) if key.endswith(".gz") else data
    if _is_bytearray(key):
        # ByteArrayFormat: each record's bytes as they are, then the separator (format.bytearray.separator,
        # a newline by default). Not JSON: parsing them re-wrote JSON values and dropped empty ones.
        if data and not data.endswith(b"\n"):
            raise ValueError("a ByteArrayFormat file ends with its separator, a newline; this one does not")
        return data.split(b"\n")[:-1]
    if data[:4] == b"Obj\x01":
        return avro_rows(data)
    if data[:4] == b"PAR1":
        rows = arrow_rows(read_bounded(data, key))
        if rows and len(rows[0]) == 1 and _NAME.fullmatch(key)["role"]:
            # The keys and headers views are wrapped in a one-field struct ({key}, {headers}); a
            # value is its own struct, kept whole even with one field.
            return [next(iter(row.values())) for row in rows]
        return rows
    return [parse_json(line, key) for line in data.splitlines() if line.strip()]


LAYOUT = ConfluentLayout()
