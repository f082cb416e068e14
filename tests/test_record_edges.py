"""Records at the edges of what Kafka allows, through every format (no broker, no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from topicvault.core.envelope import Record, batch_to_records, records_to_batch
from topicvault.formats import FORMAT_NAMES, resolve_format

CODECS = {"parquet": ["zstd"], "avro": ["deflate"], "jsonl": ["none", "gzip"], "csv": ["none", "gzip"]}
ALL = [(name, codec) for name in FORMAT_NAMES for codec in CODECS[name]]
# Every character str.splitlines() breaks on, besides "\n".
LINE_BREAKERS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r\n"]


def line_breaking_records() -> list[Record]:
    return [
        Record("t", 0, offset, f"k{char}".encode(), f"v{char}".encode(), 1_700_000_000_000 + offset, 0,
               ((f"name{char}end", f"value{char}".encode()), (char, None), ("plain", char.encode())))
        for offset, char in enumerate(LINE_BREAKERS)
    ]


@pytest.mark.parametrize("name,codec", ALL)
def test_header_names_with_line_separators_read_back(name, codec):
    fmt = resolve_format(name, codec)
    records = line_breaking_records()
    data = fmt.write(pa.Table.from_batches([records_to_batch(records)]))
    assert batch_to_records(fmt.read(data, "k")) == records
