"""Independent Kafka helpers for tests: plain confluent-kafka, no topicvault code on the read path."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from typing import Callable, Iterable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from topicvault.core.envelope import Record

# Client settings under which a read that cannot progress gives up in seconds (the derived idle
# limit is about twice the socket timeout plus the reconnect backoff): for tests that expect one.
FAST_FAILING = {"socket.timeout.ms": "2000", "reconnect.backoff.max.ms": "1000"}


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None,
                 replication_factor: int = 1) -> str:
    """Create a topic and wait until its metadata shows every partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                                  config=config or {})])[
        name
    ].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return name
        time.sleep(0.1)
    raise AssertionError(f"topic {name} did not appear")


def topic_exists(bootstrap: str, name: str) -> bool:
    """Whether the cluster has the topic."""
    return name in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def produce_records(bootstrap: str, topic: str, records: Iterable[Record], producer_config: dict | None = None) -> None:
    """Produce records to their partitions with key, value, headers and timestamp.

    Per partition the LAST record goes alone in its own batch (flush, produce, flush): the
    embedded broker (tansu) reports high watermark = base offset of the last batch + 1, which
    is only the true end when that batch holds one record.
    """
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
              "message.max.bytes": 8 * 1024 * 1024}
    config.update(producer_config or {})
    refused: list[str] = []
    # A record the broker refuses (too large, timestamp out of its limits) must fail the test here.
    config["on_delivery"] = lambda error, message: refused.append(error.str()) if error is not None else None
    producer = Producer(config)
    records = list(records)
    last_index = {r.partition: i for i, r in enumerate(records)}
    held = set(last_index.values())

    def send(record: Record) -> None:
        while True:
            try:
                producer.produce(topic, record.value, record.key, partition=record.partition,
                                 timestamp=record.timestamp_ms, headers=list(record.headers) or None)
                return
            except BufferError:
                producer.poll(0.1)

    for index, record in enumerate(records):
        if index not in held:
            send(record)
    assert producer.flush(60) == 0
    for index in sorted(held):
        send(records[index])
        assert producer.flush(60) == 0
    assert not refused, f"the broker refused {len(refused)} records: {refused[:3]}"


