"""Peer archives decoded and merged without a broker or Spark (pure logic, real local store).

Archives are written here byte for byte as the sinks write them with their default settings
(see the evidence cited in topicvault/formats/peers/*.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from peertools import restored, xerial_snappy
from topicvault.core.errors import CorruptObject, TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.formats.peers import PEERS, PeerOptions
from topicvault.source.peer_layout import peer_state, resolve_layout


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def aiven_csv(cells: list[str]) -> bytes:
    """Aiven's plain writer: a "\\n" before every record but the first, nothing after the last."""
    return "\n".join(cells).encode()


# ---- Aiven csv, default settings: format.output.fields=value, base64 ----

def test_aiven_default_csv_keeps_tombstones_as_empty_lines(tmp_path):
    # Offsets 95..104 cross a power of ten; tombstones in the middle, at an object's end, and an
    # object holding one tombstone only (an empty file).
    values = {95: b"a", 96: None, 97: b"\x00\xff", 98: None, 99: None, 100: b"", 101: b"z", 102: None, 103: b"y",
              104: None}
    for start, end in ((95, 99), (99, 100), (100, 104), (104, 105)):
        cells = ["" if values[o] is None else b64(values[o]) for o in range(start, end)]
        (tmp_path / f"orders-0-{start}").write_bytes(aiven_csv(cells))
    rows, report = restored(tmp_path, "aiven")
    assert [r["offset"] for r in rows] == list(range(95, 105))
    # csv cannot tell an empty value from a null one: both are restored as null.
    assert [r["value"] for r in rows] == [values[o] or None for o in range(95, 105)]
    assert all(r["key"] is None for r in rows)
    assert (report.duplicates, report.gaps) == (0, 0)


def test_aiven_snappy_objects_are_read_as_xerial_streams_and_a_damaged_one_is_one_line(tmp_path):
    values = [b"a", b"\x00\xff", b"longer value"]
    (tmp_path / "orders-0-7.snappy").write_bytes(xerial_snappy(aiven_csv([b64(v) for v in values])))
    rows, _ = restored(tmp_path, "aiven")
    assert [(r["offset"], r["value"]) for r in rows] == [(7, b"a"), (8, b"\x00\xff"), (9, b"longer value")]
    (tmp_path / "orders-0-7.snappy").write_bytes(xerial_snappy(aiven_csv([b64(v) for v in values]))[:-3])
    with pytest.raises(CorruptObject, match="orders-0-7.snappy"):
        restored(tmp_path, "aiven")


def test_aiven_csv_without_encoding_refuses_a_value_split_by_a_newline(tmp_path):
    # value.encoding=none: "two\nlines" at offset 11 becomes two lines; the next object starts at 12.
    (tmp_path / "t-0-10").write_bytes(b"one\ntwo\nlines")
    (tmp_path / "t-0-12").write_bytes(b"three")
    with pytest.raises(TopicvaultError, match="newline"):
        restored(tmp_path, "aiven", PeerOptions(value_encoding="none"))


def test_aiven_csv_with_offsets_refuses_an_empty_offset(tmp_path):
    (tmp_path / "t-0-10").write_bytes(f"{b64(b'v')},10\n".encode())  # a trailing newline is a record without offset
    with pytest.raises(CorruptObject, match="line 2 has 1 fields"):
        restored(tmp_path, "aiven", PeerOptions(("value", "offset")))


# ---- interleaved offsets: merged by offset across objects ----

def aiven_rows(offsets: list[int], tag: bytes = b"") -> bytes:
    return aiven_csv([f"{b64(b'v%d' % o + tag)},{o}" for o in offsets])


