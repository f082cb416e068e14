"""Restore planning on the driver: the whole plan from facts gathered first (no store, Kafka or Spark).

A restore is planned in two steps, like a backup (sink/plan.py): restore.gather_facts reads what
the plan depends on (the archive's state, the restore's saved state, the target cluster's topics,
watermarks and configs) into a RestoreFacts, and build_restore_plan here decides everything from
those alone: which topics and partitions, where each target partition begins, which objects each
task reads, which holes stay out, which configs the created topics get, and every refusal. What
the plan says is then only executed (restore.run_restore).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Iterable

from ...core.archive.archive_keys import legacy_restore_prefix
from ...core.archive.commits import BackupState, ObjectEntry, PartitionState
from ...core.cluster.cluster_access import AccessPlan, AccessState, renamed_access_changes
from ...core.cluster.cluster_admin import LOADING_CONFIGS, TopicSettings
from ...core.errors import NoBackup, TopicvaultError
from ...core.text import iso
from ...formats.peers import NATIVE, Layout, layout_named
from ..cluster_restore.access_restore import AccessRequest, plan_cluster_access
from ..object_reader import SkippedObject
from .offset_map import OffsetMap
from .restore_state import RestoreState, check_same_restore
from .selection import Selection
from .topic_policy import internal_topic_owner, screen_topic_configs

Where = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class RestoreTask:
    """One source topic-partition restored to the same partition number of its target topic."""

    source_topic: str
    partition: int
    target_topic: str
    target_start: int
    objects: tuple[ObjectEntry, ...]
    selection: Selection = Selection()
    layout: str = NATIVE.name  # the archive's layout as plan_restore resolved it (never "auto")
    restore_id: str = ""  # where objects left out are recorded (offset_map.save_hole); "": not recorded
    # Objects earlier runs of this restore left out, within the selection: their offsets stay out.
    earlier_holes: tuple[SkippedObject, ...] = ()
    # An earlier run of this restore may have sent records to the target that no replica but the
    # leader holds yet (it was killed before they were acknowledged): see restore.restore_group.
    resumed: bool = False
    # A peer archive's rerun counted from the restore's start: the source offsets, as (first, count) runs in
    # target order, that the last finished run's offset map says are the target's first records. Records
    # that repeat cannot show an object added inside them since; their offsets can (restore.check_as_restored).
    restored_before: tuple[tuple[int, int], ...] = ()

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)

    @property
    def target(self) -> tuple[str, int]:
        """The (topic, partition) written to."""
        return self.target_topic, self.partition

    @property
    def archive_layout(self) -> Layout:
        """The layout its objects are in."""
        return layout_named(self.layout)


@dataclass(frozen=True)
class RestorePlan:
    """The tasks of a restore and the topics it will create, whole as build_restore_plan decided it
    (group checks and access included): nothing changes it afterwards."""

    restore_id: str
    tasks: list[RestoreTask]
    topic_map: dict[str, str]
    topics_to_create: dict[str, int]
    resumed: bool
    notes: list[str] = field(default_factory=list)
    # Every topic the restore creates -> the configs it gets once the data is in (maybe none).
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # The overrides those topics hold while data goes in (core.cluster.cluster_admin.cluster_loading_configs).
    loading: dict[str, str] = field(default_factory=lambda: dict(LOADING_CONFIGS))
    replication: dict[str, int] = field(default_factory=dict)  # target topic -> replication factor
    selection: Selection = Selection()
    layout: str = NATIVE.name
    # With continue_saved: the offset maps earlier runs of this restore saved; the tasks start after them.
    restored: dict[tuple[str, int], OffsetMap] = field(default_factory=dict)
    archive: BackupState = field(default_factory=BackupState)  # the archive's state this plan was made from
    # "target-topic:partition" -> where the restore began writing, for every target partition (not only
    # those with objects now: a resumed or followed restore finds objects in the others later).
    target_starts: dict[str, int] = field(default_factory=dict)
    # "source-topic:partition" -> where the archive started when the restore first planned the partition
    # (saved with its state); those first planned by this resumed run are in new_source_starts too.
    source_starts: dict[str, int] = field(default_factory=dict)
    new_source_starts: dict[str, int] = field(default_factory=dict)
    # restore --cluster-state: the ACLs and SCRAM users to create once the topics exist (source.cluster_restore.access_restore).
    access: AccessPlan | None = None
    # restore --groups: commit the translated offsets of these groups once the records are in (None: no
    # --groups; empty: every saved group).
    groups: tuple[str, ...] | None = None

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the objects the tasks read, as stored (compressed, encrypted)."""
        return sum(o.bytes for t in self.tasks for o in t.objects)

    @property
    def archive_layout(self) -> Layout:
        """The layout of the archive restored from."""
        return layout_named(self.layout)