def end_offsets(bootstrap: str, topic: str, partitions: list[int], isolation: str = "read_committed"
                ) -> dict[int, tuple[int, int]]:
    """(log start, end) of each partition now: the end a consumer of `isolation` reads up to, the
    last stable offset for read_committed (an open transaction holds it back), else the high
    watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    parts = [TopicPartition(topic, p) for p in partitions]
    lows = admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts}, isolation_level=level, request_timeout=15)
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts}, isolation_level=level, request_timeout=15)
    return {tp.partition: (lows[tp].result(30).offset, ends[tp].result(30).offset) for tp in parts}


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed",
                timeout_s: float = 120, to_eof: bool | None = None) -> dict[int, list[Record]]:
    """Every record of every partition, read from the beginning up to the end each partition had
    when the call began (see `end_offsets`).

    The end is taken first because under live traffic a partition's EOF may never come: librdkafka
    reports EOF only for a fetch that finds no new record, and a fetch at the end waits up to
    fetch.wait.max.ms (500 ms) for one, so a producer writing more often than that answers every
    fetch with records. A read that cannot reach the end within `timeout_s` fails, saying per
    partition what it read and what the cluster holds now. Records deleted while being read are
    skipped (the read goes on at the new log start); a log that goes back under the read (an
    unclean election, a topic re-created) fails it.

    `to_eof` reads each partition to its first EOF instead, for the embedded broker (tansu), whose
    high watermark is the last batch's base offset + 1: a snapshot end there leaves out the rest
    of the last batch. Default: when the suite runs on the embedded broker.
    """
    if to_eof is None:
        to_eof = os.environ.get("TOPICVAULT_TEST_BROKER") == "embedded"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = sorted(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions)
    ends = end_offsets(bootstrap, topic, partitions, isolation)
    if to_eof:  # the first EOF ends a partition (see above)
        ends = {p: (low, high if high <= low else sys.maxsize) for p, (low, high) in ends.items()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
                         "auto.offset.reset": "earliest"})
    found: dict[int, list[Record]] = {p: [] for p in partitions}
    eofs: dict[int, list[int]] = {p: [] for p in partitions}
    waiting = {p for p in partitions if ends[p][0] < ends[p][1]}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(waiting)])
    deadline = time.monotonic() + timeout_s

    def done(partition: int) -> None:
        waiting.discard(partition)
        consumer.pause([TopicPartition(topic, partition)])

    try:
        while waiting:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} did not reach the end within {timeout_s:.0f} s: "
                                     f"{_read_so_far(consumer, topic, sorted(waiting), ends, found, eofs)}")
            for message in consumer.consume(num_messages=5000, timeout=0.2):
                partition, offset, error = message.partition(), message.offset(), message.error()
                if partition not in waiting:
                    continue
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, f"reading {topic}[{partition}]: {error.str()}"
                    eofs[partition].append(offset)
                    if to_eof or offset >= ends[partition][1]:  # below the end: a new leader's high watermark lagging
                        done(partition)
                    continue
                if offset >= ends[partition][1]:
                    done(partition)  # written after the call began
                    continue
                records = found[partition]
                assert not records or offset > records[-1].offset, (
                    f"reading {topic}[{partition}] went back from offset {records[-1].offset} to {offset}: the log "
                    "was truncated or the topic re-created under the read")
                kind, timestamp = message.timestamp()
                records.append(Record(
                    topic=topic, partition=partition, offset=offset, key=message.key(),
                    value=message.value(), timestamp_ms=timestamp, timestamp_type=1 if kind == 2 else 0,
                    headers=tuple(message.headers() or ()),
                ))
                if offset == ends[partition][1] - 1:
                    done(partition)
    finally:
        consumer.close()
    return found


def _read_so_far(consumer: Consumer, topic: str, partitions: list[int], ends: dict[int, tuple[int, int]],
                 found: dict[int, list[Record]], eofs: dict[int, list[int]]) -> str:
    """Per partition: what a read got and what the cluster holds now (for a read that failed)."""
    said = []
    for p in partitions:
        try:
            now = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
        except KafkaException as exc:
            now = str(exc)
        last = found[p][-1].offset if found[p] else None
        position = consumer.position([TopicPartition(topic, p)])[0].offset
        said.append(f"[{p}] {len(found[p])} records read, last offset {last}, position {position}, "
                    f"wanted up to {ends[p][1] - 1} (log start {ends[p][0]}), EOF at {eofs[p][-5:]}, "
                    f"watermarks now {now}")
    return "; ".join(said)


def transactional_producer(bootstrap: str) -> Producer:
    """A producer with a fresh transactional id, its transactions initialised."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def produce_committed_transactions(bootstrap: str, topic: str, transactions: int, per_transaction: int = 3) -> None:
    """Committed transactions of records `v<t>-<i>` to partition 0 (each commit marker takes an
    offset, so the records have offset gaps), then a single-record batch `last` (tansu: so the
    high watermark is the true end)."""
    producer = transactional_producer(bootstrap)
    for batch in range(transactions):
        producer.begin_transaction()
        for i in range(per_transaction):
            producer.produce(topic, f"v{batch}-{i}".encode(), b"k", partition=0, timestamp=1_700_000_000_000 + i)
        producer.commit_transaction(30)
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"last", b"last", 1_700_000_000_009, 0, ())])


