"""The restore job: plan from commit records, one Spark task per topic-partition, resumable."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Iterable, Iterator

from ..core.access import AccessApplied, AccessPlan
from ..core.cluster import (
    LOADING_CONFIGS,
    TopicSettings,
    apply_access,
    apply_topic_configs,
    cluster_loading_configs,
    default_retention_ms,
    loading_configs,
    retention_ms,
    silent_isr_brokers,
    target_resume_settle_s,
)
from ..core.commits import BackupState, ObjectEntry, PartitionState
from ..core.crypto import Keyring, keyring_of
from ..core.errors import NoBackup, TopicvaultError
from ..core.kafka import (
    KafkaSettings,
    broker_count,
    create_topics,
    list_topic_partitions,
    partition_watermarks,
)
from ..core.locations import open_store
from ..core.progress import counted
from ..core.spark import check_no_speculation, run_tasks, task_attempt
from ..formats.peers import NATIVE, Layout, PeerOptions, layout_named
from .kafka_writer import ProduceResult, WrittenPrefix, count_records, partition_ends, produce_streams, target_offsets
from .object_reader import SkippedObject, check_keys_open
from .offset_map import (
    OffsetMap,
    continued,
    recording,
    save_hole,
    save_offset_maps,
    saved_holes,
    saved_offset_maps,
    without_holes,
)
from .peer_layout import (
    AUTO,
    PartitionReading,
    PeerReadReport,
    archive_state,
    layout_notes,
    read_layout_partition,
    resolve_layout,
)
from .restore_state import (
    LEGACY_PREFIX,
    RestoreRecords,
    RestoreState,
    add_source_starts,
    check_same_restore,
    default_state_uri,
    load_restore_state,
    restores_into,
    save_restore_state,
)
from .selection import NotAPrefix, Selection, skip_records
from .throttle import RateLimit, in_pieces
from .topic_policy import is_internal_topic, screen_topic_configs


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
    # leader holds yet (it was killed before they were acknowledged): see restore_group.
    resumed: bool = False

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
class RestoreJob:
    """Plain picklable settings every restore task needs."""

    kafka: KafkaSettings
    store_uri: str
    store_options: tuple[tuple[str, str], ...] = ()
    progress_dir: str | None = None  # see core.progress
    layout: str = NATIVE.name  # or a peer layout (source.peer_layout), or "auto": plan_restore resolves it into the plan
    key_template: str | None = None  # a peer's file-name template, when not its default
    peer_options: PeerOptions = PeerOptions()
    state_uri: str | None = None  # where restore records go (see restore_state); None: default_state_uri(), resolved at once
    on_error: str = "stop"  # or "skip": leave out objects that cannot be read (object_reader.check_on_error)
    rate: RateLimit = RateLimit()  # the whole restore's; run_restore shares it among the tasks
    encryption_keys: tuple[str, ...] = ()  # --encryption-key specs; each worker loads them (core.crypto)

    def __post_init__(self) -> None:
        # The default state location is resolved here, where the job is built (the driver): tasks
        # record the objects --on-error skip leaves out there, and a worker on another machine
        # would resolve the default to its own directory, where the driver never looks.
        if self.state_uri is None:
            object.__setattr__(self, "state_uri", default_state_uri())

    def keyring(self) -> Keyring | None:
        """The keys encrypted objects may be wrapped by (None: none given)."""
        return keyring_of(self.encryption_keys)

    def open_store(self):
        """The object store of the backup location."""
        return open_store(self.store_uri, dict(self.store_options))

    def restore_records(self) -> RestoreRecords:
        """Where this archive's restores keep their state and offset maps (never in the archive)."""
        return RestoreRecords(open_store(self.state_uri), self.open_store())


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
    peer_report: PeerReadReport | None = None  # duplicates and gaps a peer archive's partition held
    skipped: tuple[SkippedObject, ...] = ()  # objects left out (--on-error skip), in offset order


