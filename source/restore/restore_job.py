"""The restore job: plan from commit records, one Spark task per topic-partition, resumable."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Iterable, Iterator

from ...core.archive.commits import BackupState, ObjectEntry
from ...core.cluster.cluster_access import AccessApplied
from ...core.cluster.cluster_admin import (
    LOADING_CONFIGS,
    apply_access,
    apply_topic_configs,
    cluster_loading_configs,
    default_retention_bytes,
    default_retention_ms,
    loading_configs,
    retention_bytes,
    retention_ms,
    silent_isr_brokers,
    target_resume_settle_s,
)
from ...core.cluster.kafka import (
    KafkaSettings,
    TopicsNotCreated,
    broker_count,
    create_topics,
    list_topic_partitions,
    partition_watermarks,
    topic_ids,
)
from ...core.crypto import Keyring, keyring_of
from ...core.errors import TopicvaultError
from ...core.executor import ExecutorChoice, monitored, open_executor
from ...core.process import interrupt_says
from ...core.progress import ProgressMonitor, counted
from ...core.spark import check_no_speculation, run_tasks, task_attempt
from ...core.stores.locations import open_store, open_store_beside
from ...core.stores.store import ObjectStore
from ...formats.peers import NATIVE, Layout, PeerOptions
from ...formats.saved_registry import fields_of_topic, rewrite_batch
from ..cluster_restore.access_restore import read_cluster_access
from ..object_reader import SkippedObject, check_keys_open
from ..peer_layout import (
    AUTO,
    PartitionReading,
    PeerReadReport,
    PeerTally,
    archive_state,
    content_hints,
    layout_notes,
    read_layout_partition,
    resolve_layout,
)
from .kafka_writer import ProduceResult, WrittenPrefix, count_records, partition_ends, produce_streams, target_offsets
from .offset_map import (
    OffsetMap,
    continued,
    recording,
    save_hole,
    save_new_holes,
    save_offset_maps,
    saved_holes,
    saved_offset_maps,
    without_holes,
)
from .restore_plan import (
    RestoreFacts,
    RestorePlan,
    RestoreRequest,
    RestoreTargets,
    RestoreTask,
    TargetFacts,
    build_restore_plan,
    check_on_error,
    outside_holes,
    parse_renames,  # noqa: F401 - cli.py and the tests import it from here
    restore_targets,
)
from .restore_state import (
    RestoreRecords,
    RestoreState,
    add_created_topics,
    add_source_starts,
    default_state_uri,
    load_restore_state,
    restores_into,
    save_restore_state,
)
from .selection import NotAPrefix, skip_records
from .throttle import RateLimit, in_pieces


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
    # restore --schema-ids remap: (saved id, target id) of each schema id the target registry changed;
    # the keys and values schema_id_fields names carrying one in the wire format are rewritten
    # (source.cluster_restore.registry_restore).
    schema_id_map: tuple[tuple[int, int], ...] = ()
    # (source topic, "key" | "value") whose records carry the wire format: a saved subject names them
    # (formats.saved_registry.wire_format_fields; EVERY_TOPIC: every topic, --schema-ids remap-all).
    schema_id_fields: tuple[tuple[str, str], ...] = ()

    def wire_format_fields_of(self, topic: str) -> tuple[str, ...]:
        """"key" and/or "value": the fields of `topic`'s records a remap rewrites (see schema_id_fields)."""
        return fields_of_topic(self.schema_id_fields, topic)

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
        """Where this archive's restores keep their state and offset maps (never in the archive),
        each authenticated by the restore's key when it was given one."""
        return RestoreRecords(open_store_beside(self.state_uri, dict(self.store_options)), self.open_store(),
                              self.keyring())


