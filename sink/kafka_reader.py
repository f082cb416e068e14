"""Read one offset range of one topic-partition from Kafka as envelope Arrow batches."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generator, Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..core.envelope import batch_from_columns
from ..core.errors import TopicvaultError
from ..core.faults import crash_after, crash_now
from ..core.kafka import KafkaSettings, confluent_timestamp_type, consumer_config, idle_limit_s, new_client

BATCH_RECORDS = 20_000


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition: one backup task."""

    topic: str
    partition: int
    start: int
    end: int


# Settings a backup read depends on for correctness; a user's -X value never replaces them.
CORRECTNESS_SETTINGS = frozenset(
    {"enable.partition.eof", "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "isolation.level"}
)


def check_backup_properties(settings: KafkaSettings) -> None:
    """Refuse -X settings that would make a backup hold records Kafka never committed."""
    for name, value in settings.properties:
        if name.strip().lower() == "isolation.level" and value.strip().lower() != "read_committed":
            raise TopicvaultError(
                f"-X isolation.level={value} would back up records of aborted and open transactions: "
                "backups always read with isolation.level=read_committed; drop this -X setting"
            )


def range_consumer_config(settings: KafkaSettings) -> dict[str, object]:
    """The config of a consumer tuned for bulk reads of assigned ranges; it never commits offsets."""
    config = consumer_config(
        settings,
        **{
            "group.id": "topicvault-backup",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            # Offsets deleted (retention) after planning must fail the read, never jump to the end.
            "auto.offset.reset": "error",
            # Read-ahead is bounded so a worker's memory does not grow with the partition: a
            # consumer that outpaces the object writer stops fetching at this much queued data.
            "fetch.max.bytes": 16 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.max.messages.kbytes": 32 * 1024,
            "fetch.wait.max.ms": 100,
        }
    )
    # The user's own -X settings win over our tuning (but not over correctness settings above).
    for name, value in settings.properties:
        if name not in CORRECTNESS_SETTINGS:
            config[name] = value
    return config


def range_consumer(settings: KafkaSettings) -> Consumer:
    """A consumer tuned for bulk reads of assigned ranges; it never commits offsets."""
    return new_client(Consumer, settings, range_consumer_config(settings))


def read_range(
    settings: KafkaSettings, task: OffsetRange, idle_timeout_s: float = 60.0, batch_records: int = BATCH_RECORDS
) -> Generator[pa.RecordBatch, None, int]:
    """Yield the records of `task` in offset order as envelope batches; return where the read stopped.

    Stops at the first offset >= end, or at partition EOF (transaction markers and compaction
    leave offset gaps, so the range's last offset may hold no record). The return value is
    task.end when the range was read through (its last offsets may be gaps), or the EOF
    position when the broker ended the partition before task.end (a high watermark reported
    low, e.g. after a leader change): the offsets after it were never read. Fails with a
    clear error when the broker sends nothing for `idle_timeout_s`, raised to outlast the
    consumer's own request timeouts and reconnect (see `idle_limit_s`), so a short outage is
    survived.
    """
    if task.start >= task.end:
        return task.end
    stopped_at = task.end
    config = range_consumer_config(settings)
    idle_timeout_s = idle_limit_s(config, idle_timeout_s)
    consumer = new_client(Consumer, settings, config)
    try:
        consumer.assign([TopicPartition(task.topic, task.partition, task.start)])
        columns = _Columns(task.topic, task.partition)
        last_progress = time.monotonic()
        done = False
        crash_at = crash_after("backup.consume")
        while not done:
            messages = consumer.consume(num_messages=batch_records, timeout=0.2)
            if not messages:
                if time.monotonic() - last_progress > idle_timeout_s:
                    raise TopicvaultError(
                        f"no records from {task.topic}[{task.partition}] for {idle_timeout_s:.0f} s at offset "
                        f"{columns.next_offset or task.start} (expected up to {task.end - 1}): is the broker up?"
                    )
                continue
            last_progress = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The EOF event carries the fetch position: past every record, marker and
                        # compaction gap the broker had. Below task.end, the rest was never read.
                        stopped_at = min(task.end, max(message.offset(), columns.next_offset or task.start))
                        done = True
                        break
                    if error.code() == KafkaError._AUTO_OFFSET_RESET:
                        raise TopicvaultError(
                            f"{task.topic}[{task.partition}] no longer holds offset {columns.next_offset or task.start} "
                            "(deleted by retention while this backup ran): run the backup again; it starts at the "
                            "earliest offset still there and reports what was lost"
                        )
                    raise TopicvaultError(f"reading {task.topic}[{task.partition}] failed: {error.str()}")
                if message.offset() >= task.end:
                    done = True
                    break
                columns.append(message)
                if crash_at is not None and columns.next_offset - task.start >= crash_at:
                    crash_now()
            if len(columns) >= batch_records or (done and len(columns)):
                yield columns.flush()
    finally:
        consumer.close()
    return stopped_at


def read_whole_range(
    settings: KafkaSettings, task: OffsetRange, idle_timeout_s: float = 60.0
) -> Iterator[pa.RecordBatch]:
    """`read_range` for readers whose caller commits the planned end (Spark's own offsets in the
    DataFrame and streaming readers): a read that stops short fails instead of leaving a gap."""
    stopped_at = yield from read_range(settings, task, idle_timeout_s)
    if stopped_at < task.end:
        raise TopicvaultError(
            f"{task.topic}[{task.partition}] ended at offset {stopped_at}, below the {task.end} the broker "
            "reported when the batch was planned (a leader change?): nothing of this batch is committed; "
            "run again to continue from the last commit"
        )


class _Columns:
    """Envelope columns being filled from consumed messages, flushed as one Arrow batch."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.next_offset: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list = []

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, message) -> None:
        kind, timestamp = message.timestamp()
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        self.timestamps.append(timestamp)
        self.types.append(confluent_timestamp_type(kind))
        self.headers.append(message.headers())
        self.next_offset = message.offset() + 1

    def flush(self) -> pa.RecordBatch:
        count = len(self.offsets)
        batch = batch_from_columns(
            keys=self.keys,
            values=self.values,
            topics=[self.topic] * count,
            partitions=[self.partition] * count,
            offsets=self.offsets,
            timestamps_ms=self.timestamps,
            timestamp_types=self.types,
            headers=self.headers,
        )
        self._reset()
        return batch