@dataclass
class RestorePlan:
    """The tasks of a restore and the topics it will create."""

    restore_id: str
    tasks: list[RestoreTask]
    topic_map: dict[str, str]
    topics_to_create: dict[str, int]
    resumed: bool
    notes: list[str] = field(default_factory=list)
    # Every topic the restore creates -> the configs it gets once the data is in (maybe none).
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # The overrides those topics hold while data goes in (core.cluster.cluster_loading_configs).
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
    # restore --cluster-state: the ACLs and SCRAM users to create once the topics exist (source.access).
    access: AccessPlan | None = None

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks)

    @property
    def archive_layout(self) -> Layout:
        """The layout of the archive restored from."""
        return layout_named(self.layout)


@dataclass
class RestoreResult:
    """What a restore run did."""

    plan: RestorePlan
    results: list[TaskResult]
    elapsed_s: float
    access: AccessApplied | None = None  # what --cluster-state created

    @property
    def produced(self) -> int:
        return sum(r.produced for r in self.results)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.results)

    @property
    def timestamps_replaced(self) -> int:
        return sum(r.timestamps_replaced for r in self.results)

    @property
    def skipped(self) -> list[SkippedObject]:
        """Objects left out because they could not be read, by topic, partition and offset."""
        return sorted((s for r in self.results for s in r.skipped), key=lambda s: (s.topic, s.partition, s.first_offset))


def restore_group(job: RestoreJob, tasks: list[RestoreTask], rate: RateLimit = RateLimit()) -> list[TaskResult]:
    """Restore some partitions through one producer (runs in a Spark worker; safe to run again).

    Each partition's selected source records form a fixed sequence; its target partition holds
    a prefix of it after `target_start`, so each is counted and produced from there on, within
    `rate` (this task's share of the restore's limit).
    """
    # Records, not offsets: a broker may leave offset gaps after a failed attempt (tansu does),
    # and topics are created without their saved configs until the data is in (no compaction).
    starts = {task.target: task.target_start for task in tasks}
    written = count_records(job.kafka, starts)
    if any(task.resumed for task in tasks) or task_attempt() > 0 or any(p.records for p in written.values()):
        # A resume: what a killed run or attempt sent last may not be counted yet (see resume_settle_s),
        # even when the count finds none of its records: its only request may be in the leader's log alone.
        settle_s = target_resume_settle_s(job.kafka, [task.target_topic for task in tasks])
        if settle_s:
            time.sleep(settle_s)
            check_replicas_answer(job.kafka, list(starts), settle_s)
            written = count_records(job.kafka, starts)
    streams = [_stream(job, task, written[task.target], rate) for task in tasks]
    produced = produce_streams(job.kafka, [(*task.target, stream.batches) for task, stream in zip(tasks, streams)],
                               rate=rate)
    ends = partition_ends(job.kafka, [task.target for task in tasks])
    return [_finish(job, task, written[task.target].records, stream, result, ends[task.target])
            for task, stream, result in zip(tasks, streams, produced)]


def check_replicas_answer(settings: KafkaSettings, partitions: list[tuple[str, int]], wait_s: float) -> None:
    """Wait up to `wait_s` for every in-sync replica of the target `partitions` to answer, else stop.

    The settle wait before a resume counts assumes followers copy the leader's last records or
    leave the ISR. Without a controller quorum (two of three nodes stopped) they do neither: the
    leader holds records above its high watermark that a count misses and that the nodes'
    return makes visible, so producing them again would write them twice.
    """
    deadline = time.monotonic() + wait_s
    while silent := silent_isr_brokers(settings, partitions):
        if time.monotonic() >= deadline:
            broker, where = next(iter(silent.items()))
            topic, partition = where[0]
            raise TopicvaultError(
                f"the replicas of target partition {topic}[{partition}] on broker {broker} do not answer: its leader "
                "may hold records of this restore it cannot count yet; run again with the same --restore-id once "
                "the cluster is whole"
            )
        time.sleep(1.0)


@dataclass
class _Stream:
    """One task's source records on their way to the producer, and what reading them found."""

    offset_map: OffsetMap  # filled as the producer drains `batches`
    batches: Iterator
    skipped: list  # SkippedObject, filled as objects are left out (--on-error skip)
    peer_report: PeerReadReport | None