@dataclass(frozen=True)
class TaskResult:
    """What one restore task found already written and what it produced: its whole outcome, which
    the driver merges with the others' (merged_outcome) and saves once (save_outcome), as Spark's
    writers hand a commit message to the driver's commit. Nothing else of a task reaches the driver."""

    target_topic: str
    partition: int
    already_present: int
    produced: int
    bytes: int
    timestamps_replaced: int
    offset_map: OffsetMap
    peer_report: PeerReadReport | None = None  # duplicates and gaps a peer archive's partition held
    skipped: tuple[SkippedObject, ...] = ()  # objects left out (--on-error skip), in offset order
    # Records whose key or value had its schema id rewritten (--schema-ids remap), already present ones included.
    ids_rewritten: int = 0


@dataclass(frozen=True)
class RunOutcome:
    """What a restore run leaves saved, merged from its tasks' results: every partition's whole offset
    map (earlier runs' followed by this one's) and the objects this run left out."""

    offset_maps: tuple[OffsetMap, ...]
    new_holes: tuple[SkippedObject, ...]  # by topic, partition and offset; none an earlier run saved


def merged_outcome(plan: RestorePlan, results: Iterable[TaskResult]) -> RunOutcome:
    """The run's outcome from its tasks' results, in whatever order they came (a pure function).

    One result per source partition: a second one (a task attempt counted twice) would chain maps
    of the same records, so it stops the restore before anything is saved.
    """
    by_partition: dict[tuple[str, int], TaskResult] = {}
    for result in results:
        where = (result.offset_map.source_topic, result.offset_map.partition)
        if where in by_partition:
            raise TopicvaultError(f"restore {plan.restore_id}: two task results for {where[0]}[{where[1]}]; nothing "
                                  "was saved: run again with the same --restore-id")
        by_partition[where] = result
    ordered = [by_partition[where] for where in sorted(by_partition)]
    earlier = {hole for task in plan.tasks for hole in task.earlier_holes}
    holes = {hole for result in ordered for hole in result.skipped if hole not in earlier}
    return RunOutcome(tuple(continued(plan.restored, [r.offset_map for r in ordered])),
                      tuple(sorted(holes, key=lambda h: (h.topic, h.partition, h.first_offset, h.last_offset))))


def save_outcome(records: RestoreRecords, restore_id: str, outcome: RunOutcome) -> None:
    """Save a run's outcome: the holes the state lacks (see save_new_holes), then the offset maps."""
    save_new_holes(records, restore_id, outcome.new_holes)
    save_offset_maps(records, restore_id, list(outcome.offset_maps))


@dataclass
class RestoreResult:
    """What a restore run did."""

    plan: RestorePlan
    results: list[TaskResult]
    elapsed_s: float
    access: AccessApplied | None = None  # what --cluster-state created
    outcome: RunOutcome | None = None  # what the run saved (None: built by hand, say in a test)
    notes: list[str] = field(default_factory=list)  # what the run found that the plan could not know

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
    def ids_rewritten(self) -> int:
        return sum(r.ids_rewritten for r in self.results)

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
    tasks = left_out_by_earlier_attempts(job, tasks)
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


def left_out_by_earlier_attempts(job: RestoreJob, tasks: list[RestoreTask]) -> list[RestoreTask]:
    """The tasks, each leaving out the objects of its own that an earlier attempt of it left out.

    An attempt saves each object it leaves out before producing past it (see _stream), and may
    then fail or lose its result: a retry that reads the object (a flaky read, a repaired copy)
    would count the target against the sequence with it and refuse, as a resume would without
    the saved hole. Such a hole names an object of the task itself and is not among the holes
    of earlier runs the plan gave it (earlier_holes).
    """
    if job.on_error != "skip" or not any(task.restore_id for task in tasks):
        return tasks
    saved = {restore_id: saved_holes(job.restore_records(), restore_id)
             for restore_id in {task.restore_id for task in tasks if task.restore_id}}
    updated = []
    for task in tasks:
        keys = {entry.key for entry in task.objects}
        known = {(hole.key, hole.first_offset, hole.last_offset) for hole in task.earlier_holes}
        found = tuple(hole for hole in saved.get(task.restore_id, {}).get((task.source_topic, task.partition), [])
                      if hole.key in keys and (hole.key, hole.first_offset, hole.last_offset) not in known)
        updated.append(task if not found else replace(
            task, objects=tuple(outside_holes(task.selection, list(task.objects), found)),
            earlier_holes=task.earlier_holes + found))
    return updated


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
    """One task's source records on their way to the producer, and the accumulators that observe
    them: the task's own, read once the producer drained `batches` (see _finish), never shared."""

    batches: Iterator
    taken: OffsetMap  # the source offsets of the records selected (holes are added by _finish)
    left_out: list  # SkippedObject: objects this attempt left out (--on-error skip), in offset order
    peer: PeerTally | None
    rewritten: list[int] = field(default_factory=lambda: [0])  # records whose schema ids were rewritten


