"""Cluster state beside the data: topic settings, consumer-group offsets, ACLs and SCRAM users,
read and rebuilt.

Backup reads them (`topic_settings`, `group_offsets`); restore creates topics with the saved
settings and commits translated group offsets (`commit_group_offsets`). Only the admin
protocol is used, so this works on any Kafka-compatible broker that implements it; where a
broker returns nothing, the saved state says so instead of inventing values.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ..errors import TopicvaultError
from .cluster_access import PATTERN_TYPES, RESOURCE_TYPES, AccessApplied, AccessPlan, AccessState, Acl, ScramUser
from .kafka import METADATA_TIMEOUT_S, KafkaSettings, admin_client, metadata_consumer, new_client

# Groups in these states have members; committing offsets for them would race their consumers.
_ACTIVE_GROUP_STATES = {
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
}


@dataclass(frozen=True)
class TopicSettings:
    """What a topic looked like: partition count, replication factor and its own config overrides."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]  # topic-level overrides only (what `kafka-configs --describe` lists)
    configs_reported: bool  # False when the broker answered DescribeConfigs with nothing

    def to_json(self) -> dict:
        """The form kept in commit records."""
        return {
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "configs": dict(sorted(self.configs.items())),
            "configs_reported": self.configs_reported,
        }

    @classmethod
    def from_json(cls, body: Mapping) -> "TopicSettings":
        """Read the commit-record form; records from before configs were saved give none."""
        return cls(
            partitions=int(body.get("partitions", 0)),
            replication_factor=int(body.get("replication_factor", -1)),
            configs={str(k): str(v) for k, v in body.get("configs", {}).items()},
            configs_reported=bool(body.get("configs_reported", False)),
        )


def topic_overrides(entries: Mapping[str, object]) -> dict[str, str]:
    """The configs set on the topic itself, from a DescribeConfigs answer.

    Broker-wide defaults are left out: they belong to the cluster, and re-applying them as
    topic overrides on another cluster would pin values its operators never chose.
    """
    return {
        name: entry.value
        for name, entry in entries.items()
        if getattr(entry.source, "value", entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and entry.value is not None
        and not entry.is_sensitive
    }


def topic_settings(settings: KafkaSettings, topics: Mapping[str, int]) -> dict[str, TopicSettings]:
    """Partition count, replication factor and config overrides of each topic."""
    if not topics:
        return {}
    with admin_client(settings) as admin:
        metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics])
        described: dict[str, Mapping] = {}
        for resource, future in futures.items():
            try:
                described[resource.name] = future.result()
            except KafkaException:
                described[resource.name] = {}
        result = {}
        for topic, partitions in topics.items():
            topic_metadata = metadata.topics.get(topic)
            replicas = [len(p.replicas) for p in topic_metadata.partitions.values()] if topic_metadata else []
            entries = described.get(topic, {})
            result[topic] = TopicSettings(partitions, max(replicas, default=-1), topic_overrides(entries), bool(entries))
        return result


# A topic being restored must keep every record it is given, unchanged, until the restore is done:
# time retention would delete restored records (old by record time) within minutes of a segment
# roll, size retention and compaction would delete others, and LogAppendTime would overwrite
# their timestamps; a resumed restore counts what the target holds, so nothing may vanish. Saved
# configs are applied once the data is in (apply_topic_configs).
LOADING_CONFIGS = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    "message.timestamp.type": "CreateTime",
}

# A broker refuses a record whose timestamp is further than these from its own clock: ahead
# (Kafka 4.0's default: one hour) or behind (Kafka 3.6+; before that one limit both ways,
# removed in 4.0). Restored records keep their own times, years old or set in the future, so a
# restore lifts the limits its target cluster knows while data goes in; naming one the cluster
# does not know would fail the topic's creation.
TIMESTAMP_LIMITS = ("message.timestamp.after.max.ms", "message.timestamp.before.max.ms",
                    "message.timestamp.difference.max.ms")
NO_LIMIT_MS = str(2**63 - 1)