def _stream(job: RestoreJob, task: RestoreTask, written: WrittenPrefix, rate: RateLimit = RateLimit()) -> _Stream:
    present = written.records
    if task.archive_layout.exact_entries and present > task.records:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start}, "
            f"more than the {task.records} this restore writes: another producer wrote to it; "
            "restore into a new topic"
        )
    offset_map = OffsetMap(task.source_topic, task.partition, task.target_topic, task.target_start)
    skipped: list[SkippedObject] = []

    def skip(entry: ObjectEntry, reason: str) -> None:
        # The hole is what this restore selected of the object; saved before any later record is produced,
        # so a resumed run leaves the same offsets out even if the object reads again (plan_restore).
        if task.selection.may_end_within(entry):
            reason += (f"; it may hold the first record after --until, so the partition ends there (offsets after "
                       f"{entry.last_offset} are not restored)")
        first, last = task.selection.bounds(task.source_topic, task.partition)
        first, last = max(first, entry.first_offset), min(entry.last_offset, entry.last_offset if last is None else last)
        hole = SkippedObject(entry.key, task.source_topic, task.partition, first, last, entry.records, reason)
        if task.restore_id:
            save_hole(job.restore_records(), task.restore_id, hole)
        offset_map.add_hole(first, last)
        skipped.append(hole)

    for hole in task.earlier_holes:
        offset_map.add_hole(hole.first_offset, hole.last_offset)
        skipped.append(hole)

    layout = task.archive_layout
    peer_report = None if layout.commit_log else PeerReadReport(f"{task.source_topic}[{task.partition}]")
    reading = PartitionReading(job.keyring() if layout.commit_log else None, skip if job.on_error == "skip" else None,
                               task.selection.may_end_within, job.key_template, job.peer_options, peer_report)
    source = read_layout_partition(job.open_store(), layout, list(task.objects), reading)
    selected = without_holes(task.selection.records(task.source_topic, task.partition, source),
                             [(h.first_offset, h.last_offset) for h in task.earlier_holes])
    batches = _prefix_checked(skip_records(recording(selected, offset_map), present, written.tail), task, present)
    batches = counted(in_pieces(batches, rate), job.progress_dir, f"{task.target_topic}-{task.partition}")
    return _Stream(offset_map, batches, skipped, peer_report)


def _prefix_checked(batches: Iterator, task: RestoreTask, present: int) -> Iterator:
    """The batches, with a target that is not a prefix of them (see skip_records) named in one line."""
    try:
        yield from batches
    except NotAPrefix:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start}, but "
            f"they are not the first {present} this restore selects (its last records differ): a delivery that "
            "failed left a gap there, another producer wrote to it, or an object already restored can no longer be "
            "read (--on-error skip); producing on would splice the partition: restore into a new topic with a new "
            "--restore-id"
        ) from None


def _finish(job: RestoreJob, task: RestoreTask, present: int, stream: "_Stream", produced: ProduceResult,
            end: int) -> TaskResult:
    offset_map = stream.offset_map
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
        offset_map, stream.peer_report, tuple(stream.skipped),
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
    internal = [t for t in available if is_internal_topic(t) and t not in renamed]
    chosen = [t for t in available if t not in internal]
    if not chosen:
        raise TopicvaultError(f"the backup at {uri} holds only internal topics ({', '.join(internal)}): name those "
                              "to restore with --topic")
    return chosen, [f"left out internal topic {t}: restore it by name with --topic {t}" for t in internal]


