"""`topicvault verify`: is a backup whole, and does it still match the live topic?

Checks that the checkpoints agree with the commit records, every committed object (present, checksum, record count, first/last offset, offsets
ascending and inside the committed ranges, no overlap with its neighbours), and optionally
compares each backed-up partition with the live topic over the range both still hold:
record count and a digest of every record's offset, key, value, timestamp and headers. A topic a
`restore --schema-ids remap` wrote on that cluster holds the ids the target registry gave: it is
compared through that restore's id map too (source.cluster_restore.registry_restore.id_maps_into).
Objects are read one at a time, so memory stays at one object whatever the partition size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..core.archive.checkpoints import checkpoint_problems, damaged_checkpoint_files
from ..core.archive.commits import ObjectEntry, PartitionState, fold_commits
from ..core.archive.conditional_writes import conditional_writes_damage
from ..core.archive.leases import damaged_leases
from ..core.cluster.kafka import KafkaSettings, metadata_consumer, watermarks
from ..core.crypto import Keyring
from ..core.envelope import RecordDigest
from ..core.errors import NoBackup, TopicvaultError
from ..core.stores.locations import open_store, open_store_beside
from ..core.stores.store import ObjectStore
from ..core.text import plural
from ..formats.saved_registry import fields_of_topic, rewrite_batch, wire_format_fields
from ..sink.kafka_reader import OffsetRange, read_range
from .cluster_restore.registry_restore import SCHEMA_IDS_NAME, id_maps_into
from .object_reader import read_object, stored_bytes
from .restore.restore_state import RestoreRecords, damaged_restore_states, default_state_uri


@dataclass
class VerifyReport:
    """What verify checked and every difference it found."""

    objects: int = 0
    records: int = 0
    partitions: int = 0
    partitions_compared: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not a defect of the backup
    # Offsets retention deleted before any backup read them. The archive is whole without them
    # (the commits record the loss), so they do not fail verify: a location that lost offsets
    # once would otherwise fail every verify for ever.
    lost: list[str] = field(default_factory=list)
    # Files under _topicvault/ other than the objects that readers cannot use (checkpoints, their
    # pointer, leases, saved restore states...): each names what readers do instead. The data is
    # whole without them, so they fail verify only with --strict.
    damaged: list[str] = field(default_factory=list)
    # Restore id -> the partitions that match the live topic only with the schema ids that restore's
    # --schema-ids remap gave (its id map applied to the archive's records).
    remapped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def ok_strict(self) -> bool:
        """No problem and no damaged file (verify --strict)."""
        return self.ok and not self.damaged


@dataclass
class ArchiveDigests:
    """A partition's archive records digested as they are, and once more through each schema id
    map (saved id -> target id) a remap restore rewrote the live topic with: `maps` holds
    (restore id, id map) pairs."""

    maps: list[tuple[str, dict[int, int]]] = field(default_factory=list)
    # The fields a remap rewrote: those a `<topic>-key`/`-value` subject names (remap), or both
    # (remap-all); the id map does not say which mode wrote it, so both are tried.
    named_fields: tuple[str, ...] = ("key", "value")
    plain: RecordDigest = field(default_factory=RecordDigest)

    # (restore id, id map, fields rewritten, digest): one per map and way of rewriting.
    mapped: list[tuple[str, dict[int, int], tuple[str, ...], RecordDigest]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # No fields rewrites nothing: that digest is `plain`'s.
        ways = [w for w in dict.fromkeys((self.named_fields, ("key", "value"))) if w]
        self.mapped = [(restore_id, id_map, fields, RecordDigest()) for restore_id, id_map in self.maps for fields in ways]

    def update(self, table: pa.Table) -> None:
        """Add an archive table's records (rewritten as restore rewrote them: formats.saved_registry.rewrite_batch)."""
        self.plain.update(table)
        for _, id_map, fields, digest in self.mapped:
            for batch in table.to_batches():
                digest.update(rewrite_batch(batch, id_map, fields)[0])

    def matching(self, live: tuple[int, str]) -> str | None:
        """"" when the records as archived match `live` (count, digest); the restore id whose map
        makes them match; None when neither does."""
        if self.plain.result() == live:
            return ""
        return next((restore_id for restore_id, _, _, digest in self.mapped if digest.result() == live), None)


