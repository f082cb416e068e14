"""Kafka client plumbing shared by backup and restore: configs, metadata, offsets, topics.

librdkafka settings pass through unchanged (`-X key=value` on the CLI), so SASL/SSL and
tuning need no code here.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .errors import OffsetDeleted, TopicvaultError

# Bounded failure when the cluster is unreachable (see issue: fail within 30 s).
METADATA_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is and how to talk to it; plain data so it ships to Spark workers."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...] = ()

    def client_config(self, **overrides: object) -> dict[str, object]:
        """A librdkafka config: bootstrap servers, the user's properties, then overrides."""
        config: dict[str, object] = {"bootstrap.servers": self.bootstrap_servers}
        config.update(dict(self.properties))
        config.update(overrides)
        return config

    @classmethod
    def of(cls, bootstrap_servers: str, properties: Mapping[str, str] | None = None) -> "KafkaSettings":
        """Settings from a bootstrap string and a property mapping."""
        return cls(bootstrap_servers, tuple(sorted((properties or {}).items())))


def parse_properties(pairs: Iterable[str]) -> dict[str, str]:
    """Parse `key=value` strings (CLI `-X`) into a mapping; a bad pair is a one-line error."""
    result: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise TopicvaultError(f"bad property {pair!r}: write it as key=value, e.g. -X security.protocol=SSL")
        result[name.strip()] = value
    return result


def admin_client(settings: KafkaSettings) -> AdminClient:
    """An AdminClient for the cluster."""
    return AdminClient(settings.client_config())


def metadata_consumer(settings: KafkaSettings, **overrides: object) -> Consumer:
    """A consumer used only for metadata, offset queries and reads to partition EOF (never commits)."""
    config = settings.client_config(
        **{
            "group.id": "topicvault-metadata",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # A fetch at the end of a partition waits this long for data before the broker
            # answers; partition EOF is only known from that answer.
            "fetch.wait.max.ms": 10,
        }
    )
    config.update(overrides)
    return Consumer(config)


def list_topic_partitions(settings: KafkaSettings) -> dict[str, int]:
    """Every topic of the cluster with its partition count; unreachable cluster is a clear error."""
    admin = admin_client(settings)
    try:
        metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise TopicvaultError(
            f"cannot reach Kafka at {settings.bootstrap_servers} ({exc.args[0].str() if exc.args else exc}): "
            "check --bootstrap-servers and the network/security settings (-X)"
        ) from None
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None or topic.error.code() == KafkaError.NO_ERROR
    }


def select_topics(
    available: Mapping[str, int], topics: Iterable[str] = (), regex: str | None = None
) -> dict[str, int]:
    """The requested topics (named or matching regex) with partition counts; unknown names fail."""
    chosen: dict[str, int] = {}
    for topic in topics:
        if topic not in available:
            raise TopicvaultError(f"topic {topic!r} does not exist on the cluster: check the name (topics are case-sensitive)")
        chosen[topic] = available[topic]
    if regex:
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise TopicvaultError(f"bad --topics-regex {regex!r}: {exc}") from None
        chosen.update({t: n for t, n in available.items() if pattern.fullmatch(t) and not t.startswith("__")})
    if not chosen:
        raise TopicvaultError("no topics selected: pass --topic NAME or a --topics-regex that matches")
    return dict(sorted(chosen.items()))


# librdkafka renders a missing topic ID (brokers before Kafka 2.8) as the all-zero UUID.
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, str]:
    """The Kafka topic ID of each topic (DescribeTopics); topics the broker gives no ID are left out.

    The ID tells a topic from one deleted and re-created under the same name.
    """
    names = sorted(set(topics))
    if not names:
        return {}
    admin = admin_client(settings)
    result = {}
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=METADATA_TIMEOUT_S).items():
        try:
            description = future.result()
        except KafkaException as exc:
            raise TopicvaultError(
                f"cannot describe topic {name!r} on {settings.bootstrap_servers} "
                f"({exc.args[0].str() if exc.args else exc}): was it deleted? check the name and the Describe ACL"
            ) from None
        topic_id = str(description.topic_id) if description.topic_id is not None else ""
        if topic_id and topic_id != _NO_TOPIC_ID:
            result[name] = topic_id
    return result


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """(low, high) offsets of one partition. High is the LSO for read_committed consumers."""
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise TopicvaultError(f"cannot read offsets of {topic}[{partition}]: {exc}") from None


