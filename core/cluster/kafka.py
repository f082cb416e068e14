"""Kafka client plumbing shared by backup and restore: configs, metadata, offsets, topics.

librdkafka settings pass through unchanged (`-X key=value` on the CLI), so SASL/SSL and
tuning need no code here.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from ..errors import OffsetDeleted, TopicvaultError, UnknownTopic
from ..profiles import Settings, is_secret

T = TypeVar("T")

# librdkafka prints its log lines straight to stderr unless a client has a Python logger; under
# spark-submit the driver's stderr joins stdout, where a notice would break `--json` output. Through
# `logging`, notices are dropped and warnings still reach stderr (logging's last-resort handler).
CLIENT_LOG = logging.getLogger("topicvault.kafka")

# Bounded failure when the cluster is unreachable (see issue: fail within 30 s).
METADATA_TIMEOUT_S = 20.0
# ... and how long the first answer may take before the user is told that it is being waited for.
SLOW_ANSWER_S = 3.0

# A request whose connection went silent (a broker outage can leave it half-open) is abandoned
# and re-sent only after socket.timeout.ms; librdkafka's default is 60 s, as long as a reader's
# idle limit, so a 4 s outage could fail a backup. Our consumers use a shorter one (a fetch
# answers within fetch.wait.max.ms when the broker is healthy), and every idle limit is derived
# from the client's timeouts (`idle_limit_s`), so it always outlasts a reconnect.
CONSUMER_SOCKET_TIMEOUT_MS = 20_000
READ_TO_EOF_IDLE_FLOOR_S = 30.0
# A read for a partition's true end follows records written after the watermarks were read for at
# most this long after its first record: producers faster than the read would keep its EOF away
# for as long as they write (a backup hung in planning). The last batch a broker understated its
# end by comes whole in one fetch, so even a short chase takes all of it.
END_CHASE_S = 2.0
_LIBRDKAFKA_DEFAULTS_MS = {"socket.timeout.ms": 60_000, "reconnect.backoff.max.ms": 10_000, "fetch.wait.max.ms": 500}


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


def idle_limit_s(config: Mapping[str, object], floor_s: float) -> float:
    """How long a consumer with `config` may receive nothing before a reader gives up: at least
    `floor_s`, and longer than the client needs to abandon a stuck request twice and reconnect."""

    def millis(name: str) -> int:
        return int(config.get(name, _LIBRDKAFKA_DEFAULTS_MS[name]))

    needed_ms = 2 * millis("socket.timeout.ms") + millis("reconnect.backoff.max.ms") + millis("fetch.wait.max.ms")
    return max(floor_s, needed_ms / 1000 + 5)


def consumer_config(settings: KafkaSettings, **overrides: object) -> dict[str, object]:
    """A consumer config: our socket timeout and fetch backoff (unless the user set them), the user's
    properties, overrides."""
    config: dict[str, object] = {
        "socket.timeout.ms": CONSUMER_SOCKET_TIMEOUT_MS,
        # A partition whose read-ahead queue is full gets its next fetch postponed by this long
        # (librdkafka's default: 1 s). Our readers fill it whenever they stop to work (a backup
        # task encoding and storing an object, a verify comparing): with the default a backup
        # of 2 KB records waited a second after each object, at a third of a bare consumer's pace.
        "fetch.queue.backoff.ms": 10,
    }
    config.update(settings.client_config(**overrides))
    return config


def new_client(factory: Callable[..., T], settings: KafkaSettings, config: dict[str, object], *args: object) -> T:
    """`factory(config, *args)`, logging through `CLIENT_LOG` unless `config` names a logger, with a
    setting librdkafka rejects reported as one line naming it."""
    try:
        return factory({"logger": CLIENT_LOG, **config}, *args)
    except KafkaException as exc:
        raise TopicvaultError(setting_error(settings, exc)) from None


def setting_error(settings: KafkaSettings, exc: KafkaException) -> str:
    """One line for a client setting librdkafka rejected: the setting (named by its value when
    librdkafka's message names only the value), what librdkafka said, and what to do."""
    reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)

    def mentioned(text: str) -> bool:
        return re.search(rf"(?<![\w.-]){re.escape(text)}(?![\w.-])", reason) is not None

    culprits = [name for name, _ in settings.properties if mentioned(name)]
    if not culprits:
        # "Unsupported SASL mechanism: FOO" names the value only; secrets are never matched or shown.
        culprits = [name for name, value in settings.properties if value and not is_secret(name) and mentioned(value)]
    named = ", ".join(culprits) or "(see below)"
    return (f"Kafka client setting {named} rejected: {reason}; fix or remove it "
            "(-X, the cluster profile or TOPICVAULT_KAFKA_*)")