def verify_location(uri: str, store_options: dict[str, str], topics: list[str] | None, kafka: KafkaSettings | None,
                    keyring: Keyring | None, state_uri: str | None) -> VerifyReport:
    """`verify URI`: verify_backup of the location at `uri`, with the saved restore states kept at
    `state_uri` (None: restore's default state location)."""
    return verify_backup(open_store(uri, store_options), topics, kafka, keyring=keyring,
                         state_store=open_store_beside(state_uri or default_state_uri(), store_options))


def verify_backup(
    store: ObjectStore,
    topics: list[str] | None = None,
    kafka: KafkaSettings | None = None,
    progress: Callable[[str], None] = lambda line: None,
    keyring: Keyring | None = None,
    state_store: ObjectStore | None = None,
) -> VerifyReport:
    """Check a backup location's objects, and with `kafka` compare it with the live topics.

    Encrypted objects are decrypted and checked record by record with `keyring`; without it
    only their checksums are checked (which still finds any damage) and a note says so. Every
    other file under _topicvault/ a reader could rely on is read too, and every record of this
    archive's restores in `state_store`, checked as a resume checks it (see VerifyReport.damaged;
    those written before records carried a check are named in the notes)."""
    state = fold_commits(store, keyring)  # verify checks the truth itself, not the checkpoints derived from it
    if not state.last_sequence:  # commits covering no offsets yet are a backup too, with nothing to check
        raise NoBackup(store.uri)
    unknown = sorted(set(topics or []) - {t for t, _ in state.partitions} - set(state.topics))
    if unknown:
        raise TopicvaultError(f"topic(s) {', '.join(unknown)} are not in the backup at {store.uri}")
    restore_damage, unchecked = damaged_restore_states(store, state_store, keyring)
    report = VerifyReport(problems=checkpoint_problems(store, state, keyring),
                          damaged=damaged_state_files(store) + restore_damage, notes=unchecked)
    id_maps = _remap_restores(store, state_store, keyring, kafka, report)
    remapped_fields = wire_format_fields(state.registry_at(None) or {})  # what a remap restore rewrote
    for (topic, partition), partition_state in sorted(state.partitions.items()):
        if topics and topic not in topics:
            continue
        report.partitions += 1
        report.lost.extend(partition_state.lost_notes())
        compare_from = _live_start(kafka, partition_state, report) if kafka is not None else None
        digests = ArchiveDigests(id_maps.get(topic, []) if compare_from is not None else [],
                                 fields_of_topic(remapped_fields, topic))
        readable = _check_objects(store, partition_state, report, digests, compare_from, keyring)
        progress(f"{topic}[{partition}]: {len(partition_state.objects)} objects checked")
        if compare_from is not None and readable and compare_from < partition_state.end:
            _compare_live(kafka, partition_state, compare_from, digests, report)
    report.notes.extend(_remapped_notes(report.remapped))
    return report


def _remap_restores(store: ObjectStore, state_store: ObjectStore | None, keyring: Keyring | None,
                    kafka: KafkaSettings | None, report: VerifyReport) -> dict[str, list[tuple[str, dict[int, int]]]]:
    """Per topic, the schema id maps of this archive's remap restores into it on the cluster `kafka`
    names (source.cluster_restore.registry_restore.id_maps_into); a map that cannot be read goes to report.damaged."""
    if kafka is None or state_store is None:
        return {}
    maps, damaged = id_maps_into(RestoreRecords(state_store, store, keyring), kafka.bootstrap_servers)
    report.damaged.extend(f"{line}: verify compares the topics it names without it" for line in damaged)
    return maps


def _remapped_notes(remapped: dict[str, list[str]], shown: int = 5) -> list[str]:
    """One note per remap restore whose id map the live partitions matched through."""
    return [f"{plural(len(where), 'partition')} ({', '.join(where[:shown])}{', ...' if len(where) > shown else ''}) "
            f"match with the schema ids restore {restore_id} gave (--schema-ids remap: the archive's records compared "
            f"through its {SCHEMA_IDS_NAME})" for restore_id, where in sorted(remapped.items())]


def damaged_state_files(store: ObjectStore) -> list[str]:
    """Every file under _topicvault/ besides the commits (which fold_commits reads, failing on
    any it cannot) and restore records (damaged_restore_states) that readers cannot use, each with
    what they do instead."""
    return damaged_checkpoint_files(store) + damaged_leases(store) + conditional_writes_damage(store)


