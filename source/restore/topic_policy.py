"""What a restore takes from the topic settings an archive holds.

An archive is input, not trusted state (docs/threat-model.md): whoever can write the bucket
can write any topic config into its commit records. A restore sets only configs that decide
which records a topic keeps and how it stores them (needed to get the topic back as it was),
within bounds that cannot hurt the target; durability, broker tuning and limits on producers
are the target cluster's own. Internal topics (the consumer offsets, Schema Registry's schemas,
Kafka Connect's connector configs under any of the names Connect images use, MirrorMaker 2's)
are restored only when named: writing them would hand the target's registry, Connect workers or
MirrorMaker whatever the archive holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

# Kafka's default max.message.bytes: a smaller saved limit would refuse records the target takes by default.
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
MIN_SEGMENT_BYTES = 2**20  # Kafka 4.0's own minimum
MIN_SEGMENT_MS = 600_000  # below 10 minutes a partition rolls (and keeps open) thousands of segments a day


def _integer(low: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return "not an integer"
        return None if number >= low else f"below {low}"
    return check


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"not one of {', '.join(allowed)}"
    return check


def _ratio(value: str) -> str | None:
    try:
        return None if 0.0 <= float(value) <= 1.0 else "not between 0 and 1"
    except ValueError:
        return "not a number"


# The configs a restore sets on a topic it created, once its data is in, each with its check.
RESTORED_CONFIGS: dict[str, Callable[[str], str | None]] = {
    "cleanup.policy": _one_of("delete", "compact", "compact,delete", "delete,compact"),
    "retention.ms": _integer(-1),  # a retention that deletes restored records is warned of (restore notes)
    "retention.bytes": _integer(-1),
    "delete.retention.ms": _integer(0),
    "min.compaction.lag.ms": _integer(0),
    "max.compaction.lag.ms": _integer(1),
    "min.cleanable.dirty.ratio": _ratio,
    "compression.type": _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    "compression.gzip.level": _integer(-1),
    "compression.lz4.level": _integer(1),
    "compression.zstd.level": _integer(-131072),
    "message.timestamp.type": _one_of("CreateTime", "LogAppendTime"),  # set only once the data is in
    "max.message.bytes": _integer(KAFKA_DEFAULT_MAX_MESSAGE_BYTES),
    "segment.bytes": _integer(MIN_SEGMENT_BYTES),
    "segment.ms": _integer(MIN_SEGMENT_MS),
    "segment.jitter.ms": _integer(0),
}

# Why some well-known configs are the target's own (anything else not listed above: not restored).
_TARGETS_OWN = {
    "unclean.leader.election.enable": "durability is the target's: it can lose acknowledged records",
    "min.insync.replicas": "durability is the target's",
    "leader.replication.throttled.replicas": "names the source cluster's brokers",
    "follower.replication.throttled.replicas": "names the source cluster's brokers",
    "message.timestamp.difference.max.ms": "a limit on producers: the target's",
    "message.timestamp.before.max.ms": "a limit on producers: the target's",
    "message.timestamp.after.max.ms": "a limit on producers: the target's",
    "flush.messages": "broker tuning: the target's",
    "flush.ms": "broker tuning: the target's",
    "preallocate": "broker tuning: the target's",
    "index.interval.bytes": "broker tuning: the target's",
    "segment.index.bytes": "broker tuning: the target's",
    "file.delete.delay.ms": "broker tuning: the target's",
    "remote.storage.enable": "tiered storage: the target's",
    "local.retention.ms": "tiered storage: the target's",
    "local.retention.bytes": "tiered storage: the target's",
}


@dataclass(frozen=True)
class ScreenedConfigs:
    """A topic's saved configs split into those a restore sets and those it leaves to the target."""

    applied: dict[str, str]
    skipped: dict[str, tuple[str, str]]  # name -> (saved value, why not set)

    def notes(self, topic: str) -> list[str]:
        """One line for what is set, one for what is not (none when there is nothing to say)."""
        lines = []
        if self.applied:
            lines.append(f"{topic}: saved configs set once the data is in: "
                         + ", ".join(f"{k}={v}" for k, v in sorted(self.applied.items())))
        if self.skipped:
            lines.append(f"{topic}: saved configs not set (the target's defaults stay): "
                         + ", ".join(f"{k}={v} ({why})" for k, (v, why) in sorted(self.skipped.items())))
        return lines


def screen_topic_configs(configs: Mapping[str, str]) -> ScreenedConfigs:
    """Split saved topic configs by RESTORED_CONFIGS: those on it and within its bounds are set."""
    applied: dict[str, str] = {}
    skipped: dict[str, tuple[str, str]] = {}
    for name, value in sorted(configs.items()):
        check = RESTORED_CONFIGS.get(name)
        if check is None:
            skipped[name] = (value, _TARGETS_OWN.get(name, "not a config a restore sets"))
        elif (problem := check(value.strip())) is not None:
            skipped[name] = (value, problem)
        else:
            applied[name] = value.strip()
    return ScreenedConfigs(applied, skipped)


# How Connect's config, offsets and status topics end, with whatever a second cluster or a migration
# appends after a separator (`connect-configs-v2`, `connect-offsets.prod`).
_CONNECT_SUFFIX = r"(configs?|offsets?|status(es)?)([._-].*)?"

# Whose a topic is, by its name (and, for Kafka Connect, its saved cleanup.policy), in the order
# asked; the first match names the owner in the restore's note. A pattern that also catches a
# user's topic costs a note and a --topic; one that misses a tool's topic hands the target's tool
# whatever the archive holds (a connector config runs code on Connect workers).
_OWNERS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(pattern, re.IGNORECASE), owner) for pattern, owner in (
    (r"__.*", "Kafka's own"),
    (r"_confluent.*", "Confluent Platform's"),
    (r".*_schemas", "Schema Registry's schemas topic"),
    (r"mm2-.*|.*\.checkpoints\.internal|(.*\.)?heartbeats", "MirrorMaker 2's"),
    (r".*\.internal", "an internal topic of a tool (MirrorMaker 2 and Kafka Streams name theirs *.internal)"),
    (rf".*connect.*{_CONNECT_SUFFIX}", "Kafka Connect's config, offsets or status topic, by its name"),
))
# Connect needs its config, offsets and status topics compacted: a compacted topic named like one is taken for one.
_CONNECT_LIKE = re.compile(rf".*{_CONNECT_SUFFIX}", re.IGNORECASE)


def internal_topic_owner(name: str, configs: Mapping[str, str] | None = None) -> str | None:
    """Whose internal topic `name` is (a phrase for the restore's note), or None for a user's topic.

    `configs`: the topic's saved configs; a compacted topic named like Connect's internal topics
    (`*configs`, `*offsets`, `*status`) counts as Connect's even without "connect" in its name.
    Record keys (`connector-…`, `task-…`, `commit-…`) are not looked at: a plan reads no objects.
    """
    for pattern, owner in _OWNERS:
        if pattern.fullmatch(name):
            return owner
    policy = (configs or {}).get("cleanup.policy", "")
    if "compact" in policy and _CONNECT_LIKE.fullmatch(name):
        return f"Kafka Connect's, by its name and cleanup.policy={policy}"
    return None


def is_internal_topic(name: str, configs: Mapping[str, str] | None = None) -> bool:
    """Whether a topic belongs to Kafka or a tool beside it: restored only when named (--topic)."""
    return internal_topic_owner(name, configs) is not None