def lifted_timestamp_limits(broker_config_names: Iterable[str]) -> dict[str, str]:
    """The overrides that lift every timestamp limit a cluster knows, from its broker's config
    names (each limit's broker-wide synonym is `log.` + its name); none for a broker that
    describes no configs."""
    known = set(broker_config_names)
    return {name: NO_LIMIT_MS for name in TIMESTAMP_LIMITS if f"log.{name}" in known}


def cluster_loading_configs(settings: KafkaSettings) -> dict[str, str]:
    """LOADING_CONFIGS and the lifted timestamp limits of the cluster at `settings` (a broker
    whose configs cannot be described gets LOADING_CONFIGS only: a record it refuses then stops
    the restore with one line saying what to set)."""
    return {**LOADING_CONFIGS, **lifted_timestamp_limits(broker_configs(settings) or {})}


def loading_configs(saved: Mapping[str, str], loading: Mapping[str, str] = LOADING_CONFIGS) -> dict[str, str]:
    """The configs a restore creates a topic with: `loading` (nothing deleted or rewritten, see
    cluster_loading_configs), records as large as saved."""
    configs = dict(loading)
    if "max.message.bytes" in saved:  # the restored records must fit, from the first one on
        configs["max.message.bytes"] = saved["max.message.bytes"]
    return configs


def apply_topic_configs(settings: KafkaSettings, configs_by_topic: Mapping[str, Mapping[str, str]],
                        loading: Mapping[str, str] = LOADING_CONFIGS) -> None:
    """Give topics a restore created their saved configs once the data is in, and drop the loading
    overrides (`loading`) the saved configs do not name, so those fall back to the target's defaults."""
    if not configs_by_topic:
        return
    resources = []
    for topic, configs in sorted(configs_by_topic.items()):
        entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                   for name, value in sorted(configs.items())]
        entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                    for name in sorted(loading) if name not in configs]
        resources.append(ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries))
    with admin_client(settings) as admin:  # kept alive until every future resolved
        for resource, future in admin.incremental_alter_configs(resources).items():
            try:
                future.result(METADATA_TIMEOUT_S)
            except KafkaException as exc:
                raise TopicvaultError(
                    f"restored {resource.name!r} but could not set its configs ({exc.args[0].str() if exc.args else exc}): "
                    "set them by hand (they are in the backup's commit records) and remove its loading overrides "
                    f"({', '.join(f'{k}={v}' for k, v in loading.items())})"
                ) from None


def retention_ms(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, int | None]:
    """Each existing topic's effective retention.ms (None when the broker does not say)."""
    return {topic: None if value is None else int(value)
            for topic, value in effective_topic_config(settings, topics, "retention.ms").items()}


def retention_bytes(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, int | None]:
    """Each existing topic's effective retention.bytes, per partition (None when the broker does not say)."""
    return {topic: None if value is None else int(value)
            for topic, value in effective_topic_config(settings, topics, "retention.bytes").items()}


def message_size_limits(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, int]:
    """Each existing topic's max.message.bytes, the largest record batch it accepts, where the
    broker says (its own or the cluster's default)."""
    return {topic: int(value) for topic, value in effective_topic_config(settings, topics, "max.message.bytes").items()
            if value is not None}


def effective_topic_config(settings: KafkaSettings, topics: Iterable[str], name: str) -> dict[str, str | None]:
    """Each existing topic's value of config `name`, set on it or inherited (None when the broker
    does not say: tansu describes only what is set)."""
    topics = sorted(topics)
    if not topics:
        return {}
    with admin_client(settings) as admin:
        result: dict[str, str | None] = {}
        for resource, future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics]).items():
            try:
                entry = future.result(METADATA_TIMEOUT_S).get(name)
            except (KafkaException, concurrent.futures.TimeoutError):
                entry = None
            result[resource.name] = entry.value if entry is not None else None
        return result


def broker_configs(settings: KafkaSettings) -> dict[str, str | None] | None:
    """One broker's configs by name (it speaks for the cluster's defaults), or None when they
    cannot be described (no broker, no permission); tansu describes none."""
    with admin_client(settings) as admin:
        brokers = admin.list_topics(timeout=METADATA_TIMEOUT_S).brokers
        if not brokers:
            return None
        resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
        try:
            entries = admin.describe_configs([resource])[resource].result(METADATA_TIMEOUT_S)
        except (KafkaException, concurrent.futures.TimeoutError):  # a broker stopped since the metadata said it was there
            return None
        return {name: entry.value for name, entry in entries.items()}


