"""Read one offset range of one topic-partition from Kafka as envelope Arrow batches."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterator, Mapping

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from ..core.cluster.kafka import (
    KafkaSettings,
    confluent_timestamp_type,
    consume_ready,
    consumer_config,
    idle_limit_s,
    new_client,
)
from ..core.envelope import batch_from_columns
from ..core.errors import TopicvaultError
from ..core.local.faults import crash_after, crash_now
from .native_reader import NativeConsumer, open_native_consumer

BATCH_RECORDS = 20_000
BATCH_BYTES = 8 * 1024 * 1024
SIZE_PROBE_RECORDS = 256
# The most a backup's consumer fetches of a partition, and at once, and keeps queued (see range_consumer_config).
READ_AHEAD_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition: one backup task."""

    topic: str
    partition: int
    start: int
    end: int
    # (offset, leader epoch) of the archive's last record before `start`, when a commit recorded
    # it: the read fetches that offset first and must find the same epoch there, or the log was
    # truncated and rewritten below `start` (not part of the range's identity).
    check: tuple[int, int] | None = field(default=None, compare=False)


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
            # librdkafka counts payload bytes only, holds each record with a few hundred bytes more
            # and keeps a fetch response whole while any of its records is queued. One task of two
            # partitions on Apache Kafka, three runs each: 200 B records peaked at 400-414 MiB
            # with 16 MiB fetches and queue, 337-344 MiB with 8 MiB; 2 KB records at 382-462 and
            # 347-353 MiB; 8 MiB was as fast (tests/integration/test_backup_memory.py).
            "fetch.max.bytes": READ_AHEAD_BYTES,
            "max.partition.fetch.bytes": READ_AHEAD_BYTES,
            "queued.max.messages.kbytes": READ_AHEAD_BYTES // 1024,
            "fetch.wait.max.ms": 100,
        }
    )
    # The user's own -X settings win over our tuning (but not over correctness settings above).
    user = dict(settings.properties)
    for name, value in user.items():
        if name not in CORRECTNESS_SETTINGS:
            config[name] = value
    # librdkafka refuses a consumer whose fetch is smaller than message.max.bytes, a setting that one
    # -X (or profile) often gives a restore's producer for large records too: the fetch grows with it,
    # and the largest response it takes with the fetch, unless the user set them.
    message_max = int(config.get("message.max.bytes", 0))
    if "fetch.max.bytes" not in user and message_max > int(config["fetch.max.bytes"]):
        config["fetch.max.bytes"] = message_max
        if "receive.message.max.bytes" not in user:
            config["receive.message.max.bytes"] = max(100_000_000, message_max + 512)
    return config


@dataclass(frozen=True)
class RangeEnd:
    """Where the read of one range stopped: the range's end, or the partition's EOF below it; and
    the (offset, leader epoch) of the last record the range read (None: none read, or the broker
    gives no epochs)."""

    stopped_at: int
    last_record: tuple[int, int] | None = field(default=None, compare=False)


def read_range(
    settings: KafkaSettings, task: OffsetRange, idle_timeout_s: float = 60.0, batch_records: int = BATCH_RECORDS
) -> Generator[pa.RecordBatch, None, int]:
    """Yield the records of `task` in offset order as envelope batches; return where the read stopped.

    Stops at the first offset >= end, or at partition EOF (transaction markers and compaction
    leave offset gaps, so the range's last offset may hold no record). The return value is
    task.end when the range was read through (its last offsets may be gaps), or where the read
    stopped when the broker ended the partition before task.end (a high watermark reported low,
    e.g. after a leader change) or stopped serving it (the next offset out of range: retention
    deleted it during the read): the offsets after it were never read. Fails with a
    clear error when the broker sends nothing for `idle_timeout_s`, raised to outlast the
    consumer's own request timeouts and reconnect (see `idle_limit_s`), so a short outage is
    survived.
    """
    stopped_at = task.end
    for _, item in read_ranges(settings, [task], idle_timeout_s, batch_records):
        if isinstance(item, RangeEnd):
            stopped_at = item.stopped_at
        else:
            yield item
    return stopped_at


