"""Backup as DataFrame API: the `topicvault-kafka` reader and the `topicvault` writer.

They call the same functions as the fused CLI path (`read_ranges`, `write_objects`), so a
DataFrame pipeline writes objects byte-identical to `topicvault backup`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceReader, InputPartition, WriterCommitMessage

from ..core.archive.checkpoints import load_state
from ..core.archive.commit_log import append, backup_record
from ..core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange, check_topic_ids
from ..core.cluster.kafka import (
    KafkaSettings,
    all_partitions,
    list_topic_partitions,
    partition_watermarks,
    select_topics,
)
from ..core.crypto import Keyring
from ..core.envelope import runs_by_partition
from ..core.errors import TopicvaultError
from ..core.options import (
    kafka_settings_from_options,
    keyring_from_options,
    lowercase_keys,
    positive_option,
    store_options_from,
)
from ..core.rotation import DEFAULT_MAX_BYTES, DEFAULT_MAX_RECORDS, Rotation
from ..core.stores.locations import open_store
from ..core.stores.store import ObjectStore
from ..formats import resolve_format
from ..keys import default_codec, new_run_id, template_codec
from .kafka_reader import OffsetRange, read_whole_ranges
from .objects import write_objects
from .plan import DEFAULT_RECORDS_PER_TASK, group_ranges, split_range


def _offset_spec(raw: str | None, default: str) -> str | dict:
    if raw is None or raw in ("earliest", "latest"):
        return raw or default
    try:
        return json.loads(raw)
    except ValueError:
        raise TopicvaultError(f"bad offsets option {raw!r}: use earliest, latest or JSON like {{\"t\":{{\"0\":5}}}}") from None


def _pick(spec: str | dict, topic: str, partition: int, low: int, high: int) -> int:
    if spec == "earliest":
        return low
    if spec == "latest":
        return high
    value = spec.get(topic, {}).get(str(partition))
    return low if value in (None, -2) else high if value == -1 else int(value)


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """Offset ranges of distinct partitions, read one after another by one task and consumer."""

    tasks: tuple[OffsetRange, ...]


class KafkaRangeReader(DataSourceReader):
    """Batch reader: the requested offsets of the topics, split into ranges read in parallel."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = lowercase_keys(options)
        self.kafka = kafka_settings_from_options(options)
        # Tasks the read is spread over at least (when it has that many ranges), as in Spark's
        # Kafka source: many small partitions cost a few tasks, not one each (see group_ranges).
        self.min_partitions = positive_option(self.options, "minPartitions", os.cpu_count() or 1)

    def partitions(self) -> list[RangePartition]:
        topics = [t for t in self.options.get("subscribe", "").split(",") if t]
        selected = select_topics(list_topic_partitions(self.kafka), topics, self.options.get("subscribepattern"))
        starting = _offset_spec(self.options.get("startingoffsets"), "earliest")
        ending = _offset_spec(self.options.get("endingoffsets"), "latest")
        per_task = int(self.options.get("recordsperpartition", DEFAULT_RECORDS_PER_TASK))
        ranges = []
        for (topic, partition), (low, high) in sorted(partition_watermarks(self.kafka, all_partitions(selected)).items()):
            start = _pick(starting, topic, partition, low, high)
            end = _pick(ending, topic, partition, low, high)
            ranges.extend(split_range(topic, partition, start, end, per_task))
        return [RangePartition(tuple(group)) for group in group_ranges(ranges, self.min_partitions, per_task)] or [
            RangePartition(())]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        yield from read_whole_ranges(self.kafka, list(partition.tasks))


@dataclass
class ObjectsWritten(WriterCommitMessage):
    """Object entries one writer task stored."""

    entries: list[ObjectEntry]