def _stream(job: RestoreJob, task: RestoreTask, written: WrittenPrefix, rate: RateLimit = RateLimit()) -> _Stream:
    present = written.records
    if task.archive_layout.exact_entries and present > task.records:
        raise TopicvaultError(
            f"{task.target_topic}[{task.partition}] holds {present} records after offset {task.target_start}, "
            f"more than the {task.records} this restore writes: another producer wrote to it; "
            "restore into a new topic"
        )
    taken = OffsetMap(task.source_topic, task.partition, task.target_topic, task.target_start)
    left_out: list[SkippedObject] = []

    def skip(entry: ObjectEntry, reason: str) -> None:
        # The hole is what this restore selected of the object; saved before any later record is produced,
        # so a resumed run leaves the same offsets out even if the object reads again (plan_restore).
        if task.selection.may_end_within(entry):
            reason += (f"; it may hold the first record after --until, so the partition ends there (offsets after "
                       f"{entry.last_offset} are not restored)")
        first, last = task.selection.bounds(task.source_topic, task.partition)
        first, last = max(first, entry.first_offset), min(entry.last_offset, entry.last_offset if last is None else last)
        check_not_within_written(task, entry, taken.records, present)
        hole = SkippedObject(entry.key, task.source_topic, task.partition, first, last, entry.records, reason)
        # The one write a task makes besides producing: ahead of the records after the hole (a write-ahead
        # record, not the run's outcome, which the driver saves; see save_outcome).
        if task.restore_id:
            save_hole(job.restore_records(), task.restore_id, hole)
        left_out.append(hole)

    layout = task.archive_layout
    peer = None if layout.commit_log else PeerTally(f"{task.source_topic}[{task.partition}]")
    reading = PartitionReading(job.keyring() if layout.commit_log else None, skip if job.on_error == "skip" else None,
                               task.selection.may_end_within, job.key_template, job.peer_options, peer)
    source = read_layout_partition(job.open_store(), layout, list(task.objects), reading)
    selected = without_holes(task.selection.records(task.source_topic, task.partition, source),
                             [(h.first_offset, h.last_offset) for h in task.earlier_holes])
    if task.restored_before:
        selected = check_as_restored(selected, task, present)
    rewritten = [0]
    # Rewritten before the target's records are compared with them (skip_records): they hold the new ids.
    selected = _with_ids_rewritten(selected, dict(job.schema_id_map), job.wire_format_fields_of(task.source_topic),
                                   rewritten)
    batches = _prefix_checked(skip_records(recording(selected, taken), present, written.tail), task, present)
    batches = counted(in_pieces(batches, rate), job.progress_dir, f"{task.target_topic}-{task.partition}")
    return _Stream(batches, taken, left_out, peer, rewritten)


def _with_ids_rewritten(batches: Iterator, id_map: dict[int, int], fields: tuple[str, ...], rewritten: list[int]
                        ) -> Iterator:
    """The batches with mapped schema ids in `fields` ("key", "value") rewritten
    (formats.saved_registry.rewrite_batch); the records changed are added to rewritten[0]. Without
    a map or fields, the batches themselves."""
    if not id_map or not fields:
        yield from batches
        return
    for batch in batches:
        batch, changed = rewrite_batch(batch, id_map, fields)
        rewritten[0] += changed
        yield batch