@dataclass(frozen=True)
class RestoreRequest:
    """What to restore and how, as the user asked: the one argument plan_restore takes, whole."""

    topics: tuple[str, ...] = ()  # none: every topic of the archive, or those a resumed restore id began with
    renames: Mapping[str, str] = field(default_factory=dict)
    restore_id: str | None = None  # None: a new restore
    allow_nonempty: bool = False
    create_missing: bool = True
    selection: Selection = Selection()
    apply_configs: bool = True
    groups: bool = False  # --groups: commit translated consumer-group offsets once the records are in
    only_groups: tuple[str, ...] = ()  # with groups: these groups only (empty: every saved group)
    access: AccessRequest | None = None  # --cluster-state: ACLs and SCRAM users too
    # restore --follow: start each partition after the offset map earlier runs saved, instead of
    # counting from its first start (a round reads only objects it has not restored).
    continue_saved: bool = False
    # (key, size) of a peer archive's objects at the last round: objects new or rewritten since are
    # read again, even named at or before what was restored (their records after it are restored).
    peer_objects_seen: set[tuple[str, int]] | None = None
    # Every record earlier runs sent was acknowledged (a follow round after one that finished in this
    # process), so a resume need not wait for replicas to catch up before counting.
    earlier_writes_acknowledged: bool = False

    def __post_init__(self) -> None:
        if self.only_groups and not self.groups:
            raise TopicvaultError("--group works with --groups: add --groups")


@dataclass(frozen=True)
class TargetFacts:
    """What the target cluster held when the restore was planned."""

    bootstrap: str
    topics: Mapping[str, int]  # every topic on the cluster -> its partition count
    # (low, high) watermarks as written (read_uncommitted: an open transaction's records count) of
    # every partition of an existing target topic the restore writes.
    watermarks: Mapping[Where, tuple[int, int]] = field(default_factory=dict)
    ends: Mapping[Where, int] = field(default_factory=dict)  # true ends of non-empty ones (--allow-nonempty)
    brokers: int = 0  # read when topics are to be created (caps their replication factor)
    loading: Mapping[str, str] = field(default_factory=lambda: dict(LOADING_CONFIGS))  # cluster_loading_configs
    retention_ms: Mapping[str, int | None] = field(default_factory=dict)  # existing target topics' effective one
    default_retention_ms: int | None = None  # what a created topic without retention.ms gets
    retention_bytes: Mapping[str, int | None] = field(default_factory=dict)  # existing target topics' effective one
    default_retention_bytes: int | None = None  # what a created topic without retention.bytes gets
    # Topic id of each existing target topic a resumed restore's state says it created ("" where the
    # broker gives none): a different id is a topic deleted and created again since (_configs_of_created).
    topic_ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreFacts:
    """Everything a restore plan is decided from, read before anything is decided (restore.gather_facts)."""

    archive_uri: str
    layout: Layout
    archive: BackupState
    target: TargetFacts
    restore_id: str  # the one asked for, or a new one
    now_ms: int
    layout_notes: tuple[str, ...] = ()  # what the archive's layout keeps and what its listing left out
    saved: RestoreState | None = None  # the restore's saved state (None: a first start)
    state_uri: str = ""  # where restore states are kept
    legacy_state_planted: bool = False  # the archive holds a state for this id where older versions kept it
    saved_maps: Mapping[Where, OffsetMap] = field(default_factory=dict)  # read when continued or needed for starts
    saved_holes: Mapping[Where, list[SkippedObject]] = field(default_factory=dict)
    # Target topic -> restores from this archive that wrote into it (read for a non-empty target only).
    earlier_restores: Mapping[str, list[str]] = field(default_factory=dict)
    # restore --cluster-state: the target's ACLs and SCRAM users, and the passwords given for the saved users.
    target_access: AccessState | None = None
    scram_passwords: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RestoreTargets:
    """Which topics are restored where, and how many partitions each target needs."""

    topic_map: dict[str, str]  # source topic -> target topic
    settings: dict[str, TopicSettings]  # source topic -> its saved settings
    partitions: dict[str, int]  # target topic -> partitions needed
    to_create: dict[str, int]  # target topics missing on the cluster -> partitions
    notes: list[str]


def parse_renames(pairs: list[str]) -> dict[str, str]:
    """Parse `OLD=NEW` pairs; one topic renamed to two names is refused, not resolved by order."""
    renames: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise TopicvaultError(f"bad --rename {pair!r}: write it as OLD=NEW")
        if renames.get(old, new) != new:
            raise TopicvaultError(
                f"--rename names {old!r} twice ({old}={renames[old]}, {old}={new}): give one target per topic"
            )
        renames[old] = new
    return renames


def check_on_error(layout: Layout, on_error: str, uri: str) -> None:
    """Refuse --on-error skip for an archive whose objects' offsets are not known before they are read."""
    if on_error == "skip" and not layout.skip_supported:
        raise TopicvaultError(f"--on-error skip works with topicvault archives only; {uri} is a {layout.name} "
                              "archive: use --on-error stop (the default)")