class ObjectBatchWriter(DataSourceArrowWriter):
    """Batch writer: envelope rows to rotated objects, then one commit record on the driver."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = lowercase_keys(options)
        if "path" not in self.options:
            raise TopicvaultError("the topicvault writer needs a location: .save('s3://bucket/prefix' or a path)")
        template = self.options.get("keytemplate")
        self.codec = template_codec(template) if template else default_codec()
        self.object_format = resolve_format(self.options.get("format", "parquet"), self.options.get("compression"))
        self.rotation = Rotation(
            int(self.options.get("maxrecords", DEFAULT_MAX_RECORDS)), int(self.options.get("maxbytes", DEFAULT_MAX_BYTES))
        )
        # Made on the driver and shipped with the writer: every task (and retry) of this write
        # names its objects for it, and no other write can overwrite them.
        self.run_id = new_run_id()
        self.allow_offset_gaps = _flag(self.options, "allowOffsetGaps")
        keyring_from_options(self.options)  # a bad key fails on the driver, before any task writes

    def _store(self):
        return open_store(self.options["path"], store_options_from(self.options))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ObjectsWritten:
        store = self._store()
        entries: list[ObjectEntry] = []
        for run in runs_by_partition(iterator):
            entries.extend(write_objects(run, store, self.codec, self.object_format, self.rotation,
                                          run_id=self.run_id, keyring=keyring_from_options(self.options)))
        return ObjectsWritten(entries)

    def commit(self, messages: list[ObjectsWritten]) -> None:
        entries = [e for m in messages if m is not None for e in m.entries]
        commit_written(self._store(), entries, allow_offset_gaps=self.allow_offset_gaps, kafka=self.kafka(),
                       keyring=keyring_from_options(self.options))

    def kafka(self) -> KafkaSettings | None:
        """The cluster the rows came from, when the options name it (kafka.bootstrap.servers)."""
        return kafka_settings_from_options(self.options) if "kafka.bootstrap.servers" in self.options else None


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name.lower(), "false").strip().lower()
    if value not in ("true", "false"):
        raise TopicvaultError(f"option {name} must be true or false, not {value!r}")
    return value == "true"


def missing_offsets(start: int, entries: list[ObjectEntry]) -> str | None:
    """The first offsets from `start` that a partition's objects (in offset order) leave out, as
    text, or None when they hold every offset from `start` to their end."""
    expected = start
    for entry in entries:
        if entry.first_offset > expected:
            return f"offsets {expected}..{entry.first_offset - 1} are missing"
        if entry.last_offset - entry.first_offset + 1 != entry.records:
            return (f"offsets are missing between {entry.first_offset} and {entry.last_offset} "
                    f"({entry.records} records written for {entry.last_offset - entry.first_offset + 1} offsets)")
        expected = entry.last_offset + 1
    return None


def records_before_rows(kafka: KafkaSettings | None, store: ObjectStore, topic: str, partition: int,
                        committed: int, first: int) -> None:
    """Raise (one line) unless offsets `committed`..`first`-1 of `topic`[`partition`], between the
    location's committed end and the first row written, hold no record in the topic.

    allowOffsetGaps accepts a topic's own gaps (transaction markers, aborted or compacted records).
    Those lie inside the range a batch read, and a batch reads from the committed end, so a first
    row past that end is such a gap only if the topic has no record before it; anything else is a
    batch that read from elsewhere (its previous commit was replaced by a store that ignored
    If-None-Match, say), and committing it would cover records no object holds."""
    where = f"{topic}[{partition}]: offsets {committed}..{first - 1} lie between the committed end at {store.uri} " \
            "and the first row written"
    if kafka is None:
        raise TopicvaultError(
            f"{where}, so nothing was committed: allowOffsetGaps accepts the topic's own gaps only where they can be "
            "checked in the topic, so give the writer option kafka.bootstrap.servers, or write the rows from the "
            "committed end"
        )
    try:
        held = sum(batch.num_rows for batch in read_whole_ranges(kafka, [OffsetRange(topic, partition, committed, first)]))
    except TopicvaultError as exc:
        raise TopicvaultError(f"{where}, and reading them from the topic failed ({exc}): nothing was committed") from None
    if held:
        raise TopicvaultError(
            f"{where}, and the topic holds {held} record(s) there that no object of this batch holds (the commit it "
            "continues was lost or replaced), so nothing was committed: run the backup again to continue from the "
            "committed end"
        )


def commit_written(
    store: ObjectStore,
    entries: list[ObjectEntry],
    stream: dict | None = None,
    topic_ids: dict[str, str] | None = None,
    allow_offset_gaps: bool = False,
    state: BackupState | None = None,
    groups: dict[str, dict] | None = None,
    group_topics: tuple[str, ...] | None = None,
    kafka: KafkaSettings | None = None,
    keyring: Keyring | None = None,
) -> str | None:
    """Commit objects the DataFrame writers stored: each partition's range runs from the committed
    end (or its first written offset, if never committed) to its last written offset.
    `topic_ids` (read when committing) must match the recorded ones and are recorded.

    The rows are all the writer knows of the topic, so unless `allow_offset_gaps` says the gaps
    are the topic's own (transaction markers, compaction), every offset of the range must have
    been written: a filtered DataFrame is refused, never committed as a complete backup.
    `state` is the location's current state if the caller has just read it.
    `groups` (CommitRecord.groups) are the consumer-group offsets read on `group_topics`, if read.
    Even so, rows that start past the committed end commit only if the topic, read through
    `kafka`, has no record before them (records_before_rows).
    Returns the commit key, or None when nothing was written."""
    entries = sorted(entries, key=lambda e: (e.topic, e.partition, e.first_offset))
    if not entries:
        return None
    state = state if state is not None else load_state(store, keyring)
    check_topic_ids(state.topic_ids, topic_ids or {}, store.uri)
    checked_gaps: set[tuple[str, int, int, int]] = set()  # each read once, however often `build` runs

    def build(state: BackupState) -> CommitRecord:
        # Rebuilt on the newer state when a compact or expire committed first (see append).
        ranges = []
        for topic, partition in sorted({(e.topic, e.partition) for e in entries}):
            mine = [e for e in entries if (e.topic, e.partition) == (topic, partition)]
            for before, after in zip(mine, mine[1:]):
                if after.first_offset <= before.last_offset:
                    raise TopicvaultError(f"{topic}[{partition}]: rows of overlapping offsets were written twice")
            committed = state.end_offset(topic, partition)
            if committed is not None and mine[0].first_offset < committed:
                raise TopicvaultError(f"{topic}[{partition}] offset {mine[0].first_offset} is already backed up at {store.uri}")
            start = committed if committed is not None else mine[0].first_offset
            missing = None if allow_offset_gaps else missing_offsets(start, mine)
            gap = (topic, partition, start, mine[0].first_offset)
            if allow_offset_gaps and start < mine[0].first_offset and gap not in checked_gaps:
                records_before_rows(kafka, store, *gap)
                checked_gaps.add(gap)
            if missing:
                raise TopicvaultError(
                    f"{topic}[{partition}]: {missing} in the rows written to {store.uri}, so nothing was committed: "
                    "write every row of the offsets (a filtered DataFrame is not a backup), or set option "
                    "allowOffsetGaps=true if the topic itself has these gaps (transaction markers, compaction)"
                )
            ranges.append(PartitionRange(topic, partition, start, mine[-1].last_offset + 1))
        return backup_record(state, ranges, entries, stream=stream, topic_ids=topic_ids, groups=groups,
                             group_topics=group_topics)

    return append(store, state, build, keyring).key
