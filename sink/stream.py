"""Streaming backup: `readStream.format("topicvault-kafka")` and `writeStream.format("topicvault")`.

The reader's offsets are {"offsets": {"topic:partition": next offset}}. A query that starts
without a checkpoint begins at the backup location's committed ends (option
`startFromLocation`), so the commit records stay the single truth across followed and
one-shot runs. Each micro-batch's objects become one commit record that names the batch;
a batch committed already (a replay) is not committed again.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from ..core.archive.checkpoints import load_state
from ..core.archive.commits import BackupState, check_topic_ids
from ..core.cluster.cluster_admin import group_offsets, with_clock_skew
from ..core.cluster.kafka import (
    KafkaSettings,
    all_partitions,
    list_topic_partitions,
    partition_watermarks,
    select_topics,
    topic_ids,
)
from ..core.errors import TopicDeleted, TopicvaultError, UnknownTopic
from ..core.options import (
    kafka_settings_from_options,
    keyring_from_options,
    lowercase_keys,
    positive_option,
    store_options_from,
)
from ..core.stores.locations import open_store
from .backup_datasource import ObjectBatchWriter, ObjectsWritten, commit_written
from .kafka_reader import OffsetRange, last_records_before, read_whole_ranges
from .plan import DEFAULT_RECORDS_PER_TASK, group_ranges, split_range


@dataclass(frozen=True)
class StreamRange(InputPartition):
    """Offset ranges of distinct partitions of one micro-batch, read by one task and consumer."""

    tasks: tuple[OffsetRange, ...]


def _key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def _split(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def stream_start_offsets(committed: Mapping[str, int], watermarks: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Where a stream starts each partition ("topic:partition" keys): at its committed end, or at
    its log start when the location has none of it.

    A committed end below the log start fails: retention deleted those offsets after the run was
    planned (the plan commits the offsets lost before it), and the micro-batch's commit would
    cover them as a gap, never reported as lost. A new plan records them.
    """
    for key, end in sorted(committed.items()):
        low = watermarks.get(key, (end, end))[0]
        if end < low:
            topic, partition = _split(key)
            raise TopicvaultError(
                f"{topic}[{partition}]: retention deleted offsets {end}..{low - 1} after this run was planned and "
                "before its stream started: run again (its plan records them as lost); a DataFrame stream reading "
                "with startFromLocation: run `topicvault backup` once first"
            )
    return {key: max(committed.get(key, low), low) for key, (low, _) in watermarks.items()}


def followed_topic_ids(kafka: KafkaSettings, topics: Iterable[str], followed: Mapping[str, str],
                       location: str) -> dict[str, str]:
    """The Kafka topic IDs of `topics` now. A topic followed under ID `followed[topic]` that is
    gone now, or back under another ID, fails naming the topic and its IDs (TopicDeleted):
    whichever lookup of a trigger or a commit meets the deletion first says so, not its own "not
    found". A cluster that does not answer fails as such, never as a deletion."""
    try:
        ids = topic_ids(kafka, topics)
    except TopicvaultError:
        ids = {}
        for topic in sorted(set(topics)):  # one at a time, to name the one that is gone
            try:
                ids.update(topic_ids(kafka, [topic]))
            except UnknownTopic:
                if topic not in followed:
                    raise
                raise TopicDeleted(
                    f"topic {topic} was deleted since the last backup at {location} (topic id {followed[topic]}, "
                    "now none): if it comes back, back up the new topic to a new location"
                ) from None
    check_topic_ids(followed, ids, location)
    return ids


def deleted_followed_topic(kafka: KafkaSettings, followed: Mapping[str, str], location: str) -> TopicDeleted | None:
    """Why a followed topic ({topic: Kafka topic ID} `followed`) is no longer the one backed up
    (gone, or back under another ID), or None: all are there, or the cluster cannot tell now.

    A micro-batch whose task read a topic while it was deleted fails as a read that ended short;
    the follower asks this before it reports that failure, so the deletion is named instead."""
    try:
        followed_topic_ids(kafka, followed, followed, location)
    except TopicDeleted as deleted:
        return deleted
    except TopicvaultError:  # no answer now: the failure's own reason stands
        return None
    return None


def _with_checks(offsets: dict, last: Mapping[str, list[int]], watermarks: Mapping[str, tuple[int, int]]) -> dict:
    """The stream's `offsets` with "last": the (offset, leader epoch) of the archive's last record
    before each partition's position, where known and not deleted by retention since."""
    checks = {key: record for key, record in last.items()
              if key in offsets["offsets"] and watermarks.get(key, (0, 0))[0] <= record[0] < offsets["offsets"][key]}
    return {**offsets, "last": checks} if checks else offsets