def check_client_settings(settings: KafkaSettings) -> None:
    """Build (and drop) a consumer and a producer with the settings, so a setting librdkafka
    rejects fails here, as one line, before anything is read or written."""
    # Silent: these clients only parse the settings (a consumer-only property would make the
    # producer warn, and their connection attempts are not the command's).
    quiet = {"log_level": 0}
    consumer = new_client(Consumer, settings, consumer_config(settings, **{"group.id": "topicvault-check"}, **quiet))
    consumer.close()
    new_client(Producer, settings, settings.client_config(**quiet))
    new_client(AdminClient, settings, settings.client_config(**quiet))


def admin_client(settings: KafkaSettings) -> AdminClient:
    """An AdminClient for the cluster."""
    return new_client(AdminClient, settings, settings.client_config())


class ReadingConsumer(Consumer):
    """A Consumer that knows how long its reads may stay idle (see `idle_limit_s`)."""

    def __init__(self, config: dict[str, object], idle_floor_s: float) -> None:
        super().__init__(config)
        self.idle_limit_s = idle_limit_s(config, idle_floor_s)


def metadata_consumer_config(settings: KafkaSettings, **overrides: object) -> dict[str, object]:
    """The config of a metadata_consumer."""
    config = consumer_config(
        settings,
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
    # Apache Kafka answers the first fetch of a partition created a moment ago (a restore's
    # targets, counted at once) with UNKNOWN_LEADER_EPOCH, and librdkafka waits this long before
    # the next (its default, 500 ms, was half a second of every restore task). Unless the user set it.
    if "fetch.error.backoff.ms" not in dict(settings.properties):
        config["fetch.error.backoff.ms"] = 20
    config.update(overrides)
    return config


def metadata_consumer(settings: KafkaSettings, **overrides: object) -> ReadingConsumer:
    """A consumer used only for metadata, offset queries and reads to partition EOF (never commits)."""
    return new_client(ReadingConsumer, settings, metadata_consumer_config(settings, **overrides),
                      READ_TO_EOF_IDLE_FLOOR_S)


CLI_CONNECTION_SETTINGS = "--bootstrap-servers and the network/security settings (-X)"


def list_topic_partitions(settings: KafkaSettings, connection_settings: str = CLI_CONNECTION_SETTINGS) -> dict[str, int]:
    """Every topic of the cluster with its partition count; unreachable cluster is a clear error
    (naming `connection_settings` as the user gives them)."""
    with admin_client(settings) as admin:
        try:
            metadata = _cluster_metadata(admin, settings)
        except KafkaException as exc:
            raise TopicvaultError(
                f"cannot reach Kafka at {settings.bootstrap_servers} ({exc.args[0].str() if exc.args else exc}): "
                f"check {connection_settings}"
            ) from None
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None or topic.error.code() == KafkaError.NO_ERROR
        }


def _cluster_metadata(admin, settings: KafkaSettings):
    """The cluster's metadata; when it has not answered within SLOW_ANSWER_S, say so (a warning on stderr)
    and wait the rest of METADATA_TIMEOUT_S: an unreachable cluster otherwise looked like a hang."""
    try:
        return admin.list_topics(timeout=SLOW_ANSWER_S)
    except KafkaException as exc:
        if not exc.args or exc.args[0].code() not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
            raise
    CLIENT_LOG.warning(f"no answer yet from Kafka at {settings.bootstrap_servers}; still trying (a cluster that "
                       f"does not answer fails after {METADATA_TIMEOUT_S:.0f} s)")
    return admin.list_topics(timeout=METADATA_TIMEOUT_S - SLOW_ANSWER_S)


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


