"""The restore job: plan from commit records, one Spark task per topic-partition, resumable."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..core.commits import BackupState, ObjectEntry, load_state
from ..core.errors import TopicvaultError
from ..core.kafka import KafkaSettings, create_topics, list_topic_partitions, metadata_consumer, watermarks
from ..core.spark import run_tasks
from ..core.store import open_store
from .kafka_writer import count_records, partition_end, produce_partition
from .object_reader import objects_until, read_partition, until_prefix
from .restore_state import RestoreState, check_same_restore, load_restore_state, save_restore_state


@dataclass(frozen=True)
class RestoreTask:
    """One source topic-partition restored to the same partition number of its target topic."""

    source_topic: str
    partition: int
    target_topic: str
    target_start: int
    objects: tuple[ObjectEntry, ...]
    until_ms: int | None = None

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)


@dataclass(frozen=True)
class RestoreJob:
    """Plain picklable settings every restore task needs."""

    kafka: KafkaSettings
    store_uri: str
    store_options: tuple[tuple[str, str], ...] = ()

    def open_store(self):
        """The object store of the backup location."""
        return open_store(self.store_uri, dict(self.store_options))


@dataclass(frozen=True)
class TaskResult:
    """What one restore task found already written and what it produced."""

    target_topic: str
    partition: int
    already_present: int
    produced: int
    bytes: int
    timestamps_replaced: int


@dataclass
class RestorePlan:
    """The tasks of a restore and the topics it will create."""

    restore_id: str
    tasks: list[RestoreTask]
    topic_map: dict[str, str]
    topics_to_create: dict[str, int]
    resumed: bool
    notes: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks)


@dataclass
class RestoreResult:
    """What a restore run did."""

    plan: RestorePlan
    results: list[TaskResult]
    elapsed_s: float

    @property
    def produced(self) -> int:
        return sum(r.produced for r in self.results)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.results)

    @property
    def timestamps_replaced(self) -> int:
        return sum(r.timestamps_replaced for r in self.results)


def restore_task(job: RestoreJob, task: RestoreTask) -> TaskResult:
    """Restore one partition (runs in a Spark worker; safe to run again at any point)."""
    present = count_records(job.kafka, task.target_topic, task.partition, task.target_start)
    if present > task.records:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start}, "
            f"more than the {task.records} this restore writes: another producer wrote to it; "
            "restore into a new topic"
        )
    produced = produce_partition(
        job.kafka,
        task.target_topic,
        task.partition,
        until_prefix(read_partition(job.open_store(), list(task.objects), skip=present), task.until_ms),
    )
    return TaskResult(
        task.target_topic, task.partition, present, produced.records, produced.bytes, produced.timestamps_replaced
    )


def parse_renames(pairs: list[str]) -> dict[str, str]:
    """Parse `OLD=NEW` pairs."""
    renames = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise TopicvaultError(f"bad --rename {pair!r}: write it as OLD=NEW")
        renames[old] = new
    return renames


def _select(state: BackupState, topics: list[str], uri: str) -> list[str]:
    available = sorted({topic for topic, _ in state.partitions})
    if not available:
        raise TopicvaultError(f"no backup at {uri}: no commit records under _topicvault/commits/; check the URI")
    for topic in topics:
        if topic not in available:
            raise TopicvaultError(f"topic {topic!r} is not in the backup at {uri}; it holds: {', '.join(available)}")
    return topics or available


def plan_restore(
    job: RestoreJob,
    topics: list[str],
    renames: dict[str, str],
    restore_id: str | None,
    allow_nonempty: bool = False,
    create_missing: bool = True,
    until_ms: int | None = None,
) -> RestorePlan:
    """Plan a restore; on a first start this also records where each target partition stands."""
    store = job.open_store()
    state = load_state(store)
    selected = _select(state, topics, job.store_uri)
    unknown = set(renames) - set(selected)
    if unknown:
        raise TopicvaultError(f"--rename names topics not being restored: {', '.join(sorted(unknown))}")
    topic_map = {t: renames.get(t, t) for t in selected}
    partitions_needed = {
        topic_map[t]: max(
            int(state.topics.get(t, {}).get("partitions", 0)),
            1 + max(p for (tt, p) in state.partitions if tt == t),
        )
        for t in selected
    }
    existing = list_topic_partitions(job.kafka)
    for target, needed in partitions_needed.items():
        if target in existing and existing[target] < needed:
            raise TopicvaultError(
                f"target topic {target!r} has {existing[target]} partitions but the backup has {needed}: "
                "add partitions to it or restore under another name with --rename"
            )
    to_create = {t: n for t, n in partitions_needed.items() if t not in existing}
    if to_create and not create_missing:
        raise TopicvaultError(f"target topics missing: {', '.join(sorted(to_create))}: create them or drop --no-create-topics")

    _check_until(state, selected, until_ms)
    restore_id = restore_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    saved = load_restore_state(store, restore_id)
    if saved is not None:
        check_same_restore(saved, job.kafka.bootstrap_servers, topic_map)
        starts = saved.start_offsets
    else:
        starts = _target_starts(job.kafka, partitions_needed, existing, allow_nonempty)
    tasks = [
        RestoreTask(source, partition, topic_map[source], starts.get(f"{topic_map[source]}:{partition}", 0),
                    tuple(objects_until(ps.objects, until_ms)), until_ms)
        for (source, partition), ps in sorted(state.partitions.items())
        if source in topic_map and ps.objects
    ]
    return RestorePlan(restore_id, tasks, topic_map, to_create, resumed=saved is not None)


def parse_until(text: str) -> int:
    """`--until` as Kafka milliseconds: epoch ms, or ISO-8601 (UTC unless it names a zone)."""
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise TopicvaultError(f"bad --until {text!r}: give ISO-8601 (2026-11-22T07:00:00Z) or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _check_until(state: BackupState, topics: list[str], until_ms: int | None) -> None:
    if until_ms is None:
        return
    if until_ms > time.time() * 1000 + 60_000:
        raise TopicvaultError(f"--until {_iso(until_ms)} is in the future: give a time at or before now")
    objects = [o for (t, _), ps in state.partitions.items() if t in topics for o in ps.objects]
    earliest = min((o.min_timestamp_ms for o in objects), default=None)
    if earliest is not None and until_ms < earliest:
        raise TopicvaultError(
            f"--until {_iso(until_ms)} is before the backed-up data (earliest record {_iso(earliest)}): nothing to restore"
        )


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _target_starts(
    kafka: KafkaSettings, partitions_needed: dict[str, int], existing: dict[str, int], allow_nonempty: bool
) -> dict[str, int]:
    starts: dict[str, int] = {}
    consumer = metadata_consumer(kafka, **{"isolation.level": "read_uncommitted"})
    try:
        for topic, count in partitions_needed.items():
            for partition in range(count):
                if topic not in existing:
                    starts[f"{topic}:{partition}"] = 0
                    continue
                low, high = watermarks(consumer, topic, partition)
                if high > low and not allow_nonempty:
                    raise TopicvaultError(
                        f"target topic {topic!r} already holds records (partition {partition}): restore under "
                        "another name with --rename, or pass --allow-nonempty to append after them"
                    )
                starts[f"{topic}:{partition}"] = partition_end(kafka, topic, partition) if high > low else high
    finally:
        consumer.close()
    return starts


def start_restore(job: RestoreJob, plan: RestorePlan) -> None:
    """Create missing topics and save the restore's state (first start only)."""
    create_topics(job.kafka, plan.topics_to_create)
    if not plan.resumed:
        starts = {f"{t.target_topic}:{t.partition}": t.target_start for t in plan.tasks}
        save_restore_state(
            job.open_store(), RestoreState(plan.restore_id, job.kafka.bootstrap_servers, plan.topic_map, starts)
        )


def run_restore(spark, job: RestoreJob, plan: RestorePlan) -> RestoreResult:
    """Create topics, save state, produce every partition; resumable with the same restore id."""
    started = time.monotonic()
    start_restore(job, plan)
    results = run_tasks(spark, lambda task: restore_task(job, task), plan.tasks)
    return RestoreResult(plan, results, time.monotonic() - started)
