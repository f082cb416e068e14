"""Restore archives other Kafka-to-S3 sinks wrote: list, detect the layout, merge by offset.

A peer layout names its objects its own way (keys.peers) and stores records its own way
(formats.peers). Here objects are listed, grouped per topic-partition, and read in offset
order across folders (time- or field-partitioned layouts spread a partition over many), with
offsets already restored skipped (a peer's at-least-once re-delivery writes some twice).
The merged sequence is deterministic, so a resumed restore can skip what the target holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.commits import ObjectEntry
from ..core.errors import TopicvaultError
from ..core.store import ObjectStore
from ..formats.peers import PEER_FORMATS
from ..keys.peers import PEER_KEYS, PeerKey

LAYOUTS = ("auto", "topicvault", *sorted(PEER_KEYS))


@dataclass
class PeerPartition:
    """The objects of one topic-partition in a peer archive, in name order."""

    topic: str
    partition: int
    objects: list[PeerKey] = field(default_factory=list)


@dataclass
class PeerArchive:
    """What a listing found: the layout, its partitions, and keys that were left out."""

    layout: str
    partitions: dict[tuple[str, int], PeerPartition]
    ignored: list[str]


def detect_layout(keys: list[str], has_commits: bool) -> str:
    """The layout whose naming matches the listed keys; ambiguous or none is an error."""
    if has_commits:
        return "topicvault"
    data_keys = [k for k in keys if not k.endswith("/")]
    scores = {name: sum(1 for k in data_keys if codec.parse(k) is not None) for name, codec in PEER_KEYS.items()}
    best = max(scores.values(), default=0)
    if best == 0:
        raise TopicvaultError(
            "no backup found: no topicvault commit records and no object named like a Lenses, Aiven, Confluent or "
            "Quix sink writes them; check the URI or pass --layout"
        )
    winners = sorted(name for name, score in scores.items() if score == best)
    if len(winners) > 1:
        raise TopicvaultError(f"objects match more than one layout ({', '.join(winners)}): pass --layout to choose")
    return winners[0]


def list_archive(store: ObjectStore, layout: str, key_template: str | None = None) -> PeerArchive:
    """List a peer archive and group its data objects per topic-partition."""
    codec = PEER_KEYS[layout].with_template(key_template) if key_template else PEER_KEYS[layout]
    partitions: dict[tuple[str, int], PeerPartition] = {}
    ignored: list[str] = []
    for info in store.list(""):
        parsed = codec.parse(info.key)
        if parsed is None:
            if not info.key.startswith("_topicvault/"):
                ignored.append(info.key)
            continue
        if parsed.role != "data":
            continue
        partitions.setdefault((parsed.topic, parsed.partition), PeerPartition(parsed.topic, parsed.partition)).objects.append(parsed)
    for peer_partition in partitions.values():
        peer_partition.objects.sort(key=lambda k: (k.offset_hint if k.offset_hint is not None else -1, k.key))
    return PeerArchive(layout, partitions, ignored)


def as_entries(peer_partition: PeerPartition) -> tuple[ObjectEntry, ...]:
    """Plain entries for a restore task (counts and checksums are unknown before reading)."""
    return tuple(
        ObjectEntry(k.key, peer_partition.topic, peer_partition.partition, k.offset_hint or 0, k.offset_hint or 0,
                    0, 0, 0, 0, "")
        for k in peer_partition.objects
    )


def read_peer_partition(
    store: ObjectStore, layout: str, entries: list[ObjectEntry], report: Callable[[str], None] = lambda line: None
) -> Iterator[pa.RecordBatch]:
    """A partition's records in offset order, each offset once, from objects of a peer layout.

    Objects are read one at a time in the order of the offset their names carry; every record
    at or below the last offset already yielded is a re-delivery and is dropped. Gaps between
    offsets (compaction, transaction markers, or an object the archive lost) are reported.
    """
    if not entries:
        return
    decoder = PEER_FORMATS[layout]
    where = f"{entries[0].topic}[{entries[0].partition}]"
    last = -1
    duplicates = missing = gaps = 0
    for entry in entries:
        table = _unique_offsets(decoder.read(store, entry.key, entry.topic, entry.partition).sort_by("offset"))
        fresh = table.filter(pc.greater(table.column("offset"), last)) if last >= 0 else table
        duplicates += table.num_rows - fresh.num_rows
        if fresh.num_rows == 0:
            continue
        offsets = fresh.column("offset")
        steps = pc.subtract(offsets.slice(1), offsets.slice(0, len(offsets) - 1)) if len(offsets) > 1 else pa.array([], pa.int64())
        holes = [step - 1 for step in steps.to_pylist() if step > 1]
        if last >= 0 and offsets[0].as_py() > last + 1:
            holes.append(offsets[0].as_py() - last - 1)
        gaps += len(holes)
        missing += sum(holes)
        last = offsets[-1].as_py()
        yield from fresh.to_batches(max_chunksize=50_000)
    if duplicates:
        report(f"{where}: {duplicates} records with offsets seen before (re-delivered by the sink) restored once")
    if gaps:
        report(f"{where}: {missing} offsets absent in {gaps} gaps (compaction, transaction markers, or objects "
               "missing from the archive)")


def _unique_offsets(table: pa.Table) -> pa.Table:
    """Keep the first record of each offset (the table is sorted by offset)."""
    if table.num_rows < 2:
        return table
    offsets = table.column("offset")
    repeats = pc.equal(offsets.slice(1), offsets.slice(0, table.num_rows - 1))
    keep = pa.concat_arrays([pa.array([True]), pc.invert(repeats).combine_chunks()])
    return table.filter(keep)
