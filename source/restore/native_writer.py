"""The native record loop of a restore (sink/_kafka_arrow_writer.c): envelope columns go to
librdkafka without becoming Python objects per record (issue #51.2).

`open_native_producer` gives a producer with the subset of confluent-kafka's Producer interface
that source/restore/kafka_writer.py uses (poll, flush, len, purge, list_topics) plus `produce_arrow`;
kafka_writer keeps every rule above the record loop (the producer's settings, timestamps, pacing,
delivery accounting, the stall limit, crash hooks). Where the module cannot be loaded, one line
says so (sink/native_reader.native_module) and the restore runs the Python path.
"""

from __future__ import annotations

import logging
from typing import Callable

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from ...core.cluster.kafka import KafkaSettings, setting_error
from ...core.envelope import HEADERS_TYPE
from ...core.errors import TopicvaultError
from ...sink.native_reader import librdkafka_config, native_module

# The struct array produce_arrow reads (sink/_kafka_arrow_writer.c, check_schema): one row per record.
RECORDS_TYPE = pa.struct([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp_ms", pa.int64()),
    pa.field("headers", HEADERS_TYPE),
])

# librdkafka's RD_KAFKA_PURGE_F_QUEUE, _INFLIGHT and _NON_BLOCKING (rdkafka.h).
_PURGE_QUEUE, _PURGE_INFLIGHT, _PURGE_NON_BLOCKING = 1, 2, 4

OnDelivery = Callable[[KafkaError, None], None]

# syslog's levels (librdkafka's) as logging's, as confluent-kafka maps them (confluent_kafka.c, log_cb).
_LOG_LEVELS = (logging.CRITICAL, logging.CRITICAL, logging.CRITICAL, logging.ERROR, logging.WARNING,
               logging.INFO, logging.INFO, logging.DEBUG)


def open_native_producer(settings: KafkaSettings, config: dict[str, object], on_delivery: OnDelivery,
                         logger: logging.Logger) -> "NativeProducer | None":
    """A native producer with `config` (librdkafka settings only: no callbacks), or None where the
    Python path must produce (module not loaded, TOPICVAULT_NATIVE=0, a setting only
    confluent-kafka runs). `on_delivery(error, None)` is called for each failed delivery, and
    librdkafka's log lines go to `logger`, from poll and flush, as confluent-kafka does with
    delivery.report.only.error and a logger."""
    module = native_module()
    strings = librdkafka_config(config) if module is not None else None
    if strings is None:
        return None
    try:
        return NativeProducer(module.Writer(strings), on_delivery, logger)
    except ValueError as exc:
        raise TopicvaultError(setting_error(settings, KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))))) from None


def records_array(batch: pa.RecordBatch, millis: pa.Array) -> pa.StructArray:
    """The struct array produce_arrow reads: the batch's key, value and headers, and `millis` (the
    timestamps to send, int64 ms) as timestamp_ms."""
    return pa.StructArray.from_arrays(
        [batch.column("key"), batch.column("value"), millis.cast(pa.int64()), batch.column("headers")],
        fields=list(RECORDS_TYPE))


class NativeProducer:
    """confluent-kafka's Producer methods a restore uses, over the native Writer; failed deliveries
    and a fatal error come out of poll and flush as confluent-kafka gives them (a fatal error as
    a KafkaException carrying a fatal KafkaError, once)."""

    def __init__(self, writer, on_delivery: OnDelivery, logger: logging.Logger) -> None:
        self.writer, self.on_delivery, self.logger = writer, on_delivery, logger

    def produce_arrow(self, topic: str, partition: int, records: pa.StructArray, start: int = 0
                      ) -> tuple[int, KafkaException | None]:
        """Produce records[start:] to topic[partition] in order until the local queue is full or
        librdkafka refuses one: the index after the last record produced (len(records): all), and
        for a refusal other than a full queue the KafkaException Producer.produce raises for it."""
        produced, code = self.writer.produce_arrow(topic, partition, *records.__arrow_c_array__(), start)
        if code and code != KafkaError._QUEUE_FULL:
            return produced, KafkaException(KafkaError(code, f"Unable to produce message: {KafkaError(code).str()}"))
        return produced, None

    def poll(self, timeout: float = -1) -> int:
        served = self.writer.poll(_millis(timeout))
        self._report()
        return served

    def flush(self, timeout: float = -1) -> int:
        held = self.writer.flush(_millis(timeout))
        self._report()
        return held

    def __len__(self) -> int:
        return self.writer.held()

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        flags = (_PURGE_QUEUE if in_queue else 0) | (_PURGE_INFLIGHT if in_flight else 0) | (
            0 if blocking else _PURGE_NON_BLOCKING)
        code = self.writer.purge(flags)
        if code:
            raise KafkaException(KafkaError(code))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        """Ask the brokers for `topic`'s metadata (the answer itself is not kept: a restore asks
        only to get its producer id early); KafkaException when it fails."""
        code = self.writer.metadata(topic or "", _millis(timeout))
        if code:
            raise KafkaException(KafkaError(code))

    def _report(self) -> None:
        """Hand log lines to the logger and failed deliveries to on_delivery, then raise a fatal error once."""
        lines, name = self.writer.take_logs()
        for level, facility, text in lines:
            self.logger.log(_LOG_LEVELS[min(max(level, 0), 7)], "%s [%s] %s", facility, name, text)
        for code in self.writer.take_failures():
            self.on_delivery(KafkaError(code), None)
        fatal = self.writer.take_fatal()
        if fatal is not None:
            code, reason = fatal
            raise KafkaException(KafkaError(code, reason, fatal=True))


def _millis(timeout_s: float) -> int:
    """confluent-kafka's timeout (seconds, negative: forever) in librdkafka's milliseconds (-1: forever)."""
    return -1 if timeout_s < 0 else int(timeout_s * 1000)