def plan_restore(
    job: RestoreJob,
    topics: list[str],
    renames: dict[str, str],
    restore_id: str | None,
    allow_nonempty: bool = False,
    create_missing: bool = True,
    selection: Selection = Selection(),
    apply_configs: bool = True,
    continue_saved: bool = False,
    peer_objects_seen: set[tuple[str, int]] | None = None,
    earlier_writes_acknowledged: bool = False,
) -> RestorePlan:
    """Plan a restore; on a first start this also records where each target partition stands.

    With `continue_saved` (restore --follow), a resumed restore starts each partition after the
    offset map its earlier runs saved, instead of counting from its first start: a round reads
    only objects it has not restored, and counts only what the target got since that map.
    `peer_objects_seen` ((key, size) of a peer archive's objects at the last round) adds the
    objects new or rewritten since, even named at or before what was restored: their records
    after it are restored. `earlier_writes_acknowledged`: every record earlier runs sent was
    acknowledged (a follow round after one that finished in this process), so a resume need not
    wait for replicas to catch up before counting.
    """
    store = job.open_store()
    layout = resolve_layout(store, job.layout, job.key_template)
    if job.on_error == "skip" and not layout.skip_supported:
        raise TopicvaultError(f"--on-error skip works with topicvault archives only; {store.uri} is a {layout.name} "
                              "archive: use --on-error stop (the default)")
    state, ignored = archive_state(store, layout, job.key_template, job.keyring())
    layout_found = layout_notes(layout, job.peer_options, job.layout == AUTO, ignored)
    records = job.restore_records()
    saved = load_restore_state(records, restore_id) if restore_id else None  # a new id has none
    if restore_id and saved is None and records.planted_in_archive(restore_id):
        raise TopicvaultError(
            f"restore id {restore_id!r} has no state in {records.state.uri}, but the archive holds one at "
            f"{LEGACY_PREFIX}{restore_id}/ (where older versions kept it, and where anyone who can write the bucket "
            f"can put one): it is not read unless you name it: add --import-state "
            f"{store.uri.rstrip('/')}/{LEGACY_PREFIX}{restore_id} to resume that restore, or pick another --restore-id"
        )
    if not topics and saved is not None:
        # A rerun of a restore id follows the topics it began with, even if the archive has more now.
        topics = sorted(saved.topic_map)
    selected, selection_notes = _select(state, topics, renames, job.store_uri)
    unknown = set(renames) - set(selected)
    if unknown:
        raise TopicvaultError(f"--rename names topics not being restored: {', '.join(sorted(unknown))}")
    topic_map = {t: renames.get(t, t) for t in selected}
    check_distinct_targets(topic_map)
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
    # A missing key stops the restore here, before any topic is created or record produced.
    if layout.commit_log:
        check_keys_open(store, (o for (t, _), ps in sorted(state.partitions.items()) if t in topic_map
                                for o in ps.objects), job.keyring())
    restore_id = restore_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    if saved is not None:
        check_same_restore(saved, job.kafka.bootstrap_servers, topic_map, selection.to_json())
        starts = saved.start_offsets
    else:
        starts = _target_starts(job.kafka, records, partitions_needed, existing, allow_nonempty)
    restored = saved_offset_maps(records, restore_id) if continue_saved and saved is not None else {}
    left_out = saved_holes(records, restore_id) if saved is not None and layout.skip_supported else {}
    archive_starts = {f"{t}:{p}": ps.start for (t, p), ps in state.partitions.items()
                      if t in topic_map} if layout.exact_entries else {}
    if saved is None:
        began, new_starts = archive_starts, {}
    elif saved.source_starts is None:
        # A state older than source_starts: a partition began where its saved offset map begins; one with
        # no map is refused below if an expire moved its start since the restore began (check_not_moved).
        began, new_starts = _starts_of_maps(restored or saved_offset_maps(records, restore_id)), {}
    else:
        # A partition the restore has not planned before (empty or absent when it began) begins where the
        # archive starts now; start_restore saves that before anything of it is produced.
        new_starts = {where: start for where, start in archive_starts.items() if where not in saved.source_starts}
        began = {**saved.source_starts, **new_starts}
    tasks = []
    for (source, partition), ps in sorted(state.partitions.items()):
        if source not in topic_map:
            continue
        target = topic_map[source]
        if f"{target}:{partition}" not in starts:
            raise TopicvaultError(
                f"{source}[{partition}] is in the archive but was not when restore {restore_id} started, so it has "
                f"no saved start on {target}: restore it with a new --restore-id (into a new topic)"
            )
        done = restored.get((source, partition))
        through = done.last_source_offset if done is not None else None
        chosen = selection.after(source, partition, through)
        if layout.exact_entries:
            # Nothing restored per the saved maps: the restore began where the archive started then.
            start_then = began.get(f"{source}:{partition}")
            if saved is not None and saved.source_starts is None and through is None and start_then is None:
                check_not_moved(restore_id, source, partition, target, ps, saved.created_ms)
            passed = through if through is not None or start_then is None else start_then - 1
            check_not_expired(restore_id, source, partition, target, ps.start, passed,
                              selection.after(source, partition, passed))
        holes: tuple[SkippedObject, ...] = ()
        if layout.exact_entries:
            first_chosen, _ = chosen.bounds(source, partition)
            holes = tuple(_left_out_before(restore_id, h) for h in left_out.get((source, partition), [])
                          if h.last_offset >= first_chosen)
            objects = _outside_holes(chosen, chosen.objects(source, partition, ps.objects), holes)
        else:
            # A peer object's offsets and times are known only once it is read: select records, not objects.
            # Its name's offset (first or last of the object) orders it; what it holds up to `through` is left out.
            objects = [o for o in ps.objects if through is None or o.first_offset > through
                       or (peer_objects_seen is not None and (o.key, o.bytes) not in peer_objects_seen)]
        if objects or holes:  # a partition with only holes left is named again, not called complete
            start = done.target_end if done is not None else starts[f"{target}:{partition}"]
            tasks.append(RestoreTask(source, partition, target, start, tuple(objects), chosen, layout.name, restore_id,
                                     holes, resumed=saved is not None and not earlier_writes_acknowledged))
    # Record times of a peer's objects are known only once they are read (its entries say 0).
    earliest = {
        topic_map[t]: min((o.min_timestamp_ms for (tt, _), ps in state.partitions.items() if tt == t for o in ps.objects),
                          default=None)
        for t in selected
    } if layout.exact_entries else {}
    lost_notes = [note for (source, _), ps in sorted(state.partitions.items()) if source in topic_map
                  for note in ps.lost_notes()]
    if saved is not None:
        check_log_starts(restore_id, {t.target: t.target_start for t in tasks},
                         _log_starts(job.kafka, [t.target for t in tasks if t.target_topic in existing]))
        # The first run created the topics; what is missing yet (it died before creating them) is created now.
        topic_configs, setting_notes = _configs_of_created(saved)
        replication = {}
    else:
        topic_configs, replication, setting_notes = _plan_topic_settings(
            job.kafka, to_create, {topic_map[t]: s for t, s in saved_settings.items()}, apply_configs)
    notes = layout_found + selection_notes + lost_notes + setting_notes + _retention_notes(job.kafka, earliest, topic_configs, apply_configs)
    loading = cluster_loading_configs(job.kafka) if topic_configs else dict(LOADING_CONFIGS)
    return RestorePlan(restore_id, tasks, topic_map, to_create, resumed=saved is not None, notes=notes,
                       topic_configs=topic_configs, loading=loading, replication=replication, selection=selection,
                       layout=layout.name,
                       restored=restored, archive=state, target_starts=starts, source_starts=began,
                       new_source_starts=new_starts)


