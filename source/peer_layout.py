"""Restore archives other Kafka-to-S3 sinks wrote: list, detect the layout, merge by offset.

Each peer (formats.peers) says how its objects are named and decoded. Here objects are listed
and grouped per topic-partition, and a partition's records are merged by offset across all its
objects (a k-way merge): time- or field-partitioned names spread one partition's offsets over
several objects, interleaved (12, 14, 16 in one, 13, 15, 17 in another). An object is opened
only when the merge reaches its first offset, so memory holds the objects that overlap there,
not the partition. The same offset met twice with the same record is a re-delivery by the sink
and restored once; with different records (a rewritten log, or a re-created topic writing into
the same prefix) the restore refuses, naming both objects. Nothing else is dropped. Objects whose records carry no offsets (offset = the name's + row)
cannot be merged: they must not overlap any other object, or the restore refuses.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

from ..core.archive.archive_keys import COMMITS_PREFIX, STATE_PREFIX
from ..core.archive.checkpoints import load_state
from ..core.archive.commits import BackupState, ObjectEntry, PartitionState
from ..core.crypto import Keyring
from ..core.errors import CLI_WORDING, NoBackup, ObjectNotFound, TopicvaultError, Wording
from ..core.stores.store import ObjectStore
from ..formats.peers import LAYOUTS, NATIVE, PEERS, Decoded, Layout, PeerKey, PeerLayout, PeerOptions, peer_layout
from ..keys.codec import run_id_of
from .object_reader import read_partition

AUTO = "auto"  # --layout: find the layout from the archive's keys
LAYOUT_CHOICES = (AUTO, *LAYOUTS)
BATCH_ROWS = 50_000


def detect_layout(store: ObjectStore, keys: list[str], key_template: str | None = None,
                  wording: Wording = CLI_WORDING) -> str:
    """The layout whose naming matches the listed keys; none or more than one is an error."""
    if any(k.startswith(COMMITS_PREFIX) for k in keys):
        return NATIVE.name
    objects = [k for k in keys if not k.startswith(STATE_PREFIX)]  # not a probe or a lease of topicvault's
    if all(run_id_of(k) is not None for k in objects):  # none, or a first backup's before its commit
        raise NoBackup(store.uri, "no commit records" + (" yet (a backup is writing its first objects)" if objects else ""))
    scores = {}
    for name in PEERS:
        try:
            layout = peer_layout(name, key_template)
        except TopicvaultError:
            continue  # takes no template: not the layout of a templated archive
        scores[name] = sum(1 for k in keys if layout.parse(k) is not None)
    best = max(scores.values(), default=0)
    if best == 0:
        raise TopicvaultError(
            f"no backup at {store.uri}: no topicvault commit records and no object named the way the "
            f"{', '.join(sorted(PEERS))} sinks name them; check the URI, or pass {wording.setting('--layout', 'layout')} (and "
            f"{wording.setting('--key-template', 'key_template')} for custom names)"
        )
    winners = sorted(name for name, score in scores.items() if score == best)
    if len(winners) > 1:
        raise TopicvaultError(f"objects at {store.uri} match more than one layout ({', '.join(winners)}): pass "
                              f"{wording.setting('--layout', 'layout')}")
    return winners[0]


def resolve_layout(store: ObjectStore, layout: str, key_template: str | None, wording: Wording = CLI_WORDING) -> Layout:
    """`--layout` checked, with auto resolved from a listing (messages name settings by `wording`)."""
    name, template = wording.setting("--layout", "layout"), wording.setting("--key-template", "key_template")
    if layout not in LAYOUT_CHOICES:
        raise TopicvaultError(f"bad {name} {layout!r}: use one of {', '.join(LAYOUT_CHOICES)}")
    if layout == AUTO:
        # One commit record is enough to know the layout: never list a large archive for it.
        if next(store.list(COMMITS_PREFIX), None) is not None:
            layout = NATIVE.name
        else:
            layout = detect_layout(store, [info.key for info in store.list("")], key_template, wording)
    found = LAYOUTS[layout]
    if found.commit_log and key_template:
        raise TopicvaultError(f"{template} is for peer archives; a topicvault backup's commit records name "
                              f"its objects: drop {template}")
    return found.with_template(key_template) if key_template else found  # refuses a template it does not take


def archive_state(store: ObjectStore, layout: Layout, key_template: str | None,
                  keyring: Keyring | None) -> tuple[BackupState, list[str]]:
    """The archive's state (its commit log, or a peer's listing turned into one) and the keys left out."""
    if layout.commit_log:
        return load_state(store, keyring), []
    return peer_state(store, layout.name, key_template)


@dataclass(frozen=True)
class PartitionReading:
    """How one partition's objects are read, whatever the layout: what each layout needs of it."""

    keyring: Keyring | None = None  # commit-log archives: the keys sealed objects may be wrapped by
    # Commit-log archives: called for an object that cannot be read, which is then left out (None: stop).
    skip: Callable[[ObjectEntry, str], None] | None = None
    ends_within: Callable[[ObjectEntry], bool] | None = None  # an object after which nothing is selected
    key_template: str | None = None  # peer archives: the user's file-name template
    peer_options: PeerOptions = PeerOptions()
    tally: "PeerTally | None" = None  # peer archives: counts the duplicates and gaps found