def test_time_bucketed_aiven_objects_merge_by_offset(tmp_path):
    # {{timestamp:unit=HH}} from record time: one partition's offsets alternate between folders.
    template = "hour={{timestamp:unit=HH}}/{{topic}}-{{partition}}-{{start_offset}}"
    (tmp_path / "hour=07").mkdir()
    (tmp_path / "hour=08").mkdir()
    (tmp_path / "hour=07" / "t-0-8").write_bytes(aiven_rows([8, 10, 12, 14]))
    (tmp_path / "hour=08" / "t-0-9").write_bytes(aiven_rows([9, 11, 13, 15]))
    (tmp_path / "hour=07" / "t-0-16").write_bytes(aiven_rows([16, 20]))  # 17..19 absent: one gap
    (tmp_path / "hour=08" / "t-0-13").write_bytes(aiven_rows([13, 15]))  # re-delivered: the same records
    rows, report = restored(tmp_path, "aiven", PeerOptions(("value", "offset")), template)
    assert [r["offset"] for r in rows] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 20]
    assert [r["value"] for r in rows] == [b"v%d" % o for o in (8, 9, 10, 11, 12, 13, 14, 15, 16, 20)]
    assert (report.duplicates, report.gaps, report.missing) == (2, 1, 3)
    assert report.lines() and report.to_json()["missing_offsets"] == 3


def test_duplicates_inside_one_object_are_restored_once(tmp_path):
    (tmp_path / "t-0-5").write_bytes(aiven_rows([5, 6, 6, 7]))
    rows, report = restored(tmp_path, "aiven", PeerOptions(("value", "offset")))
    assert [r["offset"] for r in rows] == [5, 6, 7] and report.duplicates == 1


def test_two_objects_holding_one_offset_with_different_content_are_refused_naming_both(tmp_path):
    # A re-created topic writing into the same prefix: its offsets start over with other records.
    (tmp_path / "t-0-0").write_bytes(aiven_rows([0, 1, 2, 3]))
    (tmp_path / "t-0-2").write_bytes(aiven_rows([2, 3], b"other log"))
    with pytest.raises(TopicvaultError, match=r"offset 2 is held by t-0-0 and by t-0-2 with different content"):
        restored(tmp_path, "aiven", PeerOptions(("value", "offset")))


def test_one_object_holding_one_offset_twice_with_different_content_is_refused(tmp_path):
    (tmp_path / "t-0-5").write_bytes(aiven_csv([f"{b64(b'first')},5", f"{b64(b'first')},6",
                                                f"{b64(b'second')},6", f"{b64(b'x')},7"]))
    with pytest.raises(TopicvaultError, match=r"offset 6 is held twice by t-0-5 with different content"):
        restored(tmp_path, "aiven", PeerOptions(("value", "offset")))


def test_an_object_whose_name_misstates_its_first_offset_is_refused(tmp_path):
    (tmp_path / "t-0-5").write_bytes(aiven_rows([7, 8]))
    with pytest.raises(TopicvaultError, match="named for offset 5 but its first record has offset 7"):
        restored(tmp_path, "aiven", PeerOptions(("value", "offset")))


def test_objects_without_offsets_that_overlap_are_refused(tmp_path):
    (tmp_path / "hour=07").mkdir()
    (tmp_path / "hour=08").mkdir()
    (tmp_path / "hour=07" / "t-0-8").write_bytes(aiven_csv([b64(b"a"), b64(b"b"), b64(b"c")]))
    (tmp_path / "hour=08" / "t-0-9").write_bytes(aiven_csv([b64(b"d")]))
    with pytest.raises(TopicvaultError, match="order cannot be recovered"):
        restored(tmp_path, "aiven", template="hour={{timestamp:unit=HH}}/{{topic}}-{{partition}}-{{start_offset}}")


def lenses_json(offsets: list[int], headers: dict) -> bytes:
    return b"".join(json.dumps({
        "key": None, "value": b64(b"v%d" % o), "valueIsArray": True, "headers": headers,
        "metadata": {"timestamp": 1_700_000_000_000 + o, "topic": "t", "partition": 0, "offset": o},
    }).encode() + b"\n" for o in offsets)