def _outside_holes(selection: Selection, objects: list[ObjectEntry], holes: tuple[SkippedObject, ...]) -> list[ObjectEntry]:
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


def _configs_of_created(saved: RestoreState) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The configs a resumed restore sets once its data is in: those its state names for topics it created.

    A restore creates a topic of its topic map and begins writing it at offset 0 in every partition;
    a state naming configs of any other topic (one imported from elsewhere, see --import-state) gets
    none set there, and says so.
    """
    configs: dict[str, dict[str, str]] = {}
    notes = []
    targets = set(saved.topic_map.values())
    for target, named in sorted(saved.topic_configs.items()):
        began = {int(where.rsplit(":", 1)[1]): start for where, start in saved.start_offsets.items()
                 if where.rsplit(":", 1)[0] == target}
        if target in targets and began and not any(began.values()):
            screened = screen_topic_configs(named)  # a state imported from elsewhere may name any config
            configs[target] = screened.applied
            notes += screened.notes(target)
            continue
        why = ("it restores nothing into it" if target not in targets
               else f"it began writing at offset {max(began.values())}" if began else "it names no start there")
        notes.append(f"{target}: not created by restore {saved.restore_id} ({why}), so the configs its state "
                     f"names are not set there: {', '.join(f'{k}={v}' for k, v in sorted(named.items())) or 'none'}")
    return configs, notes


def _starts_of_maps(maps: Mapping[tuple[str, int], OffsetMap]) -> dict[str, int]:
    """"source-topic:partition" -> the first source offset a restore's saved offset maps account for."""
    return {f"{source}:{partition}": m.first_source_offset for (source, partition), m in maps.items()
            if m.first_source_offset is not None}


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