# Kafka's replica.lag.time.max.ms: how long a follower may lag before the leader drops it from
# the ISR (and the high watermark stops waiting for it).
DEFAULT_REPLICA_LAG_MS = 30_000


def resume_settle_s(max_replicas: int, broker_values: Mapping[str, str | None] | None) -> float:
    """How long a resumed restore waits before it counts a target that holds its records.

    A killed attempt's last produce request may be in the leader's log but not yet copied by the
    followers: a count (read_uncommitted) stops at the high watermark, misses those records, and
    the resume would produce them again. Within replica.lag.time.max.ms the followers copy them
    or leave the ISR, and the high watermark passes them. A partition without followers moves its
    high watermark at the append: no wait.
    """
    if max_replicas <= 1:
        return 0.0
    lag_ms = (broker_values or {}).get("replica.lag.time.max.ms")
    return (int(lag_ms) if lag_ms else DEFAULT_REPLICA_LAG_MS) / 1000 + 5.0


def target_resume_settle_s(settings: KafkaSettings, topics: Iterable[str]) -> float:
    """resume_settle_s for the partitions of `topics` on the cluster at `settings`."""
    metadata = admin_client(settings).list_topics(timeout=METADATA_TIMEOUT_S)
    replicas = [len(p.replicas) for t in set(topics) if t in metadata.topics
                for p in metadata.topics[t].partitions.values()]
    return resume_settle_s(max(replicas, default=1), broker_configs(settings) if max(replicas, default=1) > 1 else None)


# How long one broker has to answer a client bootstrapped on it alone (see silent_isr_brokers).
BROKER_ANSWER_TIMEOUT_S = 3.0


def silent_isr_brokers(settings: KafkaSettings, partitions: Iterable[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
    """The brokers holding an in-sync replica of one of `partitions` that do not answer, each with
    those partitions.

    Without a controller quorum the metadata still lists stopped brokers in the ISR (nothing can
    shrink it), so each broker is asked itself: a client bootstrapped on it alone asks it for
    metadata. Replicas out of the ISR do not hold the high watermark back, so they are not asked.
    """
    metadata = admin_client(settings).list_topics(timeout=METADATA_TIMEOUT_S)
    members: dict[int, list[tuple[str, int]]] = {}
    for topic, partition in sorted(set(partitions)):
        found = metadata.topics.get(topic)
        described = found.partitions.get(partition) if found is not None else None
        for broker in described.isrs if described is not None else ():
            members.setdefault(broker, []).append((topic, partition))
    return {broker: where for broker, where in sorted(members.items())
            if not _answers(settings, metadata.brokers.get(broker))}


def _answers(settings: KafkaSettings, broker) -> bool:
    if broker is None:  # not among the live brokers the cluster lists
        return False
    # Quiet: a stopped broker is what is being found out, not something to log.
    config = settings.client_config(**{"bootstrap.servers": f"{broker.host}:{broker.port}", "log_level": 0})
    try:
        new_client(AdminClient, settings, config).list_topics(timeout=BROKER_ANSWER_TIMEOUT_S)
    except KafkaException:
        return False
    return True


def default_retention_ms(settings: KafkaSettings) -> int | None:
    """The retention a new topic gets on this cluster (from a broker's configs), or None when not told."""
    values = broker_configs(settings)
    return None if values is None else retention_from_broker_configs(values)


def default_retention_bytes(settings: KafkaSettings) -> int | None:
    """The retention.bytes a new topic gets on this cluster (log.retention.bytes), or None when not told."""
    value = (broker_configs(settings) or {}).get("log.retention.bytes")
    return None if value is None else int(value)


def retention_from_broker_configs(values: Mapping[str, str | None]) -> int | None:
    """A broker's default retention.ms: log.retention.ms, else minutes, else hours (Kafka's precedence)."""
    for name, unit_ms in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
        value = values.get(name)
        if value is not None:
            return int(value) * unit_ms if int(value) >= 0 else -1
    return None


def group_offsets(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, dict]:
    """Committed offsets on `topics` of every consumer group, with the time they were read.

    Returns {group: {"read_ms": ms, "uncertain_ms": ms, "offsets": {topic: {partition: offset}}}};
    groups with no offset on these topics are left out. `read_ms` is this host's clock when the
    request went out and `uncertain_ms` how long the answer took (the coordinator read the offsets
    in between); see with_clock_skew for the broker's side.
    """
    wanted = set(topics)
    with admin_client(settings) as admin:
        try:
            listed = admin.list_consumer_groups(request_timeout=METADATA_TIMEOUT_S).result()
        except KafkaException as exc:
            raise TopicvaultError(f"cannot list consumer groups on {settings.bootstrap_servers}: {exc}") from None
        result: dict[str, dict] = {}
        for listing in sorted(listed.valid, key=lambda g: g.group_id):
            read_ms = int(time.time() * 1000)
            future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(listing.group_id)])
            try:
                committed = future[listing.group_id].result().topic_partitions
            except KafkaException as exc:
                raise TopicvaultError(f"cannot read offsets of consumer group {listing.group_id!r}: {exc}") from None
            took_ms = int(time.time() * 1000) - read_ms
            offsets: dict[str, dict[str, int]] = {}
            for tp in committed:
                if tp.topic in wanted and tp.offset >= 0 and tp.error is None:
                    offsets.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
            if offsets:
                result[listing.group_id] = {"read_ms": read_ms, "uncertain_ms": max(0, took_ms), "offsets": offsets}
        return result