class KafkaStreamReader(DataSourceStreamReader):
    """Micro-batches of new offsets of the subscribed topics; new topics and partitions are picked up."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = lowercase_keys(options)
        self.kafka = kafka_settings_from_options(options)
        self.per_task = int(self.options.get("recordsperpartition", DEFAULT_RECORDS_PER_TASK))
        # Tasks a micro-batch is spread over at least (when it has that many ranges), as in
        # Spark's Kafka source; `backup --follow` passes the session's default parallelism.
        self.min_partitions = positive_option(self.options, "minPartitions", os.cpu_count() or 1)

    def _selected(self) -> dict[str, int]:
        topics = [t for t in self.options.get("subscribe", "").split(",") if t]
        return select_topics(list_topic_partitions(self.kafka), topics, self.options.get("subscribepattern"))

    def _watermarks(self, selected: dict[str, int]) -> dict[str, tuple[int, int]]:
        return {_key(t, p): offsets for (t, p), offsets in partition_watermarks(self.kafka, all_partitions(selected)).items()}

    def initialOffset(self) -> dict:
        """Each partition's committed end at `startFromLocation`, else its earliest offset; and
        each topic's Kafka topic ID, which must match the one the location recorded."""
        committed: dict[str, int] = {}
        last: dict[str, list[int]] = {}
        selected = self._selected()
        ids = topic_ids(self.kafka, selected)
        location = self.options.get("startfromlocation")
        if location:
            state = load_state(open_store(location, store_options_from(self.options)),
                               keyring_from_options(self.options))
            check_topic_ids(state.topic_ids, ids, location)
            committed = {_key(t, p): ps.end for (t, p), ps in state.partitions.items()}
            # The archive's last records where its commits recorded them (a one-shot backup's).
            last = {_key(t, p): list(record) for (t, p), record in state.last_records.items()}
        watermarks = self._watermarks(selected)
        offsets = stream_start_offsets(committed, watermarks)
        return _with_checks({"offsets": offsets, "ids": ids}, last, watermarks)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.get("maxrecordspertrigger")
        return ReadMaxRows(int(limit)) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The high watermarks now (new partitions start at their earliest offset), within `limit`."""
        try:
            return self._latest(start, limit)
        except TopicvaultError:
            # A topic deleted (and re-created) while this trigger looked it up fails whichever
            # lookup came first with its own "not found"; say what became of the topic instead.
            self._check_followed_topics(start.get("ids", {}))
            # Every followed topic is there under its ID: a lookup that failed for a moment (a
            # controller or leader busy in a failover, "Timed out waiting for controller") is
            # asked once more before the trigger fails.
            time.sleep(1)
            return self._latest(start, limit)

    def _check_followed_topics(self, followed: Mapping[str, str]) -> None:
        """Fail naming a followed topic that is gone now, or back under another topic ID."""
        followed_topic_ids(self.kafka, followed, followed, self.options.get("startfromlocation") or "the stream's start")

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        begin = dict(start["offsets"])
        ends: dict[str, int] = {}
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        selected = self._selected()
        # A topic deleted and re-created under the same name restarts its offsets: never read
        # the new topic's records as if they continued the old one (offsets from before IDs: none).
        ids = {**start.get("ids", {}), **topic_ids(self.kafka, selected)}
        check_topic_ids(start.get("ids", {}), ids, self.options.get("startfromlocation") or "the stream's start")
        watermarks = self._watermarks(selected)
        for key, (low, high) in sorted(watermarks.items()):
            first = begin.get(key, low)
            begin.setdefault(key, low)
            # Never behind the start: a watermark read low must not make the next batch re-read.
            ends[key] = max(first, high if budget is None else min(high, first + max(budget, 0)))
            if budget is not None:
                budget -= max(ends[key] - first, 0)
        new_partitions = {k: v for k, v in begin.items() if k not in start["offsets"]}
        # The last record of each range this batch reads: the next batch's read checks it is still
        # there with its leader epoch, as a one-shot backup's read does (see OffsetRange.check).
        advanced = {_split(k): (begin[k], end) for k, end in ends.items() if end > begin[k]}
        last = {k: v for k, v in start.get("last", {}).items() if _split(k) not in advanced}
        last.update({_key(*k): list(record) for k, record in last_records_before(self.kafka, advanced).items()})
        # Equal to `start` when nothing is new, so Spark runs no empty micro-batch.
        latest = _with_checks({"offsets": ends, "ids": ids}, last, watermarks)
        return {**latest, "starts": new_partitions} if new_partitions else latest

    def partitions(self, start: dict, end: dict) -> list[StreamRange]:
        ranges = []
        checks = start.get("last", {})
        for key, stop in sorted(end["offsets"].items()):
            first = start["offsets"].get(key, end.get("starts", {}).get(key, 0))
            topic, partition = _split(key)
            planned = split_range(topic, partition, first, stop, self.per_task)
            check = checks.get(key)
            if planned and check is not None and check[0] < first:
                # The read first finds the archive's last record again, with its leader epoch, or
                # the log was truncated and rewritten under the stream and the batch fails.
                planned[0] = replace(planned[0], check=(int(check[0]), int(check[1])))
            ranges.extend(planned)
        return [StreamRange(tuple(group)) for group in group_ranges(ranges, self.min_partitions, self.per_task)]

    def read(self, partition: StreamRange) -> Iterator[pa.RecordBatch]:
        yield from read_whole_ranges(self.kafka, list(partition.tasks))

    def commit(self, end: dict) -> None:
        """Nothing to do: the sink's commit records hold the backed-up position."""


class ObjectStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch's rows as rotated objects, then one commit record naming the batch."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.objects = ObjectBatchWriter(options)  # same option handling and object writing as the batch writer
        self.options = self.objects.options
        self.stream_id = self.options.get("streamid", "")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ObjectsWritten:
        return self.objects.write(iterator)

    def commit(self, messages: list[ObjectsWritten], batchId: int) -> None:
        store = open_store(self.options["path"], store_options_from(self.options))
        state = load_state(store, keyring_from_options(self.options))
        last = state.last_stream
        if last and last.get("id") == self.stream_id and last.get("batch") == batchId:
            return  # a replayed batch: committed already
        entries = [e for m in messages if m is not None for e in m.entries]
        # The topics first: one deleted since the batch was read fails naming it, not the lag's lookup.
        ids = self._topic_ids(entries, state)
        stream = {"id": self.stream_id, "batch": batchId, "committed_ms": int(time.time() * 1000),
                  "lag": self._lag(entries)}
        groups, group_topics = self._groups(state, entries)
        commit_written(store, entries, stream, ids, allow_offset_gaps=self.objects.allow_offset_gaps,
                       groups=groups, group_topics=group_topics, state=state, kafka=self.objects.kafka(),
                       keyring=keyring_from_options(self.options))

    def _groups(self, state: BackupState, entries) -> tuple[dict | None, tuple[str, ...] | None]:
        """With option saveGroups (backup --follow sets it): the consumer-group offsets on the
        location's topics, when they changed since the last commit, so a restore --until TIME finds
        each group's position at TIME; else (None, None)."""
        if self.options.get("savegroups", "false").lower() != "true" or "kafka.bootstrap.servers" not in self.options:
            return None, None
        topics = tuple(sorted({t for t, _ in state.partitions} | set(state.topics) | {e.topic for e in entries}))
        try:
            groups = group_offsets(kafka_settings_from_options(self.options), topics)
        except TopicvaultError:  # e.g. no Describe ACL on groups: the data commit matters more
            return None, None
        now = {(g, t): offsets for g, snapshot in groups.items() for t, offsets in snapshot["offsets"].items()}
        if now == state.group_offsets_on(topics):
            return None, None
        # This batch's records were in the log before the groups were read.
        return with_clock_skew(groups, max((e.max_timestamp_ms for e in entries), default=None),
                               int(time.time() * 1000)), topics

    def _topic_ids(self, entries, state: BackupState) -> dict[str, str] | None:
        """Kafka topic IDs of the topics this batch wrote, when the cluster is known (see commit_written)."""
        if "kafka.bootstrap.servers" not in self.options or not entries:
            return None
        return followed_topic_ids(kafka_settings_from_options(self.options), {e.topic for e in entries},
                                  state.topic_ids, self.options["path"])

    def _lag(self, entries) -> dict[str, int]:
        """Records behind the topic end, per partition this batch wrote, when the cluster is known."""
        if "kafka.bootstrap.servers" not in self.options:
            return {}
        kafka = kafka_settings_from_options(self.options)
        last: dict[tuple[str, int], int] = {}
        for e in entries:
            last[(e.topic, e.partition)] = max(last.get((e.topic, e.partition), -1), e.last_offset)
        highs = partition_watermarks(kafka, sorted(last))
        return {_key(t, p): max(highs[(t, p)][1] - (offset + 1), 0) for (t, p), offset in sorted(last.items())}

    def abort(self, messages: list[ObjectsWritten], batchId: int) -> None:
        """Objects of an aborted batch are named by no commit record, so they are not part of the backup."""