def read_layout_partition(store: ObjectStore, layout: Layout, entries: list[ObjectEntry],
                          reading: PartitionReading = PartitionReading()) -> Iterator[pa.RecordBatch]:
    """A partition's records in offset order, from its objects in any layout."""
    if layout.commit_log:
        return read_partition(store, entries, reading.skip, reading.keyring, reading.ends_within or (lambda entry: False))
    peer = peer_layout(layout.name, reading.key_template)
    return read_peer_partition(store, peer, reading.peer_options, entries, reading.tally)


def peer_state(store: ObjectStore, layout: str, key_template: str | None) -> tuple[BackupState, list[str]]:
    """A peer archive as a backup state (objects per partition, in name order) and the keys left out."""
    peer = peer_layout(layout, key_template)
    state = BackupState()
    ignored: list[str] = []
    data_keys: set[str] = set()
    companions: list[str] = []
    for info in store.list(""):
        parsed = peer.parse(info.key)
        if parsed is None:
            if not info.key.startswith(STATE_PREFIX):
                ignored.append(info.key)
            continue
        if parsed.role != "data":
            companions.append(parsed.key)
            continue
        data_keys.add(parsed.key)
        partition = state.partitions.setdefault(
            (parsed.topic, parsed.partition), PartitionState(parsed.topic, parsed.partition, 0, 0))
        hint = parsed.offset_hint
        # Counts and checksums are unknown until the object is read; the stored size tells a
        # standby an object a sink wrote again under the same name.
        partition.objects.append(ObjectEntry(parsed.key, parsed.topic, parsed.partition, hint, hint, 0, info.size, 0, 0,
                                             ""))
    peer.check_companions(data_keys, companions)
    for partition in state.partitions.values():
        partition.objects.sort(key=lambda e: (e.first_offset, e.key))
    return state, ignored


def layout_notes(layout: Layout, options: PeerOptions, detected: bool, ignored: list[str]) -> list[str]:
    """What a restore notes of its archive's layout: for a peer's, what it keeps and loses, the header
    encoding it was read with, and the objects its layout does not name (`ignored`); none for topicvault's."""
    if layout.commit_log:
        return []
    peer = PEERS[layout.name]
    notes = [f"layout {layout.name}{' (detected)' if detected else ''}: {peer.keeps}"]
    header = peer.header_note(options)
    if header:
        notes.append(f"{layout.name}: {header}")
    if ignored:
        notes.append(f"{len(ignored)} objects are not named like {layout.name} objects and were left out, "
                     f"e.g. {ignored[0]}")
    return notes


HINT_OBJECTS = 5  # objects read, at most, for what their content tells of the settings a restore assumed


def content_hints(store: ObjectStore, layout: str, options: PeerOptions, state: BackupState) -> list[str]:
    """Notes where an archive's content tells another setting than the one the restore assumed (header
    values all base64, values all base64 strings, lines that are not envelopes, typed fields), each
    naming the option to choose by `options.wording`. Per kind, the first of the archive's first
    HINT_OBJECTS objects that holds evidence decides."""
    peer = PEERS[layout]
    entries = [e for _, partition in sorted(state.partitions.items()) for e in partition.objects]
    found: dict[str, str | None] = {}

    def companion(key: str) -> bytes | None:
        try:
            return store.get(key)
        except ObjectNotFound:
            return None

    for entry in entries[:HINT_OBJECTS]:
        for kind, hint in peer.content_hints(store.get(entry.key), entry.key, options, companion).items():
            found.setdefault(kind, hint)
    return [hint for hint in found.values() if hint]


@dataclass(frozen=True)
class PeerReadReport:
    """What merging a partition's objects found besides records (see PeerTally, which counts it)."""

    where: str
    duplicates: int = 0  # records whose offset was already restored (a sink's re-delivery)
    gaps: int = 0  # runs of absent offsets between restored records
    missing: int = 0  # offsets absent in those gaps

    def lines(self) -> list[str]:
        """Human-readable findings (empty when there are none)."""
        found = []
        if self.duplicates:
            found.append(f"{self.where}: {self.duplicates} records with offsets seen before (re-delivered by the sink) "
                         "restored once")
        if self.gaps:
            found.append(f"{self.where}: {self.missing} offsets absent in {self.gaps} gaps (compaction, transaction "
                         "markers, or objects missing from the archive)")
        return found

    def to_json(self) -> dict:
        """For `--json`."""
        return {"partition": self.where, "duplicates": self.duplicates, "gaps": self.gaps,
                "missing_offsets": self.missing}