def with_clock_skew(groups: dict[str, dict] | None, newest_record_ms: int | None, now_ms: int) -> dict[str, dict] | None:
    """Group snapshots with `uncertain_ms` widened by how far the cluster's clock is seen to run ahead
    of this host's: `newest_record_ms`, the newest timestamp of records that were in the log by
    `now_ms` (this host's clock), later than it.

    The Kafka protocol tells a client no broker time (no response carries the broker's clock), and
    `restore --until TIME --groups` places a snapshot among records by their timestamps, so the
    records' clock (the broker's on LogAppendTime topics, else the producers') is the one that
    matters. Records stamped after the host's clock when they were already written show that clock
    behind theirs by at least the difference; a clock ahead of theirs cannot be seen this way.
    """
    ahead_ms = max(0, newest_record_ms - now_ms) if newest_record_ms is not None else 0
    if not groups or not ahead_ms:
        return groups
    return {group: {**snapshot, "uncertain_ms": snapshot.get("uncertain_ms", 0) + ahead_ms}
            for group, snapshot in groups.items()}


def check_group_inactive(settings: KafkaSettings, group: str) -> None:
    """Fail when a consumer group has members: its consumers would overwrite what restore commits."""
    with admin_client(settings) as admin:
        try:
            description = admin.describe_consumer_groups([group], request_timeout=METADATA_TIMEOUT_S)[group].result()
        except KafkaException as exc:
            raise TopicvaultError(f"cannot describe consumer group {group!r} on the target: {exc}") from None
        if description.members or description.state in _ACTIVE_GROUP_STATES:
            raise TopicvaultError(
                f"consumer group {group!r} is active on the target ({description.state.name.lower()}, "
                f"{len(description.members)} members): stop its consumers, then run the restore again with --groups"
            )