def test_lenses_partitionby_interleaving_merges_with_names_holding_the_last_offset(tmp_path):
    # PARTITIONBY a field: each folder's file named by an offset that is not its first record's.
    for folder, offsets in (("color=red", [12, 14, 16]), ("color=blue", [13, 15, 17])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"t(000000000000_{offsets[-1]:012d}).json").write_bytes(lenses_json(offsets, {"h": "web"}))
    rows, report = restored(tmp_path, "lenses")
    assert [r["offset"] for r in rows] == [12, 13, 14, 15, 16, 17]
    # Connect's default SimpleHeaderConverter stored the header as text: its UTF-8 bytes come back.
    assert rows[0]["headers"] == [{"key": "h", "value": b"web"}]
    assert report.duplicates == 0


# ---- header values stored as text ----

def write_confluent_json(root: Path, headers: list[list[dict]]) -> None:
    folder = root / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "t+0+0000000007.json").write_bytes(b"".join(b'"%s"\n' % b64(b"v").encode() for _ in headers))
    (folder / "t+0+0000000007.headers.json").write_bytes(
        b"".join(json.dumps({"headers": h}).encode() + b"\n" for h in headers))


def test_confluent_parquet_values_are_whole_structs_even_of_one_field(tmp_path):
    # Confluent's Parquet writer takes each value's struct as it is (only the keys and headers
    # views are wrapped in a one-field struct): {"id": 5} must not come back as 5.
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": [5, 6]}), folder / "t+0+0000000007.parquet")
    pq.write_table(pa.table({"key": [b"k5", None]}), folder / "t+0+0000000007.keys.parquet")
    blob = pa.table({"raw": pa.array([b"\x00\xff"], pa.binary()), "n": [1]})
    pq.write_table(blob, folder / "t+0+0000000009.parquet")
    rows, _ = restored(tmp_path, "confluent")
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (7, b"k5", b'{"id":5}'), (8, None, b'{"id":6}'), (9, None, b'{"raw":"AP8=","n":1}')]


def test_confluent_parquet_of_every_codec_is_read_not_left_out(tmp_path):
    # parquet.codec names the file: <start>.<codec extension>.parquet (parquet-mr's extensions).
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    for start, (extension, codec) in enumerate([("br", "brotli"), ("lz4hadoop", "lz4"), ("zstd", "zstd")]):
        pq.write_table(pa.table({"id": [start]}), folder / f"t+0+{start:010d}.{extension}.parquet", compression=codec)
    rows, _ = restored(tmp_path, "confluent")
    assert [(r["offset"], r["value"]) for r in rows] == [(0, b'{"id":0}'), (1, b'{"id":1}'), (2, b'{"id":2}')]


def test_confluent_headers_default_to_text_and_take_base64(tmp_path):
    write_confluent_json(tmp_path, [[{"key": "source", "value": "web"}, {"key": "source", "value": "app"}],
                                    [{"key": "n", "value": None}]])
    rows, _ = restored(tmp_path, "confluent")
    assert [r["headers"] for r in rows] == [[{"key": "source", "value": b"web"}, {"key": "source", "value": b"app"}],
                                            [{"key": "n", "value": None}]]
    with pytest.raises(CorruptObject, match="'web' is not base64"):
        restored(tmp_path, "confluent", PeerOptions(header_encoding="base64"))


def test_confluent_headers_written_by_bytearrayconverter(tmp_path):
    write_confluent_json(tmp_path, [[{"key": "b", "value": b64(b"\x00\xff")}]])
    rows, _ = restored(tmp_path, "confluent", PeerOptions(header_encoding="base64"))
    assert rows[0]["headers"] == [{"key": "b", "value": b"\x00\xff"}]


def test_bad_key_encoding_is_refused():
    with pytest.raises(TopicvaultError, match="bad --peer-key-encoding 'hex': use base64, none or json"):
        PeerOptions(key_encoding="hex")
    assert PeerOptions(value_encoding="none").keys_base64 is False
    assert PeerOptions(value_encoding="none", key_encoding="base64").keys_base64 is True


def test_bad_header_encoding_is_refused():
    with pytest.raises(TopicvaultError, match="bad --peer-header-encoding 'utf8': use text or base64"):
        PeerOptions(header_encoding="utf8")


