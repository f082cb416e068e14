"""Which records of a backup a restore writes: offset bounds and a point in time.

Selection happens on the driver for objects (skip those that cannot hold a selected record)
and in the task for records, in one fixed order: offset bounds, then time. The result is a
deterministic sequence, which a resumed restore relies on when it skips what the target holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ...core.archive.commits import ObjectEntry
from ...core.envelope import batch_to_records, content_fingerprint, timestamps_ms
from ...core.errors import TopicvaultError
from ...core.instants import iso_to_epoch_ms

UNTIL_MODES = ("prefix", "filter")
ALL_PARTITIONS = "*"


@dataclass(frozen=True)
class Selection:
    """Offset bounds per partition (inclusive) and a point in time, as plain data."""

    until_ms: int | None = None
    until_mode: str = "prefix"  # prefix: stop at the first record after TIME; filter: drop every such record
    from_offsets: tuple[tuple[str, int], ...] = ()  # ("topic:partition" or "*", first offset)
    to_offsets: tuple[tuple[str, int], ...] = ()  # ("topic:partition" or "*", last offset)

    def bounds(self, topic: str, partition: int) -> tuple[int, int | None]:
        """(first, last) source offsets selected in a partition; last None means no bound."""
        return _bound(self.from_offsets, topic, partition, 0), _bound(self.to_offsets, topic, partition, None)

    def after(self, topic: str, partition: int, offset: int | None) -> "Selection":
        """This selection without a partition's source offsets up to `offset` (those restored before)."""
        if offset is None:
            return self
        first, _ = self.bounds(topic, partition)
        where = f"{topic}:{partition}"
        bounds = dict(self.from_offsets) | {where: max(first, offset + 1)}
        return Selection(self.until_ms, self.until_mode, tuple(sorted(bounds.items())), self.to_offsets)

    def to_json(self) -> dict:
        """Stored with the restore state, so a resumed restore selects the same records."""
        return {
            "until_ms": self.until_ms,
            "until_mode": self.until_mode,
            "from_offsets": dict(self.from_offsets),
            "to_offsets": dict(self.to_offsets),
        }

    def objects(self, topic: str, partition: int, entries: list[ObjectEntry]) -> list[ObjectEntry]:
        """The objects, in offset order, that can hold selected records.

        In prefix mode the records after the first one past TIME are dropped while reading, so
        objects kept here beyond that point are never read.
        """
        first, last = self.bounds(topic, partition)
        kept = []
        for entry in sorted(entries, key=lambda e: e.first_offset):
            if entry.last_offset < first or (last is not None and entry.first_offset > last):
                continue
            if self.until_ms is not None and entry.min_timestamp_ms > self.until_ms:
                if self.until_mode == "prefix":
                    break
                continue
            kept.append(entry)
        return kept

    def may_end_within(self, entry: ObjectEntry) -> bool:
        """Whether the object may hold the first record after TIME (prefix mode), where a
        partition's selection ends: an object left out unread is then the last one restored
        past, since the records after it may all be after the end."""
        return self.until_ms is not None and self.until_mode == "prefix" and entry.max_timestamp_ms > self.until_ms

    def records(self, topic: str, partition: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The selected records of a partition's batches (in offset order)."""
        first, last = self.bounds(topic, partition)
        for batch in batches:
            batch = _offset_slice(batch, first, last)
            if self.until_ms is not None:
                after = pc.greater(timestamps_ms(batch), self.until_ms)
                if self.until_mode == "filter":
                    batch = batch.filter(pc.invert(after))
                else:
                    first_after = pc.index(after, True).as_py()
                    if first_after >= 0:
                        if first_after > 0:
                            yield batch.slice(0, first_after)
                        return
            if batch.num_rows:
                yield batch


def _offset_slice(batch: pa.RecordBatch, first: int, last: int | None) -> pa.RecordBatch:
    offsets = batch.column("offset")
    keep = pc.greater_equal(offsets, first)
    if last is not None:
        keep = pc.and_(keep, pc.less_equal(offsets, last))
    return batch if pc.all(keep).as_py() else batch.filter(keep)


def _bound(specs: tuple[tuple[str, int], ...], topic: str, partition: int, default: int | None) -> int | None:
    named = dict(specs)
    return named.get(f"{topic}:{partition}", named.get(ALL_PARTITIONS, default))


class NotAPrefix(Exception):
    """The records a resumed restore found in its target are not the first ones it selects."""


def skip_records(batches: Iterable[pa.RecordBatch], count: int,
                 written_tail: Sequence[tuple[bytes, int | None]] = ()) -> Iterator[pa.RecordBatch]:
    """Leave out the first `count` records (those a resumed restore finds already written).

    `written_tail` describes the last records found written, (content fingerprint, timestamp or
    None), in order: the skipped records must end with those, or NotAPrefix is raised before any
    record is yielded. Records counted past a gap would otherwise be taken for the ones before it.
    """
    first_compared = count - len(written_tail)  # index of the first skipped record compared
    skipped = 0
    for batch in batches:
        if skipped == count:
            yield batch
            continue
        take = min(count - skipped, batch.num_rows)
        if skipped + take > first_compared:
            start = max(first_compared - skipped, 0)
            _check_written(batch.slice(start, take - start), written_tail[skipped + start - first_compared:])
        skipped += take
        if take < batch.num_rows:
            yield batch.slice(take)


def _check_written(batch: pa.RecordBatch, written: Sequence[tuple[bytes, int | None]]) -> None:
    """The batch's records against the first of `written`: same content, and the same timestamp
    where both sides have their own (not a broker's or a replaced one)."""
    for record, (fingerprint, timestamp) in zip(batch_to_records(batch), written):
        same_time = timestamp is None or record.timestamp_ms <= 0 or record.timestamp_ms == timestamp
        if not same_time or content_fingerprint(record.key, record.value, record.headers) != fingerprint:
            raise NotAPrefix()


def parse_offset_bounds(specs: list[str], option: str) -> tuple[tuple[str, int], ...]:
    """`--from-offset`/`--to-offset` values: `N` (every partition) or `TOPIC:PARTITION=N`."""
    parsed: dict[str, int] = {}
    for spec in specs:
        where, sep, number = spec.rpartition("=")
        if not sep:
            where, number = ALL_PARTITIONS, spec
        topic, colon, partition = where.rpartition(":")
        valid_where = where == ALL_PARTITIONS or (colon and topic and partition.isdigit())
        if not valid_where or not number.strip().isdigit():
            raise TopicvaultError(f"bad {option} {spec!r}: write N (every partition) or TOPIC:PARTITION=N, e.g. orders:3=1200")
        parsed[where if where == ALL_PARTITIONS else f"{topic}:{int(partition)}"] = int(number)
    return tuple(sorted(parsed.items()))


def parse_until(text: str) -> int:
    """`--until` as Kafka milliseconds: epoch ms, or ISO-8601 (UTC unless it names a zone)."""
    if text.strip().isdigit():
        return int(text)
    try:
        return iso_to_epoch_ms(text)
    except ValueError:
        raise TopicvaultError(f"bad --until {text!r}: give ISO-8601 (2026-11-22T07:00:00Z) or epoch milliseconds") from None


def check_until_mode(mode: str) -> str:
    """Validate `--until-mode`."""
    if mode not in UNTIL_MODES:
        raise TopicvaultError(f"bad --until-mode {mode!r}: use prefix or filter")
    return mode


def selection_of(until: str | None, until_mode: str, from_offsets: list[str], to_offsets: list[str]) -> Selection:
    """The Selection of restore's --until, --until-mode, --from-offset and --to-offset (each checked:
    a bad one is a one-line error before anything is read)."""
    return Selection(
        until_ms=parse_until(until) if until else None,
        until_mode=check_until_mode(until_mode),
        from_offsets=parse_offset_bounds(from_offsets, "--from-offset"),
        to_offsets=parse_offset_bounds(to_offsets, "--to-offset"),
    )
