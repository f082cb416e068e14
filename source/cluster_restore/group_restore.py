"""Consumer-group offsets after a restore: translate the saved ones through the offset map, commit.

A restore with --until TIME takes each group's snapshot read at or before TIME (the backup
keeps them over time), so data and group positions are of one moment.

A saved committed offset is the next record the group would have read. Through the map of
the finished restore it becomes the target offset of that same record (or the partition's
restored end when that record was not restored), so the group resumes exactly there.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.archive.checkpoints import load_state
from ...core.cluster.cluster_admin import check_group_inactive, commit_group_offsets
from ...core.errors import TopicvaultError
from ..restore.offset_map import load_offset_maps
from ..restore.restore_job import RestoreJob, RestorePlan
from ..restore.restore_plan import check_named_groups
from ..restore.restore_state import load_restore_state


@dataclass(frozen=True)
class GroupOffset:
    """One translated committed offset."""

    group: str
    source_topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_offset: int


def translate_groups(job: RestoreJob, restore_id: str, only: list[str] | None = None) -> list[GroupOffset]:
    """The saved group offsets of the restored topics, translated to the target of `restore_id`."""
    records = job.restore_records()
    restore_state = load_restore_state(records, restore_id)
    if restore_state is None:
        raise TopicvaultError(f"no restore {restore_id!r} of {job.store_uri} in {records.state.uri}: run the restore "
                              "first (or pass the --state it used)")
    maps = load_offset_maps(records, restore_id)
    state = load_state(records.archive, job.keyring())
    # One point in time for data and groups: a restore --until TIME gets each group's position at TIME.
    until_ms = restore_state.selection.get("until_ms")
    saved = state.groups_at(until_ms)
    check_named_groups(only, saved, until_ms)
    translated = []
    for group in sorted(only or saved):
        for source_topic, offsets in sorted(saved[group]["offsets"].items()):
            target_topic = restore_state.topic_map.get(source_topic)
            if target_topic is None:
                continue
            for partition_text, source_offset in sorted(offsets.items(), key=lambda item: int(item[0])):
                partition = int(partition_text)
                offset_map = maps.get((source_topic, partition))
                if offset_map is not None:
                    target_offset = offset_map.translate(source_offset)
                else:  # nothing of this partition was selected: the group starts where the restore would have
                    target_offset = restore_state.start_offsets.get(f"{target_topic}:{partition}", 0)
                translated.append(GroupOffset(group, source_topic, partition, source_offset, target_topic, target_offset))
    return translated


def restore_groups(job: RestoreJob, restore_id: str, only: list[str] | None = None) -> list[GroupOffset]:
    """Commit the translated offsets of each saved group on the target; active groups are refused first."""
    translated = translate_groups(job, restore_id, only)
    groups = sorted({t.group for t in translated})
    for group in groups:
        check_group_inactive(job.kafka, group)
    for group in groups:
        commit_group_offsets(
            job.kafka,
            group,
            {(t.target_topic, t.partition): t.target_offset for t in translated if t.group == group},
        )
    return translated


def restore_planned_groups(job: RestoreJob, plan: RestorePlan) -> list[GroupOffset] | None:
    """After a restore with --groups: commit the translated offsets of the groups its plan names
    (every saved group when it names none); None when the plan has no --groups."""
    if plan.groups is None:
        return None
    return restore_groups(job, plan.restore_id, list(plan.groups) or None)
