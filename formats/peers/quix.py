"""Quix Streams' FileSink (quixio/quix-streams).

Names (quixstreams/sinks/community/file/base.py): `<directory>/<topic>/<partition>/<start offset,
19 digits><.jsonl | .jsonl.gz | .parquet>`.

Contents (quixstreams/sinks/community/file/formats/json.py, parquet.py): `_timestamp` (ms),
`_key` (the key decoded as UTF-8), `_value` (the deserialized value) in JSON; in Parquet the
value's fields are columns beside `_timestamp` and `_key`. No offsets (record i has start
offset + i) and no headers. A key that is not bytes, a null key included, is written as
`str(item)`: "<quixstreams.sinks.base.item.SinkItem object at 0x7f…>", no key anyone wrote.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pyarrow as pa

from ...core.envelope import Record
from ...core.errors import CorruptObject
from ..object_format import parse_json
from ..parquet import read_bounded
from .layout import Decoded, PeerKey, PeerLayout, PeerOptions, as_bytes, decompress, table_of

NAME = re.compile(r"(?:.*/)?(?P<topic>[a-zA-Z0-9._-]+)/(?P<partition>\d+)/(?P<offset>\d{19})"
                  r"\.(?P<ext>jsonl|jsonl\.gz|parquet)")
_NON_BYTES_KEY = re.compile(r"<[\w.]*SinkItem object at 0x[0-9a-fA-F]+>")


class QuixLayout(PeerLayout):
    """Quix FileSink objects (JSON lines, optionally gzip, or Parquet)."""

    name = "quix"
    keeps = ("keeps keys as text, values as the JSON it deserialized (not the original bytes), timestamps; no headers, "
             "no offsets (file start offset + row, so gaps are not seen); null keys (written as a SinkItem repr) "
             "come back null; its folders write a topic name's characters other than letters, digits, '.', ' ' and '_' "
             "as '_' (my-topic is my_topic): --rename to the original name")

    def parse(self, key: str) -> PeerKey | None:
        """Topic, partition and start offset, or None."""
        match = NAME.fullmatch(key)
        if match is None:
            return None
        return PeerKey(key, match["topic"], int(match["partition"]), int(match["offset"]))

    def header_note(self, options: PeerOptions) -> str | None:
        """Quix stores no headers."""
        return None

    def decode(self, data: bytes, obj: PeerKey, options: PeerOptions,
               companion: Callable[[str], bytes | None]) -> Decoded:
        """A FileSink object as envelope rows (offsets: the name's + row)."""
        data = decompress(data, obj.key)
        try:
            if data[:4] == b"PAR1":
                rows = read_bounded(data, obj.key).to_pylist()
                values = [{k: v for k, v in sorted(row.items()) if k not in ("_timestamp", "_key")} for row in rows]
            else:
                rows = [parse_json(line, obj.key) for line in data.splitlines() if line.strip()]
                values = [row.get("_value") for row in rows]
        except (ValueError, pa.ArrowInvalid) as exc:
            raise CorruptObject(f"Quix object {obj.key} cannot be read ({exc})") from None
        return Decoded(table_of([
            Record(obj.topic, obj.partition, obj.offset_hint + i, _key(row.get("_key")),
                   as_bytes(value), int(row.get("_timestamp") or 0), 0, ())
            for i, (row, value) in enumerate(zip(rows, values))
        ]), record_offsets=False)


def _key(text: Any) -> bytes | None:
    if text is None or _NON_BYTES_KEY.fullmatch(str(text)):
        return None
    return str(text).encode()


LAYOUT = QuixLayout()
