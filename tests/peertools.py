"""Archives as a peer tool writes them (Aiven's CSV and others): records with gaps, nulls and repeated
headers, objects written in chunks (one re-delivered), and the check that a restore kept them."""

from __future__ import annotations

import base64
from pathlib import Path

from kafkatools import consume_all
from topicvault.core.envelope import Record
from topicvault.core.stores.locations import open_store
from topicvault.formats.peers import PeerOptions, peer_layout
from topicvault.source.peer_layout import PeerReadReport, PeerTally, peer_state, read_peer_partition

BASE = 1_700_000_000_000


FIELDS = "key,value,offset,timestamp,headers"


def archive_records(topic: str, partitions: int = 2, count: int = 9, headers: bool = True) -> dict[int, list[Record]]:
    """Per partition: offsets from 12 with a gap, null keys, a tombstone, binary bytes, repeated headers."""
    found = {}
    for p in range(partitions):
        records = []
        offset = 12
        for i in range(count):
            key = None if i % 3 == 0 else b"\x00\xffkey-%d" % i
            value = None if i == 4 else b"value-%d-%d\xfe" % (p, i)
            record_headers = ((("h", b"1"), ("h", b"\x00\x01"), ("other", None)) if headers and i % 2 else ())
            records.append(Record(topic, p, offset, key, value, BASE + p * 1000 + i * 7, 0, record_headers))
            offset += 3 if i == 5 else 1  # a gap, as compaction would leave
        found[p] = records
    return found


def b64(data: bytes | None) -> str:
    return "" if data is None else base64.b64encode(data).decode()


def aiven_csv(records: list[Record]) -> bytes:
    lines = []
    for r in records:
        headers = "".join(f"{b64(k.encode())}:{b64(v)};" for k, v in r.headers)
        lines.append(",".join([b64(r.key), b64(r.value), str(r.offset), str(r.timestamp_ms), headers]))
    return "\n".join(lines).encode()  # Aiven: a separator before every record but the first


def write_chunks(root: Path, records: dict[int, list[Record]], name, encode, size: int = 4, redeliver: bool = True):
    """Objects of `size` records per partition; with `redeliver`, one object written twice, shifted."""
    for p, rows in records.items():
        chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
        if redeliver:
            chunks.append(rows[2:6])  # at-least-once: a re-delivered overlap
        for chunk in chunks:
            path = root / name(p, chunk[0])
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                path = path.with_name(path.name + ".redelivered")
            path.write_bytes(encode(chunk))


def assert_restored(bootstrap: str, target: str, expected: dict[int, list[Record]], timestamps: bool = True,
                    headers_as=lambda h: h) -> None:
    restored = consume_all(bootstrap, target)
    for p, rows in expected.items():
        got = [(r.key, r.value, r.headers) + ((r.timestamp_ms,) if timestamps else ()) for r in restored[p]]
        want = [(r.key, r.value, headers_as(r.headers)) + ((r.timestamp_ms,) if timestamps else ()) for r in rows]
        assert got == want, f"partition {p}"


def restored(root: Path, layout: str, options: PeerOptions = PeerOptions(), template: str | None = None,
             partition: tuple[str, int] | None = None) -> tuple[list[dict], PeerReadReport]:
    """Rows and read report of one partition (`partition`, else the first) of the peer archive at `root`."""
    store = open_store(str(root))
    state, _ = peer_state(store, layout, template)
    key = partition or sorted(state.partitions)[0]
    entries = state.partitions[key].objects
    tally = PeerTally(f"{key[0]}[{key[1]}]")
    rows = []
    for batch in read_peer_partition(store, peer_layout(layout, template), options, entries, tally):
        rows.extend(batch.to_pylist())
    return rows, tally.report()


def xerial_snappy(data: bytes, block: int = 5) -> bytes:
    """What org.xerial.snappy.SnappyOutputStream writes (Aiven's snappy): a magic header, then
    blocks, each its compressed length (4 bytes, big-endian) and raw snappy bytes."""
    import struct

    import cramjam

    out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for start in range(0, len(data), block):
        compressed = bytes(cramjam.snappy.compress_raw(data[start:start + block]))
        out += [struct.pack(">i", len(compressed)), compressed]
    return b"".join(out)
