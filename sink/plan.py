"""Backup planning on the driver: which offset ranges to read, from plain data only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..core.commits import BackupState, check_topic_ids
from ..core.errors import TopicvaultError
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


@dataclass
class BackupPlan:
    """Partitions to back up, the tasks that read them, and what was noticed on the way."""

    partitions: list[PartitionPlan]
    tasks: list[OffsetRange]
    topics: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    topic_settings: dict[str, dict] = field(default_factory=dict)  # topic -> TopicSettings.to_json()
    groups: dict[str, dict] | None = None  # see CommitRecord.groups
    state_changed: bool = False  # topic settings or group offsets differ from the last commit
    topic_ids: dict[str, str] = field(default_factory=dict)  # topic -> Kafka topic ID when planned

    @property
    def has_work(self) -> bool:
        return bool(self.tasks)

    @property
    def needs_commit(self) -> bool:
        """Records to back up, or cluster state worth saving even when no record is new."""
        return self.has_work or self.state_changed


def plan_backup(
    topics: dict[str, int],
    offsets: dict[tuple[str, int], tuple[int, int]],
    state: BackupState,
    records_per_task: int = DEFAULT_RECORDS_PER_TASK,
    topic_ids: Mapping[str, str] | None = None,
    location: str = "this location",
) -> BackupPlan:
    """Plan the ranges after each partition's committed end up to the snapshot high watermark.

    `offsets` maps (topic, partition) to its (low, high) watermarks, taken once at the start;
    records produced after the snapshot are left for the next run. `topic_ids` (topic -> Kafka
    topic ID) must match the IDs the location's commits recorded.
    """
    if records_per_task < 1:
        raise TopicvaultError("--records-per-task must be positive")
    check_topic_ids(state.topic_ids, topic_ids or {}, location)
    partitions: list[PartitionPlan] = []
    tasks: list[OffsetRange] = []
    warnings: list[str] = []
    for (topic, partition), (low, high) in sorted(offsets.items()):
        committed = state.end_offset(topic, partition)
        if committed is not None and committed > high:
            raise TopicvaultError(
                f"{topic}[{partition}] ends at offset {high} but this location already holds it up to "
                f"{committed}: the topic was deleted or recreated; back up to a new location"
            )
        start = low if committed is None else committed
        if committed is not None and committed < low:
            warnings.append(
                f"{topic}[{partition}]: offsets {committed}..{low - 1} were deleted by retention before "
                "this backup could read them"
            )
        read_from = max(start, low)
        partitions.append(PartitionPlan(topic, partition, start, high, low))
        for chunk_start in range(read_from, high, records_per_task):
            tasks.append(OffsetRange(topic, partition, chunk_start, min(chunk_start + records_per_task, high)))
    return BackupPlan(partitions=partitions, tasks=tasks, topics=dict(topics), warnings=warnings,
                      topic_ids=dict(topic_ids or {}))
