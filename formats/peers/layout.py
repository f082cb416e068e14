"""The one interface every peer layout implements, and the decoding helpers they share.

A peer layout is an archive another Kafka-to-S3 sink wrote. It knows how its objects are named
(`parse`, `with_template`), how an object decodes into envelope rows (`decode`), whether those
rows carry their Kafka offsets, and what it keeps and loses (`keeps`). Nothing here knows Spark
or Kafka clients: source/peer_layout.py lists, orders and merges objects.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa

from ...core.envelope import Record, records_to_batch
from ...core.errors import CLI_WORDING, CorruptObject, TopicvaultError, Wording
from ..object_format import (
    INFLATE_STEP_BYTES,
    MAX_INFLATED_BYTES,
    check_inflated_size,
    gunzip_bytes,
    snappy_stated_size,
)
from .connect_values import connect_header_text, connect_json

AIVEN_FIELDS = ("key", "value", "offset", "timestamp", "headers")
VALUE_ENCODINGS = ("base64", "none", "json")
HEADER_ENCODINGS = ("text", "base64")
COMPRESSION_SUFFIXES = (".gz", ".snappy", ".zst")


@dataclass(frozen=True)
class PeerOptions:
    """What a peer's objects do not say about themselves (its connector settings)."""

    fields: tuple[str, ...] = ("value",)  # Aiven: format.output.fields, in order
    # base64: bytes were written base64-encoded (Aiven csv default; JSON from ByteArrayConverter);
    # none: written as text (Aiven value.encoding=none; JSON from StringConverter)
    # json: JSON from JsonConverter: every value is its JSON text (a string with its quotes)
    value_encoding: str = "base64"
    # How header values stored as text were written where the files do not say: text (Connect's
    # default SimpleHeaderConverter) or base64 (ByteArrayConverter). None: the layout's default.
    header_encoding: str | None = None
    # value_encoding for keys, where the sink's key.converter differs from its value.converter
    # (e.g. StringConverter keys beside ByteArrayConverter values). None: as value_encoding.
    key_encoding: str | None = None
    # Aiven: format.output.envelope. False: with one output field, each record is that field's value
    # alone (a jsonl line, a json element), not an object holding it (AbstractJsonOutputStreamWriter).
    envelope: bool = True
    # How the refusals below name these settings (CLI flags, or the DataFrame reader's options).
    wording: Wording = field(default=CLI_WORDING, compare=False)

    def __post_init__(self) -> None:
        def bad(name: str, value: str) -> str:
            return f"bad {self.wording.setting('--' + name.replace('_', '-'), name)} {value}"

        unknown = [f for f in self.fields if f not in AIVEN_FIELDS]
        if unknown or not self.fields:
            raise TopicvaultError(f"{bad('peer_fields', ','.join(self.fields))}: use some of {','.join(AIVEN_FIELDS)}")
        if self.value_encoding not in VALUE_ENCODINGS:
            raise TopicvaultError(f"{bad('peer_value_encoding', repr(self.value_encoding))}: use base64, none or json")
        if self.key_encoding is not None and self.key_encoding not in VALUE_ENCODINGS:
            raise TopicvaultError(f"{bad('peer_key_encoding', repr(self.key_encoding))}: use base64, none or json")
        if self.header_encoding is not None and self.header_encoding not in HEADER_ENCODINGS:
            raise TopicvaultError(f"{bad('peer_header_encoding', repr(self.header_encoding))}: use text or base64")
        if not self.envelope:
            self._check_unwrapped_fields()

    def _check_unwrapped_fields(self) -> None:
        """format.output.envelope=false takes one output field (OutputFormatFragment.validate); only a
        value alone holds records a restore can produce."""
        envelope = self.wording.setting("--peer-envelope false", 'peer_envelope", "false')
        fields = self.wording.setting("--peer-fields", "peer_fields")
        if len(self.fields) != 1:
            raise TopicvaultError(f"{envelope} (format.output.envelope=false) takes one output field, {fields} names "
                                  f"{','.join(self.fields)}: the sink refuses that setting; check its configuration")
        if self.fields != ("value",):
            raise TopicvaultError(f"{envelope} with {fields} {self.fields[0]}: each line holds the {self.fields[0]} "
                                  "alone, so the archive holds no values; topicvault cannot restore records from it")


    def flag(self, name: str, value: str | None = None) -> str:
        """A setting as the user names it: `--peer-header-encoding base64` on the CLI,
        `option("peer_header_encoding", "base64")` on the DataFrame reader."""
        option = name if value is None else f'{name}", "{value}'
        return self.wording.setting(f"--{name.replace('_', '-')}" + ("" if value is None else f" {value}"), option)

    @property
    def keys_encoding(self) -> str:
        """How keys were written: key_encoding, else as the values."""
        return self.key_encoding or self.value_encoding

    @property
    def keys_base64(self) -> bool:
        """Whether keys written as JSON strings are base64 of bytes (else text)."""
        return self.keys_encoding == "base64"