def check_as_restored(batches: Iterator, task: RestoreTask, present: int) -> Iterator:
    """The batches, refused (TopicvaultError) where one of the first `present` records is not at the source
    offset the last finished run restored there (task.restored_before): an object added to a peer archive
    since, inside what was restored, shifts the later records, and records that repeat hide the shift from
    the content check (skip_records)."""
    expected = iter(offset for first, count in task.restored_before for offset in range(first, first + count))
    compared = min(present, sum(count for _, count in task.restored_before))
    seen = 0
    for batch in batches:
        if seen < compared:
            for offset in batch.column("offset").slice(0, compared - seen).to_pylist():
                was = next(expected)
                if offset != was:
                    raise TopicvaultError(
                        f"{task.target_topic}[{task.partition}]: source offset {offset} now comes where restore "
                        f"{task.restore_id} restored source offset {was} (target offset {task.target_start + seen}): "
                        f"records were added to the archive inside what the restore already restored (an object that "
                        "arrived late), which cannot go in in order now; restore into a new topic with a new "
                        "--restore-id"
                    )
                seen += 1
        yield batch


def check_not_within_written(task: RestoreTask, entry: ObjectEntry, before: int, present: int) -> None:
    """Refuse to leave out an object an earlier run of the restore went past (checked before its hole is saved).

    `before` records are selected ahead of the object and the target holds `present`: more means the
    target holds records an earlier run produced from this object or after it (one it left out would be
    a saved hole, never read again). Leaving it out now shifts every later record onto the place of
    the object's own, and the content check (skip_records) cannot see that where records repeat.
    """
    if present <= before:
        return
    raise TopicvaultError(
        f"{task.target_topic}[{task.partition}] already holds {present} records after offset {task.target_start}, "
        f"more than the {before} selected before object {entry.key}, which cannot be read now: an earlier run restored "
        "records of it or after it, so leaving it out would splice the partition; repair or restore the object and "
        "run again, or restore into a new topic with a new --restore-id"
    )


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


def drained_offset_map(task: RestoreTask, taken: OffsetMap, left_out: Iterable[SkippedObject]) -> OffsetMap:
    """A task's offset map once its batches are drained: the offsets `taken`, with the holes of
    earlier runs and those this one `left_out`."""
    holes = sorted((h.first_offset, h.last_offset) for h in (*task.earlier_holes, *left_out))
    return OffsetMap(task.source_topic, task.partition, task.target_topic, task.target_start, list(taken.ranges),
                     holes=holes)


def _finish(job: RestoreJob, task: RestoreTask, present: int, stream: "_Stream", produced: ProduceResult,
            end: int) -> TaskResult:
    """Fold what the stream's accumulators observed into the task's result, checked against the target."""
    offset_map = drained_offset_map(task, stream.taken, stream.left_out)
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
        offset_map, stream.peer.report() if stream.peer is not None else None,
        (*task.earlier_holes, *stream.left_out), stream.rewritten[0],
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


def plan_restore(job: RestoreJob, request: RestoreRequest) -> RestorePlan:
    """Plan a restore: read the facts (gather_facts), then decide from them alone (build_restore_plan),
    group checks (--groups) and access (--cluster-state) included; the plan is final.

    A missing encryption key stops the restore here, before any topic is created or record produced.
    """
    facts = gather_facts(job, request)
    plan = build_restore_plan(facts, request)
    if facts.layout.commit_log:
        check_keys_open(job.open_store(), (o for (t, _), ps in sorted(facts.archive.partitions.items())
                                           if t in plan.topic_map for o in ps.objects), job.keyring())
    return plan


def _layout_notes(store: ObjectStore, job: RestoreJob, layout: Layout, archive: BackupState,
                  ignored: list[str], seen_before: bool) -> tuple[str, ...]:
    """What the restore says of the layout: what it keeps and loses, objects left out, and hints where a
    peer's content tells another setting than the one assumed (content_hints). The hints read up to
    HINT_OBJECTS objects, so a standby round after one that saw the objects (`seen_before`) does not
    read them again."""
    notes = layout_notes(layout, job.peer_options, job.layout == AUTO, ignored)
    hints = [] if layout.commit_log or seen_before else content_hints(store, layout.name, job.peer_options, archive)
    return tuple(notes + hints)


