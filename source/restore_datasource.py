"""Restore as DataFrame API: the `topicvault` reader and the `topicvault-kafka` writer.

They call the same functions as the fused CLI path (`read_partition`, `produce_partition`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceReader, InputPartition, WriterCommitMessage

from ..core.archive.commits import ObjectEntry
from ..core.cluster.kafka import KafkaSettings, list_topic_partitions
from ..core.envelope import runs_by_partition
from ..core.errors import DATAFRAME_WORDING, TopicvaultError
from ..core.local.faults import crash_after, crash_now
from ..core.options import (
    kafka_settings_from_options,
    keyring_from_options,
    lowercase_keys,
    positive_option,
    store_options_from,
)
from ..core.spark import refuse_speculation
from ..core.stores.locations import open_store
from ..formats.peers import NATIVE, layout_named, peer_options_of
from .object_reader import check_keys_open
from .peer_layout import PartitionReading, archive_state, read_layout_partition, resolve_layout
from .restore.kafka_writer import ProduceAdvice, produce_partition
from .restore.throttle import RateLimit, TokenBucket


@dataclass(frozen=True)
class ObjectsPartition(InputPartition):
    """All objects of one topic-partition, and whose layout they are."""

    entries: tuple[ObjectEntry, ...]
    layout: str = NATIVE.name


class ObjectReader(DataSourceReader):
    """Batch reader: one Spark partition per backed-up topic-partition, rows in offset order.

    Options: `topics` (comma-separated), `layout` (auto, topicvault or a peer sink's, as
    `restore --layout`), and for peer archives `key_template`, `peer_fields`,
    `peer_value_encoding`, `peer_header_encoding`, `peer_key_encoding`, `peer_envelope` (as the restore options of the
    same names).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = lowercase_keys(options)
        if "path" not in self.options:
            raise TopicvaultError("the topicvault reader needs a location: .load('s3://bucket/prefix' or a path)")
        self.topics = {t for t in self.options.get("topics", "").split(",") if t}
        self.layout = self.options.get("layout", NATIVE.name)
        self.key_template = self.options.get("key_template") or None
        self.peer_options = peer_options_of(
            self.options.get("peer_fields", "value"), self.options.get("peer_value_encoding", "base64"),
            self.options.get("peer_header_encoding"), self.options.get("peer_key_encoding"),
            self.options.get("peer_envelope"), DATAFRAME_WORDING)

    def _store(self):
        return open_store(self.options["path"], store_options_from(self.options))

    def partitions(self) -> list[ObjectsPartition]:
        store = self._store()
        layout = resolve_layout(store, self.layout, self.key_template, DATAFRAME_WORDING)
        state, _ = archive_state(store, layout, self.key_template, keyring_from_options(self.options))
        if layout.commit_log:  # a missing or unusable key fails here, on the driver, before any task runs
            check_keys_open(store, (o for (topic, _), ps in state.partitions.items()
                                    if not self.topics or topic in self.topics for o in ps.objects),
                            keyring_from_options(self.options), wording=DATAFRAME_WORDING)
        parts = [
            ObjectsPartition(tuple(ps.objects), layout.name)
            for (topic, _), ps in sorted(state.partitions.items())
            if ps.objects and (not self.topics or topic in self.topics)
        ]
        return parts or [ObjectsPartition((), layout.name)]

    def read(self, partition: ObjectsPartition) -> Iterator[pa.RecordBatch]:
        layout = layout_named(partition.layout)
        reading = PartitionReading(keyring=keyring_from_options(self.options) if layout.commit_log else None,
                                   key_template=self.key_template, peer_options=self.peer_options)
        yield from read_layout_partition(self._store(), layout, list(partition.entries), reading)


# How the writer's errors tell the user to go on: options, not the CLI's flags (no restore id here).
WRITER_ADVICE = ProduceAdvice(
    "write into a new, empty topic (the target partitions hold a prefix of their rows; `topicvault restore` "
    "resumes instead)",
    'option("kafka.message.timeout.ms")',
)
WRITER_CONNECTION = 'option("kafka.bootstrap.servers") and the other kafka.* options (security settings)'


def missing_target(partitions: Mapping[str, int], topic: str, partition: int | None = None) -> str | None:
    """The one-line refusal when `topic` (or its `partition`) is not on the cluster whose topics
    have `partitions` partitions each, else None."""
    sink = "the topicvault-kafka writer, like Spark's own Kafka sink, does not create topics"
    if topic not in partitions:
        return (f"target topic {topic!r} does not exist: {sink}; create it first (as many partitions as the "
                'rows carry), or name an existing one with option("topic")')
    if partition is not None and not 0 <= partition < partitions[topic]:
        return (f"target partition {topic}[{partition}] does not exist ({topic!r} has {partitions[topic]} "
                f"partitions): {sink}; add partitions to it first, or write to a topic with enough partitions")
    return None


def check_target(settings: KafkaSettings, topic: str, partition: int | None = None) -> None:
    """Refuse, before anything is produced, a target topic or partition missing on the cluster."""
    refusal = missing_target(list_topic_partitions(settings, WRITER_CONNECTION), topic, partition)
    if refusal:
        raise TopicvaultError(refusal)