def peer_options_of(fields: str, value_encoding: str, header_encoding: str | None, key_encoding: str | None,
                    envelope: str | None, wording: Wording = CLI_WORDING) -> PeerOptions:
    """PeerOptions from the settings as given (`--peer-fields a,b` / option("peer_fields", "a,b") and
    the others, unset ones None or empty); a one-line TopicvaultError, in `wording`, for a bad one."""
    return PeerOptions(tuple(f.strip() for f in fields.split(",") if f.strip()), value_encoding,
                       header_encoding or None, key_encoding or None, envelope_setting(envelope, wording),
                       wording=wording)


def envelope_setting(text: str | None, wording: Wording = CLI_WORDING) -> bool:
    """`--peer-envelope` / option("peer_envelope"): Aiven's format.output.envelope, true (default) or false."""
    if text is None or text.strip().lower() == "true":
        return True
    if text.strip().lower() == "false":
        return False
    raise TopicvaultError(f"bad {wording.setting('--peer-envelope', 'peer_envelope')} {text!r}: use true or false "
                          "(the sink's format.output.envelope)")


@dataclass(frozen=True)
class PeerKey:
    """What a peer object's name says."""

    key: str
    topic: str
    partition: int
    offset_hint: int  # the offset the name carries (see PeerLayout.name_offset_is_first)
    role: str = "data"  # data, or a companion file's role (Confluent: keys, headers)


@dataclass(frozen=True)
class Decoded:
    """An object's records as an envelope table, sorted by offset."""

    table: pa.Table
    # True: offsets come from the records; False: they are the name's offset + the row number,
    # so the object's place among the partition's others is all that orders it.
    record_offsets: bool


class Layout(ABC):
    """How an archive names and records its objects: topicvault's own or a peer sink's.

    Callers ask a layout what it can do, never which one it is: its state is a commit log
    (`commit_log`) or a listing of objects; its state's object entries say exactly which
    offsets, records and times each object holds (`exact_entries`), so a restore can leave an
    unreadable object out as a hole of known offsets (`skip_supported`) and check its plan
    against them before reading. Reading a state and a partition is source/peer_layout.py's
    (archive_state, read_layout_partition), which dispatch on these.
    """

    name: str
    keeps: str  # what the layout keeps and loses, for the restore's notes and the CLI help
    commit_log: bool = False
    exact_entries: bool = False
    skip_supported: bool = False

    def with_template(self, template: str) -> "Layout":
        """The layout for a user's file-name template; layouts without templates refuse one."""
        raise TopicvaultError(f"--key-template: {self.name} objects are not named by a template; drop --key-template")


class PeerLayout(Layout):
    """One sink's archive layout. A new peer is one module with one subclass, listed in PEERS."""

    default_header_encoding: str = "text"
    # Whether a name's offset is its object's first record's (objects may then be opened lazily in
    # name order); if not, the reader finds each object's first offset before merging.
    name_offset_is_first: bool = True

    @abstractmethod
    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and offset of an object key (relative to the archive root), or None."""

    @abstractmethod
    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """The object's records; `companion(key)` reads another object of the archive (None if absent)."""

    def check_companions(self, data_keys: set[str], companion_keys: list[str]) -> None:
        """Refuse, before anything is restored, companion files (role other than data) that no value
        file of the archive reads; layouts without companions have none to check."""
        return None

    def header_note(self, options: PeerOptions) -> str | None:
        """Which header encoding a restore used where files do not say it (None: not applicable)."""
        used = options.header_encoding or self.default_header_encoding
        flag = options.flag("peer_header_encoding")
        how = flag if options.header_encoding else f"default; set {flag}"
        return f"header values stored as text read as {used} ({how})"

    def content_hints(self, data: bytes, key: str, options: PeerOptions,
                      companion: Callable[[str], bytes | None]) -> dict[str, str | None]:
        """What object `key` (its bytes `data`; `companion` reads its sibling files) tells of a setting
        the restore assumed, by kind (HINT_KINDS): a note naming the option to choose instead, or None
        where the object shows the assumption holds. Kinds it holds no evidence of are left out."""
        return {}

    def overlap_hint(self, options: PeerOptions) -> str:
        """Why objects without record offsets may overlap, for the refusal message."""
        return "was it written with a field- or time-based partitioner?"