# The answers of a broker that has no such topic, as against one that could not answer.
_UNKNOWN_TOPIC_CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID)

# librdkafka renders a missing topic ID (brokers before Kafka 2.8) as the all-zero UUID.
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def topic_ids(settings: KafkaSettings, topics: Iterable[str], just_created: bool = False) -> dict[str, str]:
    """The Kafka topic ID of each topic (DescribeTopics); topics the broker gives no ID are left out.

    The ID tells a topic from one deleted and re-created under the same name. `just_created`: the
    topics were created a moment ago, and one the broker does not know yet (its metadata is still
    propagating) is asked for again, up to METADATA_TIMEOUT_S.
    """
    names = sorted(set(topics))
    if not names:
        return {}
    deadline = time.monotonic() + (METADATA_TIMEOUT_S if just_created else 0)
    with admin_client(settings) as admin:
        result = {}
        for name, future in admin.describe_topics(TopicCollection(names), request_timeout=METADATA_TIMEOUT_S).items():
            try:
                description = _described(admin, name, future, deadline)
            except KafkaException as exc:
                unknown = bool(exc.args) and exc.args[0].code() in _UNKNOWN_TOPIC_CODES
                raise (UnknownTopic if unknown else TopicvaultError)(
                    f"cannot describe topic {name!r} on {settings.bootstrap_servers} "
                    f"({exc.args[0].str() if exc.args else exc}): was it deleted? check the name and the Describe ACL"
                ) from None
            topic_id = str(description.topic_id) if description.topic_id is not None else ""
            if topic_id and topic_id != _NO_TOPIC_ID:
                result[name] = topic_id
        return result


def _described(admin: AdminClient, name: str, future, deadline: float):
    """The topic's description from `future`, asked again while the broker does not know the topic and
    `deadline` (monotonic) is not passed."""
    while True:
        try:
            return future.result()
        except KafkaException as exc:
            if not exc.args or exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
        future = admin.describe_topics(TopicCollection([name]), request_timeout=METADATA_TIMEOUT_S)[name]


# Errors of an offsets query sent while a partition's leader moves (a failover): the query went to
# the lost leader's broker handle, or waited on it, or the new leader has no high watermark yet.
# Once the client's metadata names the new leader (seconds), asked again, it answers.
LEADER_MOVING = frozenset({
    KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.OFFSET_NOT_AVAILABLE,
    # The client's metadata is newer than the broker's: a just-created topic's leader, or a leader
    # election, that this broker has not applied yet (seen on a loaded one-node cluster).
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
})
WATERMARK_ATTEMPT_S = 5.0


def watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """(low, high) offsets of one partition. High is the LSO for read_committed consumers.

    While the partition's leader moves (see LEADER_MOVING) the client's metadata is refreshed and
    the query asked again, all within METADATA_TIMEOUT_S."""
    deadline = time.monotonic() + METADATA_TIMEOUT_S
    while True:
        try:
            attempt_s = max(1.0, min(WATERMARK_ATTEMPT_S, deadline - time.monotonic()))
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=attempt_s)
        except KafkaException as exc:
            if not _leader_moving(exc) or time.monotonic() >= deadline:
                raise TopicvaultError(f"cannot read offsets of {topic}[{partition}]: {exc}") from None
        _learn_leaders(consumer, topic)


def _learn_leaders(consumer: Consumer, topic: str) -> None:
    """Refresh the client's metadata of `topic` (its partitions' leaders now); best effort."""
    time.sleep(0.5)
    try:
        consumer.list_topics(topic, timeout=WATERMARK_ATTEMPT_S)
    except KafkaException:
        pass


def all_partitions(topics: Mapping[str, int]) -> list[tuple[str, int]]:
    """Every (topic, partition) of topics given with their partition counts."""
    return [(topic, partition) for topic, count in topics.items() for partition in range(count)]


