"""Produce envelope batches to one target partition, in order, and count what a partition holds."""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import length_hint
from typing import Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, KafkaException, Producer

from ...core.cluster.cluster_admin import NO_LIMIT_MS, TIMESTAMP_LIMITS, message_size_limits
from ...core.cluster.kafka import KafkaSettings, metadata_consumer, read_to_eof, true_end_offsets
from ...core.envelope import content_fingerprint, record_sizes, timestamps_ms
from ...core.errors import OffsetDeleted, TopicvaultError
from ...core.hotloop import rare_cyclic_gc
from ...core.local.faults import crash_after, crash_now
from .native_writer import NativeProducer, open_native_producer, records_array
from .throttle import RateLimit, TokenBucket


@dataclass
class ProduceResult:
    """What was produced to one partition."""

    records: int = 0
    bytes: int = 0
    # librdkafka treats timestamp 0 as "now" and cannot send negative ones, so these
    # records got the broker's/producer's time instead of their own.
    timestamps_replaced: int = 0


class _DropGaplessNotice(logging.Filter):
    """librdkafka warns on every producer that enable.gapless.guarantee is experimental; we set
    it on purpose (see restore_producer), so the line is noise to the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "enable.gapless.guarantee is experimental" not in record.getMessage()


_PRODUCER_LOG = logging.getLogger("topicvault.producer")
_PRODUCER_LOG.addFilter(_DropGaplessNotice())


# The restore producer's batches (librdkafka's default is 1 MB), unless the target topics take less.
DEFAULT_BATCH_SIZE = 1024 * 1024


def restore_producer(settings: KafkaSettings, on_delivery, batch_limit: int | None = None
                     ) -> Producer | NativeProducer:
    """An idempotent producer: retries never reorder or duplicate records within a partition.
    `batch_limit`: the smallest max.message.bytes of the topics it writes to (None: unknown).
    The native one (source/restore/native_writer.py) where the module loads and the settings allow it,
    else confluent-kafka's; both from the one config of restore_producer_config."""
    config = restore_producer_config(settings, batch_limit)
    native = open_native_producer(settings, config, on_delivery, _PRODUCER_LOG)
    if native is not None:
        return native
    return Producer({**config, "on_delivery": on_delivery, "logger": _PRODUCER_LOG})