def _plan_topic_settings(
    kafka: KafkaSettings, to_create: dict[str, int], settings: dict[str, TopicSettings], apply_configs: bool,
) -> tuple[dict[str, dict[str, str]], dict[str, int], list[str]]:
    """Configs to set once data is in and replication factor of each topic the restore creates, and notes."""
    brokers = broker_count(kafka) if to_create else 0
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


def _retention_notes(
    kafka: KafkaSettings, earliest_ms: dict[str, int | None], topic_configs: dict[str, dict[str, str]],
    apply_configs: bool,
) -> list[str]:
    """Warn where the target's effective retention will delete restored records (they keep their old times).

    A topic the restore creates keeps everything while data goes in and gets its saved retention.ms
    (or the target's default) afterwards; a topic that already existed keeps its own retention,
    which deletes old records even while the restore runs.
    """
    now_ms = time.time() * 1000
    old = {t: ms for t, ms in earliest_ms.items() if ms is not None}
    created = {t for t in old if t in topic_configs}
    existing_retention = retention_ms(kafka, old.keys() - created)
    needs_default = [t for t in created if "retention.ms" not in topic_configs[t]]
    default = default_retention_ms(kafka) if needs_default else None
    notes = []
    for target, oldest in sorted(old.items()):
        if target in created:
            saved = topic_configs[target].get("retention.ms")
            retention = int(saved) if saved is not None else default
            if retention is None or retention < 0 or oldest >= now_ms - retention:
                continue
            if saved is not None:
                notes.append(f"{target}: gets retention.ms={saved} after the restore; the broker deletes restored records "
                             "older than that soon after the restore (use --no-configs to keep them)")
            else:
                notes.append(f"{target}: gets the target's default retention.ms={retention} after the restore; the "
                             "broker then deletes restored records older than that: set retention.ms on it to keep them"
                             + ("" if apply_configs else " (--no-configs)"))
        else:
            retention = existing_retention.get(target)
            if retention is not None and retention >= 0 and oldest < now_ms - retention:
                notes.append(f"{target}: the existing target keeps records for retention.ms={retention}; the broker "
                             "deletes restored records older than that, possibly while the restore runs (a resume then "
                             "stops): raise its retention.ms first, or restore into a new topic")
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