def test_header_note_names_the_encoding_used():
    assert "read as text (default" in PEERS["confluent"].header_note(PeerOptions())
    assert "read as base64 (--peer-header-encoding)" in PEERS["lenses"].header_note(PeerOptions(header_encoding="base64"))
    assert PEERS["quix"].header_note(PeerOptions()) is None


# ---- names ----

def test_aiven_names_are_parsed_whole(tmp_path):
    (tmp_path / "t-0-5").write_bytes(aiven_csv([b64(b"mine")]))
    (tmp_path / "other-archive").mkdir()
    (tmp_path / "other-archive" / "t-0-6").write_bytes(aiven_csv([b64(b"not mine")]))
    state, ignored = peer_state(open_store(str(tmp_path)), "aiven", None)
    assert [o.key for o in state.partitions[("t", 0)].objects] == ["t-0-5"]
    assert ignored == ["other-archive/t-0-6"]


@pytest.mark.parametrize("layout", ["confluent", "lenses", "quix"])
def test_a_template_for_a_layout_without_templates_is_refused(tmp_path, layout):
    with pytest.raises(TopicvaultError, match=f"{layout} objects are not named by a template; drop --key-template"):
        resolve_layout(open_store(str(tmp_path)), layout, "{{topic}}/{{partition}}/{{start_offset}}")


def test_every_peer_has_one_module_in_the_registry():
    assert sorted(PEERS) == ["aiven", "confluent", "lenses", "quix"]
    for name, peer in PEERS.items():
        assert peer.name == name and peer.keeps


@pytest.mark.parametrize("seed", range(6))
def test_merge_matches_sorted_unique_offsets_for_random_interleavings(tmp_path, seed):
    import random

    rng = random.Random(seed)
    offsets = sorted(rng.sample(range(90, 400), 120))  # gaps, and crossing 100
    folders = [[] for _ in range(3)]
    for offset in offsets:  # each record to one of three time/field folders
        folders[rng.randrange(3)].append(offset)
    objects = []
    for f, mine in enumerate(folders):
        i = 0
        while i < len(mine):
            size = rng.randint(1, 9)
            objects.append((f, mine[i:i + size]))
            i += size
    objects += [(3, sorted(rng.sample(offsets, 5))) for _ in range(3)]  # re-deliveries, spread anywhere
    for f, chunk in objects:
        if chunk:
            (tmp_path / f"f={f:02d}").mkdir(exist_ok=True)
            path = tmp_path / f"f={f:02d}" / f"t-0-{chunk[0]}"
            path.write_bytes(path.read_bytes() + b"\n" + aiven_rows(chunk) if path.exists() else aiven_rows(chunk))
    rows, report = restored(tmp_path, "aiven", PeerOptions(("value", "offset")),
                            "f={{timestamp:unit=HH}}/{{topic}}-{{partition}}-{{start_offset}}")
    assert [r["offset"] for r in rows] == offsets
    assert [r["value"] for r in rows] == [b"v%d" % o for o in offsets]
    assert report.missing == offsets[-1] - offsets[0] + 1 - len(offsets)


@pytest.mark.parametrize(("args", "message"), [
    (["--peer-header-encoding", "utf8"], "error: bad --peer-header-encoding 'utf8': use text or base64"),
    (["--layout", "quix", "--key-template", "{{topic}}-{{partition}}-{{start_offset}}"],
     "error: --key-template: quix objects are not named by a template; drop --key-template"),
    (["--peer-envelope", "maybe"], "error: bad --peer-envelope 'maybe': use true or false (the sink's "
                                   "format.output.envelope)"),
    (["--peer-envelope", "false", "--peer-fields", "value,offset"],
     "error: --peer-envelope false (format.output.envelope=false) takes one output field, --peer-fields names "
     "value,offset: the sink refuses that setting; check its configuration"),
])
def test_bad_peer_options_are_one_line_errors(tmp_path, args, message):
    from clitools import run_cli

    (tmp_path / "t-0-5").write_bytes(b"")
    out = run_cli("restore", "--from", str(tmp_path), "-b", "127.0.0.1:9", *args, expect_exit=1)
    assert out.strip() == message