@dataclass
class PeerTally:
    """Counts what read_peer_partition finds while its batches are drained; whoever drains them
    takes the frozen report() once they are done (the reader itself keeps no result)."""

    where: str
    duplicates: int = 0
    gaps: int = 0
    missing: int = 0

    def report(self) -> PeerReadReport:
        """What was counted so far, frozen."""
        return PeerReadReport(self.where, self.duplicates, self.gaps, self.missing)


class _Cursor:
    """An open object: its rows sorted by offset and the next one to restore."""

    def __init__(self, key: str, table: pa.Table, record_offsets: bool) -> None:
        self.key = key
        self.table = table
        self.offsets: list[int] = table.column("offset").to_pylist()
        self.record_offsets = record_offsets
        self.position = 0

    @property
    def current(self) -> int:
        return self.offsets[self.position]

    @property
    def done(self) -> bool:
        return self.position >= len(self.offsets)


def read_peer_partition(
    store: ObjectStore,
    peer: PeerLayout,
    options: PeerOptions,
    entries: list[ObjectEntry],
    tally: PeerTally | None = None,
) -> Iterator[pa.RecordBatch]:
    """A partition's records in offset order, each offset once, merged from a peer's objects.

    `tally`, if given, counts the duplicates and gaps found (complete once the iterator is
    exhausted: its report() then is the partition's PeerReadReport).
    """
    if not entries:
        return
    where = f"{entries[0].topic}[{entries[0].partition}]"
    report = tally if tally is not None else PeerTally(where)

    def open_object(entry: ObjectEntry) -> _Cursor:
        obj = PeerKey(entry.key, entry.topic, entry.partition, entry.first_offset)
        decoded = decode_peer_object(store, peer, options, obj)
        cursor = _Cursor(entry.key, decoded.table, decoded.record_offsets)
        if peer.name_offset_is_first and decoded.record_offsets and not cursor.done and cursor.current != obj.offset_hint:
            raise TopicvaultError(f"{where}: object {entry.key} is named for offset {obj.offset_hint} but its first "
                                  f"record has offset {cursor.current}; the archive's names cannot be trusted to order it")
        return cursor

    starts = _first_offsets(entries, peer, open_object)
    pending = deque(sorted(entries, key=lambda e: (starts[e.key], e.key)))
    cursors: list[_Cursor] = []
    last = -1  # the last offset restored
    last_copy: tuple[_Cursor, int] | None = None  # the object and row `last` was restored from
    out = _Output()
    while pending or cursors:
        head = min((c.current for c in cursors), default=None)
        while pending and (head is None or starts[pending[0].key] <= head):
            cursor = open_object(pending.popleft())
            if cursor.done:
                continue
            _check_overlap(where, peer, options, cursor, cursors, last)
            cursors.append(cursor)
            head = cursor.current if head is None else min(head, cursor.current)
        if not cursors:
            continue
        cursor = min(cursors, key=lambda c: c.current)
        # The same offset again: a re-delivery, restored once.
        skip_to = max(cursor.position, bisect_right(cursor.offsets, last))
        if skip_to > cursor.position:
            # The merge takes an offset only once every open object is at or past it, so a copy met
            # later is one of `last`, whose restored copy it is compared with.
            for row in range(cursor.position, skip_to):
                if last_copy is not None and cursor.offsets[row] == last:
                    check_same_copy(where, last, last_copy, (cursor, row))
            report.duplicates += skip_to - cursor.position
            cursor.position = skip_to
            if cursor.done:
                cursors.remove(cursor)
            continue  # its next offset may no longer be the smallest
        bounds = [c.current for c in cursors if c is not cursor]
        if pending:
            bounds.append(starts[pending[0].key])
        end = len(cursor.offsets)
        if bounds:
            end = max(cursor.position + 1, bisect_left(cursor.offsets, min(bounds)))
        taken = cursor.offsets[cursor.position:end]
        rows = list(range(cursor.position, end))
        # The same offset twice in one object (sorted: side by side) is a re-delivery too.
        keep = [True] + [after != before for before, after in zip(taken, taken[1:])]
        if not all(keep):
            kept_row = rows[0]
            for row, k in zip(rows, keep):
                if k:
                    kept_row = row
                else:
                    check_same_copy(where, cursor.offsets[row], (cursor, kept_row), (cursor, row))
            report.duplicates += keep.count(False)
            taken = [o for o, k in zip(taken, keep) if k]
            rows = [r for r, k in zip(rows, keep) if k]
        for before, after in zip([last] + taken[:-1], taken):
            if before >= 0 and after - before > 1:
                report.gaps += 1
                report.missing += after - before - 1
        last, last_copy = taken[-1], (cursor, rows[-1])
        out.add(cursor.table, rows)
        cursor.position = end
        if out.rows >= BATCH_ROWS:
            yield from out.flush()
        if cursor.done:
            cursors.remove(cursor)
    yield from out.flush()


