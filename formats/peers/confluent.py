"""Confluent's S3 sink (confluentinc/kafka-connect-storage-cloud).

Names (DefaultPartitioner + S3 sink docs): `topics/<topic>/partition=<p>/<topic>+<p>+<start
offset, 10 digits>.<ext>`; with `store.kafka.keys` / `store.kafka.headers` a sibling
`<same>.keys.<ext>` / `.headers.<ext>`. Time- and field-based partitioners replace
`partition=<p>` with their own folders, but the file name still carries `<topic>+<p>+<start>`.

Contents (kafka-connect-s3/.../format/RecordViews.java): value files hold the value only;
`.keys.*` files the key (Parquet: struct {key}); `.headers.*` files an array of {key: string,
value: string} (JSON and Parquet: struct {headers}), the value converted to a string by
Connect's `Values.convertToString`: text with Connect's default SimpleHeaderConverter, base64
with ByteArrayConverter; the file does not say which. No file holds offsets or timestamps:
record i of a file has offset start + i, and timestamps are lost.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any, Callable

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.envelope import Record
from ...core.errors import CorruptObject
from .base import Decoded, PeerKey, PeerLayout, PeerOptions, as_bytes, decompress, header_value, json_bytes, table_of

_NAME = re.compile(
    r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)\+(?P<partition>\d+)\+(?P<offset>\d+)(?P<role>\.keys|\.headers)?"
    r"\.(?P<ext>avro|json|snappy\.parquet|gz\.parquet|zstd\.parquet|parquet|bin|json\.gz|bin\.gz)"
)


class ConfluentLayout(PeerLayout):
    """`<topic>+<partition>+<start offset>.<ext>` in any folder layout, with `.keys`/`.headers` siblings."""

    name = "confluent"
    keeps = ("keeps values; keys and headers only with store.kafka.keys/store.kafka.headers (else null keys, "
             "no headers); never offsets (file start offset + row, so gaps are not seen) nor timestamps "
             "(the restore time is used); structured values come back as JSON text, not their original bytes")

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition, start offset and role (data, keys, headers), or None."""
        match = _NAME.fullmatch(key)
        if match is None:
            return None
        role = (match["role"] or ".data")[1:]
        return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]), role)

    @staticmethod
    def sibling(key: str, role: str) -> str:
        """The `.keys` or `.headers` file written beside a value file."""
        match = _NAME.fullmatch(key)
        if match is None or match["role"]:
            raise ValueError(f"{key} is not a Confluent value file")
        return f"{key[: match.start('ext') - 1]}.{role}.{match['ext']}"

    def overlap_hint(self, options: PeerOptions) -> str:
        """Confluent overlaps come from partitioners that spread a partition over folders."""
        return "was it written with a field-based partitioner?"

    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """A value file (and its `.keys`/`.headers` siblings, if any) as envelope rows."""
        key = obj.key
        try:
            values = _rows(data, key)
            keys_data = companion(self.sibling(key, "keys"))
            headers_data = companion(self.sibling(key, "headers"))
            keys = _rows(keys_data, key) if keys_data is not None else [None] * len(values)
            headers = _rows(headers_data, key) if headers_data is not None else [[]] * len(values)
            # JSON header files wrap each list as {"headers": [...]} (RecordHeaders); Parquet's one column unwraps it.
            headers = [h.get("headers") if isinstance(h, dict) else h for h in headers]
        except (ValueError, KeyError, pa.ArrowInvalid, StopIteration) as exc:
            raise CorruptObject(f"Confluent object {key} cannot be read ({exc})") from None
        if not (len(values) == len(keys) == len(headers)):
            raise CorruptObject(f"Confluent object {key}: {len(values)} values but {len(keys)} keys and "
                                f"{len(headers)} header lists in its sibling files")
        encoded = options.value_encoding == "base64"
        header_encoding = options.header_encoding or self.default_header_encoding
        as_json = data[:4] not in (b"Obj\x01", b"PAR1")
        return Decoded(table_of([
            Record(obj.topic, obj.partition, obj.offset_hint + i,
                   json_bytes(k, key, encoded) if as_json else as_bytes(k),
                   json_bytes(v, key, encoded) if as_json else as_bytes(v),
                   0, 0,
                   tuple((h["key"], header_value(h.get("value"), header_encoding, key)) for h in (hs or [])))
            for i, (k, v, hs) in enumerate(zip(keys, values, headers))
        ]), record_offsets=False)


def _rows(data: bytes, key: str) -> list[Any]:
    """Records of one Confluent file (value, keys or headers view) as Python values."""
    data = decompress(data, key) if key.endswith(".gz") else data
    if data[:4] == b"Obj\x01":
        return list(fastavro.reader(io.BytesIO(data)))
    if data[:4] == b"PAR1":
        table = pq.read_table(io.BytesIO(data))
        if table.num_columns == 1:  # the struct envelope Parquet needs: {key}, {headers} or a one-field value
            return table.column(0).to_pylist()
        return table.to_pylist()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


LAYOUT = ConfluentLayout()