def read_ranges(
    settings: KafkaSettings,
    tasks: list[OffsetRange],
    idle_timeout_s: float = 60.0,
    batch_records: int = BATCH_RECORDS,
    one_at_a_time: Callable[[], bool] = lambda: False,
) -> Iterator[tuple[int, pa.RecordBatch | RangeEnd]]:
    """Read ranges of distinct partitions through one consumer, as `read_range` reads one.

    Yields (index of the range in `tasks`, item): envelope batches of that range's records in
    offset order, then one RangeEnd once the range is done; ranges interleave. All ranges are
    read at once; once `one_at_a_time()` is true (checked first and after each fetched batch,
    e.g. when the caller holds too much of them in memory) the rest are read one range after
    another in `tasks` order, so each is finished before the next begins.
    """
    seen: set[tuple[str, int]] = set()
    for task in tasks:
        if (task.topic, task.partition) in seen:
            raise TopicvaultError(f"{task.topic}[{task.partition}] twice in one read: give each range its own task")
        seen.add((task.topic, task.partition))
    reads = [_RangeRead(task) for task in tasks]
    for index, read in enumerate(reads):
        if read.task.start >= read.task.end:
            read.done = True
            yield index, RangeEnd(read.task.end)
    if all(read.done for read in reads):
        return
    config = range_consumer_config(settings)
    idle_timeout_s = idle_limit_s(config, idle_timeout_s)
    consumer = open_native_consumer(settings, config) or new_client(Consumer, settings, config)
    if isinstance(consumer, NativeConsumer):
        for read in reads:
            read.columns = consumer.columns(read.task.topic, read.task.partition)
    try:
        if not one_at_a_time():
            yield from _consume(settings, consumer, reads, [i for i, read in enumerate(reads) if not read.done],
                                idle_timeout_s, batch_records, one_at_a_time)
        for index in [i for i, read in enumerate(reads) if not read.done]:
            yield from _consume(settings, consumer, reads, [index], idle_timeout_s, batch_records, lambda: False)
    finally:
        consumer.close()


class _RangeRead:
    """The state of one range being read: records not yet yielded, and whether it is done."""

    def __init__(self, task: OffsetRange) -> None:
        self.task = task
        self.columns = _Columns(task.topic, task.partition)
        self.done = False
        self.done_at = task.end  # where the read stopped, once done
        self.checking = task.check is not None  # the check record not yet met

    @property
    def next_offset(self) -> int:
        """The offset the read continues at."""
        return self.task.start if self.columns.next_offset is None else self.columns.next_offset


def _consume(
    settings: KafkaSettings,
    consumer: Consumer,
    reads: list[_RangeRead],
    active: list[int],
    idle_timeout_s: float,
    batch_records: int,
    stop_early: Callable[[], bool],
) -> Iterator[tuple[int, pa.RecordBatch | RangeEnd]]:
    """Read the `active` ranges from their next offsets until all are done or `stop_early()`."""
    # assign() replaces any earlier assignment; messages fetched for it are dropped below.
    consumer.assign([_position(reads[i]) for i in active])
    consumption = _NativeConsumption if isinstance(consumer, NativeConsumer) else _Consumption
    return consumption(settings, consumer, reads, active, idle_timeout_s, batch_records).run(stop_early)


