"""Memory of encoding one very large record (the Parquet writer of a backup task).

Arrow's Parquet writer keeps min/max statistics of every column chunk: for a key or value column
those are copies of the largest and smallest values, so a chunk holding one 64 MiB value took
three more copies of it. Statistics are only worth keeping where readers prune by them
(offsets and timestamps); the rest are not written. Measured in a fresh process (VmHWM)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from peak_memory import PEAK_MEMORY_SOURCE

MiB = 1 << 20
VALUE = 64 * MiB

ENCODE_ONE_LARGE_RECORD = f"""
    import os
    from topicvault.core.envelope import Record, record_sizes, records_to_batch
    from topicvault.formats.parquet import ParquetFormat

    batch = records_to_batch([Record("t", 0, 7, b"k", os.urandom({VALUE}), 1_700_000_000_000, 0, (("h", b"x"),))])
    sizes = record_sizes(batch)
    before = resident_bytes("VmHWM")
    writer = ParquetFormat().open_writer()
    writer.add(batch, sizes)
    data = writer.finish()
    print(before, resident_bytes("VmHWM"), len(data))
"""


def test_encoding_a_large_record_takes_a_few_copies_of_it_not_seven():
    script = PEAK_MEMORY_SOURCE + textwrap.dedent(ENCODE_ONE_LARGE_RECORD)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    before, after, stored = map(int, done.stdout.split())
    assert stored > VALUE  # random bytes: stored whole
    assert after - before < 4.5 * VALUE, f"encoding took {(after - before) / VALUE:.1f} copies of the value"


def test_offsets_and_timestamps_keep_their_statistics_and_the_payload_columns_have_none():
    import io

    import pyarrow.parquet as pq
    from topicvault.core.envelope import Record, record_sizes, records_to_batch
    from topicvault.formats.parquet import ParquetFormat

    batch = records_to_batch([Record("t", 0, offset, b"k%d" % offset, b"v", 1_700_000_000_000 + offset, 0, ())
                              for offset in (5, 6, 9)])
    writer = ParquetFormat().open_writer()
    writer.add(batch, record_sizes(batch))
    group = pq.ParquetFile(io.BytesIO(writer.finish())).metadata.row_group(0)
    stats = {group.column(c).path_in_schema: group.column(c).statistics for c in range(group.num_columns)}
    assert (stats["metadata.offset"].min, stats["metadata.offset"].max) == (5, 9)
    assert stats["metadata.timestamp"].min == 1_700_000_000_005
    assert stats["key"] is None and stats["value"] is None