def partition_watermarks(
    settings: KafkaSettings, partitions: Iterable[tuple[str, int]], isolation: str = "read_committed",
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermarks of many partitions, asked of each leader in one ListOffsets request
    per side (a round trip per partition dominated planning a 256-partition backup).

    With read_committed (the default) high is the last stable offset, as a read_committed
    consumer sees it; restore's guards read the log as written (read_uncommitted)."""
    wanted = [TopicPartition(topic, partition) for topic, partition in sorted(set(partitions))]
    if not wanted:
        return {}
    level = IsolationLevel.READ_COMMITTED if isolation == "read_committed" else IsolationLevel.READ_UNCOMMITTED
    with admin_client(settings) as admin:
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        try:
            while wanted:
                wanted = _ask_watermarks(admin, wanted, level, offsets, final=time.monotonic() >= deadline)
                if wanted:  # a leader moving, or a broker that has not applied a new topic's metadata yet
                    time.sleep(0.5)
                    _refresh_leaders(admin, {tp.topic for tp in wanted})
        finally:
            admin.poll(0)  # serve the client's queued log lines (see CLIENT_LOG)
        return offsets


def _ask_watermarks(admin: AdminClient, wanted: list[TopicPartition], level: IsolationLevel,
                    offsets: dict[tuple[str, int], tuple[int, int]], final: bool) -> list[TopicPartition]:
    """Ask both sides of `wanted`'s watermarks into `offsets`; return the partitions to ask again
    (a leader moving: see LEADER_MOVING), or, when `final`, fail on them."""
    sides = [admin.list_offsets({tp: spec for tp in wanted}, isolation_level=level, request_timeout=METADATA_TIMEOUT_S)
             for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]
    again = []
    for tp in wanted:
        try:
            low, high = (side[tp].result().offset for side in sides)
        except KafkaException as exc:
            if final or not _leader_moving(exc):
                raise TopicvaultError(f"cannot read offsets of {tp.topic}[{tp.partition}]: {exc}") from None
            again.append(tp)
            continue
        if low < 0 or high < 0:
            # OFFSET_INVALID (-1001) with no error: what librdkafka answers when the partition's
            # leader died a moment ago (seen with a SIGKILLed leader). Never an offset to plan with.
            if final:
                raise TopicvaultError(f"cannot read offsets of {tp.topic}[{tp.partition}]: its leader gave no "
                                      f"offsets (low {low}, high {high}); check the cluster, then run again")
            again.append(tp)
            continue
        offsets[(tp.topic, tp.partition)] = (low, high)
    return again


def _refresh_leaders(admin: AdminClient, topics: set[str]) -> None:
    """Have the client ask the cluster for `topics`' leaders again (its cache still names a dead one,
    which answers list_offsets with OFFSET_INVALID); best effort."""
    for topic in sorted(topics):
        try:
            admin.list_topics(topic, timeout=WATERMARK_ATTEMPT_S)
        except KafkaException:
            pass


def _leader_moving(exc: KafkaException) -> bool:
    return bool(exc.args) and hasattr(exc.args[0], "code") and exc.args[0].code() in LEADER_MOVING


def true_end_offsets(consumer: Consumer, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition, found by reading from the high
    watermark to partition EOF.

    Some Kafka-compatible brokers report a high watermark below the true end (the embedded
    broker reports the base offset of the last batch + 1), so restore never trusts it alone.
    """
    return ends_past(consumer, {(topic, partition): watermarks(consumer, topic, partition)[1]
                                for topic, partition in partitions})


def ends_past(consumer: Consumer, reported: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Each partition's end: the offset after the last record a read from its `reported` end
    (a high watermark) finds before partition EOF (or END_CHASE_S after its first, while records
    come faster than it reads), else the reported end itself. The consumer needs
    enable.partition.eof=True; its isolation level decides what counts."""
    ends = dict(reported)
    for message in read_to_eof(consumer, {tp: max(high, 0) for tp, high in ends.items()}, chase_s=END_CHASE_S):
        ends[(message.topic(), message.partition())] = message.offset() + 1
    return ends


def consume_ready(consumer: Consumer, limit: int, wait_s: float) -> list:
    """Up to `limit` messages and events: those already fetched, or else the first to come within
    `wait_s` and those fetched with it; empty when none came.

    `consume(n, timeout)` returns early only once n have come, so a read whose last records are
    fewer than n (every read's end, every small partition) would wait out the whole timeout.
    """
    ready = consumer.consume(num_messages=limit, timeout=0)
    if ready:
        return ready
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=limit - 1, timeout=0)] if limit > 1 else [first]


