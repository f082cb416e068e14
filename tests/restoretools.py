"""Restores driven from a test: a warm standby on a thread of the test process, a backup made
in-process, the topic settings a restore must keep or refuse, and a topic's own configs."""

from __future__ import annotations

import functools
import threading

from clitools import wait_for
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafkatools import consume_all, exact, produce_records
from topicvault.core.cluster.cluster_admin import broker_configs, topic_overrides
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.sink.backup import BackupJob, plan_run, run_backup
from topicvault.source.restore.restore_job import RestoreJob
from topicvault.source.restore.standby import FollowRound, StandbyRequest, follow_restore


class Standby:
    """follow_restore in a thread of this process (sharing the test session's Spark), stopped by an event."""

    def __init__(self, spark, job: RestoreJob, request: StandbyRequest) -> None:
        self.rounds: list[FollowRound] = []
        self.waits: list[TopicvaultError] = []
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.summary = None

        def run() -> None:
            try:
                self.summary = follow_restore(spark, job, request, self.stop, self.rounds.append,
                                              on_wait=self.waits.append)
            except BaseException as exc:  # noqa: BLE001 — handed to the test thread
                self.failure = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait_rounds(self, count: int, timeout_s: float = 180) -> FollowRound:
        wait_for(lambda: len(self.rounds) >= count or self.failure is not None or not self.thread.is_alive(),
                 timeout_s, f"round {count}")
        if self.failure is not None:
            raise self.failure
        assert len(self.rounds) >= count, "the standby ended early"
        return self.rounds[count - 1]

    def finish(self, timeout_s: float = 180):
        self.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the standby did not stop"
        if self.failure is not None:
            raise self.failure
        return self.summary


def backup_now(spark, bootstrap: str, location: str, topic: str) -> None:
    job = BackupJob(KafkaSettings.of(bootstrap), location)
    backup_plan = plan_run(job, [topic])
    assert backup_plan.has_work
    run_backup(spark, job, backup_plan)


def backed_up(spark, bootstrap: str, location: str, topic: str, first: int, count: int) -> None:
    produce_records(bootstrap, topic, standby_records(topic, first, count))
    backup_now(spark, bootstrap, location, topic)


def same_as_source(bootstrap: str, topic: str, target: str) -> None:
    assert exact(consume_all(bootstrap, target)[0]) == exact(consume_all(bootstrap, topic)[0])


def overrides(bootstrap: str, topic: str, names) -> dict[str, str]:
    """The topic's values of `names` it has (real Kafka describes every config; tansu only those set)."""
    described = describe(bootstrap, topic)
    return {name: described[name] for name in names if name in described}


def describe(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's own configs. Real Kafka describes every config and marks the topic's own (source
    DYNAMIC_TOPIC_CONFIG); tansu describes only those set, marked as defaults, and no broker configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    future = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = list(future.values())[0].result(30)
    if describes_broker_configs(bootstrap):
        return topic_overrides(entries)
    return {name: entry.value for name, entry in entries.items()}


@functools.cache
def describes_broker_configs(bootstrap: str) -> bool:
    """Whether the broker describes its configs (real Kafka does, tansu does not)."""
    return bool(broker_configs(KafkaSettings.of(bootstrap)))


LOADING = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete",
           "message.timestamp.type": "CreateTime"}


HOSTILE_CONFIGS = {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact",
                   "unclean.leader.election.enable": "true", "min.insync.replicas": "1", "segment.ms": "1000",
                   "max.message.bytes": "1", "retention.ms": "-1", "follower.replication.throttled.replicas": "*"}


BASE = 1_700_000_000_000  # 2023: older than any retention the tests set


def standby_records(topic: str, first: int, count: int) -> list[Record]:
    """`count` records of partition 0 from source offset `first`, one millisecond apart from BASE + first
    (so an expiry time cuts between batches), with null keys, tombstones and duplicate headers."""
    return [Record(topic, 0, 0, None if i % 7 == 0 else b"k%d" % (i % 5), None if i % 11 == 0 else b"v%d" % i,
                   BASE + i, 0, (("h", b"%d" % i), ("h", None))) for i in range(first, first + count)]