HINT_KINDS = ("headers", "values", "envelope", "typed")


def is_base64(text: Any) -> bool:
    """Whether `text` is a string of strict base64 (the empty string is: the bytes b"")."""
    try:
        return isinstance(text, str) and b64(text, "") is not None
    except CorruptObject:
        return False


def headers_hint(layout: str, key: str, values: list[Any], options: PeerOptions) -> dict[str, str | None]:
    """Header values stored as text (read as text by default): a note when every one is base64, as
    header.converter=ByteArrayConverter writes them."""
    values = [v for v in values if v is not None]
    if options.header_encoding is not None or not any(values):  # empty values say nothing either way
        return {}
    if not all(is_base64(v) for v in values):
        return {"headers": None}
    return {"headers": f"{layout}: every header value in {key} is base64, yet header values are read as text (the "
                       "default): if the sink's header.converter was ByteArrayConverter, restore with "
                       f"{options.flag('peer_header_encoding', 'base64')}"}


def values_hint(layout: str, key: str, nodes: list[Any], options: PeerOptions) -> dict[str, str | None]:
    """Values stored as JSON strings: a note when every one is base64 (as ByteArrayConverter writes
    them) while the restore reads them as text or JSON text."""
    nodes = [n for n in nodes if n is not None]
    if not any(nodes) or not all(isinstance(n, str) for n in nodes):
        return {}
    if options.value_encoding == "base64" or not all(is_base64(n) for n in nodes):
        return {"values": None}
    return {"values": f"{layout}: every value in {key} is a base64 JSON string, yet values are read with "
                      f"{options.flag('peer_value_encoding', options.value_encoding)}: if the sink's value.converter "
                      f"was ByteArrayConverter, restore with {options.flag('peer_value_encoding', 'base64')}"}


def typed_hint(layout: str, key: str, typed: list[str]) -> dict[str, str | None]:
    """A note naming the fields an Avro or Parquet object stores typed (not bytes or text)."""
    if not typed:
        return {"typed": None}
    return {"typed": f"{layout}: {key} stores {', '.join(typed)} typed (not bytes): restored as the JSON Connect's "
                     "JsonConverter (schemas.enable=false) writes for them, header values as its header converter "
                     "writes them; the bytes another converter made of them (Avro or Protobuf with a schema "
                     "registry) cannot be rebuilt"}


def header_value(text: Any, encoding: str, where: str, wording: Wording = CLI_WORDING) -> bytes | None:
    """A header value a Connect sink stored as text: base64 of the bytes, or the text itself; a JSON
    number, list or object as Connect's header converter writes it (connect_values.connect_header_text)."""
    if text is None or isinstance(text, bytes):
        return text
    if not isinstance(text, str):
        return typed_header_bytes(text)
    return b64(text, where, wording) if encoding == "base64" else text.encode()


def typed_header_bytes(value: Any) -> bytes | None:
    """A header value a sink stored with its Connect type (Avro, Parquet): bytes as they are, text as
    UTF-8, anything else as SimpleHeaderConverter writes it (Values.convertToString)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return connect_header_text(value).encode()


def connect_bytes(value: Any) -> bytes | None:
    """A key or value a Connect sink stored typed (Avro, Parquet): bytes as they are, text as UTF-8,
    anything else as the JSON Connect's JsonConverter writes for it (connect_values.connect_json)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return connect_json(value)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def decompress(data: bytes, key: str, by_content: bool = False) -> bytes:
    """Bytes of an object compressed as its name (or gzip's magic bytes) says; `by_content`: also
    zstd's and Java snappy's magic bytes, for sinks that name compressed objects without a suffix."""
    if key.endswith(".gz") or data[:2] == b"\x1f\x8b":
        return gunzip_bytes(data, key, "gzip")  # bounded: a gzip bomb is refused, not inflated
    if key.endswith(".zst") or (by_content and data.startswith(_ZSTD_MAGIC)):
        codec = unzstd_bounded
    elif key.endswith(".snappy") or (by_content and data.startswith(_XERIAL_MAGIC)):
        codec = _snappy
    else:
        return data
    try:
        return codec(data, key)
    except CorruptObject:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec has its own errors; all mean a damaged object
        raise CorruptObject(f"{key} cannot be decompressed ({type(exc).__name__}: {exc})") from None