# With chase_s: how many chase_s a partition that gave no record may keep the read waiting for one.
NO_RECORD_CHASE_FACTOR = 5


def read_to_eof(consumer: Consumer, starts: Mapping[tuple[str, int], int], idle_timeout_s: float | None = None,
                chase_s: float | None = None):
    """Yield the messages of each (topic, partition) from its start offset until its EOF.

    All partitions are read at once: one EOF wait for all of them, not one each. The consumer
    must have been created with enable.partition.eof=True. Fails when the broker sends nothing
    for `idle_timeout_s` (default: the consumer's own idle limit, which outlasts its timeouts).
    With `chase_s`, a partition still short of its EOF `chase_s` after its first record ends
    after the messages already fetched (its EOF moves on as fast as it reads); one that gave no
    record NO_RECORD_CHASE_FACTOR x `chase_s` after the read began ends where it started.
    """
    if not starts:
        return
    if idle_timeout_s is None:
        idle_timeout_s = getattr(consumer, "idle_limit_s", None) or idle_limit_s({}, READ_TO_EOF_IDLE_FLOOR_S)
    assignment = [TopicPartition(t, p, start if start >= 0 else OFFSET_BEGINNING) for (t, p), start in starts.items()]
    open_partitions = set(starts)
    first_record_at: dict[tuple[str, int], float] = {}
    consumer.assign(assignment)
    try:
        last_progress = read_started = time.monotonic()
        while open_partitions:
            if chase_s is not None:  # checked between fetched rounds: a batch in hand is taken whole
                now = time.monotonic()
                open_partitions -= {where for where, at in first_record_at.items() if now - at > chase_s}
                # A partition that gave no record yet while its EOF never came (seen once in CI; why its
                # fetches brought nothing for 30 s is not known) ends where it started after a longer wait.
                if now - read_started > NO_RECORD_CHASE_FACTOR * chase_s:
                    open_partitions -= {where for where in open_partitions if where not in first_record_at}
                if not open_partitions:
                    break
            messages = consume_ready(consumer, 10_000, 0.2)
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
                    first_record_at.setdefault(where, last_progress)
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
) -> set[str]:
    """Create topics with the given partition counts, configs and replication (default: broker's), and wait.

    Returns the topics this call created: those whose CreateTopics answered success, not
    TOPIC_ALREADY_EXISTS (someone else's topic of that name, which the caller must leave alone).
    """
    created: set[str] = set()
    if not partitions_by_topic:
        return created
    with admin_client(settings) as admin:
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
        failed: list[str] = []
        for topic, future in futures.items():  # every answer, so the topics created are all known
            try:
                future.result()
                created.add(topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    failed.append(f"cannot create topic {topic!r}: {exc.args[0].str()}")
    if failed:
        raise TopicsNotCreated(failed[0] + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""), created)
    return created


class TopicsNotCreated(TopicvaultError):
    """CreateTopics refused some topics; `created` holds those it did create (a restore records them)."""

    def __init__(self, message: str, created: set[str]) -> None:
        super().__init__(message)
        self.created = created


def broker_count(settings: KafkaSettings) -> int:
    """How many brokers the cluster has (caps the replication factor of created topics)."""
    return len(admin_client(settings).list_topics(timeout=METADATA_TIMEOUT_S).brokers)


def confluent_timestamp_type(kind: int) -> int:
    """Map confluent-kafka's timestamp type (1 create, 2 log-append) to Kafka's id (0, 1)."""
    return 1 if kind == 2 else 0


def cluster_of(settings: Settings) -> KafkaSettings:
    """The cluster of a command's resolved settings (core.profiles), its -X settings checked before
    anything is read or written; a one-line error naming the flags when no cluster was given."""
    if not settings.bootstrap_servers:
        raise TopicvaultError("no Kafka cluster given: pass -b SERVERS, --cluster NAME or set "
                              "TOPICVAULT_BOOTSTRAP_SERVERS")
    kafka = KafkaSettings.of(settings.bootstrap_servers, settings.kafka_properties)
    check_client_settings(kafka)
    return kafka
