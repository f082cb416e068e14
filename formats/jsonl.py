"""JSON Lines objects: one record per line, bytes as base64, optional gzip."""

from __future__ import annotations

import base64
import json

import pyarrow as pa

from .object_format import ObjectFormat, from_rows, gunzip_bytes, gzip_bytes, parse_json, to_rows


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


class JsonlFormat(ObjectFormat):
    """`{"key": b64|null, "value": b64|null, "headers": [{"key", "value": b64|null}], "metadata": {...}}`."""

    name = "jsonl"

    def __init__(self, compression: str = "none") -> None:
        self.gzip = compression == "gzip"
        self.extension = "jsonl.gz" if self.gzip else "jsonl"

    def write(self, table: pa.Table) -> bytes:
        lines = []
        for row in to_rows(table):
            row["key"], row["value"] = _b64(row["key"]), _b64(row["value"])
            row["headers"] = [{"key": h["key"], "value": _b64(h["value"])} for h in row["headers"]]
            lines.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        data = ("\n".join(lines) + "\n").encode() if lines else b""
        return gzip_bytes(data) if self.gzip else data

    def read(self, data: bytes, object_key: str) -> pa.Table:
        if self.gzip:
            data = gunzip_bytes(data, object_key, self.name)
        if data and not data.endswith(b"\n"):
            raise self.corrupt(object_key, "the last line is cut off")
        rows = []
        try:
            # Lines end at "\n" only: JSON escapes it inside strings, but not U+2028, U+0085 or
            # the other breaks str.splitlines() knows, which header names may hold.
            for line in data.decode().split("\n")[:-1]:
                row = parse_json(line, object_key)
                row["key"], row["value"] = _unb64(row["key"]), _unb64(row["value"])
                row["headers"] = [{"key": h["key"], "value": _unb64(h["value"])} for h in row["headers"]]
                rows.append(row)
        except (ValueError, KeyError, TypeError) as exc:
            raise self.corrupt(object_key, exc) from None
        return from_rows(rows)