def restore_producer_config(settings: KafkaSettings, batch_limit: int | None = None) -> dict[str, object]:
    """The restore producer's librdkafka settings (see restore_producer), without callbacks."""
    config = settings.client_config(
        **{
            "linger.ms": 20,
            "batch.size": DEFAULT_BATCH_SIZE,
            # The local queue bounds a restore worker's memory; deeper queues measured no faster
            # (2 KB records: 64 MiB held a worker at 431-446 MiB, 32 MiB at about 405 MiB).
            "queue.buffering.max.messages": 100_000,
            "queue.buffering.max.kbytes": 32 * 1024,
            "message.max.bytes": 16 * 1024 * 1024,
            "delivery.report.only.error": True,
        }
    )
    for name, value in settings.properties:
        config[name] = value
    # librdkafka refuses a message larger than the local queue even when the queue is empty, and
    # a restore retries that refusal until the queue drains: it would wait forever. The queue
    # holds at least the largest record the producer may send.
    largest_kbytes = -(-int(config["message.max.bytes"]) // 1024) + 1
    config["queue.buffering.max.kbytes"] = max(int(config["queue.buffering.max.kbytes"]), largest_kbytes)
    # A topic refuses a record batch over its max.message.bytes, and the producer fills batches up
    # to batch.size: records that each fit (a topic limited to 256 KiB holding records of 200 KB,
    # which their own producer sent one per batch) went two to a batch, and the restore failed.
    # A record larger than batch.size still goes in a batch of its own.
    if batch_limit is not None:
        config["batch.size"] = min(int(config["batch.size"]), batch_limit)
    # Correctness settings the user may not switch off. Gapless: if a record fails after later
    # ones were sent, the producer stops with a fatal error instead of leaving a hole, so the
    # target always holds a prefix of the source, which is what a resumed restore counts on.
    # A restore creates its topics itself (partitions, loading configs): a missing one must
    # not come back from the broker's defaults because the producer asked for its metadata.
    # No local message timeout (0: forever), see DeliveryWatch: librdkafka answers a record timed
    # out in its queue by bumping the idempotent producer's epoch and numbering the records it
    # still holds afresh, among them retries of requests the leader had appended but not
    # acknowledged; the broker, seeing a new epoch, appends those a second time. Without a timeout
    # a retry keeps its epoch and sequence, and the broker appends a sequence only right after
    # the one before it, once: what lands of a run is a prefix of what it sent, in order.
    config.pop("delivery.timeout.ms", None)  # message.timeout.ms's alias
    config.update({"enable.idempotence": True, "acks": "all", "enable.gapless.guarantee": True,
                   "allow.auto.create.topics": False, "message.timeout.ms": 0})
    return config


# librdkafka's default message.timeout.ms: how long a restore waits out deliveries that make no progress.
DEFAULT_OUTAGE_S = 300.0
OUTAGE_SETTINGS = ("message.timeout.ms", "delivery.timeout.ms")


def outage_limit_s(settings: KafkaSettings) -> float | None:
    """How long a restore's deliveries may make no progress before it stops: the user's
    message.timeout.ms (or its alias delivery.timeout.ms, the last one given), None for 0
    (forever), else DEFAULT_OUTAGE_S. The producer itself never times a record out (see
    restore_producer)."""
    given = [value for name, value in settings.properties if name in OUTAGE_SETTINGS]
    if not given:
        return DEFAULT_OUTAGE_S
    milliseconds = int(given[-1])
    return milliseconds / 1000 if milliseconds > 0 else None


class Stalled(Exception):
    """No record was acknowledged for the outage limit while some were outstanding."""

    def __init__(self, outstanding: int, limit_s: float) -> None:
        super().__init__(f"none of {outstanding} outstanding records was acknowledged within {limit_s:g} s")
        self.outstanding, self.limit_s = outstanding, limit_s


class DeliveryWatch:
    """Every wait on a restore producer polls through here, which raises Stalled once nothing was
    delivered for `limit_s` (None: never) while records were outstanding.

    The producer has no message timeout (see restore_producer), so this is where a restore gives
    up on a broker outage. Deliveries report only errors, so what was delivered is counted as
    records handed to the producer minus those it still holds (its length also counts queued
    log lines and errors, which only ever make the count smaller: never taken for progress).
    """

    def __init__(self, producer: Producer, limit_s: float | None, clock=time.monotonic) -> None:
        self.producer, self.limit_s, self._clock = producer, limit_s, clock
        self.handed = 0  # records handed to the producer by finished produce_in_order calls
        self._most_delivered = 0
        self._since = clock()

    def poll(self, timeout_s: float, handing: int = 0) -> None:
        """Serve the producer's callbacks for up to `timeout_s`, then check (`handing`: records
        a produce_in_order call under way has handed over so far)."""
        self.producer.poll(timeout_s)
        self.check(handing)

    def check(self, handing: int = 0) -> None:
        """Raise Stalled if nothing was delivered for the limit while records were outstanding."""
        outstanding = len(self.producer)
        delivered = self.handed + handing - outstanding
        now = self._clock()
        if outstanding == 0 or delivered > self._most_delivered:
            self._most_delivered = max(self._most_delivered, delivered)
            self._since = now
        elif self.limit_s is not None and now - self._since > self.limit_s:
            raise Stalled(outstanding, self.limit_s)


def ask_producer_id_now(producer: Producer, topic: str, timeout_s: float = 0.5) -> None:
    """Let a new idempotent producer get its producer id at once instead of after 0.5-1 s.

    librdkafka asks for the id when a metadata response comes while a broker is up, and else on a
    500 ms timer; a bootstrap address does not count. The first request learns the brokers (and
    the bootstrap connection closes), the second goes through one of them. Best effort: a
    request slower than the timer itself is given up (the timer gets the id), and producing
    reports any real error.
    """
    try:
        for _ in range(2):
            producer.list_topics(topic, timeout=timeout_s)
    except KafkaException:
        pass


@dataclass(frozen=True)
class ProduceAdvice:
    """How a failed produce's message tells the user to go on: in CLI flags, or DataFrame options."""

    resume: str  # what to do once the cause is fixed, after "then"
    outage_setting: str  # how the user sets librdkafka's message.timeout.ms


CLI_ADVICE = ProduceAdvice("run again with the same --restore-id to continue", "-X message.timeout.ms")


# Partitions one producer reads at once (see produce_streams).
OPEN_STREAMS = 2


def produce_partition(
    settings: KafkaSettings,
    topic: str,
    partition: int,
    batches: Iterable[pa.RecordBatch],
    rate: RateLimit = RateLimit(),
    bucket: TokenBucket | None = None,
    advice: ProduceAdvice | None = None,
) -> ProduceResult:
    """Produce every record of the batches to `topic`[`partition`] (see produce_streams)."""
    return produce_streams(settings, [(topic, partition, batches)], rate, bucket, advice)[0]


def produce_streams(
    settings: KafkaSettings,
    streams: list[tuple[str, int, Iterable[pa.RecordBatch]]],
    rate: RateLimit = RateLimit(),
    bucket: TokenBucket | None = None,
    advice: ProduceAdvice | None = None,
) -> list[ProduceResult]:
    """Produce each stream's records to its (topic, partition) with key, value, headers and
    timestamp, through one producer, taking a batch from each stream being read in turn (two
    at a time, see OPEN_STREAMS); wait for all deliveries and fail on any delivery error, or
    once none made progress for the outage limit (see outage_limit_s).

    One producer for several partitions batches requests across them, as a plain producer
    would; within each partition the order is the stream's order. `rate` is this producer's
    share of the restore's limit: batches go in pieces, each after the bucket lets it. A `bucket`
    given instead is one that earlier calls of the same task used, so their pace carries over.
    `advice` words the errors' way on (default: the CLI's).
    """
    advice = advice or CLI_ADVICE
    failures: list[KafkaError] = []

    def on_delivery(error, message) -> None:
        if error is not None and len(failures) < 5:
            failures.append(error)

    limits = message_size_limits(settings, {topic for topic, _, _ in streams})
    producer = restore_producer(settings, on_delivery, min(limits.values(), default=None))
    watch = DeliveryWatch(producer, outage_limit_s(settings))
    if streams:
        ask_producer_id_now(producer, streams[0][0])
    # Waiting for the bucket polls the producer, so deliveries are served meanwhile.
    if bucket is None and rate.limited:
        bucket = TokenBucket(rate, sleep=watch.poll)
    results = [ProduceResult() for _ in streams]
    where = ", ".join(f"{topic}[{partition}]" for topic, partition, _ in streams)
    with rare_cyclic_gc():  # millions of short-lived objects (see core.hotloop)
        try:
            _produce_in_turn(watch, streams, results, bucket, failures)
            if not failures:
                _flush(watch, failures)
        except Stalled as stalled:
            _abandon(producer)
            raise TopicvaultError(
                f"producing to {where} timed out: {stalled}: check the broker, then {advice.resume} "
                f"({advice.outage_setting} sets how long a broker outage is waited out)"
            ) from None
        except (KafkaException, SystemError) as exc:
            fatal = _fatal_error(exc)
            if fatal is None:
                _settle(watch)
                raise
            failures.insert(0, fatal)
        except BaseException:
            # Settle the partitions before anyone counts them again: drop what was never sent and
            # wait for what is in flight, so a retried task attempt counts a stable prefix.
            _settle(watch)
            raise
    if failures:
        _settle(watch)
        raise _delivery_failure(failures, where, advice)
    return results


def _produce_in_turn(watch: DeliveryWatch, streams: list[tuple[str, int, Iterable[pa.RecordBatch]]],
                     results: list[ProduceResult], bucket: TokenBucket | None, failures: list[KafkaError]) -> None:
    """Produce a batch from each stream being read in turn until all end or a delivery fails.

    Each stream being read holds its current object in memory (up to --max-bytes): only a few
    (OPEN_STREAMS) are read at once, the next one opened when one ends.
    """
    unopened = [(index, iter(batches)) for index, (_, _, batches) in enumerate(streams)]
    pending, unopened = unopened[:OPEN_STREAMS], unopened[OPEN_STREAMS:]
    crash_at = crash_after("restore.produce")
    while pending and not failures:
        for entry in list(pending):
            index, batches = entry
            batch = next(batches, None)
            if batch is None:
                pending.remove(entry)
                if unopened:
                    pending.append(unopened.pop(0))
                continue
            topic, partition, _ = streams[index]
            _produce_paced(watch, topic, partition, batch, results[index], bucket, crash_at)
            watch.poll(0)
            if failures:
                break


def _produce_paced(watch: DeliveryWatch, topic: str, partition: int, batch: pa.RecordBatch, result: ProduceResult,
                   bucket: TokenBucket | None, crash_at: int | None) -> None:
    """Produce the batch, in pieces the bucket lets go (at once without a bucket)."""
    if bucket is None:
        _produce_batch(watch, topic, partition, batch, result, crash_at)
        return
    for piece, nbytes in _pieces(batch, bucket):
        # The limit holds at the broker, not only at the local queue: records held back
        # (no leader yet, a slow broker) would otherwise go out later in one burst.
        while len(watch.producer) > 2 * piece.num_rows:
            watch.poll(0.005)
        bucket.take(piece.num_rows, nbytes)
        _produce_batch(watch, topic, partition, piece, result, crash_at)


def _delivery_failure(failures: list[KafkaError], where: str, advice: ProduceAdvice) -> TopicvaultError:
    """The one-line error for deliveries that failed, saying what to do."""
    if any(_refused_timestamp(failure) for failure in failures):
        # A topic the restore created has its limits lifted while data goes in; one that existed has its own.
        return TopicvaultError(
            f"producing to {where} failed: {failures[0].str()}: the target refuses record timestamps this far from "
            f"its clock: set {' and '.join(TIMESTAMP_LIMITS[:2])} (before Kafka 3.6: {TIMESTAMP_LIMITS[2]}) to "
            f"{NO_LIMIT_MS} on the target topic, then {advice.resume}"
        )
    return TopicvaultError(
        f"producing to {where} failed: {failures[0].str()}: check the broker, then {advice.resume} "
        f"({advice.outage_setting} sets how long a broker outage is waited out)"
    )


def _flush(watch: DeliveryWatch, failures: list[KafkaError]) -> None:
    """Wait for every delivery (Stalled once none comes for the outage limit); a fatal producer
    error raised by flush goes into `failures`."""
    try:
        while watch.producer.flush(0.5):
            watch.check()
    except (KafkaException, SystemError) as exc:
        fatal = _fatal_error(exc)
        if fatal is None:
            raise
        failures.insert(0, fatal)


def _fatal_error(exc: BaseException) -> KafkaError | None:
    """The producer's fatal error an exception carries, if any. A fatal error (the gap-less
    guarantee: a record refused after later ones were sent) is raised from whichever call serves
    callbacks next, as a KafkaException, or from flush as a SystemError caused by one (the client
    raises it while also returning the queue length)."""
    for candidate in (exc, exc.__cause__):
        if isinstance(candidate, KafkaException) and isinstance(candidate.args[0], KafkaError):
            return candidate.args[0]
    return None


def _settle(watch: DeliveryWatch) -> None:
    """Drop what was never sent and wait for what is in flight, so the partitions hold a stable
    prefix before anyone counts them again; an outage that outlasts the limit leaves what is in
    flight unknown (see _abandon). A producer in a fatal state raises here: nothing more of it
    goes out anyway."""
    try:
        watch.producer.purge(in_queue=True, in_flight=False)
        _flush(watch, [])
    except Stalled:
        _abandon(watch.producer)
    except (KafkaException, SystemError) as exc:
        if _fatal_error(exc) is None:
            raise


def _abandon(producer: Producer) -> None:
    """Give up on every record the producer holds, sent or not, and send nothing more.

    Requests in flight may still be appended by their leader: under the producer's one epoch
    (see restore_producer) only in sequence, so the partition holds a prefix of what was sent,
    though maybe above the high watermark until the followers copy it (a resume waits for that,
    see restore.restore_group)."""
    try:
        producer.purge(in_queue=True, in_flight=True)
        producer.flush(0)
    except (KafkaException, SystemError) as exc:
        if _fatal_error(exc) is None:
            raise


def _refused_timestamp(failure: KafkaError) -> bool:
    """Whether the broker refused a record's timestamp: as a delivery error, or as the fatal
    error the idempotent producer raises for it (its code is the gap-less guarantee's, the
    broker's refusal is only in its text)."""
    return failure.code() == KafkaError.INVALID_TIMESTAMP or "Invalid timestamp" in failure.str()


def _pieces(batch: pa.RecordBatch, bucket: TokenBucket) -> Iterator[tuple[pa.RecordBatch, int]]:
    """The batch in pieces the bucket lets go at once, each with its payload bytes (key, value, headers)."""
    if bucket.limit.bytes_per_s is None:
        step = bucket.piece_records(0)
        for start in range(0, batch.num_rows, step):
            yield batch.slice(start, step), 0
        return
    before = [0, *accumulate(record_sizes(batch))]  # payload bytes before each record, and in all
    step = bucket.piece_records(before[-1] / max(batch.num_rows, 1))
    for start in range(0, batch.num_rows, step):
        piece = batch.slice(start, step)
        yield piece, before[start + piece.num_rows] - before[start]


def _produce_batch(watch: DeliveryWatch, topic: str, partition: int, batch: pa.RecordBatch, result: ProduceResult,
                   crash_at: int | None) -> None:
    millis = timestamps_ms(batch)
    # librdkafka reads timestamp 0 as "now" and cannot send negative ones: count them.
    result.timestamps_replaced += pc.sum(pc.less_equal(millis, 0)).as_py() or 0
    records = records_array(batch, pc.max_element_wise(millis, 0))
    if crash_at is not None and result.records + batch.num_rows > crash_at:
        # Test hook: produce up to the crash point, then die (or fail this task attempt).
        start = max(crash_at - result.records, 0)
        _produce_records(watch, topic, partition, records.slice(0, start))
        watch.producer.poll(0)
        crash_now()  # returns when only a first attempt fails and this is a retry
        records = records.slice(start)
    _produce_records(watch, topic, partition, records)
    result.records += batch.num_rows
    result.bytes += batch.nbytes


def _produce_records(watch: DeliveryWatch, topic: str, partition: int, records: pa.StructArray) -> None:
    """Produce each record (a row of native_writer.RECORDS_TYPE) to topic[partition], in order:
    in native code where the producer is native, else through confluent-kafka."""
    if isinstance(watch.producer, NativeProducer):
        produce_arrow_in_order(watch, topic, partition, records)
        return
    fields = {name: records.field(name) for name in ("key", "value", "timestamp_ms", "headers")}
    produce_in_order(watch, topic, partition, fields["value"].to_pylist(), fields["key"].to_pylist(),
                     fields["timestamp_ms"].to_pylist(), header_lists(fields["headers"]))


def produce_arrow_in_order(watch: DeliveryWatch, topic: str, partition: int, records: pa.StructArray) -> None:
    """produce_in_order's rules with the native producer: its record loop stops at a full local
    queue, deliveries drain (the wait bounded by the watch), and it goes on from the refused record."""
    produced = 0
    try:
        while True:
            produced, refusal = watch.producer.produce_arrow(topic, partition, records, produced)
            if refusal is not None:
                raise refusal
            if produced == len(records):
                return
            # Deliveries report only errors: a longer poll just sleeps.
            watch.poll(0.005, handing=produced)
    finally:
        watch.handed += produced


def produce_in_order(watch: DeliveryWatch, topic: str, partition: int, values: list, keys: list, millis: list,
                     headers: list) -> None:
    """Produce record i = (values[i], keys[i], millis[i], headers[i]) to topic[partition], in order,
    through the watch's producer.

    `map` calls `produce` with positional arguments and `deque` drains it, so no Python frame
    runs per record (a `for` loop over the same call took a fifth of a restore task's main
    thread at 200 B). A full local queue makes `produce` refuse record i (BufferError), which
    ends that pass with every input iterator past i: deliveries drain, record i goes again,
    and the same map goes on from i + 1. Waiting on a full queue is bounded by the watch.
    """
    produce = watch.producer.produce
    # How far the map got tells which record was refused (length_hint is exact for a list's iterator).
    remaining_values = iter(values)
    calls = map(produce, repeat(topic), remaining_values, keys, repeat(partition), repeat(None), repeat(None),
                millis, headers)
    try:
        while True:
            try:
                deque(calls, maxlen=0)
                return
            except BufferError:  # the local queue is full: let deliveries drain, then the same record again
                refused = len(values) - length_hint(remaining_values) - 1
                while True:
                    # Deliveries report only errors: a longer poll just sleeps.
                    watch.poll(0.005, handing=refused)
                    try:
                        produce(topic, values[refused], keys[refused], partition, None, None, millis[refused],
                                headers[refused])
                        break
                    except BufferError:
                        continue
    finally:
        watch.handed += len(values) - length_hint(remaining_values)


def header_lists(column: pa.Array | pa.ChunkedArray) -> list[list[tuple[str, bytes | None]] | None]:
    """Each record's headers as the (name, value) list `Producer.produce` takes, None for none.

    Built from the flattened name and value columns, converted once per batch: converting the
    list column row by row builds a dict per header and cost more than producing the records.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    lists: list = [None] * len(column)
    if len(column) == 0:
        return lists
    with_headers = pc.indices_nonzero(pc.list_value_length(column).fill_null(0)).to_pylist()
    if not with_headers:
        return lists
    # A sliced list array's offsets index into its whole child array: take only this slice's part.
    offsets = column.offsets.to_pylist()
    base = offsets[0]
    flat = column.values.slice(base, offsets[-1] - base)
    pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist()))
    for row in with_headers:
        lists[row] = pairs[offsets[row] - base:offsets[row + 1] - base]
    return lists


def _eof_consumer(settings: KafkaSettings):
    # A start offset that no longer exists must fail the count, never jump to the end: a count
    # of 0 there would make a resumed restore produce everything a second time.
    return metadata_consumer(settings, **{"enable.partition.eof": True, "isolation.level": "read_uncommitted",
                                          "auto.offset.reset": "error"})


def target_offsets(settings: KafkaSettings, topic: str, partition: int, start: int) -> Iterator[int]:
    """The offsets of the records in the partition from `start` to its true end (read to EOF)."""
    consumer = _eof_consumer(settings)
    try:
        for message in read_to_eof(consumer, {(topic, partition): start}):
            yield message.offset()
    finally:
        consumer.close()


# Records at the end of a target partition a resume compares with the source (see WrittenPrefix):
# this many, fewer when they hold more than COMPARED_TAIL_BYTES (at least one is compared); the
# counting read keeps them whole until the end of the partition is known.
COMPARED_TAIL = 100
COMPARED_TAIL_BYTES = 1024 * 1024


@dataclass(frozen=True)
class WrittenPrefix:
    """What a target partition holds from a restore's start offset on: how many records, and for
    its last COMPARED_TAIL records (fewer if it holds fewer) their content fingerprint and their
    timestamp (None where the broker set it: LogAppendTime)."""

    records: int = 0
    tail: tuple[tuple[bytes, int | None], ...] = ()


def count_records(settings: KafkaSettings, starts: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], WrittenPrefix]:
    """The records in each (topic, partition) from its start offset to its true end (read to EOF,
    not the watermark): their count and their last ones (see WrittenPrefix)."""
    found = {where: _Found() for where in starts}
    consumer = _eof_consumer(settings)
    try:
        for message in read_to_eof(consumer, starts):
            found[(message.topic(), message.partition())].add(message)
    except OffsetDeleted as exc:
        raise TopicvaultError(
            f"{exc}, so what this restore wrote there cannot be counted: restore into a new topic with a new "
            "--restore-id"
        ) from None
    finally:
        consumer.close()
    return {where: WrittenPrefix(f.records, tuple(map(_compared, f.messages))) for where, f in found.items()}


class _Found:
    """A partition's records counted so far, and its last messages: COMPARED_TAIL at most and
    COMPARED_TAIL_BYTES (but one)."""

    def __init__(self) -> None:
        self.records = 0
        self.messages: deque = deque()
        self.bytes = 0

    def add(self, message) -> None:
        self.records += 1
        self.messages.append(message)
        self.bytes += len(message)
        while len(self.messages) > COMPARED_TAIL or (self.bytes > COMPARED_TAIL_BYTES and len(self.messages) > 1):
            self.bytes -= len(self.messages.popleft())


def _compared(message) -> tuple[bytes, int | None]:
    kind, timestamp = message.timestamp()
    fingerprint = content_fingerprint(message.key(), message.value(), message.headers() or ())
    return fingerprint, timestamp if kind == TIMESTAMP_CREATE_TIME else None


def partition_ends(settings: KafkaSettings, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The true end offset of each partition (see core.cluster.kafka.true_end_offsets)."""
    consumer = _eof_consumer(settings)
    try:
        return true_end_offsets(consumer, partitions)
    finally:
        consumer.close()