def restore_targets(archive: BackupState, saved: RestoreState | None, request: RestoreRequest, uri: str,
                    cluster_topics: Mapping[str, int]) -> RestoreTargets:
    """The topics to restore and their targets (refusing what cannot be restored there)."""
    topics = list(request.topics)
    if not topics and saved is not None:
        # A rerun of a restore id follows the topics it began with, even if the archive has more now.
        topics = sorted(saved.topic_map)
    selected, notes = _select(archive, topics, request.renames, uri)
    unknown = set(request.renames) - set(selected)
    if unknown:
        raise TopicvaultError(f"--rename names topics not being restored: {', '.join(sorted(unknown))}")
    topic_map = {t: request.renames.get(t, t) for t in selected}
    check_distinct_targets(topic_map)
    settings = {t: TopicSettings.from_json(archive.topics.get(t, {})) for t in selected}
    needed = {
        topic_map[t]: max(settings[t].partitions, 1 + max((p for (tt, p) in archive.partitions if tt == t), default=0))
        for t in selected
    }
    for target, count in needed.items():
        if target in cluster_topics and cluster_topics[target] < count:
            raise TopicvaultError(
                f"target topic {target!r} has {cluster_topics[target]} partitions but the backup has {count}: "
                "add partitions to it or restore under another name with --rename"
            )
    to_create = {t: n for t, n in needed.items() if t not in cluster_topics}
    if to_create and not request.create_missing:
        raise TopicvaultError(f"target topics missing: {', '.join(sorted(to_create))}: create them or drop --no-create-topics")
    return RestoreTargets(topic_map, settings, needed, to_create, notes)


def check_distinct_targets(topic_map: dict[str, str]) -> None:
    """Refuse two source topics written into one target: their partitions would interleave."""
    sources_by_target: dict[str, list[str]] = {}
    for source, target in sorted(topic_map.items()):
        sources_by_target.setdefault(target, []).append(source)
    for target, sources in sorted(sources_by_target.items()):
        if len(sources) > 1:
            raise TopicvaultError(
                f"topics {', '.join(map(repr, sources))} would all be restored into {target!r}: "
                "give each a target of its own with --rename OLD=NEW (or restore one of them with --topic)"
            )


def _select(state: BackupState, topics: list[str], renamed: Iterable[str], uri: str) -> tuple[list[str], list[str]]:
    """The topics to restore (those named, else every one but internal topics not renamed), and notes."""
    available = sorted({topic for topic, _ in state.partitions} | set(state.topics))
    if not available:
        raise NoBackup(uri)
    for topic in topics:
        if topic not in available:
            raise TopicvaultError(f"topic {topic!r} is not in the backup at {uri}; it holds: {', '.join(available)}")
    if topics:
        return topics, []
    owners = {t: owner for t in available if t not in renamed
              and (owner := internal_topic_owner(t, TopicSettings.from_json(state.topics.get(t, {})).configs))}
    chosen = [t for t in available if t not in owners]
    if not chosen:
        raise TopicvaultError(f"the backup at {uri} holds only internal topics ({', '.join(owners)}): name those "
                              "to restore with --topic")
    return chosen, [f"left out internal topic {t} ({owner}): restore it by name with --topic {t}"
                    for t, owner in owners.items()]


def build_restore_plan(facts: RestoreFacts, request: RestoreRequest) -> RestorePlan:
    """The whole restore plan, decided from `facts` alone (raises TopicvaultError naming what to do
    where the restore cannot go on)."""
    _check_not_planted(facts)
    targets = restore_targets(facts.archive, facts.saved, request, facts.archive_uri, facts.target.topics)
    _check_until(facts.archive, list(targets.topic_map), request.selection.until_ms, facts.now_ms)
    if facts.saved is not None:
        check_same_restore(facts.saved, facts.target.bootstrap, targets.topic_map, request.selection.to_json())
        starts = facts.saved.start_offsets
    else:
        starts = _target_starts(facts, targets.partitions, request.allow_nonempty)
    restored = dict(facts.saved_maps) if request.continue_saved and facts.saved is not None else {}
    began, new_starts = _source_starts(facts, targets.topic_map, restored)
    partitions = _PartitionPlanning(facts, request, targets.topic_map, starts, restored, began)
    tasks = [task for (source, partition), ps in sorted(facts.archive.partitions.items())
             if source in targets.topic_map and (task := partitions.task(source, partition, ps)) is not None]
    topic_configs, replication, notes = _topic_settings(facts, targets, tasks, request.apply_configs)
    notes = [*facts.layout_notes, *targets.notes, *_lost_notes(facts.archive, targets.topic_map), *notes,
             *_renamed_access_notes(facts.archive, targets.topic_map, request.selection.until_ms),
             *_timestamp_type_notes(targets),
             *_retention_notes(facts, _earliest_times(facts, targets.topic_map), topic_configs, request.apply_configs),
             *_retention_bytes_notes(facts, tasks, topic_configs, request.apply_configs)]
    groups = check_groups(facts.archive, targets.topic_map, request.selection.until_ms, request.only_groups) \
        if request.groups else []
    access = _access_plan(facts, request, targets.topic_map)
    return RestorePlan(facts.restore_id, tasks, targets.topic_map, targets.to_create, resumed=facts.saved is not None,
                       notes=[*notes, *groups, *(access.notes if access else ())], topic_configs=topic_configs,
                       loading=dict(facts.target.loading) if topic_configs else dict(LOADING_CONFIGS),
                       replication=replication, selection=request.selection, layout=facts.layout.name,
                       restored=restored, archive=facts.archive, target_starts=dict(starts), source_starts=began,
                       new_source_starts=new_starts, access=access,
                       groups=request.only_groups if request.groups else None)