def unzstd_bounded(data: bytes, key: str, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """Every zstd frame of `data`, at most `limit` bytes in all: a frame whose header states a larger
    size is refused before it is inflated, one that states none is inflated at most one byte past it."""
    try:
        from compression import zstd  # noqa: PLC0415 - Python 3.14+
    except ImportError:
        from backports import zstd  # noqa: PLC0415 - optional codec, loaded only for zstd objects
    out = bytearray()
    while data:
        stated = zstd.get_frame_info(data).decompressed_size
        if stated is not None:
            check_inflated_size(len(out) + stated, key, limit)
        inflater = zstd.ZstdDecompressor()
        chunk = inflater.decompress(data, INFLATE_STEP_BYTES)
        while True:  # in steps: a frame that states no size is never inflated whole at once
            out += chunk
            check_inflated_size(len(out), key, limit)
            if inflater.eof or inflater.needs_input:
                break
            chunk = inflater.decompress(b"", INFLATE_STEP_BYTES)
        if not inflater.eof:
            raise ValueError("the zstd stream is cut off")
        data = inflater.unused_data
    return bytes(out)


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy(data: bytes, key: str) -> bytes:
    """Snappy as Java sinks write it: org.xerial.snappy.SnappyOutputStream (Aiven: a magic header,
    two version ints, then blocks of a 4-byte big-endian length and raw snappy), else the framing
    format."""
    import cramjam  # noqa: PLC0415

    if not data.startswith(_XERIAL_MAGIC):
        # The framing format states no total; its chunks inflate at most about 21:1 (64 KiB
        # each), so this holds at most ~21 times the object's own size before the check.
        out = bytes(cramjam.snappy.decompress(data))
        check_inflated_size(len(out), key)
        return out
    blocks, at, inflated = [], len(_XERIAL_MAGIC) + 8, 0
    while at < len(data):
        if at + 4 > len(data):
            raise ValueError("a block length is cut short")
        length = int.from_bytes(data[at:at + 4], "big")
        block = data[at + 4:at + 4 + length]
        if len(block) != length:
            raise ValueError(f"a block of {length} bytes holds {len(block)}")
        inflated += snappy_stated_size(block)  # checked before the block is inflated
        check_inflated_size(inflated, key)
        blocks.append(bytes(cramjam.snappy.decompress_raw(block)))
        at += 4 + length
    return b"".join(blocks)


def b64(text: str | None, where: str, wording: Wording = CLI_WORDING) -> bytes | None:
    """Strict base64 (None stays None)."""
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        values = wording.setting("--peer-value-encoding none", 'peer_value_encoding", "none')
        headers = wording.setting("--peer-header-encoding text", 'peer_header_encoding", "text')
        raise CorruptObject(f"{where}: {text[:40]!r} is not base64 (if the sink stored text, set {values} or "
                            f"{headers})") from None


def json_bytes(node: Any, where: str, encoding: str, wording: Wording = CLI_WORDING) -> bytes | None:
    """A key/value a sink wrote as JSON (through Connect's JsonConverter): by `encoding`, a JSON
    string is base64 of bytes (ByteArrayConverter), text (StringConverter) or JSON text, quotes and
    all (JsonConverter); other JSON is kept as compact JSON text, UTF-8, numbers as Jackson writes them."""
    if node is None:
        return None
    if isinstance(node, str) and encoding != "json":
        return b64(node, where, wording) if encoding == "base64" else node.encode()
    return connect_json(node)  # Jackson's numbers: a parsed 1.0E10 is written 1.0E10 again, not 10000000000.0


def as_bytes(value: Any) -> bytes | None:
    """Bytes as they are, text as UTF-8, anything else as compact JSON text (bytes inside it as
    base64 strings, as Connect's JsonConverter writes them)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), default=_json_default).encode()


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _json_default(value: Any) -> Any:
    """JSON for what Avro and Parquet decode to beyond JSON's types, as Connect's JsonConverter
    writes the same logical types: Timestamp as epoch ms, Date as days, Time as ms of the day."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _EPOCH) // datetime.timedelta(milliseconds=1)  # exact: float seconds round off by 1 ms
    if isinstance(value, datetime.date):
        return (value - datetime.date(1970, 1, 1)).days
    if isinstance(value, datetime.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    return str(value)  # Decimal, UUID: their text (JsonConverter's default writes a decimal as base64 bytes)


def table_of(records: list[Record]) -> pa.Table:
    """Envelope rows sorted by offset (a sink writes in offset order; re-deliveries may not be)."""
    table = pa.Table.from_batches([records_to_batch(records)])
    return table.sort_by("offset") if table.num_rows > 1 else table


def strip_compression(name: str) -> str:
    """The name without its compression suffix."""
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
