"""CSV objects (Aiven-style rows), optional gzip.

Columns: key,value,topic,partition,offset,timestamp,timestampType,headers. Bytes are base64;
a null key or value is an empty cell and empty bytes are the cell `=` (not valid base64, so
the two never mix). headers is a JSON array of [name, base64-or-null] pairs.
"""

from __future__ import annotations

import base64
import csv
import io
import json

import pyarrow as pa

from .object_format import ObjectFormat, from_rows, gunzip_bytes, gzip_bytes, parse_json, to_rows

# Kafka values can be many MiB; the csv module's default cell limit is 128 KiB.
csv.field_size_limit(2**31 - 1)
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
EMPTY = "="


def _cell(data: bytes | None) -> str:
    if data is None:
        return ""
    return base64.b64encode(data).decode("ascii") if data else EMPTY


def _bytes(cell: str) -> bytes | None:
    if cell == "":
        return None
    return b"" if cell == EMPTY else base64.b64decode(cell, validate=True)


class CsvFormat(ObjectFormat):
    """One header line, then one record per line."""

    name = "csv"

    def __init__(self, compression: str = "none") -> None:
        self.gzip = compression == "gzip"
        self.extension = "csv.gz" if self.gzip else "csv"

    def write(self, table: pa.Table) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in to_rows(table):
            meta = row["metadata"]
            headers = [[h["key"], None if h["value"] is None else base64.b64encode(h["value"]).decode()]
                       for h in row["headers"]]
            writer.writerow([_cell(row["key"]), _cell(row["value"]), meta["topic"], meta["partition"], meta["offset"],
                             meta["timestamp"], meta["timestampType"], json.dumps(headers, ensure_ascii=False)])
        data = out.getvalue().encode()
        return gzip_bytes(data) if self.gzip else data

    def read(self, data: bytes, object_key: str) -> pa.Table:
        if self.gzip:
            data = gunzip_bytes(data, object_key, self.name)
        if not data.endswith(b"\n"):
            raise self.corrupt(object_key, "the last line is cut off")
        rows = []
        try:
            reader = csv.reader(io.StringIO(data.decode()))
            if next(reader) != COLUMNS:
                raise ValueError(f"the header line is not {','.join(COLUMNS)}")
            for cells in reader:
                key, value, topic, partition, offset, timestamp, timestamp_type, headers = cells
                rows.append({
                    "key": _bytes(key),
                    "value": _bytes(value),
                    "headers": [{"key": k, "value": None if v is None else base64.b64decode(v, validate=True)}
                                for k, v in parse_json(headers, object_key)],
                    "metadata": {"topic": topic, "partition": int(partition), "offset": int(offset),
                                 "timestamp": int(timestamp), "timestampType": int(timestamp_type)},
                })
        except (ValueError, StopIteration, TypeError, csv.Error) as exc:
            raise self.corrupt(object_key, exc) from None
        return from_rows(rows)