def _access_plan(facts: RestoreFacts, request: RestoreRequest, topic_map: Mapping[str, str]) -> AccessPlan | None:
    """restore --cluster-state: the ACLs and SCRAM users to create (None: not asked for)."""
    if request.access is None:
        return None
    if facts.target_access is None:
        raise ValueError("--cluster-state planned without the target's access read (restore.gather_facts reads it)")
    renames = {source: target for source, target in topic_map.items() if source != target}
    return plan_cluster_access(request.access, facts.archive, request.selection.until_ms, facts.target_access,
                               renames, facts.scram_passwords)


def check_groups(archive: BackupState, topic_map: Mapping[str, str], until_ms: int | None,
                 only: tuple[str, ...]) -> list[str]:
    """Before a restore with --groups writes anything: refuse a --group with no saved offsets (at
    --until, when given); return a note naming each group plain --groups leaves out because its
    offsets on the restored topics were saved only after --until."""
    saved = archive.groups_at(until_ms)
    check_named_groups(only, saved, until_ms)
    if only or until_ms is None:
        return []
    later = [group for group, snapshot in sorted(archive.groups.items())
             if group not in saved and set(topic_map) & set(snapshot["offsets"])]
    return [f"consumer group {group} has no saved offsets at or before --until {iso(until_ms)} (only later "
            "ones): its offsets are not restored" for group in later]


def check_named_groups(only: Iterable[str] | None, saved: dict[str, dict], until_ms: int | None) -> None:
    """Refuse a --group the archive saved no offsets of (at --until, when given)."""
    missing = sorted(set(only or []) - set(saved))
    if missing and until_ms is not None:
        raise TopicvaultError(
            f"consumer group {', '.join(missing)} has no saved offsets at or before --until {iso(until_ms)} "
            f"(saved then: {', '.join(sorted(saved)) or 'none'}): give a later --until or leave out --group"
        )
    if missing:
        raise TopicvaultError(
            f"the backup holds no offsets of consumer group(s) {', '.join(missing)} on its topics; "
            f"it has: {', '.join(sorted(saved)) or 'none'}"
        )


def _check_not_planted(facts: RestoreFacts) -> None:
    """Refuse a restore id whose only state is one in the archive (where anyone who can write the bucket
    can put one): it is read only when named with --import-state."""
    if facts.saved is not None or not facts.legacy_state_planted:
        return
    restore_id = facts.restore_id
    raise TopicvaultError(
        f"restore id {restore_id!r} has no state in {facts.state_uri}, but the archive holds one at "
        f"{legacy_restore_prefix(restore_id)} (where older versions kept it, and where anyone who can write the bucket "
        f"can put one): it is not read unless you name it: add --import-state "
        f"{facts.archive_uri.rstrip('/')}/{legacy_restore_prefix(restore_id).rstrip('/')} to resume that restore, or pick another --restore-id"
    )


def _source_starts(facts: RestoreFacts, topic_map: Mapping[str, str],
                   restored: Mapping[Where, OffsetMap]) -> tuple[dict[str, int], dict[str, int]]:
    """"source-topic:partition" -> where the archive started when the restore first planned each partition,
    and those of them first planned by this run (saved by restore.start_restore before any is produced)."""
    archive_starts = {f"{t}:{p}": ps.start for (t, p), ps in facts.archive.partitions.items()
                      if t in topic_map} if facts.layout.exact_entries else {}
    saved = facts.saved
    if saved is None:
        return archive_starts, {}
    if saved.source_starts is None:
        # A state older than source_starts: a partition began where its saved offset map begins; one with
        # no map is refused if an expire moved its start since the restore began (check_not_moved).
        return _starts_of_maps(restored or facts.saved_maps), {}
    # A partition the restore has not planned before (empty or absent when it began) begins where the
    # archive starts now.
    new_starts = {where: start for where, start in archive_starts.items() if where not in saved.source_starts}
    return {**saved.source_starts, **new_starts}, new_starts


