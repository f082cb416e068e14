"""The restore job: plan from commit records, one Spark task per topic-partition, resumable."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from ..core.cluster import TopicSettings, apply_topic_configs
from ..core.commits import BackupState, ObjectEntry, load_state
from ..core.errors import TopicvaultError
from ..core.kafka import (
    KafkaSettings,
    broker_count,
    create_topics,
    list_topic_partitions,
    metadata_consumer,
    watermarks,
)
from ..core.progress import counted
from ..core.spark import run_tasks
from ..core.store import open_store
from ..formats.peers import PeerOptions
from .kafka_writer import ProduceResult, count_records, partition_ends, produce_streams, target_offsets
from .object_reader import read_partition
from .offset_map import OffsetMap, recording, save_offset_maps
from .peer_layout import keeps, peer_state, read_peer_partition, resolve_layout
from .restore_state import RestoreState, check_same_restore, load_restore_state, save_restore_state
from .selection import Selection, skip_records


@dataclass(frozen=True)
class RestoreTask:
    """One source topic-partition restored to the same partition number of its target topic."""

    source_topic: str
    partition: int
    target_topic: str
    target_start: int
    objects: tuple[ObjectEntry, ...]
    selection: Selection = Selection()

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)

    @property
    def target(self) -> tuple[str, int]:
        """The (topic, partition) written to."""
        return self.target_topic, self.partition


@dataclass(frozen=True)
class RestoreJob:
    """Plain picklable settings every restore task needs."""

    kafka: KafkaSettings
    store_uri: str
    store_options: tuple[tuple[str, str], ...] = ()
    progress_dir: str | None = None  # see core.progress
    layout: str = "topicvault"  # or a peer layout (source.peer_layout); plan_restore resolves "auto"
    key_template: str | None = None  # a peer's file-name template, when not its default
    peer_options: PeerOptions = PeerOptions()

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
    offset_map: OffsetMap


@dataclass
class RestorePlan:
    """The tasks of a restore and the topics it will create."""

    restore_id: str
    tasks: list[RestoreTask]
    topic_map: dict[str, str]
    topics_to_create: dict[str, int]
    resumed: bool
    notes: list[str] = field(default_factory=list)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)  # target topic -> configs to create it with
    replication: dict[str, int] = field(default_factory=dict)  # target topic -> replication factor
    selection: Selection = Selection()
    layout: str = "topicvault"

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


def restore_group(job: RestoreJob, tasks: list[RestoreTask]) -> list[TaskResult]:
    """Restore some partitions through one producer (runs in a Spark worker; safe to run again).

    Each partition's selected source records form a fixed sequence; its target partition holds
    a prefix of it after `target_start`, so each is counted and produced from there on.
    """
    # Records, not offsets: a broker may leave offset gaps after a failed attempt (tansu does),
    # and topics are created without their saved configs until the data is in (no compaction).
    present = count_records(job.kafka, {task.target: task.target_start for task in tasks})
    streams = [_stream(job, task, present[task.target]) for task in tasks]
    produced = produce_streams(job.kafka, [(*task.target, batches) for task, (_, batches) in zip(tasks, streams)])
    ends = partition_ends(job.kafka, [task.target for task in tasks])
    return [_finish(job, task, present[task.target], offset_map, result, ends[task.target])
            for task, (offset_map, _), result in zip(tasks, streams, produced)]


def _stream(job: RestoreJob, task: RestoreTask, present: int):
    if job.layout == "topicvault" and present > task.records:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start}, "
            f"more than the {task.records} this restore writes: another producer wrote to it; "
            "restore into a new topic"
        )
    offset_map = OffsetMap(task.source_topic, task.partition, task.target_topic, task.target_start)
    if job.layout == "topicvault":
        source = read_partition(job.open_store(), list(task.objects))
    else:
        source = read_peer_partition(job.open_store(), job.layout, job.peer_options, list(task.objects))
    selected = task.selection.records(task.source_topic, task.partition, source)
    batches = counted(skip_records(recording(selected, offset_map), present), job.progress_dir,
                      f"{task.target_topic}-{task.partition}")
    return offset_map, batches


def _finish(job: RestoreJob, task: RestoreTask, present: int, offset_map: OffsetMap, produced: ProduceResult,
            end: int) -> TaskResult:
    if present > offset_map.records:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start} but this "
            f"restore selects {offset_map.records}: another producer wrote to it; restore into a new topic"
        )
    if end != offset_map.target_end:
        # Offsets with gaps (or another writer): map each record to where it really landed.
        landed = list(target_offsets(job.kafka, task.target_topic, task.partition, task.target_start))
        if len(landed) != offset_map.records:
            raise TopicvaultError(
                f"{task.target_topic}[{task.partition}] holds {len(landed)} records after offset {task.target_start}, "
                f"expected {offset_map.records}: another producer wrote to it during the restore; restore into a new topic"
            )
        offset_map = offset_map.landed_at(landed)
    return TaskResult(
        task.target_topic, task.partition, present, produced.records, produced.bytes, produced.timestamps_replaced,
        offset_map,
    )


def group_tasks(tasks: list[RestoreTask], groups: int) -> list[list[RestoreTask]]:
    """Split tasks into at most `groups` lists of about equal record counts (largest first)."""
    lists: list[list[RestoreTask]] = [[] for _ in range(max(1, min(groups, len(tasks))))]
    loads = [0] * len(lists)
    for task in sorted(tasks, key=lambda t: (-t.records, t.target_topic, t.partition)):
        lightest = loads.index(min(loads))
        lists[lightest].append(task)
        loads[lightest] += task.records
    return [sorted(group, key=lambda t: t.target) for group in lists if group]


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
    available = sorted({topic for topic, _ in state.partitions} | set(state.topics))
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
    selection: Selection = Selection(),
    apply_configs: bool = True,
) -> RestorePlan:
    """Plan a restore; on a first start this also records where each target partition stands."""
    store = job.open_store()
    layout = resolve_layout(store, job.layout, job.key_template)
    if layout == "topicvault":
        state, layout_notes = load_state(store), []
    else:
        state, ignored = peer_state(store, layout, job.key_template)
        layout_notes = [f"layout {layout}{' (detected)' if job.layout == 'auto' else ''}: {keeps(layout)}"]
        if ignored:
            layout_notes.append(f"{len(ignored)} objects are not named like {layout} objects and were left out, "
                                f"e.g. {ignored[0]}")
    selected = _select(state, topics, job.store_uri)
    unknown = set(renames) - set(selected)
    if unknown:
        raise TopicvaultError(f"--rename names topics not being restored: {', '.join(sorted(unknown))}")
    topic_map = {t: renames.get(t, t) for t in selected}
    saved_settings = {t: TopicSettings.from_json(state.topics.get(t, {})) for t in selected}
    partitions_needed = {
        topic_map[t]: max(saved_settings[t].partitions, 1 + max((p for (tt, p) in state.partitions if tt == t), default=0))
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

    _check_until(state, selected, selection.until_ms)
    restore_id = restore_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    saved = load_restore_state(store, restore_id)
    if saved is not None:
        check_same_restore(saved, job.kafka.bootstrap_servers, topic_map, selection.to_json())
        starts = saved.start_offsets
    else:
        starts = _target_starts(job.kafka, partitions_needed, existing, allow_nonempty)
    tasks = []
    for (source, partition), ps in sorted(state.partitions.items()):
        if source not in topic_map:
            continue
        # A peer object's offsets and times are known only once it is read: select records, not objects.
        objects = selection.objects(source, partition, ps.objects) if layout == "topicvault" else ps.objects
        if objects:
            target = topic_map[source]
            tasks.append(RestoreTask(source, partition, target, starts[f"{target}:{partition}"], tuple(objects), selection))
    lost_notes = [note for (source, _), ps in sorted(state.partitions.items()) if source in topic_map
                  for note in ps.lost_notes()]
    plan = RestorePlan(restore_id, tasks, topic_map, to_create, resumed=saved is not None, selection=selection,
                       notes=layout_notes + lost_notes, layout=layout)
    if saved is not None:
        plan.topic_configs = dict(saved.topic_configs)  # the topics were created by the first run
    elif to_create:
        earliest = {
            topic_map[t]: min((o.min_timestamp_ms for (tt, _), ps in state.partitions.items() if tt == t for o in ps.objects),
                              default=None)
            for t in selected
        }
        _plan_topic_settings(job.kafka, plan, {topic_map[t]: s for t, s in saved_settings.items()}, earliest, apply_configs)
    return plan


def _plan_topic_settings(
    kafka: KafkaSettings,
    plan: RestorePlan,
    settings: dict[str, TopicSettings],
    earliest_ms: dict[str, int | None],
    apply_configs: bool,
) -> None:
    """Configs and replication factor of the topics the restore creates, with notes on what changed."""
    brokers = broker_count(kafka)
    for target in plan.topics_to_create:
        saved = settings[target]
        if saved.replication_factor > brokers:
            plan.notes.append(
                f"{target}: replication factor {saved.replication_factor} capped to {brokers}, the brokers the target has"
            )
        plan.replication[target] = min(saved.replication_factor, brokers) if saved.replication_factor > 0 else -1
        if not saved.configs_reported:
            plan.notes.append(f"{target}: the source broker reported no topic configs; created with the target's defaults")
        elif apply_configs and saved.configs:
            plan.topic_configs[target] = saved.configs
            retention_ms = int(saved.configs.get("retention.ms", -1))
            oldest = earliest_ms.get(target)
            if retention_ms >= 0 and oldest is not None and oldest < time.time() * 1000 - retention_ms:
                plan.notes.append(
                    f"{target}: created with retention.ms={saved.configs['retention.ms']}; the broker deletes restored "
                    "records older than that soon after the restore (use --no-configs to keep them)"
                )


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
    holding: list[tuple[str, int]] = []
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
                starts[f"{topic}:{partition}"] = high
                if high > low:
                    holding.append((topic, partition))
    finally:
        consumer.close()
    for (topic, partition), end in partition_ends(kafka, holding).items():
        starts[f"{topic}:{partition}"] = end
    return starts


def start_restore(job: RestoreJob, plan: RestorePlan) -> None:
    """Create missing topics and save the restore's state (first start only)."""
    # Configs are applied after the data is in (see run_restore): compaction or retention acting
    # on a partition while it is restored would change what a resumed task counts.
    create_topics(job.kafka, plan.topics_to_create, replication_by_topic=plan.replication)
    if not plan.resumed:
        starts = {f"{t.target_topic}:{t.partition}": t.target_start for t in plan.tasks}
        save_restore_state(
            job.open_store(),
            RestoreState(plan.restore_id, job.kafka.bootstrap_servers, plan.topic_map, starts, plan.selection.to_json(),
                         plan.topic_configs),
        )


def run_restore(spark, job: RestoreJob, plan: RestorePlan) -> RestoreResult:
    """Create topics, save state, produce every partition; resumable with the same restore id."""
    started = time.monotonic()
    start_restore(job, plan)
    job = replace(job, layout=plan.layout)
    # One Spark task per core, each producing its partitions through one producer.
    groups = group_tasks(plan.tasks, spark.sparkContext.defaultParallelism)
    results = [r for group in run_tasks(spark, lambda tasks: restore_group(job, tasks), groups) for r in group]
    save_offset_maps(job.open_store(), plan.restore_id, [r.offset_map for r in results])
    apply_topic_configs(job.kafka, plan.topic_configs)
    return RestoreResult(plan, results, time.monotonic() - started)