@dataclass
class Produced(WriterCommitMessage):
    """How many records one writer task produced."""

    records: int


class KafkaPartitionWriter(DataSourceArrowWriter):
    """Produces rows to the partition number they carry, in the order received per partition.

    Option `topic` overrides the rows' topic (restore under another name); the topic must
    exist with the rows' partitions: like Spark's own Kafka sink, this writer creates none. A
    missing `topic` is refused on the driver, before any task runs; a missing topic or partition
    of the rows is refused by the task holding them before it produces them (the driver never
    sees the rows, so tasks holding other partitions may have produced theirs). Options
    `maxRecordsPerSecond` and `maxBytesPerSecond` (payload: key + value + headers) limit the
    whole write, as `restore --max-records-per-second` does: each task takes an equal share of
    the tasks that run at once, which is the cores of a local[N] master, or option
    `concurrentTasks` (needed on a cluster, where the writer cannot tell).

    A session with spark.speculation=true is refused before a task produces anything, as
    `topicvault restore` refuses it: a speculative copy of a task is a second producer.

    A task runs once: a retried attempt (or a re-run stage) refuses to produce. Its first
    attempt may have produced part of its rows, and this writer keeps no state to tell how
    many (the CLI restore does, under its restore id), so producing again would duplicate
    them out of order. The idempotent producer leaves each target partition holding a prefix
    of its rows, and the job fails saying so.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        # Runs on the driver when the write is planned: bad options fail before any task runs.
        self.options = lowercase_keys(options)
        self.kafka = kafka_settings_from_options(options)
        self.rate = rate_limit_from_options(self.options)
        self.concurrent_tasks = (positive_option(self.options, "concurrentTasks", 1)
                                 if "concurrenttasks" in self.options else None)
        if self.options.get("topic"):  # the rows' own topics and partitions are known only to the tasks
            check_target(self.kafka, self.options["topic"])

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Produced:
        context = TaskContext.get()
        # Spark SQL hands the session's settings to its tasks as local properties.
        refuse_speculation(context.getLocalProperty("spark.speculation") if context else None,
                           "the topicvault-kafka writer")
        refuse_retry()
        bucket = None
        if self.rate.limited:
            master = context.getLocalProperty("spark.master") if context else None
            # One bucket for the whole task, so its pace carries over from one partition to the next.
            bucket = TokenBucket(self.rate.shared_by(tasks_at_once(master, self.concurrent_tasks)))
        total = 0
        partitions: dict[str, int] | None = None
        for run in runs_by_partition(iterator):
            batches = list(run)
            first = batches[0]
            topic = self.options.get("topic") or first.column("topic")[0].as_py()
            partition = first.column("partition")[0].as_py()
            # Checked before this partition's first record: a producer would wait for a missing topic
            # to appear and then fail with a broker error that names neither option nor cause.
            partitions = partitions or list_topic_partitions(self.kafka, WRITER_CONNECTION)
            refusal = missing_target(partitions, topic, partition)
            if refusal:
                raise TopicvaultError(refusal)
            total += produce_partition(self.kafka, topic, partition, batches, bucket=bucket,
                                       advice=WRITER_ADVICE).records
            if crash_after("kafka_writer.partition") == 1:  # test hook: fail after a partition was delivered
                crash_now()
        return Produced(total)


def rate_limit_from_options(options: Mapping[str, str]) -> RateLimit:
    """The write's rate limit from options maxRecordsPerSecond / maxBytesPerSecond (as from
    lowercase_keys), or a one-line error naming the option."""
    rates = []
    for name in ("maxRecordsPerSecond", "maxBytesPerSecond"):
        value = options.get(name.lower())
        try:
            rate = None if value is None else float(value)
        except ValueError:
            rate = float("nan")
        if rate is not None and not rate > 0:
            raise TopicvaultError(f"option {name} must be a positive number, not {value!r}: leave it out for no limit")
        rates.append(rate)
    return RateLimit(*rates)


def tasks_at_once(master: str | None, concurrent_tasks: int | None) -> int:
    """How many writer tasks share the rate limit: option concurrentTasks, else the cores of a
    local master (a DataFrame of fewer partitions then runs below the limit, never above it)."""
    if concurrent_tasks is not None:
        return concurrent_tasks
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", (master or "").strip())
    if found:
        cores = found.group(1) or "1"
        return os.cpu_count() or 1 if cores == "*" else int(cores)
    raise TopicvaultError(
        f"the topicvault-kafka writer cannot tell how many of its tasks run at once on master {master!r}, so "
        "it cannot share maxRecordsPerSecond/maxBytesPerSecond among them: give option concurrentTasks "
        "(executors x cores per executor, or fewer)"
    )


def refuse_retry() -> None:
    """Fail a task attempt that is not the first run of its task (see KafkaPartitionWriter)."""
    context = TaskContext.get()
    if context is None or context.attemptNumber() == 0:
        return
    raise TopicvaultError(
        f"task {context.partitionId()} of the topicvault-kafka writer is a retry (attempt {context.attemptNumber()}): "
        "its first attempt may have produced records already, so it "
        "produces nothing (the target partitions hold a prefix of their rows); use `topicvault restore` "
        "(resumable), or write into a new, empty topic"
    )