@dataclass(frozen=True)
class _PartitionPlanning:
    """What planning one source partition's task needs of the plan decided so far."""

    facts: RestoreFacts
    request: RestoreRequest
    topic_map: Mapping[str, str]
    starts: Mapping[str, int]  # "target:partition" -> where the restore began writing it
    restored: Mapping[Where, OffsetMap]  # continue_saved: what earlier runs restored
    began: Mapping[str, int]  # "source:partition" -> where the archive started when the restore began it

    def task(self, source: str, partition: int, ps: PartitionState) -> RestoreTask | None:
        """The task restoring what is left of this partition (None: nothing is)."""
        facts, restore_id, target = self.facts, self.facts.restore_id, self.topic_map[source]
        if f"{target}:{partition}" not in self.starts:
            raise TopicvaultError(
                f"{source}[{partition}] is in the archive but was not when restore {restore_id} started, so it has "
                f"no saved start on {target}: restore it with a new --restore-id (into a new topic)"
            )
        done = self.restored.get((source, partition))
        through = done.last_source_offset if done is not None else None
        chosen = self.request.selection.after(source, partition, through)
        holes: tuple[SkippedObject, ...] = ()
        if facts.layout.exact_entries:
            self._check_archive_start(source, partition, ps, through)
            first_chosen, _ = chosen.bounds(source, partition)
            holes = tuple(_left_out_before(restore_id, h) for h in facts.saved_holes.get((source, partition), [])
                          if h.last_offset >= first_chosen)
            objects = outside_holes(chosen, chosen.objects(source, partition, ps.objects), holes)
        else:
            # A peer object's offsets and times are known only once it is read: select records, not objects.
            # Its name's offset (first or last of the object) orders it; what it holds up to `through` is left out.
            seen = self.request.peer_objects_seen
            objects = [o for o in ps.objects if through is None or o.first_offset > through
                       or (seen is not None and (o.key, o.bytes) not in seen)]
        if not objects and not holes:  # a partition with only holes left is named again, not called complete
            return None
        start = done.target_end if done is not None else self.starts[f"{target}:{partition}"]
        return RestoreTask(source, partition, target, start, tuple(objects), chosen, facts.layout.name, restore_id,
                           holes, resumed=facts.saved is not None and not self.request.earlier_writes_acknowledged,
                           restored_before=self._restored_before(source, partition, start))

    def _restored_before(self, source: str, partition: int, start: int) -> tuple[tuple[int, int], ...]:
        """What the last finished run restored into the partition from `start` on, for a peer archive's
        rerun that counts from the restore's start (see RestoreTask.restored_before)."""
        if self.facts.saved is None or self.facts.layout.exact_entries or self.restored:
            return ()
        earlier = self.facts.saved_maps.get((source, partition))
        if earlier is None or earlier.target_start != start:
            return ()
        return tuple((first, count) for first, _, count in earlier.ranges)

    def _check_archive_start(self, source: str, partition: int, ps: PartitionState, through: int | None) -> None:
        """Refuse to go on where an expire dropped records this restore has not restored."""
        saved, selection = self.facts.saved, self.request.selection
        # Nothing restored per the saved maps: the restore began where the archive started then.
        start_then = self.began.get(f"{source}:{partition}")
        if saved is not None and saved.source_starts is None and through is None and start_then is None:
            check_not_moved(self.facts.restore_id, source, partition, self.topic_map[source], ps, saved.created_ms)
        passed = through if through is not None or start_then is None else start_then - 1
        check_not_expired(self.facts.restore_id, source, partition, self.topic_map[source], ps.start, passed,
                          selection.after(source, partition, passed))


def outside_holes(selection: Selection, objects: list[ObjectEntry], holes: tuple[SkippedObject, ...]) -> list[ObjectEntry]:
    """The objects (in offset order) a resumed run reads: one wholly inside a hole is not read (its records
    stay out), and none after one that may hold the end of the selection (see Selection.may_end_within)."""
    kept = []
    for entry in objects:
        if not any(h.first_offset <= entry.first_offset and entry.last_offset <= h.last_offset for h in holes):
            kept.append(entry)
        elif selection.may_end_within(entry):
            break
    return kept


def _left_out_before(restore_id: str, hole: SkippedObject) -> SkippedObject:
    """A hole an earlier run of the restore left, as this run reports it again (it stays a hole)."""
    if hole.reason.startswith("left out by an earlier run"):
        return hole
    return replace(hole, reason=(
        f"left out by an earlier run of restore {restore_id}, which went on past it, so it cannot go in "
        f"in order ({hole.reason}); restore these offsets into a new topic with a new --restore-id"))


def check_not_expired(restore_id: str, source: str, partition: int, target: str, archive_start: int,
                      through: int | None, chosen: Selection) -> None:
    """Refuse to continue a partition whose next selected offsets were expired from the archive.

    Earlier runs of the restore passed the partition through source offset `through` (their
    offset maps; else one before where the archive started when the restore began; None: not
    known, nothing checked) and `chosen` starts after it. An archive that now starts later (an
    expire commit dropped objects the restore had not finished) would splice or double the
    target: the records between are gone from the archive, and a resumed restore counts what
    the target holds against a sequence that no longer starts where it did.
    """
    first, last = chosen.bounds(source, partition)
    gone_last = archive_start - 1 if last is None else min(archive_start - 1, last)
    if through is None or gone_last < first:
        return
    raise TopicvaultError(
        f"{source}[{partition}]: offsets {first}..{gone_last} were expired from the archive before restore "
        f"{restore_id} had restored them (the archive now starts at offset {archive_start}): continuing would "
        f"leave a gap in {target}; restore into a new topic with a new --restore-id (it starts at offset "
        f"{archive_start}), and next time expire with a --before older than what the restore has yet to do"
    )


