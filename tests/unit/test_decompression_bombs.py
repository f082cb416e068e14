"""Decompression bombs (issue #39 item 5): an object that is small as stored but inflates to far
more than topicvault ever writes is refused with one line, fast and without the memory it asks
for. Each bomb is built and read in a fresh Python process whose peak RSS is measured
(VmHWM), so the test process never holds a gibibyte either."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from peak_memory import PEAK_MEMORY_SOURCE
from topicvault.core.errors import CorruptObject
from topicvault.formats.jsonl import JsonlFormat
from topicvault.formats.object_format import MAX_INFLATED_BYTES
from topicvault.formats.peers.layout import decompress

GiB = 1 << 30
# Python with pyarrow loaded takes about 100 MiB; a reader that inflated the bomb would take GiBs.
RSS_BOUND = 400 * 1024 * 1024


def run_python(code: str) -> tuple[int, str]:
    """Run `code` in a fresh interpreter; return its peak RSS (bytes) and what it printed last
    before that measure."""
    # VmHWM (see peak_memory): the child's own peak, not its parent's.
    script = PEAK_MEMORY_SOURCE + textwrap.dedent(code) + '\nprint(resident_bytes("VmHWM"))\n'
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]), lines[-2] if len(lines) > 1 else ""


READ_RECORD_BOMB = """
    import sys
    from topicvault.core.errors import TopicvaultError
    from topicvault.formats import resolve_format
    name, compression, path = sys.argv_bomb
    data = open(path, "rb").read()
    try:
        if sys.how == "stream":
            offsets, batches = resolve_format(name, compression).read_stream(data, "bomb", 50_000, 8 << 20)
            for batch in batches:
                pass
        else:
            resolve_format(name, compression).read(data, "bomb")
        print("read it all")
    except TopicvaultError as exc:
        print("refused: " + str(exc).replace("\\n", "|"))
"""


def test_the_measure_is_the_child_s_own_peak_not_its_parent_s():
    held = bytearray(RSS_BOUND + (64 << 20))
    held[::4096] = b"\x01" * len(held[::4096])  # touch every page: the parent's RSS is above the bound
    rss, said = run_python("print('small')")
    assert said == "small"
    assert rss < 100 << 20, f"peak RSS {rss / 2**20:.0f} MiB"
    del held


# One record whose value is 1 GiB of zeros, written by tests/data/bombs/make_bombs.py (building them
# takes GiBs of memory for a moment, so they are kept as files).
BOMBS = Path(__file__).parents[1] / "data" / "bombs"


@pytest.mark.parametrize("name,compression", [("parquet", "zstd"), ("avro", "deflate")])
def test_a_gibibyte_value_in_a_tiny_object_is_refused_without_inflating_it(name, compression):
    path = BOMBS / f"gibibyte-value.{compression}.{name}"
    prelude = f"import sys; sys.argv_bomb = {[name, compression, str(path)]!r}\n"
    assert path.stat().st_size < 2 * 1024 * 1024, path.stat().st_size  # small as stored
    for how in ("stream", "read"):
        rss, said = run_python(prelude + f"sys.how = {how!r}\n" + textwrap.dedent(READ_RECORD_BOMB))
        assert said.startswith("refused: object bomb inflates to more than"), said  # a block or a row group
        assert rss < RSS_BOUND, f"{how}: peak RSS {rss / 2**20:.0f} MiB"


READ_PEER_BOMB = """
    import sys
    from backports import zstd
    from topicvault.core.errors import TopicvaultError
    from topicvault.formats.peers.layout import decompress
    compressor = zstd.ZstdCompressor()
    if sys.pledged:
        compressor.set_pledged_input_size(2 << 30)  # the frame header says how large it inflates
    chunk = bytes(64 << 20)
    data = b"".join(compressor.compress(chunk) for _ in range(32)) + compressor.flush()
    del chunk
    print(len(data))
    try:
        decompress(data, "t-0-0.jsonl.zst")
        print("inflated")
    except TopicvaultError as exc:
        print("refused: " + str(exc))
"""


def test_a_zstd_peer_object_inflating_to_two_gibibytes_is_refused():
    rss, said = run_python("import sys; sys.pledged = True\n" + textwrap.dedent(READ_PEER_BOMB))
    assert said.startswith("refused: object t-0-0.jsonl.zst inflates to more than"), said
    assert rss < RSS_BOUND, f"peak RSS {rss / 2**20:.0f} MiB"
    # Without a size in the frame header it is inflated up to the cap only, in bounded steps.
    rss, said = run_python("import sys; sys.pledged = False\n" + textwrap.dedent(READ_PEER_BOMB))
    assert said.startswith("refused: object t-0-0.jsonl.zst inflates to more than"), said
    assert rss < MAX_INFLATED_BYTES + RSS_BOUND, f"peak RSS {rss / 2**20:.0f} MiB"


def test_a_snappy_block_declaring_a_gibibyte_is_refused_before_it_is_inflated():
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(bytes(1000)))
    declared = bytearray()
    size = MAX_INFLATED_BYTES + 1
    while size >= 0x80:  # the raw snappy preamble: the uncompressed length as a varint
        declared.append(size & 0x7F | 0x80)
        size >>= 7
    declared.append(size)
    lying = bytes(declared) + raw[2:]  # 1000 < 16384: its own preamble is two bytes
    xerial = b"\x82SNAPPY\x00" + bytes(8) + len(lying).to_bytes(4, "big") + lying
    with pytest.raises(CorruptObject, match=r"^object t-0-0.jsonl.snappy inflates to more than"):
        decompress(xerial, "t-0-0.jsonl.snappy")


def test_deeply_nested_json_is_a_one_line_error(tmp_path):
    nested = "[" * 200_000 + "]" * 200_000
    line = json.dumps({"key": None, "value": None, "headers": [],
                       "metadata": {"topic": "t", "partition": 0, "offset": 0, "timestamp": 0, "timestampType": 0}})
    bomb = (line[:-1] + ', "extra": ' + nested + "}\n").encode()
    with pytest.raises(CorruptObject, match="nested too deeply"):
        JsonlFormat().read(bomb, "deep.jsonl")
    aiven = ("[" + nested + "]").encode()
    from topicvault.formats.object_format import parse_json
    with pytest.raises(CorruptObject, match="nested too deeply"):
        parse_json(aiven, "t-0-0.json")


def test_the_cap_is_far_above_what_topicvault_writes():
    from topicvault.core.rotation import DEFAULT_MAX_BYTES

    assert MAX_INFLATED_BYTES >= 8 * DEFAULT_MAX_BYTES