def gather_facts(job: RestoreJob, request: RestoreRequest) -> RestoreFacts:
    """Read what a restore plan is decided from: the archive, the restore's saved state, the target cluster."""
    store = job.open_store()
    layout = resolve_layout(store, job.layout, job.key_template)
    check_on_error(layout, job.on_error, job.store_uri)  # before a peer archive is listed
    archive, ignored = archive_state(store, layout, job.key_template, job.keyring())
    records = job.restore_records()
    saved = load_restore_state(records, request.restore_id) if request.restore_id else None  # a new id has none
    restore_id = request.restore_id or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    cluster_topics = list_topic_partitions(job.kafka)
    targets = restore_targets(archive, saved, request, job.store_uri, cluster_topics)
    target = _target_facts(job, cluster_topics, targets, saved, request.allow_nonempty, layout)
    # A peer archive's rerun compares what it counts with the offsets earlier runs restored (restored_before).
    maps_needed = saved is not None and (request.continue_saved or saved.source_starts is None
                                         or not layout.exact_entries)
    return RestoreFacts(
        job.store_uri, layout, archive, target, restore_id,
        int(time.time() * 1000), _layout_notes(store, job, layout, archive, ignored, bool(request.peer_objects_seen)), saved,
        records.state.uri,
        legacy_state_planted=bool(request.restore_id and saved is None and records.planted_in_archive(restore_id)),
        saved_maps=saved_offset_maps(records, restore_id) if maps_needed else {},
        saved_holes=saved_holes(records, restore_id) if saved is not None and layout.skip_supported else {},
        earlier_restores=_earlier_restores(job, records, target, saved is None and not request.allow_nonempty),
        **_access_facts(job, request, archive),
    )


def _access_facts(job: RestoreJob, request: RestoreRequest, archive: BackupState) -> dict:
    """restore --cluster-state: the RestoreFacts fields of the target's access and the passwords given."""
    if request.access is None:
        return {}
    target, passwords = read_cluster_access(job.kafka, request.access, archive, request.selection.until_ms)
    return {"target_access": target, "scram_passwords": passwords}


