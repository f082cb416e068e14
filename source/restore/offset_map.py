"""Offset maps: where each restored record landed, as ranges, and translation of group offsets.

A restore produces a partition's records in source-offset order to a target partition that
starts at a known offset, with no other writer, so the i-th restored record lands at
`target_start + i`. Source offsets may have gaps (compaction, transaction markers, a
point-in-time cut); the map stores one range per run of consecutive source offsets.

Holes are the source offset ranges of objects a restore left out because they could not be
read (--on-error skip): their records exist in the source but not in the target. Translation
treats them as gaps, and the map names them so nobody mistakes them for compaction.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ...core.errors import TopicvaultError
from ..object_reader import SkippedObject
from .restore_state import RESUME_ADVICE, RestoreRecords


@dataclass
class OffsetMap:
    """One partition's map: ranges (source first offset, target first offset, length), ascending."""

    source_topic: str
    partition: int
    target_topic: str
    target_start: int
    ranges: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(length for _, _, length in self.ranges)

    end_offset: int | None = None  # set when target offsets have gaps (see landed_at)
    holes: list[tuple[int, int]] = field(default_factory=list)  # (first, last) source offsets left out, ascending

    def add_hole(self, first: int, last: int) -> None:
        """Mark source offsets first..last (inclusive) as left out: they could not be read."""
        bisect.insort(self.holes, (first, last))

    @property
    def target_end(self) -> int:
        """The target offset after the last restored record."""
        return self.end_offset if self.end_offset is not None else self.target_start + self.records

    def add_offsets(self, source_offsets: pa.Array) -> None:
        """Append the next restored records, given their source offsets (int64, ascending)."""
        count = len(source_offsets)
        if count == 0:
            return
        steps = pc.subtract(source_offsets.slice(1), source_offsets.slice(0, count - 1))
        breaks = [i + 1 for i in pc.indices_nonzero(pc.not_equal(steps, 1)).to_pylist()]
        for begin, end in zip([0, *breaks], [*breaks, count]):
            self._append(source_offsets[begin].as_py(), end - begin)

    def _append(self, source_first: int, length: int) -> None:
        if self.ranges:
            last_source, last_target, last_length = self.ranges[-1]
            if source_first <= last_source + last_length - 1:
                raise TopicvaultError(
                    f"{self.source_topic}[{self.partition}]: source offset {source_first} repeats or goes back"
                )
            if source_first == last_source + last_length:
                self.ranges[-1] = (last_source, last_target, last_length + length)
                return
        self.ranges.append((source_first, self.target_end, length))

    @property
    def first_source_offset(self) -> int | None:
        """The first source offset this map accounts for, restored or left out (None: none yet)."""
        return min([first for first, _, _ in self.ranges[:1]] + [first for first, _ in self.holes[:1]], default=None)

    @property
    def last_source_offset(self) -> int | None:
        """The last source offset this map accounts for, restored or left out (None: none yet)."""
        ends = [first + length - 1 for first, _, length in self.ranges[-1:]] + [last for _, last in self.holes[-1:]]
        return max(ends, default=None)

    def followed_by(self, later: "OffsetMap") -> "OffsetMap":
        """This map with `later` appended: the map of a run that continued at this one's target end."""
        if (later.source_topic, later.partition, later.target_topic) != (self.source_topic, self.partition,
                                                                          self.target_topic):
            raise ValueError(f"offset maps of different partitions: {self.source_topic}[{self.partition}], "
                             f"{later.source_topic}[{later.partition}]")
        if later.target_start != self.target_end:
            raise ValueError(f"{later.source_topic}[{later.partition}]: a map continuing at target offset "
                             f"{later.target_start} does not follow one ending at {self.target_end}")
        ranges = list(self.ranges)
        for source, target, length in later.ranges:
            if ranges and source == ranges[-1][0] + ranges[-1][2] and target == ranges[-1][1] + ranges[-1][2]:
                ranges[-1] = (ranges[-1][0], ranges[-1][1], ranges[-1][2] + length)
            else:
                ranges.append((source, target, length))
        return OffsetMap(self.source_topic, self.partition, self.target_topic, self.target_start, ranges,
                         later.target_end, self.holes + later.holes)

    def source_offsets(self) -> Iterator[int]:
        """Every restored record's source offset, in order."""
        for source_first, _, length in self.ranges:
            yield from range(source_first, source_first + length)

    def holds(self, source_offsets: list[int]) -> list[bool]:
        """For each source offset, whether this map restored a record of it (a hole's were not)."""
        firsts = [first for first, _, _ in self.ranges]
        found = []
        for offset in source_offsets:
            index = bisect.bisect_right(firsts, offset) - 1
            found.append(index >= 0 and offset < firsts[index] + self.ranges[index][2])
        return found

    def landed_at(self, target_offsets: list[int]) -> "OffsetMap":
        """The same records mapped to the target offsets they really got (when those have gaps)."""
        landed = OffsetMap(self.source_topic, self.partition, self.target_topic, self.target_start,
                           holes=list(self.holes))
        for source, target in zip(self.source_offsets(), target_offsets):
            last = landed.ranges[-1] if landed.ranges else None
            if last and source == last[0] + last[2] and target == last[1] + last[2]:
                landed.ranges[-1] = (last[0], last[1], last[2] + 1)
            else:
                landed.ranges.append((source, target, 1))
        landed.end_offset = target_offsets[-1] + 1 if target_offsets else self.target_start
        return landed

    def translate(self, source_offset: int) -> int:
        """The target offset of the first restored record at or after `source_offset`.

        A consumer group's committed offset is the next record it would read; translated, it
        points at the same record on the target (or at the end, if that record was not restored).
        """
        index = bisect.bisect_right([r[0] for r in self.ranges], source_offset) - 1
        if index >= 0:
            source_first, target_first, length = self.ranges[index]
            if source_offset < source_first + length:
                return target_first + (source_offset - source_first)
        if index + 1 < len(self.ranges):
            return self.ranges[index + 1][1]
        return self.target_end

    def to_json(self) -> dict:
        """The stored form."""
        return {
            "source_topic": self.source_topic,
            "partition": self.partition,
            "target_topic": self.target_topic,
            "target_start": self.target_start,
            "target_end": self.target_end,
            "ranges": [list(r) for r in self.ranges],
            "holes": [list(h) for h in self.holes],
        }

    @classmethod
    def from_json(cls, body: dict) -> "OffsetMap":
        """Parse the stored form."""
        return cls(
            body["source_topic"],
            int(body["partition"]),
            body["target_topic"],
            int(body["target_start"]),
            [tuple(int(x) for x in r) for r in body["ranges"]],
            int(body["target_end"]),
            [(int(first), int(last)) for first, last in body.get("holes", [])],
        )