def true_end_offsets(consumer: Consumer, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition, found by reading from the high
    watermark to partition EOF.

    Some Kafka-compatible brokers report a high watermark below the true end (the embedded
    broker reports the base offset of the last batch + 1), so restore never trusts it alone.
    """
    ends = {(topic, partition): watermarks(consumer, topic, partition)[1] for topic, partition in partitions}
    for message in read_to_eof(consumer, {tp: max(high, 0) for tp, high in ends.items()}):
        ends[(message.topic(), message.partition())] = message.offset() + 1
    return ends


def read_to_eof(consumer: Consumer, starts: Mapping[tuple[str, int], int], idle_timeout_s: float = 30.0):
    """Yield the messages of each (topic, partition) from its start offset until its EOF.

    All partitions are read at once: one EOF wait for all of them, not one each. The consumer
    must have been created with enable.partition.eof=True. Fails when the broker sends nothing
    for `idle_timeout_s`.
    """
    if not starts:
        return
    assignment = [TopicPartition(t, p, start if start >= 0 else OFFSET_BEGINNING) for (t, p), start in starts.items()]
    open_partitions = set(starts)
    consumer.assign(assignment)
    try:
        last_progress = time.monotonic()
        while open_partitions:
            # consume() returns early only when num_messages arrive: keep the wait short.
            messages = consumer.consume(num_messages=10_000, timeout=0.02)
            if not messages:
                if time.monotonic() - last_progress > idle_timeout_s:
                    waiting = ", ".join(f"{t}[{p}]" for t, p in sorted(open_partitions))
                    raise TopicvaultError(f"no answer from Kafka for {waiting} within {idle_timeout_s:.0f} s: check the broker")
                continue
            last_progress = time.monotonic()
            for message in messages:
                where = (message.topic(), message.partition())
                if where not in open_partitions:
                    continue  # written after this partition's EOF was seen
                error = message.error()
                if error is None:
                    yield message
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(where)
                elif error.code() == KafkaError._AUTO_OFFSET_RESET:  # only with auto.offset.reset=error
                    raise OffsetDeleted(
                        f"{where[0]}[{where[1]}] no longer holds offset {starts[where]}: records were deleted "
                        "(retention or DeleteRecords)"
                    )
                else:
                    raise TopicvaultError(f"reading {where[0]}[{where[1]}] failed: {error.str()}")
    finally:
        consumer.unassign()


def create_topics(
    settings: KafkaSettings,
    partitions_by_topic: Mapping[str, int],
    replication_factor: int = -1,
    configs_by_topic: Mapping[str, Mapping[str, str]] | None = None,
    replication_by_topic: Mapping[str, int] | None = None,
) -> None:
    """Create topics with the given partition counts, configs and replication (default: broker's), and wait."""
    if not partitions_by_topic:
        return
    admin = admin_client(settings)
    new_topics = [
        NewTopic(
            t,
            num_partitions=n,
            replication_factor=(replication_by_topic or {}).get(t, replication_factor),
            config=dict((configs_by_topic or {}).get(t, {})),
        )
        for t, n in partitions_by_topic.items()
    ]
    futures = admin.create_topics(new_topics, operation_timeout=METADATA_TIMEOUT_S)
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicvaultError(f"cannot create topic {topic!r}: {exc.args[0].str()}") from None


def broker_count(settings: KafkaSettings) -> int:
    """How many brokers the cluster has (caps the replication factor of created topics)."""
    return len(admin_client(settings).list_topics(timeout=METADATA_TIMEOUT_S).brokers)


def confluent_timestamp_type(kind: int) -> int:
    """Map confluent-kafka's timestamp type (1 create, 2 log-append) to Kafka's id (0, 1)."""
    return 1 if kind == 2 else 0
