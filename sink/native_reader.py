"""The native record loop (sink/_kafka_arrow.c): a backup's records go from librdkafka into Arrow
columns without becoming Python objects (issue #51.2).

`open_native_consumer` gives a consumer with the subset of confluent-kafka's Consumer interface
that sink/kafka_reader.py uses (assign, pause, get_watermark_offsets, close) plus the native
fetch; kafka_reader's _NativeConsumption keeps every rule above the record loop. Where the module
cannot be loaded (not built, no librdkafka), one line says so and the reader runs the Python path.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from types import ModuleType

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ..core.cluster.kafka import KafkaSettings, setting_error
from ..core.envelope import ARROW_SCHEMA, HEADERS_TYPE, timestamp_column
from ..core.errors import TopicvaultError

# "0": read and write through confluent-kafka even where the native module loads (the tests compare the two).
NATIVE_ENV = "TOPICVAULT_NATIVE"

# The struct array the native loop hands over per batch (sink/_kafka_arrow.c, slot_export).
NATIVE_TYPE = pa.struct([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp_ms", pa.int64()),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
])

_module: ModuleType | None = None
_unavailable: str | None = None  # why the module did not load, once tried


def native_module() -> ModuleType | None:
    """The compiled module (the backup's Reader, the restore's Writer), or None: TOPICVAULT_NATIVE=0,
    or it cannot be loaded (said once per process on stderr, with what to do)."""
    global _module, _unavailable
    if os.environ.get(NATIVE_ENV) == "0":
        return None
    if _module is None and _unavailable is None:
        try:
            _module = _load()
        except (ImportError, OSError) as exc:
            _unavailable = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(f"note: native Kafka module not loaded ({_unavailable}): records go through confluent-kafka "
                  "instead (slower); `make setup` builds it", file=sys.stderr)
    return _module


def _load() -> ModuleType:
    """Import sink/_kafka_arrow after making the librdkafka that confluent-kafka loaded global, so
    the module's librdkafka symbols resolve to it (the Python path's own library and version)."""
    import confluent_kafka.cimpl  # noqa: F401 - loads librdkafka

    library = _loaded_librdkafka()
    if library is None:
        raise ImportError("confluent-kafka's librdkafka not found among the loaded libraries")
    ctypes.CDLL(library, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    return importlib.import_module(f"{__package__}._kafka_arrow")


def _loaded_librdkafka() -> str | None:
    """The path of the librdkafka this process loaded (from /proc/self/maps; None when none)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if "/librdkafka" in path and ".so" in path:
                    return path
    except OSError:
        return None
    return None


def librdkafka_config(config: dict[str, object]) -> dict[str, str] | None:
    """A confluent-kafka config as librdkafka's strings; None when only confluent-kafka can run it
    (a Python callback, or -X debug, whose log lines the native reader does not forward)."""
    strings: dict[str, str] = {}
    for name, value in config.items():
        if name == "logger":
            continue
        if callable(value) or name == "debug":
            return None
        strings[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return strings


def open_native_consumer(settings: KafkaSettings, config: dict[str, object]) -> "NativeConsumer | None":
    """A native consumer with `config`, or None where the Python path must read."""
    module = native_module()
    strings = librdkafka_config(config) if module is not None else None
    if strings is None:
        return None
    try:
        return NativeConsumer(module.Reader(strings))
    except ValueError as exc:
        raise TopicvaultError(setting_error(settings, KafkaException(KafkaError(KafkaError._INVALID_ARG, str(exc))))) from None


class NativeConsumer:
    """confluent-kafka's Consumer methods the backup reader uses, over the native Reader."""

    def __init__(self, reader) -> None:
        self.reader = reader

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.reader.assign([(p.topic, p.partition, p.offset) for p in partitions])

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.reader.pause([(p.topic, p.partition) for p in partitions])

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = 10, cached: bool = False
                              ) -> tuple[int, int]:
        """(low, high), asked of the broker (`cached` is ignored: always asked)."""
        try:
            return self.reader.watermarks(partition.topic, partition.partition, int(timeout * 1000))
        except RuntimeError as exc:
            raise KafkaException(KafkaError(KafkaError._FAIL, str(exc))) from None

    def columns(self, topic: str, partition: int) -> "NativeColumns":
        """The held records of one range, as kafka_reader's _Columns holds them."""
        return NativeColumns(self.reader, topic, partition)

    def close(self) -> None:
        self.reader.close()


class NativeColumns:
    """One range's records held in the native reader (slot `slot` of its last track()); the
    interface of kafka_reader._Columns: len, value_bytes, next_offset, last_record, flush."""

    def __init__(self, reader, topic: str, partition: int) -> None:
        self.reader, self.topic, self.partition = reader, topic, partition
        self.slot = -1
        self.next_offset: int | None = None
        self.last_record: tuple[int, int] | None = None
        self.value_bytes = 0
        self._rows = 0
        self._tracked_from = -1

    def __len__(self) -> int:
        return self._rows

    def tracked(self, slot: int, next_offset: int) -> None:
        """The reader now reads this range in `slot`, on from `next_offset`."""
        self.slot, self._tracked_from, self._rows, self.value_bytes = slot, next_offset, 0, 0

    def refresh(self) -> None:
        """Take the reader's counts after a fetch."""
        self._rows, self.value_bytes, next_offset, _ = self.reader.held(self.slot)
        if next_offset != self._tracked_from:
            self.next_offset = next_offset

    def flush(self) -> pa.RecordBatch:
        """The records held, as one envelope batch."""
        capsule, last_offset, last_epoch = self.reader.take(self.slot)
        self._rows = self.value_bytes = 0
        return self.batch_of(capsule, last_offset, last_epoch)

    def batch_of(self, capsule, last_offset: int, last_epoch: int) -> pa.RecordBatch:
        """An envelope batch of a native struct array (its last record's offset and leader epoch)."""
        native = pa.Array._import_from_c_capsule(NATIVE_TYPE.__arrow_c_schema__(), capsule)
        if len(native):
            self.last_record = (last_offset, last_epoch) if last_epoch >= 0 else None
        return envelope_batch(native, self.topic, self.partition)


def envelope_batch(native: pa.StructArray, topic: str, partition: int) -> pa.RecordBatch:
    """The envelope batch (core.envelope.ARROW_SCHEMA) of one partition's native struct array."""
    count = len(native)
    names = native.field("headers").values.field("key")
    try:
        names.validate(full=True)
    except pa.ArrowInvalid:
        raise TopicvaultError(f"{topic}[{partition}]: a record's header name is not UTF-8, which Kafka's "
                              "header names are; topicvault cannot carry it") from None
    topics = pa.repeat(pa.scalar(topic, pa.string()), count) if count else pa.array([], pa.string())
    partitions = pa.repeat(pa.scalar(partition, pa.int32()), count) if count else pa.array([], pa.int32())
    offsets = native.field("offset")
    return pa.RecordBatch.from_arrays(
        [native.field("key"), native.field("value"), topics, partitions, offsets,
         timestamp_column(native.field("timestamp_ms"), topics, partitions, offsets),
         native.field("timestampType"), native.field("headers")],
        schema=ARROW_SCHEMA,
    )