def recording(batches: Iterable[pa.RecordBatch], offset_map: OffsetMap) -> Iterator[pa.RecordBatch]:
    """Pass batches through, adding their source offsets to `offset_map`: an accumulator of the one
    who drains them, read once they are drained (a restore task folds it into its result)."""
    for batch in batches:
        offset_map.add_offsets(batch.column("offset"))
        yield batch


OFFSET_MAP_NAME = "offset-map.json"


def save_offset_maps(records: RestoreRecords, restore_id: str, maps: list[OffsetMap]) -> str:
    """Write every partition's map of a restore as one JSON object in the state store; returns its key."""
    body = {"restore_id": restore_id, "partitions": [m.to_json() for m in sorted(maps, key=_order)]}
    return records.write(restore_id, OFFSET_MAP_NAME, body)


def load_offset_maps(records: RestoreRecords, restore_id: str) -> dict[tuple[str, int], OffsetMap]:
    """A finished restore's maps by (source topic, partition)."""
    if records.read(restore_id, OFFSET_MAP_NAME) is None:
        raise TopicvaultError(
            f"restore {restore_id!r} has no offset map in {records.state.uri}: it has not finished; run it again "
            "to complete it"
        )
    return saved_offset_maps(records, restore_id)


def saved_offset_maps(records: RestoreRecords, restore_id: str) -> dict[tuple[str, int], OffsetMap]:
    """The maps an earlier run of this restore saved, by (source topic, partition); empty if none."""
    body = records.read(restore_id, OFFSET_MAP_NAME)
    try:
        maps = [OffsetMap.from_json(p) for p in body["partitions"]] if body is not None else []
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise TopicvaultError(f"{records.describe(restore_id, OFFSET_MAP_NAME)} is damaged ({type(exc).__name__}: "
                              f"{exc}): {RESUME_ADVICE}") from None
    return {(m.source_topic, m.partition): m for m in maps}