def produce_until(done: threading.Event, bootstrap: str, topic: str, key: Callable[[int], bytes | None], every: int,
                  pause_s: float, partitions: tuple[int, ...] = (0, 1), base_ms: int = 1_700_000_000_000) -> int:
    """Live traffic until `done` is set: round i produces to each partition value v<i>, `key(i)`,
    timestamp base_ms + i and headers n=<i>, n=null; every `every` rounds it flushes and pauses
    `pause_s`. Returns the rounds produced (all flushed)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    i = 0
    while not done.is_set():
        for partition in partitions:
            producer.produce(topic, b"v%d" % i, key(i), partition=partition, timestamp=base_ms + i,
                             headers=[("n", b"%d" % i), ("n", None)])
        i += 1
        if i % every == 0:
            producer.flush(30)
            time.sleep(pause_s)
    producer.flush(30)
    return i


class LiveTraffic:
    """A producer writing numbered records to a topic's partitions on a thread, until stopped:
    `with LiveTraffic(bootstrap, topic, partitions) as traffic: ...` then `traffic.acked` holds,
    per partition, the values the cluster acknowledged (acks=all, idempotent), in offset order.
    Records failed by a fault are retried by the producer (never duplicated: idempotence); a
    record that still fails is kept in `traffic.failed`, not in `acked`."""

    def __init__(self, bootstrap: str, topic: str, partitions: tuple[int, ...] = (0,), pause_s: float = 0.01,
                 per_round: int = 10, value_size: int = 100) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.pause_s, self.per_round, self.value_size = pause_s, per_round, value_size
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
        self.failed: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "LiveTraffic":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop producing and wait until every record sent is acknowledged or failed."""
        self._done.set()
        self._thread.join(180)
        assert not self._thread.is_alive(), "live traffic did not stop within 180 s"

    def count(self) -> int:
        """Records acknowledged so far."""
        return sum(len(v) for v in self.acked.values())

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.failed.append(error.str())
        else:
            self.acked[message.partition()].append((message.offset(), message.value()))

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 120_000, "log_level": 0})
        i = 0
        padding = b"x" * self.value_size
        while not self._done.is_set():
            for _ in range(self.per_round):
                for partition in self.partitions:
                    value = b"live-%d-%d-" % (partition, i) + padding
                    while True:
                        try:
                            producer.produce(self.topic, value, b"k%d" % (i % 7), partition=partition,
                                             headers=[("n", b"%d" % i), ("n", None)], on_delivery=self._delivered)
                            break
                        except BufferError:
                            producer.poll(0.1)
                        except KafkaException as exc:  # fatal (e.g. an unclean election lost its sequence)
                            self.failed.append(str(exc))
                            self._sort_acked()
                            return
                i += 1
            producer.poll(0)
            time.sleep(self.pause_s)
        try:
            producer.flush(150)
        except (KafkaException, SystemError) as exc:
            # After an unclean election the idempotent producer's state is fatal: flush raises
            # (SystemError when a delivery report came with the fatal error set). What was not
            # acknowledged is not in `acked`; say why instead of dying on the thread.
            self.failed.append(f"flush: {exc}")
        self._sort_acked()

    def _sort_acked(self) -> None:
        for values in self.acked.values():
            values.sort()


def set_client_quotas(bootstrap: str, quotas: dict[str, dict[str, float | None]]) -> str:
    """Set client quotas by client.id ({client_id: {"producer_byte_rate": 1e5, ...}}; None removes
    one) through Apache Kafka's own Admin client (confluent-kafka's Python API has no
    AlterClientQuotas), and wait until the cluster describes them. Returns what it describes."""
    import subprocess
    from pathlib import Path

    from topicvault.core.local.local_kafka import kafka_jars

    source = Path(__file__).with_name("data") / "ClientQuotas.java"
    ops = [f"{client}/{name}={'-' if rate is None else rate}" for client, rates in quotas.items()
           for name, rate in rates.items()]
    done = subprocess.run(["java", "-cp", f"{kafka_jars()}/*", str(source), bootstrap, *ops],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def ends_of(records: dict) -> dict[int, int]:
    """Each partition's offset after its last record (records: partition -> its records in
    offset order, as consume_all returns them)."""
    return {partition: rows[-1].offset + 1 for partition, rows in records.items()}


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (Kafka's DYNAMIC_TOPIC_CONFIG entries), read with a plain admin client."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    entries = list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())[0].result(30)
    return {name: entry.value for name, entry in entries.items()
            if getattr(entry.source, "value", entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and entry.value is not None}


def recreate_topic(bootstrap: str, name: str, partitions: int, config: dict) -> str:
    """Delete the topic and create it again under the same name with `config` (a new topic id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)
    deadline = time.monotonic() + 60
    while True:  # the deletion completes asynchronously: creation fails until it has
        try:
            return create_topic(bootstrap, name, partitions, config)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def commit_offsets(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit {(topic, partition): offset} for `group`, as a consumer of the group would."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: offset} `group` has committed on `topic` (negative where it has none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    consumer.close()
    return {tp.partition: tp.offset for tp in found}


def record_at(bootstrap: str, topic: str, partition: int, offset: int) -> tuple | None:
    """The first record at or after `offset` as (key, value, timestamp, headers); None at the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{uuid.uuid4().hex}",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF
                return None
            return message.key(), message.value(), message.timestamp()[1], tuple(message.headers() or ())
    finally:
        consumer.close()
    raise AssertionError(f"nothing from {topic}[{partition}] at {offset}")


def as_tuple(record: Record) -> tuple:
    """(key, value, timestamp, headers): what record_at returns, for comparing with it."""
    return record.key, record.value, record.timestamp_ms, record.headers


def strip(records) -> list[tuple]:
    """Key, value, headers and timestamp of each record: what a restore into a used topic keeps."""
    return [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def exact(records) -> list[tuple]:
    """Everything a restore must keep, offsets included (the standby topics here start empty)."""
    return [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]
