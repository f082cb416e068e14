"""Restore archives other Kafka-to-S3 sinks wrote: list, detect the layout, merge by offset.

A peer layout names its objects its own way (keys.peers) and stores records its own way
(formats.peers). Here objects are listed, grouped per topic-partition, and read one at a
time in the order of the offset their names carry; time- or field-partitioned folders spread
a partition over many prefixes, and that order merges them. Offsets already restored are
skipped (a peer's at-least-once re-delivery writes some twice), so the merged sequence is
deterministic and a resumed restore can skip what the target holds.
"""

from __future__ import annotations

from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.commits import COMMITS_PREFIX, BackupState, ObjectEntry, PartitionState
from ..core.errors import ObjectNotFound, TopicvaultError
from ..core.store import ObjectStore
from ..formats.peers import KEEPS, PeerOptions, decode_aiven, decode_confluent, decode_lenses, decode_quix
from ..keys.peers import PEER_KEYS

LAYOUTS = ("auto", "topicvault", *sorted(PEER_KEYS))
# Layouts whose records carry no offset: it is the object name's start offset + the row number.
NAMED_OFFSETS_ONLY = {"confluent", "quix"}


def detect_layout(store: ObjectStore, keys: list[str], key_template: str | None = None) -> str:
    """The layout whose naming matches the listed keys; none or more than one is an error."""
    if any(k.startswith("_topicvault/commits/") for k in keys):
        return "topicvault"
    scores = {}
    for name, codec in PEER_KEYS.items():
        codec = codec.with_template(key_template) if key_template else codec
        scores[name] = sum(1 for k in keys if codec.parse(k) is not None)
    best = max(scores.values(), default=0)
    if best == 0:
        raise TopicvaultError(
            f"no backup at {store.uri}: no topicvault commit records and no object named the way the Lenses, Aiven, "
            "Confluent or Quix sinks name them; check the URI, or pass --layout (and --key-template for custom names)"
        )
    winners = sorted(name for name, score in scores.items() if score == best)
    if len(winners) > 1:
        raise TopicvaultError(f"objects at {store.uri} match more than one layout ({', '.join(winners)}): pass --layout")
    return winners[0]


def resolve_layout(store: ObjectStore, layout: str, key_template: str | None) -> str:
    """`--layout` checked, with auto resolved from a listing."""
    if layout not in LAYOUTS:
        raise TopicvaultError(f"bad --layout {layout!r}: use one of {', '.join(LAYOUTS)}")
    if layout != "auto":
        return layout
    # One commit record is enough to know the layout: never list a large archive for it.
    if next(store.list(COMMITS_PREFIX), None) is not None:
        return "topicvault"
    return detect_layout(store, [info.key for info in store.list("")], key_template)


def peer_state(store: ObjectStore, layout: str, key_template: str | None) -> tuple[BackupState, list[str]]:
    """A peer archive as a backup state (objects per partition, ordered) and the keys left out."""
    codec = PEER_KEYS[layout].with_template(key_template) if key_template else PEER_KEYS[layout]
    state = BackupState()
    ignored: list[str] = []
    for info in store.list(""):
        parsed = codec.parse(info.key)
        if parsed is None:
            if not info.key.startswith("_topicvault/"):
                ignored.append(info.key)
            continue
        if parsed.role != "data":
            continue
        partition = state.partitions.setdefault(
            (parsed.topic, parsed.partition), PartitionState(parsed.topic, parsed.partition, 0, 0))
        hint = parsed.offset_hint or 0
        # Counts, sizes and checksums are unknown until the object is read.
        partition.objects.append(ObjectEntry(parsed.key, parsed.topic, parsed.partition, hint, hint, 0, 0, 0, 0, ""))
    for partition in state.partitions.values():
        partition.objects.sort(key=lambda e: (e.first_offset, e.key))
    return state, ignored


def keeps(layout: str) -> str:
    """What a layout keeps and loses, for the restore's notes."""
    return KEEPS[layout]


def read_peer_partition(
    store: ObjectStore,
    layout: str,
    options: PeerOptions,
    entries: list[ObjectEntry],
    report: Callable[[str], None] = lambda line: None,
) -> Iterator[pa.RecordBatch]:
    """A partition's records in offset order, each offset once, from objects of a peer layout.

    Every record at or below the last offset already yielded is a re-delivery and is dropped;
    gaps between offsets (compaction, transaction markers, or objects missing from the archive)
    are reported.
    """
    if not entries:
        return
    where = f"{entries[0].topic}[{entries[0].partition}]"
    last = -1
    duplicates = missing = gaps = 0
    for entry in entries:
        decoded = _decode(store, layout, options, entry)
        if layout in NAMED_OFFSETS_ONLY and last >= 0 and decoded.num_rows and decoded.column("offset")[0].as_py() <= last:
            # Offsets here are the name's start offset + row: an overlap means the sink spread the
            # partition's records over files (e.g. Confluent's FieldPartitioner) or wrote some twice,
            # and the true order can no longer be known. Refuse rather than guess.
            raise TopicvaultError(
                f"{where}: object {entry.key} starts at offset {entry.first_offset}, inside the offsets of the objects "
                f"before it (up to {last}); {layout} objects carry no per-record offsets, so the partition's record "
                "order cannot be recovered (was it written with a field-based partitioner?)"
            )
        table = _unique_offsets(decoded.sort_by("offset"))
        fresh = table.filter(pc.greater(table.column("offset"), last)) if last >= 0 else table
        duplicates += table.num_rows - fresh.num_rows
        if fresh.num_rows == 0:
            continue
        offsets = fresh.column("offset").to_pylist()
        holes = [b - a - 1 for a, b in zip([last] + offsets[:-1], offsets) if b - a > 1 and a >= 0]
        gaps += len(holes)
        missing += sum(holes)
        last = offsets[-1]
        yield from fresh.to_batches(max_chunksize=50_000)
    if duplicates:
        report(f"{where}: {duplicates} records with offsets seen before (re-delivered by the sink) restored once")
    if gaps:
        report(f"{where}: {missing} offsets absent in {gaps} gaps (compaction, transaction markers, or objects "
               "missing from the archive)")


def _decode(store: ObjectStore, layout: str, options: PeerOptions, entry: ObjectEntry) -> pa.Table:
    data = store.get(entry.key)
    if layout == "aiven":
        return decode_aiven(data, entry.key, entry.topic, entry.partition, entry.first_offset, options)
    if layout == "lenses":
        return decode_lenses(data, entry.key, entry.topic, entry.partition, options)
    if layout == "quix":
        return decode_quix(data, entry.key, entry.topic, entry.partition, entry.first_offset)

    def companion(role: str) -> bytes | None:
        try:
            return store.get(PEER_KEYS["confluent"].sibling(entry.key, role))
        except ObjectNotFound:
            return None

    return decode_confluent(data, entry.key, entry.topic, entry.partition, entry.first_offset, companion, options)


def _unique_offsets(table: pa.Table) -> pa.Table:
    """Keep the first record of each offset (the table is sorted by offset)."""
    if table.num_rows < 2:
        return table
    offsets = table.column("offset")
    repeats = pc.equal(offsets.slice(1), offsets.slice(0, table.num_rows - 1))
    keep = pa.concat_arrays([pa.array([True]), pc.invert(repeats).combine_chunks()])
    return table.filter(keep)