class _BatchSize:
    """How many records a batch holds, and how many wait to be yielded over all ranges.

    batch_records, fewer for large records, so that about BATCH_BYTES wait at a time (20,000
    records of 2 KB held 80 MB as bytes and as Arrow). A first small fetch tells how large they
    are; each batch then tells again."""

    def __init__(self, batch_records: int) -> None:
        self.batch_records = batch_records
        self.limit = min(batch_records, SIZE_PROBE_RECORDS)
        self.sized = False
        self.pending = 0  # records appended but not yet yielded, over all ranges
        self.pending_bytes = 0  # and their values' bytes

    def first_fetch(self, count: int, value_bytes: int) -> None:
        """Size batches from the first fetch: `count` messages of `value_bytes`."""
        if not self.sized:
            self.sized = True
            self.limit = max(1, min(self.batch_records, BATCH_BYTES * count // max(value_bytes, 1)))

    def due(self, read: _RangeRead, ended: bool) -> bool:
        """Whether the range's records kept so far make a batch now: its own once it has `limit`
        of them, everyone's once the ranges together have that many (or BATCH_BYTES: `limit` comes
        from the records seen so far, and larger ones after small ones would otherwise wait until
        `limit` of them came), and its last one when it `ended`."""
        held = len(read.columns)
        return bool(held) and (held >= self.limit or self.pending >= self.limit
                               or self.pending_bytes >= BATCH_BYTES or ended)

    def cut(self, read: _RangeRead) -> pa.RecordBatch:
        """The range's records kept so far, as one batch; the next batch's size follows from it."""
        self.pending -= len(read.columns)
        self.pending_bytes -= read.columns.value_bytes
        batch = read.columns.flush()
        self.limit = max(1, min(self.batch_records, BATCH_BYTES * batch.num_rows // max(batch.nbytes, 1)))
        return batch


class _Consumption:
    """One read of the `active` ranges through an assigned consumer: fetch, sort each message to
    its range (a record, an end, or an error), and cut the ranges' records into batches."""

    def __init__(self, settings: KafkaSettings, consumer: Consumer, reads: list[_RangeRead], active: list[int],
                 idle_timeout_s: float, batch_records: int) -> None:
        self.settings, self.consumer, self.reads, self.active = settings, consumer, reads, active
        self.idle_timeout_s = idle_timeout_s
        self.index_of = {(reads[i].task.topic, reads[i].task.partition): i for i in active}
        self.ours = {(read.task.topic, read.task.partition) for read in reads}
        self.waiting = set(active)
        self.finished: list[int] = []  # ranges that ended in the last fetch
        self.size = _BatchSize(batch_records)
        self.crash_at = crash_after("backup.consume")

    def run(self, stop_early: Callable[[], bool]) -> Iterator[tuple[int, pa.RecordBatch | RangeEnd]]:
        """Fetch until every range is done or `stop_early()`; yield as _consume does."""
        last_progress = time.monotonic()
        while self.waiting:
            messages = consume_ready(self.consumer, self.size.limit, 0.2)
            if not messages:
                self._check_idle(last_progress)
                continue
            last_progress = time.monotonic()
            self.size.first_fetch(len(messages), sum(map(len, messages)))
            self.finished = []
            yield from self._read(messages)
            yield from self._end_fetch()
            if self.waiting and stop_early():
                yield from self._flush_waiting()
                return

    def _check_idle(self, last_progress: float) -> None:
        """Fail once nothing came for idle_timeout_s."""
        if time.monotonic() - last_progress > self.idle_timeout_s:
            read = self.reads[min(self.waiting)]
            more = f" (and {len(self.waiting) - 1} more partitions)" if len(self.waiting) > 1 else ""
            raise TopicvaultError(
                f"no records from {read.task.topic}[{read.task.partition}]{more} for {self.idle_timeout_s:.0f} s "
                f"at offset {read.next_offset} (expected up to {read.task.end - 1}): is the broker up?"
            )

    def _read(self, messages: list) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Keep each fetched record in its range (the hot loop: one pass per record), yielding a
        range's batch early when its values reach BATCH_BYTES."""
        reads, waiting, index_of, size, crash_at = self.reads, self.waiting, self.index_of, self.size, self.crash_at
        for message in messages:
            index = index_of.get((message.topic(), message.partition()))
            error = message.error()
            if error is not None:
                self._on_error(index, message, error)
                continue
            if index is None or index not in waiting:
                continue  # a range already done, or a message fetched before the last assign()
            read = reads[index]
            offset = message.offset()
            if read.checking and self._meets_check(read, message, offset):
                continue  # the archive's record, met again: not read twice
            if offset < read.next_offset:
                continue  # fetched again after a re-assign: already read
            if offset >= read.task.end:
                self._end(index, read.task.end)
                continue
            size.pending += 1
            size.pending_bytes += read.columns.append(message, offset)
            if crash_at is not None and read.columns.next_offset - read.task.start >= crash_at:
                crash_now()
            if read.columns.value_bytes >= BATCH_BYTES:
                # Large records: one consume can return the whole read-ahead (tens of MiB).
                yield index, size.cut(read)
            if offset == read.task.end - 1:
                # The range's last offset holds a record: it is read through, with no wait for
                # an EOF (the broker holds an empty fetch for fetch.wait.max.ms first).
                self._end(index, read.task.end)

    def _on_error(self, index: int | None, message, error: KafkaError) -> None:
        """An event instead of a record: a range's EOF or lost next offset ends it; an error of no
        partition of ours stops every read; any other error of a range being read fails it."""
        code = error.code()
        if index is None:
            if code != KafkaError._PARTITION_EOF and (message.topic(), message.partition()) not in self.ours:
                # An error of no partition of ours (e.g. all brokers down) stops every read.
                raise TopicvaultError(f"reading {', '.join(_names(self.reads, self.waiting))} failed: {error.str()}")
            return  # left from before the last assign() (a range not read now): it says nothing now
        if index not in self.waiting:
            return  # a range already done
        read = self.reads[index]
        if code == KafkaError._PARTITION_EOF:
            # The EOF event carries the fetch position: past every record, marker and
            # compaction gap the broker had. Below task.end, the rest was never read.
            self._end(index, min(read.task.end, max(message.offset(), read.next_offset)))
            return
        if code == KafkaError._AUTO_OFFSET_RESET and _log_start(self.consumer, read) > read.next_offset:
            # Retention deleted the next offset while this read went on (a backup far behind
            # reads the segment being deleted). What was read is kept and the range ends here,
            # as at an early EOF: a caller commits only up to it (the next backup records what
            # retention deleted as lost), and one that needs the whole range fails
            # (read_whole_ranges). An offset refused for another reason (the log truncated or
            # the topic re-created under the read) fails below: nothing of it is committed.
            self._end(index, read.next_offset)
            return
        raise TopicvaultError(f"reading {read.task.topic}[{read.task.partition}] at offset {read.next_offset} "
                              f"failed: {error.str()}")

    def _meets_check(self, read: _RangeRead, message, offset: int) -> bool:
        """Check the range's first fetched record against the archive's last one (see
        _check_history); True when it is that record."""
        read.checking = False
        _check_history(self.settings, read, message.leader_epoch(), offset)
        return offset == read.task.check[0]

    def _end(self, index: int, at: int) -> None:
        """The range is read up to `at` (its end, or where the partition ended below it)."""
        self.reads[index].done_at = at
        self.waiting.discard(index)
        self.finished.append(index)

    def _end_fetch(self) -> Iterator[tuple[int, pa.RecordBatch | RangeEnd]]:
        """After a fetch: pause the ranges that ended, yield the batches due and their ends."""
        reads, finished = self.reads, self.finished
        if finished:
            self.consumer.pause([TopicPartition(reads[i].task.topic, reads[i].task.partition) for i in finished])
        for index in self.active:
            if self.size.due(reads[index], index in finished):
                yield index, self.size.cut(reads[index])
        for index in finished:
            reads[index].done = True
            yield index, RangeEnd(reads[index].done_at, reads[index].columns.last_record)

    def _flush_waiting(self) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Stopping early: what the ranges not done hold so far."""
        for index in sorted(self.waiting):
            read = self.reads[index]
            if len(read.columns):
                yield index, read.columns.flush()


class _NativeConsumption(_Consumption):
    """_Consumption whose record loop (_read's rules) runs in native code (sink/_kafka_arrow.c):
    each fetch comes back as the batches cut in it, check records, events and ranges ended, in
    fetch order, which the rules above the loop take as _read would."""

    def __init__(self, settings: KafkaSettings, consumer: NativeConsumer, reads: list[_RangeRead], active: list[int],
                 idle_timeout_s: float, batch_records: int) -> None:
        super().__init__(settings, consumer, reads, active, idle_timeout_s, batch_records)
        tracked = []
        for slot, index in enumerate(active):
            read = reads[index]
            tracked.append((read.task.topic, read.task.partition, read.next_offset, read.task.end,
                            read.task.check[0] if read.checking else -1))
            read.columns.tracked(slot, read.next_offset)
        consumer.reader.track(tracked)

    def run(self, stop_early: Callable[[], bool]) -> Iterator[tuple[int, pa.RecordBatch | RangeEnd]]:
        """Fetch until every range is done or `stop_early()`; yield as _consume does."""
        last_progress = time.monotonic()
        reader = self.consumer.reader
        while self.waiting:
            found, count, value_bytes = reader.fetch(self.size.limit, 200, BATCH_BYTES)
            if not count:
                self._check_idle(last_progress)
                continue
            last_progress = time.monotonic()
            self.size.first_fetch(count, value_bytes)
            self.finished = []
            for index in self.active:
                self.reads[index].columns.refresh()
            yield from self._take(found)
            self._crash_if_due()
            self.size.pending = sum(len(self.reads[index].columns) for index in self.active)
            self.size.pending_bytes = sum(self.reads[index].columns.value_bytes for index in self.active)
            yield from self._end_fetch()
            if self.waiting and stop_early():
                yield from self._flush_waiting()
                return

    def _take(self, found: list[tuple]) -> Iterator[tuple[int, pa.RecordBatch]]:
        """What the native loop found in one fetch (see _kafka_arrow.c, fetch), in order."""
        for kind, slot, *rest in found:
            index = self.active[slot] if slot >= 0 else None
            if kind == _FOUND_BATCH:
                yield index, self.reads[index].columns.batch_of(*rest)
            elif kind == _FOUND_CHECK:
                offset, epoch = rest
                self.reads[index].checking = False
                _check_history(self.settings, self.reads[index], epoch if epoch >= 0 else None, offset)
            elif kind == _FOUND_EVENT:
                code, topic, partition, offset, reason = rest
                self._on_error(index, _Event(topic, partition, offset), KafkaError(code, reason))
            else:
                self._end(index, rest[0])

    def _crash_if_due(self) -> None:
        """The fault tests' crash point (as _read's, checked after each fetch)."""
        if self.crash_at is not None and any(
                self.reads[i].columns.next_offset is not None
                and self.reads[i].columns.next_offset - self.reads[i].task.start >= self.crash_at for i in self.active):
            crash_now()


# What the native loop reports per fetch (sink/_kafka_arrow.c: FOUND_*).
_FOUND_BATCH, _FOUND_CHECK, _FOUND_EVENT = 0, 1, 2


@dataclass(frozen=True)
class _Event:
    """Where a native event happened, as _on_error reads it off a confluent-kafka message."""

    where_topic: str
    where_partition: int
    where_offset: int

    def topic(self) -> str:
        return self.where_topic

    def partition(self) -> int:
        return self.where_partition

    def offset(self) -> int:
        return self.where_offset


def _position(read: _RangeRead) -> TopicPartition:
    """Where a range's read (re)starts: at the archive's last record before it while that is not
    met again yet (see OffsetRange.check), else where the read goes on."""
    task = read.task
    offset = task.check[0] if read.checking else read.next_offset
    return TopicPartition(task.topic, task.partition, offset)


def _check_history(settings: KafkaSettings, read: _RangeRead, epoch: int | None, offset: int) -> None:
    """The first record fetched for a checked range: the archive's last record must be there with
    the leader epoch it was backed up with. A leader epoch is a leader's term: a record at the same
    offset with another epoch was written by another leader after the log was truncated below it
    (an unclean leader election), and the records on from there are not the archive's continuation.
    A record compacted away since cannot be compared: the read goes on."""
    check_offset, check_epoch = read.task.check
    if offset == check_offset and epoch is not None and epoch != check_epoch:
        task = read.task
        first = _rewritten_from(settings, task, epoch) if epoch > check_epoch else check_offset
        raise TopicvaultError(
            f"{task.topic}[{task.partition}]: offsets {first}..{check_offset} this location backed up were rewritten: "
            f"offset {check_offset}, the last record this location backed up, was written in leader epoch "
            f"{check_epoch} but the broker now holds a record of epoch {epoch} there: the log was truncated and "
            "rewritten (an unclean leader election), so what follows is not the archive's continuation; back up "
            "to a new location (this one keeps what was backed up)"
        )


def _rewritten_from(settings: KafkaSettings, task: OffsetRange, found_epoch: int) -> int:
    """The first offset the log rewrote below the archive's last record (task.check, now held by
    a record of `found_epoch`, a later leader's): the first whose record is of a later epoch than
    the archive's. A log's epochs only grow with its offsets, so a binary search finds it, each
    step one fetch. The archive's last offset when a fetch tells nothing (then only it is sure)."""
    check_offset, check_epoch = task.check
    consumer = new_client(Consumer, settings, range_consumer_config(settings))
    try:
        part = TopicPartition(task.topic, task.partition)
        low = max(0, consumer.get_watermark_offsets(part, timeout=10, cached=False)[0])
        while low < check_offset:
            middle = (low + check_offset) // 2
            epoch = _epoch_from(consumer, task, middle)
            if epoch is None:
                return task.check[0]
            if epoch > check_epoch:
                check_offset = middle
            else:
                low = middle + 1
        return check_offset
    except Exception:  # noqa: BLE001 - the refusal stands without the range
        return task.check[0]
    finally:
        consumer.close()


def _epoch_from(consumer: Consumer, task: OffsetRange, offset: int, wait_s: float = 10.0) -> int | None:
    """The leader epoch of the first record at or after `offset` (None: none came within `wait_s`)."""
    consumer.assign([TopicPartition(task.topic, task.partition, offset)])
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None and message.offset() >= offset:
            epoch = message.leader_epoch()
            return epoch if epoch is not None and epoch >= 0 else None
        if message is not None and message.error() is not None and message.error().code() != KafkaError._PARTITION_EOF:
            return None
    return None


# How far below a partition's end `last_records_before` looks for its last record: past a
# transaction marker or a few compacted offsets, without reading a whole batch again.
LAST_RECORD_LOOK_BACK = 64


def last_records_before(
    settings: KafkaSettings, ends: Mapping[tuple[str, int], tuple[int, int]], wait_s: float = 10.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """(offset, leader epoch) of the last record below each partition's end, for `ends` mapping
    (topic, partition) to (first, end): the offsets [first, end) about to be backed up. Looked
    for among the last LAST_RECORD_LOOK_BACK offsets of the range only; a partition without a
    record there, or whose broker gives no epochs, is left out (its next range goes unchecked).
    The result is what OffsetRange.check of the range after it compares with."""
    wanted = {key: (max(first, end - LAST_RECORD_LOOK_BACK), end) for key, (first, end) in ends.items() if end > first}
    if not wanted:
        return {}
    consumer = new_client(Consumer, settings, range_consumer_config(settings))
    found: dict[tuple[str, int], tuple[int, int]] = {}
    try:
        consumer.assign([TopicPartition(topic, partition, start) for (topic, partition), (start, _) in wanted.items()])
        waiting = set(wanted)
        deadline = time.monotonic() + wait_s
        while waiting and time.monotonic() < deadline:
            for message in consume_ready(consumer, 1000, 0.2):
                key = (message.topic(), message.partition())
                if key not in waiting:
                    continue
                end = wanted[key][1]
                if message.error() is not None or message.offset() >= end - 1:
                    waiting.discard(key)  # EOF or an error: the records up to here are all there are
                if message.error() is None and message.offset() < end:
                    epoch = message.leader_epoch()
                    if epoch is not None and epoch >= 0:
                        found[key] = (message.offset(), epoch)
                    else:
                        found.pop(key, None)
    finally:
        consumer.close()
    # A read cut short may have missed later records: only the last record below the end is a check.
    return {key: record for key, record in found.items() if key not in waiting}


def _log_start(consumer: Consumer, read: _RangeRead) -> int:
    """The partition's log start now, asked of the broker (-1 when it cannot be told)."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(read.task.topic, read.task.partition), timeout=10,
                                                cached=False)
        return low
    except Exception:  # noqa: BLE001 - not told: the refusal fails the read as any other error
        return -1


def _names(reads: list[_RangeRead], indices: set[int]) -> list[str]:
    return [f"{reads[i].task.topic}[{reads[i].task.partition}]" for i in sorted(indices)]


def read_whole_range(
    settings: KafkaSettings, task: OffsetRange, idle_timeout_s: float = 60.0
) -> Iterator[pa.RecordBatch]:
    """`read_range` for readers whose caller commits the planned end (Spark's own offsets in the
    DataFrame and streaming readers): a read that stops short fails instead of leaving a gap."""
    yield from read_whole_ranges(settings, [task], idle_timeout_s)


def read_whole_ranges(
    settings: KafkaSettings, tasks: list[OffsetRange], idle_timeout_s: float = 60.0
) -> Iterator[pa.RecordBatch]:
    """`read_whole_range` of ranges of distinct partitions through one consumer, one range after
    another: each partition's records come as one run, as a writer cutting objects by
    partition run needs (see core.envelope.runs_by_partition)."""
    for index, item in read_ranges(settings, tasks, idle_timeout_s, one_at_a_time=lambda: True):
        if not isinstance(item, RangeEnd):
            yield item
        elif item.stopped_at < tasks[index].end:
            task = tasks[index]
            raise TopicvaultError(
                f"{task.topic}[{task.partition}] ended at offset {item.stopped_at}, below the {task.end} the broker "
                "reported when the batch was planned (retention deleted the offsets being read, or a leader "
                "change): nothing of this batch is committed; run again to continue from the last commit (a "
                "backup records what retention deleted as lost)"
            )


class _Columns:
    """Consumed messages of one partition waiting to become one envelope batch.

    The messages are kept as they come and turned into columns at `flush`, one list
    comprehension per field: per-message appends to seven lists cost more than the read.
    """

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.next_offset: int | None = None
        self.last_record: tuple[int, int] | None = None  # (offset, leader epoch) of the last message flushed
        self.value_bytes = 0  # of the messages kept
        self._messages: list = []

    def __len__(self) -> int:
        return len(self._messages)

    def append(self, message, offset: int) -> int:
        """Add the next message (its offset given, as the caller has read it already); return
        its value's bytes."""
        size = len(message)
        self._messages.append(message)
        self.value_bytes += size
        self.next_offset = offset + 1
        return size

    def flush(self) -> pa.RecordBatch:
        messages, self._messages, self.value_bytes = self._messages, [], 0
        count = len(messages)
        if count:
            epoch = messages[-1].leader_epoch()
            self.last_record = (messages[-1].offset(), epoch) if epoch is not None and epoch >= 0 else None
        stamps = [message.timestamp() for message in messages]
        batch = batch_from_columns(
            keys=[message.key() for message in messages],
            values=[message.value() for message in messages],
            topics=[self.topic] * count,
            partitions=[self.partition] * count,
            offsets=[message.offset() for message in messages],
            timestamps_ms=[timestamp for _, timestamp in stamps],
            timestamp_types=[_TIMESTAMP_TYPES[kind] for kind, _ in stamps],
            headers=[message.headers() for message in messages],
        )
        return batch


# confluent-kafka's timestamp kinds (not available, create time, log-append time) as Kafka's ids.
_TIMESTAMP_TYPES = {kind: confluent_timestamp_type(kind) for kind in (0, 1, 2)}