def continued(earlier: dict[tuple[str, int], OffsetMap], later: Iterable[OffsetMap]) -> list[OffsetMap]:
    """Every partition's whole map: `earlier` (saved by previous runs) followed by what `later` (this run's) added."""
    merged = dict(earlier)
    for offset_map in later:
        where = (offset_map.source_topic, offset_map.partition)
        merged[where] = merged[where].followed_by(offset_map) if where in merged else offset_map
    return [merged[where] for where in sorted(merged)]


HOLES_DIR = "holes/"


def save_hole(records: RestoreRecords, restore_id: str, hole: SkippedObject) -> None:
    """Record an object a restore left out, before it produces any record after it.

    The target then holds later records without these, so the hole is for good in this
    restore: a resume (even one that finds the object readable again, say merged by a compact)
    must count the target against the sequence without it, or it would produce records twice.
    """
    name = f"{HOLES_DIR}{hole.topic}-{hole.partition}-{hole.first_offset:019d}.json"
    records.write(restore_id, name, dict(vars(hole)))


def save_new_holes(records: RestoreRecords, restore_id: str, holes: Iterable[SkippedObject]) -> int:
    """Save those of `holes` the state does not hold yet; returns how many were written.

    A restore task saves each hole where it runs before producing past it (save_hole); the
    driver saves a run's holes here once more only where the state lacks them (a task on
    another machine wrote its own local state directory), so each is written once.
    """
    saved = {hole for found in saved_holes(records, restore_id).values() for hole in found}
    new = [hole for hole in holes if hole not in saved]
    for hole in new:
        save_hole(records, restore_id, hole)
    return len(new)


def saved_holes(records: RestoreRecords, restore_id: str) -> dict[tuple[str, int], list[SkippedObject]]:
    """The objects earlier runs of a restore left out, by (source topic, partition), in offset order."""
    holes: dict[tuple[str, int], list[SkippedObject]] = {}
    for name in records.names(restore_id):
        if not name.startswith(HOLES_DIR):
            continue
        body = records.read(restore_id, name)
        try:
            hole = SkippedObject(**body)
        except TypeError as exc:
            raise TopicvaultError(f"{records.describe(restore_id, name)} is damaged ({exc}): {RESUME_ADVICE}") from None
        holes.setdefault((hole.topic, hole.partition), []).append(hole)
    return {where: sorted(found, key=lambda h: h.first_offset) for where, found in holes.items()}


def without_holes(batches: Iterable[pa.RecordBatch], holes: list[tuple[int, int]]) -> Iterator[pa.RecordBatch]:
    """The records whose source offsets lie in none of `holes` ((first, last), inclusive)."""
    for batch in batches:
        offsets = batch.column("offset")
        inside = None
        for first, last in holes:
            here = pc.and_(pc.greater_equal(offsets, first), pc.less_equal(offsets, last))
            inside = here if inside is None else pc.or_(inside, here)
        if inside is not None and pc.any(inside).as_py():
            batch = batch.filter(pc.invert(inside))
        if batch.num_rows:
            yield batch


def _order(offset_map: OffsetMap) -> tuple[str, int]:
    return offset_map.source_topic, offset_map.partition
