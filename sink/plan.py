"""Backup planning on the driver: which offset ranges to read, from plain data only."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from ..core.archive.commits import BackupState, ObjectEntry, PartitionRange, check_topic_ids
from ..core.cluster.cluster_access import changed_access
from ..core.errors import TopicvaultError
from ..core.text import iso, plural
from ..formats.saved_registry import changed_registry
from .kafka_reader import OffsetRange

DEFAULT_RECORDS_PER_TASK = 1_000_000


@dataclass(frozen=True)
class PartitionPlan:
    """What one backup run covers of one topic-partition: offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
    low_watermark: int

    @property
    def records_at_most(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class BackupPlan:
    """Partitions to back up, the tasks that read them, and what was noticed on the way (built
    whole by plan_backup)."""

    partitions: list[PartitionPlan]
    tasks: list[OffsetRange]
    topics: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    topic_settings: dict[str, dict] = field(default_factory=dict)  # topic -> TopicSettings.to_json()
    groups: dict[str, dict] | None = None  # see CommitRecord.groups
    state_changed: bool = False  # topic settings or group offsets differ from the last commit
    topic_ids: dict[str, str] = field(default_factory=dict)  # topic -> Kafka topic ID when planned
    lost: list[PartitionRange] = field(default_factory=list)  # offsets retention deleted before they were read
    records_per_task: int = DEFAULT_RECORDS_PER_TASK  # at most this many offsets in one Spark task
    access: dict | None = None  # the cluster's ACLs and SCRAM users (core.cluster.cluster_access.AccessState.to_json); None: not read
    # The schema registry (formats.saved_registry's saved form) when it differs from the saved one; None: not saved.
    schema_registry: dict | None = None

    @property
    def records(self) -> int:
        """Records the run reads at most (offsets; markers and compacted gaps make it fewer)."""
        return sum(p.records_at_most for p in self.partitions)

    @property
    def stored_bytes(self) -> None:
        """A backup cannot know the bytes it reads before it reads them (core.executor)."""
        return None

    @property
    def has_work(self) -> bool:
        return bool(self.tasks)

    def task_groups(self, cores: int) -> list[list[OffsetRange]]:
        """The ranges each Spark task reads through one consumer (see group_ranges)."""
        return group_ranges(self.tasks, cores, self.records_per_task)

    @property
    def needs_commit(self) -> bool:
        """Records to back up, offsets lost to record, or cluster state worth saving when no record is new."""
        return self.has_work or self.state_changed or bool(self.lost)


@dataclass(frozen=True)
class ClusterRead:
    """What a backup run read from the cluster before planning (sink.backup.plan_run reads it).

    `offsets` maps (topic, partition) to its (low, high) watermarks, taken once at the start.
    `topic_ids` (topic -> Kafka topic ID) must match the IDs the location's commits recorded.
    `topic_settings` (topic -> TopicSettings.to_json()), `groups` (CommitRecord.groups; None: not
    read) and `access` (AccessState.to_json; None: not read) are saved by the commit when they
    differ from the state; `warnings` are what was noticed while they were read. `log_ends` (the
    high watermarks, read_uncommitted) tell where an open transaction holds a partition back;
    `held_since` the timestamp (ms) of the first record it holds back, where that was read."""

    topics: dict[str, int]  # topic -> partitions
    offsets: dict[tuple[str, int], tuple[int, int]]
    topic_ids: Mapping[str, str] | None = None
    topic_settings: Mapping[str, dict] | None = None
    groups: dict[str, dict] | None = None
    warnings: list[str] | None = None
    log_ends: Mapping[tuple[str, int], int] | None = None
    access: dict | None = None
    held_since: Mapping[tuple[str, int], int] | None = None
    schema_registry: dict | None = None  # formats.saved_registry's saved form; None: not read


def plan_backup(cluster: ClusterRead, state: BackupState, records_per_task: int = DEFAULT_RECORDS_PER_TASK,
                location: str = "this location") -> BackupPlan:
    """Plan the ranges after each partition's committed end up to the snapshot high watermark.

    Records produced after the cluster was read are left for the next run. Offsets between the
    committed end and a low watermark above it were deleted by retention unread: the plan records
    them as lost, inside the partition's range, so the commit keeps that fact for ever. An open
    transaction that holds a partition back is warned about (see _held_back).
    """
    if records_per_task < 1:
        raise TopicvaultError("--records-per-task must be positive")
    topics, offsets, log_ends = cluster.topics, cluster.offsets, cluster.log_ends
    groups, access = cluster.groups, cluster.access
    check_topic_ids(state.topic_ids, cluster.topic_ids or {}, location)
    partitions: list[PartitionPlan] = []
    tasks: list[OffsetRange] = []
    warnings = list(cluster.warnings or [])
    lost: list[PartitionRange] = []
    for (topic, partition), (low, high) in sorted(offsets.items()):
        committed = state.end_offset(topic, partition)
        if committed is not None and committed > high:
            # Topic ids matched above (where recorded): the same topic's log now ends below the archive.
            raise TopicvaultError(
                f"{topic}[{partition}] ends at offset {high} but this location backed it up to offset {committed}: "
                f"offsets {high}..{committed - 1} are gone from the log and some below them may have been rewritten: "
                "the log was truncated (an unclean leader election) or the topic deleted and re-created; back up "
                "to a new location (this one keeps what was backed up)"
            )
        start = low if committed is None else committed
        if committed is not None and committed < low:
            lost.append(PartitionRange(topic, partition, committed, low))
            warnings.append(
                f"{topic}[{partition}]: offsets {committed}..{low - 1} were deleted by retention before "
                "this backup could read them; recorded as lost"
            )
        held = _held_back(topic, partition, committed, high, (log_ends or {}).get((topic, partition), high),
                          (cluster.held_since or {}).get((topic, partition)))
        warnings.extend(held)
        read_from = max(start, low)
        partitions.append(PartitionPlan(topic, partition, start, high, low))
        ranges = split_range(topic, partition, read_from, high, records_per_task)
        last = state.last_records.get((topic, partition))
        if ranges and last is not None and read_from == committed and low <= last[0] < committed:
            # The read continues the archived history: it first finds the archive's last record
            # again, with its leader epoch (see OffsetRange.check), while retention has not deleted it.
            ranges[0] = replace(ranges[0], check=last)
        tasks.extend(ranges)
    topic_settings = dict(cluster.topic_settings or {})
    registry = changed_registry(state.registry_at(None), cluster.schema_registry)
    return BackupPlan(partitions=partitions, tasks=tasks, topics=dict(topics), warnings=warnings,
                      topic_settings=topic_settings, groups=groups,
                      state_changed=_state_changed(state, topics, topic_settings, groups)
                      or changed_access(state.access, access) is not None or registry is not None,
                      topic_ids=dict(cluster.topic_ids or {}), lost=lost, records_per_task=records_per_task, access=access,
                      schema_registry=registry)


def _state_changed(
    state: BackupState, topics: Mapping[str, int], topic_settings: Mapping[str, dict], groups: dict[str, dict] | None,
) -> bool:
    """Whether topic settings or group offsets differ from what the location's commits saved."""
    if any(state.topics.get(t) != s for t, s in topic_settings.items()):
        return True
    if groups is None:
        return False
    saved = {
        (g, t): offsets
        for g, snapshot in state.groups.items()
        for t, offsets in snapshot["offsets"].items()
        if t in topics
    }
    now = {(g, t): offsets for g, snapshot in groups.items() for t, offsets in snapshot["offsets"].items()}
    return saved != now


def split_range(topic: str, partition: int, start: int, end: int, max_records: int) -> list[OffsetRange]:
    """Offsets [start, end) of one partition as consecutive ranges of at most `max_records` offsets
    (none when the range is empty): the unit a backup task reads and a retry repeats."""
    return [OffsetRange(topic, partition, first, min(first + max_records, end))
            for first in range(start, end, max_records)]


def group_ranges(ranges: list[OffsetRange], cores: int, max_records: int) -> list[list[OffsetRange]]:
    """Pack offset ranges into Spark tasks: about one per core, none over `max_records` offsets.

    Many small partitions then cost a few tasks and consumers instead of one each, while a big
    partition's ranges (each up to `max_records`) stay tasks of their own and keep their
    parallelism. No task gets two ranges of one partition (one consumer reads each partition
    once). Ranges are placed largest first on the least loaded task; deterministic.
    """
    if not ranges:
        return []
    total = sum(r.end - r.start for r in ranges)
    wanted = min(len(ranges), max(cores, 1, -(-total // max_records)))
    groups: list[list[OffsetRange]] = [[] for _ in range(wanted)]
    loads = [0] * wanted
    partitions: list[set[tuple[str, int]]] = [set() for _ in range(wanted)]
    for r in sorted(ranges, key=lambda r: (-(r.end - r.start), r.topic, r.partition, r.start)):
        size = r.end - r.start
        fits = [i for i in range(len(groups))
                if (not groups[i] or loads[i] + size <= max_records) and (r.topic, r.partition) not in partitions[i]]
        if fits:
            chosen = min(fits, key=lambda i: (loads[i], i))
        else:
            groups.append([])
            loads.append(0)
            partitions.append(set())
            chosen = len(groups) - 1
        groups[chosen].append(r)
        loads[chosen] += size
        partitions[chosen].add((r.topic, r.partition))
    return [sorted(group, key=lambda r: (r.topic, r.partition, r.start)) for group in groups if group]


@dataclass(frozen=True)
class TaskResult:
    """What one backup task did: the objects it wrote and where its read really stopped."""

    task: OffsetRange
    end: int  # the offset after the last one read; task.end when the whole range was read
    objects: list[ObjectEntry]
    last_record: tuple[int, int] | None = None  # (offset, leader epoch) of the last record read

    @property
    def short(self) -> bool:
        return self.end < self.task.end


@dataclass(frozen=True)
class ReadExtent:
    """What a run may commit: per partition the range really read, its objects, and what stopped short."""

    ranges: list[PartitionRange]
    objects: list[ObjectEntry]
    warnings: list[str]
    # "topic:partition" -> (offset, leader epoch) of the last record its range read, where known.
    last_records: dict[str, tuple[int, int]] = field(default_factory=dict)


def _held_back(topic: str, partition: int, committed: int | None, stable_end: int, log_end: int,
               since_ms: int | None = None) -> list[str]:
    """A warning when an open transaction holds the partition back: this run stops short of the log's end.

    read_committed reads stop at the last stable offset (`stable_end`), before the first record
    of the oldest open transaction (its time: `since_ms`, where read). Transactions usually end
    within seconds, and the next run reads on, but the operator must know that this backup ends
    before the newest records (issue #50 item 12). One that stays open (a producer that died
    mid-transaction, until transaction.timeout.ms; a hanging transaction, KIP-890) holds back
    everything after it while the log grows (`log_end`), and retention may delete those records
    before any backup reads them: a run whose stable offset has not moved since the last backup
    says so, and what to do.
    """
    if log_end <= stable_end:
        return []
    waiting = f"offsets {stable_end}..{log_end - 1} ({plural(log_end - stable_end, 'offset')})"
    since = "" if since_ms is None else f" that began at {iso(since_ms)} (its first record's time)"
    if committed == stable_end:
        return [f"{topic}[{partition}]: {waiting} wait behind an open transaction{since} (the last stable offset "
                "has not moved since the last backup): they are backed up once it ends; if it never does (a hanging "
                "transaction), abort it (kafka-transactions.sh) before retention deletes them"]
    return [f"{topic}[{partition}]: this backup ends at offset {stable_end}, before the log's end: {waiting} wait "
            f"behind an open transaction{since}; a backup after it commits or aborts takes them"]


def read_extent(partitions: list[PartitionPlan], results: list[TaskResult]) -> ReadExtent:
    """The ranges a run read, from its tasks' real ends (not the planned ones).

    A partition's range ends at the end of its contiguous read tasks: a task that stopped
    short (partition EOF below the planned end, e.g. a high watermark reported low after a
    leader change; or the next offset deleted by retention while it read) ends it there, and later tasks of that partition are left uncommitted, so
    no unread offset is ever committed. The next run continues from that end. Offsets before
    the low watermark (lost to retention) belong to the range; the plan records them as lost.
    """
    by_partition: dict[tuple[str, int], list[TaskResult]] = {}
    for result in results:
        by_partition.setdefault((result.task.topic, result.task.partition), []).append(result)
    ranges: list[PartitionRange] = []
    objects: list[ObjectEntry] = []
    warnings: list[str] = []
    last_records: dict[str, tuple[int, int]] = {}
    for p in partitions:
        end = max(p.start, p.low_watermark)  # where the first task started reading
        last = None
        for result in sorted(by_partition.get((p.topic, p.partition), []), key=lambda r: r.task.start):
            if result.task.start != end:
                break  # after a short task: these offsets follow a gap nobody read
            end, last = result.end, result.last_record or last
            if result.short:
                break
        if last is not None:
            last_records[f"{p.topic}:{p.partition}"] = last
        if end < p.end and by_partition.get((p.topic, p.partition)):
            warnings.append(
                f"{p.topic}[{p.partition}]: the broker stopped serving the partition at offset {end}, below the "
                f"{p.end} it reported when this run started (retention deleted the offsets being read, or a leader "
                f"change): committed up to {end}; the next backup continues from there and records what retention "
                "deleted as lost"
            )
        objects.extend(o for r in by_partition.get((p.topic, p.partition), []) for o in r.objects if o.last_offset < end)
        if end > p.start:
            ranges.append(PartitionRange(p.topic, p.partition, p.start, end))
    return ReadExtent(ranges, sorted(objects, key=lambda o: (o.topic, o.partition, o.first_offset)), warnings,
                      last_records)