def _log_starts(kafka: KafkaSettings, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    return {tp: low for tp, (low, _) in partition_watermarks(kafka, partitions, "read_uncommitted").items()}


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


def _nonempty_target_error(records: RestoreRecords, bootstrap: str, topic: str, partition: int) -> TopicvaultError:
    """Why a target holding records is refused; names the restore that wrote it, if this location has one,
    since re-running a restore without its id is the usual way to get here."""
    earlier = restores_into(records, bootstrap, topic)
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


def _target_starts(
    kafka: KafkaSettings, records: RestoreRecords, partitions_needed: dict[str, int], existing: dict[str, int],
    allow_nonempty: bool,
) -> dict[str, int]:
    starts: dict[str, int] = {}
    holding: list[tuple[str, int]] = []
    # The log as written (read_uncommitted): an open transaction's records are there too.
    live = partition_watermarks(kafka, [(topic, partition) for topic, count in partitions_needed.items()
                                        if topic in existing for partition in range(count)], "read_uncommitted")
    for topic, count in partitions_needed.items():
        for partition in range(count):
            if topic not in existing:
                starts[f"{topic}:{partition}"] = 0
                continue
            low, high = live[(topic, partition)]
            if high > low and not allow_nonempty:
                raise _nonempty_target_error(records, kafka.bootstrap_servers, topic, partition)
            starts[f"{topic}:{partition}"] = high
            if high > low:
                holding.append((topic, partition))
    for (topic, partition), end in partition_ends(kafka, holding).items():
        starts[f"{topic}:{partition}"] = end
    return starts


def start_restore(job: RestoreJob, plan: RestorePlan) -> None:
    """Save the restore's state (first start; later, starts of partitions planned for the first time),
    then create missing topics with loading configs."""
    if plan.resumed:
        add_source_starts(job.restore_records(), plan.restore_id, plan.new_source_starts)
    else:
        # Saved before the topics are created, so a run that dies in between still knows, when
        # resumed, which topics are its own to create and to configure at the end.
        save_restore_state(
            job.restore_records(),
            RestoreState(plan.restore_id, job.kafka.bootstrap_servers, plan.topic_map, plan.target_starts,
                         plan.selection.to_json(), plan.topic_configs, plan.source_starts),
        )
    # Saved configs are applied after the data is in (see run_restore): retention, compaction or
    # LogAppendTime acting on a partition while it is restored would lose or change records.
    create_topics(job.kafka, plan.topics_to_create, replication_by_topic=plan.replication,
                  configs_by_topic={t: loading_configs(plan.topic_configs.get(t, {}), plan.loading)
                                    for t in plan.topics_to_create})


def set_loading_configs(job: RestoreJob, plan: RestorePlan) -> None:
    """Give the topics this restore created in an earlier run their loading configs again (a finished
    run gave them their saved ones); topics it creates now get them when created."""
    apply_topic_configs(job.kafka, {topic: loading_configs(configs, plan.loading)
                                    for topic, configs in plan.topic_configs.items()
                                    if topic not in plan.topics_to_create})


def run_restore(spark, job: RestoreJob, plan: RestorePlan, configure: bool = True) -> RestoreResult:
    """Create topics, save state, produce every partition; resumable with the same restore id.

    Every run that produces, first or rerun, does so into topics holding the loading configs
    (see LOADING_CONFIGS) and, with `configure`, gives them their saved configs once the data is
    in; `configure` False (a follow round) keeps the loading configs (the standby applies the
    saved ones when it stops). The saved offset map is the plan's earlier maps followed by this run's.
    """
    check_no_speculation(spark, "a restore")
    started = time.monotonic()
    start_restore(job, plan)
    # Topics first, then who may use them, then the data: applications find their rights in place.
    access = apply_access(job.kafka, plan.access) if plan.access is not None else None
    if plan.resumed and (plan.tasks or not configure):
        # A rerun of a finished restore id (or a follow round after a clean stop) finds its topics with
        # their saved configs: it counts and produces only once they hold the loading ones again.
        set_loading_configs(job, plan)
    # One Spark task per core, each producing its partitions through one producer.
    groups = group_tasks(plan.tasks, spark.sparkContext.defaultParallelism)
    # The groups run at the same time (one per core), so each gets an equal share of the limit.
    share = job.rate.shared_by(len(groups)) if groups else job.rate
    results = [r for group in run_tasks(spark, lambda tasks: restore_group(job, tasks, share), groups) for r in group]
    records = job.restore_records()
    # A task saves each object it leaves out where it runs, before producing past it; on a cluster of
    # several machines a local state directory is that machine's own, so the driver saves them too
    # (those of earlier runs, which the tasks report again, the driver read from its state).
    earlier = {hole for task in plan.tasks for hole in task.earlier_holes}
    for hole in (hole for result in results for hole in result.skipped if hole not in earlier):
        save_hole(records, plan.restore_id, hole)
    save_offset_maps(records, plan.restore_id, continued(plan.restored, [r.offset_map for r in results]))
    if configure:
        apply_topic_configs(job.kafka, plan.topic_configs, plan.loading)
    return RestoreResult(plan, results, time.monotonic() - started, access)