def check_not_moved(restore_id: str, source: str, partition: int, target: str, partition_state: PartitionState,
                    began_ms: int | None) -> None:
    """Refuse to continue a partition of a restore that saved no start for it (a state older than
    source_starts, no offset map) once an expire moved the archive's start since the restore began
    (`began_ms`; None: not known, any expire counts): where it began is unknown, so what the target holds
    cannot be counted against what the archive holds now."""
    moved_ms = partition_state.start_moved_ms
    if not moved_ms or (began_ms is not None and moved_ms < began_ms):
        return
    raise TopicvaultError(
        f"{source}[{partition}]: an expire moved the archive's start to offset {partition_state.start} after "
        f"restore {restore_id} began, whose saved state (from an older topicvault) does not say where it began "
        f"that partition: continuing could leave a gap or a second copy in {target}; restore into a new topic "
        "with a new --restore-id"
    )


def _configs_of_created(saved: RestoreState, topic_ids: Mapping[str, str],
                        to_create: Mapping[str, int]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The configs a resumed restore sets once its data is in: those its state names for topics it created.

    A restore created a topic when its CreateTopics answered success (the state's created_topics,
    with the topic's id); a topic of that name holding another id now was deleted and created again
    by someone else, and the restore refuses to go on before it changes anything. A topic missing
    now (`to_create`) is created by this run and gets its configs only if that creation succeeds
    (restore.run_restore). Any other topic a state names configs for (an older state, which does not
    say what it created; one whose first CreateTopics failed and an admin created the topic; one
    imported from elsewhere, see --import-state) gets none set there, and says so.
    """
    configs: dict[str, dict[str, str]] = {}
    notes = []
    targets = set(saved.topic_map.values())
    for target, created_id in sorted(saved.created_topics.items()):
        if target in targets and target not in to_create and topic_ids.get(target, "") != created_id:
            raise TopicvaultError(
                f"{target} is not the topic restore {saved.restore_id} created (its topic id changed: it was deleted "
                "and created again since), so it is left as it is: restore into a new topic with a new --restore-id"
            )
    for target, named in sorted(saved.topic_configs.items()):
        began = {int(where.rsplit(":", 1)[1]): start for where, start in saved.start_offsets.items()
                 if where.rsplit(":", 1)[0] == target}
        created = target in to_create or target in saved.created_topics
        if target in targets and began and not any(began.values()) and created:
            screened = screen_topic_configs(named)  # a state imported from elsewhere may name any config
            configs[target] = screened.applied
            notes += screened.notes(target)
            continue
        why = ("it restores nothing into it" if target not in targets
               else f"it began writing at offset {max(began.values())}" if began and any(began.values())
               else "it names no start there" if not began
               else "its CreateTopics did not create it: the topic was there already, or the state does not say")
        notes.append(f"{target}: not created by restore {saved.restore_id} ({why}), so the configs its state "
                     f"names are not set there: {', '.join(f'{k}={v}' for k, v in sorted(named.items())) or 'none'}")
    return configs, notes


def _starts_of_maps(maps: Mapping[tuple[str, int], OffsetMap]) -> dict[str, int]:
    """"source-topic:partition" -> the first source offset a restore's saved offset maps account for."""
    return {f"{source}:{partition}": m.first_source_offset for (source, partition), m in maps.items()
            if m.first_source_offset is not None}


def _topic_settings(facts: RestoreFacts, targets: RestoreTargets, tasks: list[RestoreTask],
                    apply_configs: bool) -> tuple[dict[str, dict[str, str]], dict[str, int], list[str]]:
    """Configs to set once data is in, replication factors of topics to create, and notes; a resumed
    restore first refuses targets whose log start moved past where it began writing."""
    if facts.saved is None:
        settings = {targets.topic_map[t]: s for t, s in targets.settings.items()}
        return _plan_topic_settings(facts.target.brokers, targets.to_create, settings, apply_configs)
    check_log_starts(facts.restore_id, {t.target: t.target_start for t in tasks},
                     {t.target: facts.target.watermarks[t.target][0] for t in tasks
                      if t.target in facts.target.watermarks})
    # The first run created the topics; what is missing yet (it died before creating them) is created now.
    configs, notes = _configs_of_created(facts.saved, facts.target.topic_ids, targets.to_create)
    return configs, {}, notes


def _plan_topic_settings(
    brokers: int, to_create: dict[str, int], settings: dict[str, TopicSettings], apply_configs: bool,
) -> tuple[dict[str, dict[str, str]], dict[str, int], list[str]]:
    """Configs to set once data is in and replication factor of each topic the restore creates, and notes
    (`brokers`: how many the target has)."""
    configs: dict[str, dict[str, str]] = {}
    replication: dict[str, int] = {}
    notes: list[str] = []
    for target in to_create:
        saved = settings[target]
        if saved.replication_factor > brokers:
            notes.append(
                f"{target}: replication factor {saved.replication_factor} capped to {brokers}, the brokers the target has"
            )
        replication[target] = min(saved.replication_factor, brokers) if saved.replication_factor > 0 else -1
        if not saved.configs_reported:
            notes.append(f"{target}: the source broker reported no topic configs, so the topic gets the target's defaults")
        # Every created topic is listed, even with no saved configs: its loading overrides are removed at the end.
        screened = screen_topic_configs(saved.configs if apply_configs else {})
        configs[target] = screened.applied
        notes += screened.notes(target)
    return configs, replication, notes


def _lost_notes(archive: BackupState, topic_map: Mapping[str, str]) -> list[str]:
    return [note for (source, _), ps in sorted(archive.partitions.items()) if source in topic_map
            for note in ps.lost_notes()]


def _timestamp_type_notes(targets: RestoreTargets) -> list[str]:
    """A note for each topic saved as LogAppendTime (issue #50.6): Kafka stamps such a record with the
    broker's clock at append, so a restore can only write it as CreateTime with its saved time."""
    return [f"{targets.topic_map[source]}: {source} was a LogAppendTime topic: its records keep their timestamp "
            "values but come back typed CreateTime (Kafka gives a LogAppendTime record the broker's time, never a "
            "given one); records produced after the restore get LogAppendTime where the topic is set to it"
            for source, settings in sorted(targets.settings.items())
            if settings.configs.get("message.timestamp.type", "").strip() == "LogAppendTime"]


def _renamed_access_notes(archive: BackupState, topic_map: Mapping[str, str], until_ms: int | None) -> list[str]:
    """A note for each renamed topic the saved ACLs give other access than its source (issue #50.5): a
    prefixed or wildcard binding covers one name and not the other. On a cluster holding those ACLs (the
    source cluster itself, or one restored with --cluster-state) the restored topic has that access."""
    saved = archive.access_at(until_ms)
    acls = AccessState.from_json(saved).acls if saved is not None else None
    renames = {source: target for source, target in topic_map.items() if source != target}
    return [f"{change.describe()}, under the ACLs the backup saved (where the target holds them); check the "
            "target's ACLs for the restored topic" for change in renamed_access_changes(acls or (), acls or (), renames)]


def _earliest_times(facts: RestoreFacts, topic_map: Mapping[str, str]) -> dict[str, int | None]:
    """Target topic -> the oldest record time the restore writes into it (a peer's are known only once read)."""
    if not facts.layout.exact_entries:
        return {}
    return {target: min((o.min_timestamp_ms for (t, _), ps in facts.archive.partitions.items() if t == source
                         for o in ps.objects), default=None)
            for source, target in topic_map.items()}


def _retention_notes(facts: RestoreFacts, earliest_ms: dict[str, int | None],
                     topic_configs: dict[str, dict[str, str]], apply_configs: bool) -> list[str]:
    """Warn where the target's effective retention will delete restored records (they keep their old times).

    A topic the restore creates keeps everything while data goes in and gets its saved retention.ms
    (or the target's default) afterwards; a topic that already existed keeps its own retention,
    which deletes old records even while the restore runs.
    """
    notes = []
    for target, oldest in sorted((t, ms) for t, ms in earliest_ms.items() if ms is not None):
        if target in topic_configs:
            saved = topic_configs[target].get("retention.ms")
            retention = int(saved) if saved is not None else facts.target.default_retention_ms
            if retention is None or retention < 0 or oldest >= facts.now_ms - retention:
                continue
            notes.append(_retention_note(target, "saved" if saved is not None else "default", "retention.ms",
                                         f"retention.ms={retention}", "restored records older than that",
                                         apply_configs))
        else:
            retention = facts.target.retention_ms.get(target)
            if retention is not None and retention >= 0 and oldest < facts.now_ms - retention:
                notes.append(_retention_note(target, "existing", "retention.ms", f"retention.ms={retention}",
                                             "restored records older than that", apply_configs))
    return notes


def _retention_note(target: str, limit_from: str, setting: str, figure: str, deleted: str,
                    apply_configs: bool) -> str:
    """The note for a target whose `setting` (shown as `figure`) deletes `deleted` records of the restore;
    `limit_from`: "existing" (the existing topic's own), "saved" (the archive's, set after the restore) or
    "default" (the target's default, on a topic the restore creates)."""
    if limit_from == "existing":
        return (f"{target}: the existing target keeps {figure}; the broker deletes {deleted}, possibly while the "
                f"restore runs (a resume then stops): raise its {setting} first, or restore into a new topic")
    if limit_from == "saved":
        return f"{target}: gets {figure} after the restore; the broker deletes {deleted} soon after (use --no-configs to keep them)"
    return (f"{target}: gets the target's default {figure} after the restore; the broker then deletes {deleted}: "
            f"set {setting} on it to keep them" + ("" if apply_configs else " (--no-configs)"))


def _retention_bytes_notes(facts: RestoreFacts, tasks: list[RestoreTask], topic_configs: dict[str, dict[str, str]],
                           apply_configs: bool) -> list[str]:
    """Warn where a target's retention.bytes (per partition) is smaller than what the restore writes into one
    of its partitions: the broker deletes the oldest restored records once a segment rolls (issue #50.7).

    What is written is measured by the archive's objects (their stored bytes); the log's own size differs
    with the target's compression and batching, so the figure is an estimate and the note says so.
    """
    restored: dict[str, dict[int, int]] = {}
    for task in tasks if facts.layout.exact_entries else ():
        restored.setdefault(task.target_topic, {})[task.partition] = sum(o.bytes for o in task.objects)
    notes = []
    for target, by_partition in sorted(restored.items()):
        created = target in topic_configs
        saved = topic_configs[target].get("retention.bytes") if created else None
        limit = (int(saved) if saved is not None else facts.target.default_retention_bytes) if created \
            else facts.target.retention_bytes.get(target)
        over = {p: n for p, n in by_partition.items() if limit is not None and 0 <= limit < n}
        if not over:
            continue
        largest = max(over, key=lambda p: (over[p], -p))
        figure = (f"retention.bytes={limit} per partition, but the restore writes about {over[largest]:,} bytes into "
                  f"partition {largest}" + (f" ({len(over)} partitions over it)" if len(over) > 1 else "")
                  + " (the archive's object sizes; the log's own size differs with compression)")
        limit_from = "existing" if not created else "saved" if saved is not None else "default"
        notes.append(_retention_note(target, limit_from, "retention.bytes", figure, "the oldest restored records",
                                     apply_configs))
    return notes


def check_log_starts(restore_id: str, starts: Mapping[tuple[str, int], int],
                     log_starts: Mapping[tuple[str, int], int]) -> None:
    """Refuse to resume where a target's log start moved past where the restore began writing.

    Records it wrote are gone then (retention or DeleteRecords), so counting what is there would
    not say how far it got, and producing on would leave a hole or a second copy.
    """
    for (topic, partition), start in sorted(starts.items()):
        low = log_starts.get((topic, partition))
        if low is not None and low > start:
            raise TopicvaultError(
                f"{topic}[{partition}] now starts at offset {low}, past offset {start} where restore {restore_id} "
                "began writing: records it wrote were deleted (retention or DeleteRecords), so it cannot resume "
                "exactly once: restore into a new topic with a new --restore-id"
            )


def _check_until(state: BackupState, topics: list[str], until_ms: int | None, now_ms: int) -> None:
    if until_ms is None:
        return
    if until_ms > now_ms + 60_000:
        raise TopicvaultError(f"--until {_iso(until_ms)} is in the future: give a time at or before now")
    objects = [o for (t, _), ps in state.partitions.items() if t in topics for o in ps.objects]
    earliest = min((o.min_timestamp_ms for o in objects), default=None)
    if earliest is not None and until_ms < earliest:
        raise TopicvaultError(
            f"--until {_iso(until_ms)} is before the backed-up data (earliest record {_iso(earliest)}): nothing to restore"
        )


def _iso(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _target_starts(facts: RestoreFacts, partitions_needed: Mapping[str, int], allow_nonempty: bool) -> dict[str, int]:
    """"target:partition" -> where a first start begins writing: 0 in a topic it creates, else the
    partition's end; a target holding records is refused unless `allow_nonempty`."""
    starts: dict[str, int] = {}
    for topic, count in partitions_needed.items():
        for partition in range(count):
            if topic not in facts.target.topics:
                starts[f"{topic}:{partition}"] = 0
                continue
            low, high = facts.target.watermarks[(topic, partition)]
            if high > low and not allow_nonempty:
                raise _nonempty_target_error(facts.earlier_restores.get(topic, []), topic, partition)
            # Past the end of what is there, transaction markers included (the true end).
            starts[f"{topic}:{partition}"] = facts.target.ends.get((topic, partition), high) if high > low else high
    return starts


def _nonempty_target_error(earlier: list[str], topic: str, partition: int) -> TopicvaultError:
    """Why a target holding records is refused; names the restore that wrote it (`earlier`: those from this
    location into it, oldest first), since re-running a restore without its id is the usual way to get here."""
    if earlier:
        return TopicvaultError(
            f"target topic {topic!r} already holds records (partition {partition}) and restore {earlier[-1]} from "
            f"this location wrote into it: run again with --restore-id {earlier[-1]} to resume or finish it, or pass "
            "--allow-nonempty to append a second copy"
        )
    return TopicvaultError(
        f"target topic {topic!r} already holds records (partition {partition}): restore under "
        "another name with --rename, or pass --allow-nonempty to append after them"
    )