def _check_objects(
    store: ObjectStore, ps: PartitionState, report: VerifyReport, digest: ArchiveDigests, digest_from: int | None,
    keyring: Keyring | None,
) -> bool:
    """Check each object of a partition, feeding records at or after `digest_from` to the digest."""
    readable = True
    previous: ObjectEntry | None = None
    for entry in ps.objects:
        where = f"{ps.topic}[{ps.partition}] object {entry.key}"
        if previous is not None and entry.first_offset <= previous.last_offset:
            report.problems.append(f"{where}: offsets from {entry.first_offset} overlap {previous.key} (up to {previous.last_offset})")
        if entry.first_offset < ps.start or entry.last_offset >= ps.end:
            report.problems.append(
                f"{where}: offsets {entry.first_offset}..{entry.last_offset} lie outside the committed range "
                f"{ps.start}..{ps.end - 1}"
            )
        previous = entry
        if entry.key_id and keyring is None:
            readable = _check_checksum_only(store, entry, ps, report) and digest_from is None and readable
            continue
        try:
            table = read_object(store, entry, keyring)
        except TopicvaultError as exc:
            report.problems.append(f"{ps.topic}[{ps.partition}]: {exc}")
            readable = False
            continue
        report.objects += 1
        report.records += table.num_rows  # read_object checked count, bounds and ascending offsets
        if digest_from is not None:
            digest.update(table.filter(pc.greater_equal(table.column("offset"), digest_from)))
    return readable


def _check_checksum_only(store: ObjectStore, entry: ObjectEntry, ps: PartitionState, report: VerifyReport) -> bool:
    """An encrypted object checked without its key: present and matching its commit's checksum."""
    try:
        stored_bytes(store, entry)
    except TopicvaultError as exc:
        report.problems.append(f"{ps.topic}[{ps.partition}]: {exc}")
        return False
    note = ("encrypted objects were checked by checksum only (their records were not read, nor compared with "
            "live topics): pass --encryption-key to check their records too")
    if note not in report.notes:
        report.notes.append(note)
    report.objects += 1
    report.records += entry.records  # as committed: not read without the key
    return True


def _live_start(kafka: KafkaSettings, ps: PartitionState, report: VerifyReport) -> int | None:
    """Where the live partition and the backup overlap from, or None when they cannot be compared."""
    consumer = metadata_consumer(kafka)
    try:
        low, high = watermarks(consumer, ps.topic, ps.partition)
    finally:
        consumer.close()
    where = f"{ps.topic}[{ps.partition}]"
    if high < ps.end:
        report.problems.append(
            f"{where}: the live topic ends at offset {high} but the backup holds offsets up to {ps.end - 1}: "
            "it was truncated or recreated"
        )
        return None
    if low > ps.start:
        report.notes.append(
            f"{where}: the live topic no longer holds offsets {ps.start}..{low - 1} (retention or deletion); "
            f"compared from {low}"
        )
    return max(ps.start, low)


def _compare_live(kafka: KafkaSettings, ps: PartitionState, start: int, archived: ArchiveDigests,
                  report: VerifyReport) -> None:
    live = RecordDigest()
    reader = read_range(kafka, OffsetRange(ps.topic, ps.partition, start, ps.end))
    while True:
        try:
            live.update(next(reader))
        except StopIteration as stopped:
            stopped_at = stopped.value
            break
    if stopped_at < ps.end:
        # Retention deleted offsets being read, or the partition's end moved below them: what the
        # live topic holds now cannot be compared with the whole range; the archive is not at fault.
        report.notes.append(f"{ps.topic}[{ps.partition}]: the live topic stopped serving offset {stopped_at} while "
                            f"it was compared (retention or a leader change): not compared; run verify again")
        return
    report.partitions_compared += 1
    matched_by = archived.matching(live.result())
    if matched_by:
        report.remapped.setdefault(matched_by, []).append(f"{ps.topic}[{ps.partition}]")
    elif matched_by is None:
        backed_up = archived.plain.result()
        tried = (f"; nor through the schema id map of restore {', '.join(r for r, _ in archived.maps)}"
                 if archived.maps else "")
        report.problems.append(
            f"{ps.topic}[{ps.partition}]: offsets {start}..{ps.end - 1} differ from the live topic: backup "
            f"{backed_up[0]} records (sha256 {backed_up[1][:12]}), live {live.records} records "
            f"(sha256 {live.result()[1][:12]}){tried}"
        )