def _existing_partitions(job: RestoreJob, targets: RestoreTargets) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermarks as written (read_uncommitted) of each partition the restore writes in an
    existing target topic (an open transaction's records are there too)."""
    return partition_watermarks(job.kafka, [(topic, partition) for topic, count in targets.partitions.items()
                                            if topic not in targets.to_create for partition in range(count)],
                                "read_uncommitted")


def _target_facts(job: RestoreJob, cluster_topics: dict[str, int], targets: RestoreTargets,
                  saved: RestoreState | None, allow_nonempty: bool, layout: Layout) -> TargetFacts:
    """What the target cluster holds that the plan depends on (each read only where the plan may use it)."""
    watermarks = _existing_partitions(job, targets)
    holding = [where for where, (low, high) in watermarks.items() if high > low]
    # Topics the restore creates, now or in its first run, get loading configs and, later, their own.
    first_start = saved is None
    creates = bool(targets.to_create) if first_start else bool(saved.topic_configs)
    existing = set(targets.partitions) - set(targets.to_create)
    return TargetFacts(
        job.kafka.bootstrap_servers, cluster_topics, watermarks,
        ends=partition_ends(job.kafka, holding) if first_start and allow_nonempty and holding else {},
        brokers=broker_count(job.kafka) if first_start and targets.to_create else 0,
        loading=cluster_loading_configs(job.kafka) if creates else dict(LOADING_CONFIGS),
        retention_ms=retention_ms(job.kafka, existing) if layout.exact_entries and existing else {},
        default_retention_ms=default_retention_ms(job.kafka) if layout.exact_entries and creates else None,
        retention_bytes=retention_bytes(job.kafka, existing) if layout.exact_entries and existing else {},
        default_retention_bytes=default_retention_bytes(job.kafka) if layout.exact_entries and creates else None,
        topic_ids=_created_topic_ids(job, saved, cluster_topics),
    )


def _created_topic_ids(job: RestoreJob, saved: RestoreState | None, cluster_topics: dict[str, int]) -> dict[str, str]:
    """The topic id of each existing topic a resumed restore's state says it created ("": the broker gives none)."""
    existing = [topic for topic in (saved.created_topics if saved is not None else {}) if topic in cluster_topics]
    ids = topic_ids(job.kafka, existing)
    return {topic: ids.get(topic, "") for topic in existing}


def _earlier_restores(job: RestoreJob, records: RestoreRecords, target: TargetFacts,
                      refused_if_holding: bool) -> dict[str, list[str]]:
    """Restores from this archive into each target topic holding records, where a first start refuses
    it as non-empty (the refusal names the restore to resume)."""
    if not refused_if_holding:
        return {}
    holding = sorted({topic for (topic, _), (low, high) in target.watermarks.items() if high > low})
    return {topic: restores_into(records, job.kafka.bootstrap_servers, topic) for topic in holding}



def start_restore(job: RestoreJob, plan: RestorePlan) -> set[str]:
    """Save the restore's state (first start; later, starts of partitions planned for the first time),
    then create missing topics with loading configs and record those it created with their topic ids.
    Returns the topics it created (a topic someone else created in between is not among them)."""
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
    try:
        created = create_topics(job.kafka, plan.topics_to_create, replication_by_topic=plan.replication,
                                configs_by_topic={t: loading_configs(plan.topic_configs.get(t, {}), plan.loading)
                                                  for t in plan.topics_to_create})
    except TopicsNotCreated as refused:
        # Those it did create are this restore's: recorded, so a rerun configures them (#50.2).
        _record_created(job, plan, refused.created)
        raise
    _record_created(job, plan, created)
    return created


def _record_created(job: RestoreJob, plan: RestorePlan, created: set[str]) -> None:
    """Save the topics this restore's CreateTopics created, with their topic ids, in its state."""
    ids = topic_ids(job.kafka, created, just_created=True)
    add_created_topics(job.restore_records(), plan.restore_id, {topic: ids.get(topic, "") for topic in created})


def configured_topics(plan: RestorePlan, created: set[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The configs a run sets: the plan's, but for a topic the plan meant to create and found already
    there (someone else's), which is left as it is; and a note for each such topic."""
    skipped = sorted(set(plan.topics_to_create) - created)
    notes = [f"{topic}: the restore did not create it (it was created by someone else after the restore was "
             "planned), so its configs are left as they are; check them" for topic in skipped]
    return {t: c for t, c in plan.topic_configs.items() if t not in skipped}, notes


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
    configs, notes = configured_topics(plan, start_restore(job, plan))
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
    # The tasks' results are their whole outcome: merged and saved once, here.
    outcome = merged_outcome(plan, results)
    save_outcome(job.restore_records(), plan.restore_id, outcome)
    if configure:
        apply_topic_configs(job.kafka, configs, plan.loading)
    return RestoreResult(plan, results, time.monotonic() - started, access, outcome, notes)


def run_one_restore(job: RestoreJob, plan: RestorePlan, choice: ExecutorChoice, master: str | None,
                    quiet: bool = False) -> RestoreResult:
    """Open the executor `choice` names (Spark's task session, or this process), show progress unless
    `quiet`, and run the planned restore. Ctrl-C raises core.process.Interrupted saying how to resume."""
    with interrupt_says(lambda: f"interrupted; resume with --restore-id {plan.restore_id}"):
        spark = open_executor(choice, master)
        with ProgressMonitor("restore", plan.records, len(plan.tasks), monitored(spark), quiet=quiet) as progress:
            return run_restore(spark, replace(job, progress_dir=progress.directory), plan)