# What two copies of one offset must share to be one record delivered twice.
_COMPARED_COLUMNS = ("key", "value", "headers", "timestamp", "timestampType")


def check_same_copy(where: str, offset: int, kept: tuple[_Cursor, int], again: tuple[_Cursor, int]) -> None:
    """Refuse a second copy of `offset` (object cursor and row) that differs from the one restored.

    A sink re-delivering a record writes it again unchanged; a different record under the same offset
    comes from another log (rewritten, or a re-created topic writing into the same prefix), and
    keeping either copy would restore a partition that never existed.
    """
    def content(copy: tuple[_Cursor, int]) -> dict:
        cursor, row = copy
        names = [name for name in _COMPARED_COLUMNS if name in cursor.table.column_names]
        return cursor.table.select(names).slice(row, 1).to_pylist()[0]

    if content(kept) == content(again):
        return
    holders = (f"twice by {kept[0].key}" if kept[0] is again[0] else f"by {kept[0].key} and by {again[0].key}")
    raise TopicvaultError(
        f"{where}: offset {offset} is held {holders} with different content (a rewritten log, or a re-created "
        "topic writing into the same prefix): a restore would mix two logs; move the objects of one of them "
        "out of the archive's prefix and restore again"
    )


def decode_peer_object(store: ObjectStore, peer: PeerLayout, options: PeerOptions, obj: PeerKey) -> Decoded:
    """One peer object's records, sorted by offset; its companion files (if the layout has any) are read from
    `store` too."""
    def companion(key: str) -> bytes | None:
        try:
            return store.get(key)
        except ObjectNotFound:
            return None

    return peer.decode(store.get(obj.key), obj, options, companion)


class _Output:
    """Rows picked from open objects, in merge order, gathered into batches with one `take`.

    An interleaved partition alternates between objects record by record; slicing a table per
    record would cost more than decoding it.
    """

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.indices: list[int] = []
        self._base: dict[int, int] = {}  # id(table) -> its first row in the concatenation
        self._next_base = 0

    @property
    def rows(self) -> int:
        return len(self.indices)

    def add(self, table: pa.Table, rows: list[int]) -> None:
        """Rows (indices into `table`) that come next."""
        base = self._base.get(id(table))
        if base is None:
            base = self._base[id(table)] = self._next_base
            self._next_base += table.num_rows
            self.tables.append(table)
        self.indices.extend(base + r for r in rows)

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The gathered rows as batches; starts over empty."""
        if self.indices:
            picked = pa.concat_tables(self.tables).take(pa.array(self.indices, pa.int64()))
            yield from picked.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)
        self.__init__()


def _first_offsets(entries: list[ObjectEntry], peer: PeerLayout,
                   open_object: Callable[[ObjectEntry], _Cursor]) -> dict[str, int]:
    """Each object's first offset: its name's, or, where names do not give it, read (one object at a time)."""
    if peer.name_offset_is_first:
        return {e.key: e.first_offset for e in entries}
    firsts = {}
    for entry in entries:
        cursor = open_object(entry)
        firsts[entry.key] = entry.first_offset if cursor.done else cursor.current
    return firsts


def _check_overlap(where: str, peer: PeerLayout, options: PeerOptions, opened: _Cursor, cursors: list[_Cursor],
                   last: int) -> None:
    """Records without offsets are ordered by their object's place alone: refuse any overlap."""
    unordered = [c for c in cursors if not c.record_offsets]
    if opened.record_offsets and not unordered:
        return
    other = unordered[0] if unordered else (cursors[0] if cursors else None)
    if other is None and (opened.record_offsets or opened.current > last):
        return
    other_text = f"the offsets of {other.key}" if other is not None else f"the offsets restored before it (up to {last})"
    raise TopicvaultError(
        f"{where}: object {opened.key} starts at offset {opened.current}, inside {other_text}; {peer.name} objects "
        f"without per-record offsets cannot be merged, so the partition's record order cannot be recovered "
        f"({peer.overlap_hint(options)})"
    )