def commit_group_offsets(settings: KafkaSettings, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
    """Commit `offsets` ((topic, partition) -> next offset to read) for `group` on the target."""
    consumer = metadata_consumer(settings, **{"group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False
        )
    except KafkaException as exc:
        raise TopicvaultError(
            f"committing offsets for consumer group {group!r} failed ({exc.args[0].str() if exc.args else exc}): "
            "is the group active? stop its consumers and run again with --groups"
        ) from None
    finally:
        consumer.close()


# -- ACLs and SCRAM users (core.cluster.cluster_access) ------------------------------------------------------------

ALL_ACLS = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def acl_of(binding: AclBinding) -> Acl:
    """A binding as core.cluster.cluster_access names it."""
    return Acl(binding.restype.name, binding.name, binding.resource_pattern_type.name, binding.principal,
               binding.host, binding.operation.name, binding.permission_type.name)


def binding_of(acl: Acl) -> AclBinding:
    """The confluent-kafka binding of a saved one."""
    return AclBinding(ResourceType[acl.resource_type], acl.name, ResourcePatternType[acl.pattern_type],
                      acl.principal, acl.host, AclOperation[acl.operation], AclPermissionType[acl.permission])


def read_access(settings: KafkaSettings) -> tuple[AccessState, list[str]]:
    """The cluster's ACL bindings and SCRAM users, with a warning for each part that could not be
    read. A cluster without an authorizer has no ACLs to save (an empty part, no warning)."""
    with admin_client(settings) as admin:
        warnings = []
        try:
            bindings = admin.describe_acls(ALL_ACLS, request_timeout=METADATA_TIMEOUT_S).result()
            unknown = [b for b in bindings if b.restype.name not in RESOURCE_TYPES
                       or b.resource_pattern_type.name not in PATTERN_TYPES]
            if unknown:
                warnings.append(f"{len(unknown)} ACL bindings on resource types confluent-kafka cannot name were not "
                                "saved (e.g. DELEGATION_TOKEN, USER): set them again by hand after a restore")
            acls: tuple[Acl, ...] | None = tuple(acl_of(b) for b in bindings if all(b is not u for u in unknown))
        except KafkaException as exc:
            acls = None if _code(exc) != KafkaError.SECURITY_DISABLED else ()
            if acls is None:
                warnings.append(f"ACLs not saved: {_reason(exc)} (the backup's principal needs Describe on the cluster)")
        try:
            # Without a list of users, one future of every user's description.
            described = admin.describe_user_scram_credentials(request_timeout=METADATA_TIMEOUT_S).result()
            users: tuple[ScramUser, ...] | None = tuple(
                ScramUser(user, info.mechanism.name.replace("_", "-"), info.iterations)
                for user, description in described.items() for info in description.scram_credential_infos)
        except KafkaException as exc:
            users = None
            if _code(exc) == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                warnings.append(f"SCRAM users not saved: {_reason(exc)} (the backup's principal needs Describe on "
                                "the cluster)")
        return AccessState(acls, users), warnings


def target_access(settings: KafkaSettings) -> AccessState:
    """The target's ACL bindings and SCRAM users; a one-line error when it cannot be read."""
    state, warnings = read_access(settings)
    if state.acls is None or state.scram_users is None:
        raise TopicvaultError(f"cannot read the target's ACLs and SCRAM users: {'; '.join(warnings) or 'no answer'}: "
                              "restore --cluster-state needs a principal that may describe and alter them")
    return state


def _code(exc: KafkaException):
    return exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None


def _reason(exc: KafkaException) -> str:
    return exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)




def apply_access(settings: KafkaSettings, plan: AccessPlan) -> AccessApplied:
    """Create the planned bindings and SCRAM users (the broker salts each password itself)."""
    with admin_client(settings) as admin:
        if plan.create_acls:
            for binding, future in admin.create_acls([binding_of(a) for a in plan.create_acls],
                                                     request_timeout=METADATA_TIMEOUT_S).items():
                try:
                    future.result()
                except KafkaException as exc:
                    raise TopicvaultError(f"creating ACL {acl_of(binding).describe()} on the target failed: "
                                          f"{_reason(exc)}") from None
        if plan.create_users:
            upserts = [UserScramCredentialUpsertion(u.name, ScramCredentialInfo(ScramMechanism[u.mechanism.replace('-', '_')], u.iterations),
                                                    plan.passwords[u.name].encode()) for u in plan.create_users]
            for user, future in admin.alter_user_scram_credentials(upserts).items():
                try:
                    future.result(METADATA_TIMEOUT_S)
                except KafkaException as exc:
                    raise TopicvaultError(f"creating SCRAM user {user} on the target failed: {_reason(exc)}") from None
        return AccessApplied(len(plan.create_acls), tuple(sorted({u.name for u in plan.create_users})))

