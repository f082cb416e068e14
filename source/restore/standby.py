"""`restore --follow`: a warm standby that keeps restoring what lands in the archive.

A follow is one restore (one restore id) run in rounds. Each round plans from the archive's
current state and restores only what earlier rounds did not: it starts every partition after
the offset map the restore saved (RestoreRequest.continue_saved), so a round reads only
new objects and counts only what the target got since that map. The map is saved after the
round's producers flushed, so a run killed at any point and started again with the same
--restore-id finds the target holding a prefix of the round it was in, counts it and goes on:
nothing twice, nothing lost (the same guard as any resumed restore).

Between rounds the follower waits `poll_interval_s`, then asks the archive whether anything is
new with one request (topicvault: does the next commit record exist; a peer archive: one
listing, compared with the objects of the last round). A stop request is seen while waiting
and after a round; the running round always finishes, so its state is saved.

A peer object that lands (or is written again) and may hold offsets at or before what a partition
restored (named at or before it; any, where a name carries an object's last offset) is read once
after its round: the round restored its records after that point, but one at or before
it that the offset map does not hold (say, inside a gap an earlier round reported) cannot go in
now, since a standby restores each partition in offset order. Those records are left out like an
unreadable object (late_peer_records): named in every round's report, saved with the restore so
a restart names them too, and the run ends with the exit status of a restore that left records
out. Records it only re-delivers get a note.

Topic configs: while it follows, the topics the restore created keep their loading configs
(unlimited retention, delete policy, CreateTime), and get their saved configs when the standby
stops for good (`stop` set: SIGTERM or Ctrl-C), so it then looks like its source. A compacting
or expiring target would delete records of a round a kill interrupts, and the restart, which
counts what the target holds after the saved map's end, would count too few and produce some
twice. Every round of a resumed standby sets the loading configs again before it counts or
produces (restore.run_restore), so neither a restart after a clean stop nor a one-shot rerun of
the same id that applied the saved configs in between leaves a round producing into them.
A failed round leaves them as they are (the standby is meant to be restarted).

Maintenance of the archive: a compact commit replaces objects with merged ones over the same
offsets; a round selects records by offset after the saved map (Selection.after), so it reads
the merged object and restores only what is new. An expire commit that dropped records the
standby has not restored stops the round with an error naming the offsets gone
(restore.check_not_expired): following on would splice the standby's copy.

Lost ranges (offsets retention deleted before any backup read them, recorded by a backup): each
round names those it steps over that no earlier round of the run named, in its notes and, in
`--json`, under "lost"; a restarted standby names them all again in its first round.

Consumer groups (`groups`): after each round the saved offsets are translated through the whole
map and committed, so a group never points past what the standby holds; a group with members on
the target (the standby is in use) is left alone and named.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Callable

from ...core.archive.archive_keys import commit_key
from ...core.archive.checkpoints import read_forward
from ...core.archive.commits import BackupState, CommitRecord, PartitionRange, lost_note
from ...core.cluster.cluster_admin import apply_topic_configs, check_group_inactive, commit_group_offsets
from ...core.errors import NoBackup, ObjectNotFound, TopicvaultError
from ...core.process import stop_on_signals
from ...core.restarts import RestartBudget, pause
from ...core.spark import failure_reason, get_spark
from ...core.text import plural
from ...formats.peers import PeerKey, peer_layout
from ..object_reader import SkippedObject
from ..peer_layout import decode_peer_object, peer_state
from .offset_map import OffsetMap
from .restore_job import RestoreJob, RestorePlan, RestoreResult, plan_restore, run_restore
from .restore_plan import RestoreRequest
from .restore_state import load_peer_objects_seen, save_peer_objects_seen
from .selection import Selection

DEFAULT_POLL_INTERVAL_S = 10.0


@dataclass(frozen=True)
class StandbyRequest:
    """What to keep restoring (the restore a one-shot run would make, --groups included) and how often
    to look for more."""

    restore: RestoreRequest = RestoreRequest()
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S


def check_follow_options(selection: Selection, poll_interval_s: float) -> None:
    """Refuse values a standby cannot honour, before anything is read or written (options only a
    one-shot restore takes, such as --dry-run, are refused by the CLI, as backup's)."""
    if poll_interval_s <= 0:
        raise TopicvaultError(f"bad --poll-interval {poll_interval_s:g}: give a positive number of seconds")
    if selection.until_ms is not None:
        raise TopicvaultError("--until restores the archive as of a past moment, --follow keeps restoring what "
                              "lands: drop one of them")


class LateRecords(SkippedObject):
    """Records of a peer object that landed after the standby had restored past their offsets: they
    are left out of this restore for good (its fields as SkippedObject's; `records` counts these only)."""

    def describe(self) -> str:
        """One line naming what is missing from the standby, why, and what to do."""
        return (f"{self.topic}[{self.partition}] offsets {self.first_offset}..{self.last_offset} left out "
                f"({self.records} records): {self.reason}")


@dataclass(frozen=True)
class PartitionLag:
    """How far one partition of the standby is behind the archive, in source offsets."""

    source_topic: str
    partition: int
    target_topic: str
    archive_end: int  # the offset after the newest record the archive holds
    restored_end: int  # the offset after the newest record restored (or left out as unreadable)

    @property
    def behind(self) -> int:
        return max(0, self.archive_end - self.restored_end)


@dataclass(frozen=True)
class FollowRound:
    """What one round restored, and where the standby stands after it."""

    number: int
    restore_id: str
    produced: int
    already_present: int  # found in the target when the round started (a restart resumed them)
    bytes: int
    elapsed_s: float
    lag: tuple[PartitionLag, ...]
    archive_sequence: int  # the newest commit restored (topicvault archives; 0 for a peer's)
    commit_age_s: float | None  # how long ago that commit was written: how stale the standby is
    newest_sequence: int = 0  # the archive's newest commit when the round ended (later ones: the next round's)
    skipped: tuple[SkippedObject, ...] = ()
    groups_committed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # Ranges the archive records as lost (deleted by retention before a backup read them) that this
    # round stepped over and no earlier round of this run named; each is in `notes` too.
    lost: tuple[PartitionRange, ...] = ()

    def behind_by_topic(self) -> dict[str, int]:
        """Source offsets not yet restored, per target topic."""
        behind: dict[str, int] = {}
        for lag in self.lag:
            behind[lag.target_topic] = behind.get(lag.target_topic, 0) + lag.behind
        return behind

    def line(self) -> str:
        """One human-readable line."""
        topics = "; ".join(self._topic_lag(t, n) for t, n in sorted(self.behind_by_topic().items()))
        as_of = ""
        if self.archive_sequence:
            age = f", written {self.commit_age_s:.1f} s ago" if self.commit_age_s is not None else ""
            newer = self.newest_sequence - self.archive_sequence
            as_of = f"; as of commit {self.archive_sequence}{age}" + (f" ({newer} newer to restore)" if newer > 0 else "")
        resumed = f" ({self.already_present:,} already there)" if self.already_present else ""
        who = f" of restore {self.restore_id}" if self.number == 1 else ""
        return (f"round {self.number}{who}: restored {plural(self.produced, 'record')}{resumed} in {self.elapsed_s:.1f} s; "
                f"{topics or 'nothing to restore yet'}{as_of}")

    def _topic_lag(self, topic: str, behind: int) -> str:
        """How far `topic` is behind the archive: offsets summed over its partitions, and the partition most
        behind with its own offsets (offsets of different partitions do not add up to an offset)."""
        if not behind:
            return f"{topic}: up to date"
        worst = max((x for x in self.lag if x.target_topic == topic), key=lambda x: x.behind)
        return (f"{topic}: {behind:,} offsets behind (most: partition {worst.partition}, restored to offset "
                f"{worst.restored_end:,} of {worst.archive_end:,})")

    def to_json(self) -> dict:
        """For `--json`: one object per round."""
        return {
            "round": self.number, "restore_id": self.restore_id, "produced": self.produced,
            "already_present": self.already_present, "bytes": self.bytes, "elapsed_s": round(self.elapsed_s, 3),
            "archive_sequence": self.archive_sequence, "newest_sequence": self.newest_sequence,
            "commit_age_s": None if self.commit_age_s is None else round(self.commit_age_s, 3),
            "behind": self.behind_by_topic(),
            "partitions": [{"source_topic": x.source_topic, "target_topic": x.target_topic,
                            "partition": x.partition, "archive_end": x.archive_end, "restored_end": x.restored_end,
                            "behind": x.behind} for x in self.lag],
            "skipped": [vars(s) for s in self.skipped], "groups": list(self.groups_committed),
            "notes": list(self.notes),
            **({"lost": [{"topic": r.topic, "partition": r.partition, "first_offset": r.start,
                          "last_offset": r.end - 1} for r in self.lost]} if self.lost else {}),
        }


@dataclass(frozen=True)
class FollowSummary:
    """What a follow run did until it was stopped."""

    restore_id: str | None  # None: stopped while waiting for the first backup
    rounds: int
    produced: int
    skipped: tuple[SkippedObject, ...]


@dataclass(frozen=True)
class FollowRestart:
    """A round that failed (a Python worker crashed in every attempt of a task, ...) and is run again
    from the saved offset map after `delay_s`: the `number`th restart of this run."""

    number: int
    reason: str
    delay_s: float
    in_window: int  # restarts within the window, this one included
    max_restarts: int
    window_s: float

    def line(self) -> str:
        """One human-readable line."""
        return (f"restart {self.number}: the round failed ({self.reason}); restoring again from the saved offsets "
                f"in {self.delay_s:.0f} s ({self.in_window} of at most {self.max_restarts} restarts in "
                f"{self.window_s:.0f} s)")

    def to_json(self) -> dict:
        """For `--json`: one object per restart."""
        return {"restart": self.number, "reason": self.reason, "delay_s": self.delay_s, "in_window": self.in_window,
                "max_restarts": self.max_restarts, "window_s": self.window_s}


def run_standby(job: RestoreJob, request: StandbyRequest, master: str | None, report: Callable[[FollowRound], None],
                on_restart: Callable[[FollowRestart], None], on_wait: Callable[[NoBackup], None],
                say: Callable[[str], None], started: Callable[[], None]) -> FollowSummary:
    """`restore --follow` until SIGTERM or Ctrl-C: check the options, start Spark with task retries,
    call `started()` once signals are handled, then follow_restore. The first signal finishes the
    running round (`say` tells so); a second ends the process at once (the last finished round's
    state is saved, and a restart with the same restore id continues exactly)."""
    check_follow_options(request.restore.selection, request.poll_interval_s)
    stop = threading.Event()

    def stopping() -> None:
        say("stopping: finishing the running round, then saving its state")
        stop.set()

    spark = get_spark(master, retry_tasks=True)  # a crashed worker costs a task attempt, not the follower
    stop_on_signals(stopping, second_ends_process=True)
    started()
    return follow_restore(spark, job, request, stop, report, on_restart, on_wait)


def follow_restore(spark, job: RestoreJob, request: StandbyRequest, stop: threading.Event,
                   report: Callable[[FollowRound], None],
                   on_restart: Callable[[FollowRestart], None] = lambda restart: None,
                   on_wait: Callable[[NoBackup], None] = lambda nothing_yet: None) -> FollowSummary:
    """Restore what the archive holds, then what lands in it, until `stop` is set.

    A standby started before its first backup (a new restore id and no backup at the location yet)
    waits for it, passing the reason to `on_wait` once. Each finished round is passed to `report`. Resumable like any restore: run again with the
    same restore id after a kill and it continues exactly once; a round that fails other than
    by a TopicvaultError is run again that way in this process (passed to `on_restart`), a
    bounded number of times (core.restarts).
    """
    progress = _progress_of(job, request)
    restarts = RestartBudget()
    while True:
        plan = _plan_round(job, request, progress, stop, on_wait)
        if plan is None:  # stopped while waiting for the first backup
            return FollowSummary(None, 0, 0, ())
        progress.restore_id, progress.topics = plan.restore_id, tuple(sorted(plan.topic_map))
        try:
            result = run_restore(spark, job, plan, configure=False)
        except TopicvaultError:
            raise
        except Exception as exc:  # Py4JJavaError: a task failed in every attempt (its worker crashed, ...)
            progress.acknowledged = False  # the target may hold part of the round: a resume counts it (see plan_restore)
            if not _restart_after(exc, restarts, stop, on_restart):
                # Stopped: the loading configs stay, as after any failed round (the standby is meant to be restarted).
                return progress.summary()
            continue
        progress.acknowledged = True
        report(_finish_round(job, request, plan, result, progress))
        if stop.is_set() or not _wait_for_news(job, plan, request.poll_interval_s, stop):
            apply_topic_configs(job.kafka, plan.topic_configs, plan.loading)  # stopped for good: the standby looks like its source
            return progress.summary()


@dataclass
class _Progress:
    """What a follow run carries from one round to the next."""

    restore_id: str | None
    topics: tuple[str, ...]  # none: all of the archive's, or those the restore id began with (plan_restore)
    number: int = 0  # rounds finished
    produced: int = 0
    skipped: dict[SkippedObject, None] = field(default_factory=dict)  # every round names them again: each once, in order
    committed_groups: dict[str, dict] = field(default_factory=dict)
    # A peer archive's objects at the last finished round, (key, size) (empty: none yet), and the
    # records of late objects left out; saved each round, so a restarted standby still tells an object
    # written again while it was down, and still names what it left out.
    seen: set[tuple[str, int]] = field(default_factory=set)
    left_out: list[LateRecords] = field(default_factory=list)
    # (topic, partition, end) of lost ranges named: an expire may clip a start.
    named_lost: set[tuple[str, int, int]] = field(default_factory=set)
    acknowledged: bool = False  # every record sent so far was acknowledged: the last round finished

    def summary(self) -> FollowSummary:
        return FollowSummary(self.restore_id, self.number, self.produced, tuple(self.skipped))


def _progress_of(job: RestoreJob, request: StandbyRequest) -> _Progress:
    """A follow run's progress at its start: what the restore saved of a peer archive's objects, if any."""
    progress = _Progress(request.restore.restore_id, request.restore.topics)
    if request.restore.restore_id:
        saved_seen, saved = load_peer_objects_seen(job.restore_records(), request.restore.restore_id)
        # None saved while offsets were restored (a one-shot restore continued, or a standby killed in its
        # first round): every object is read once more, since any may have landed after what was restored.
        progress.seen = saved_seen or set()
        progress.left_out = [LateRecords(**fields) for fields in saved]
    return progress


def _plan_round(job: RestoreJob, request: StandbyRequest, progress: _Progress, stop: threading.Event,
                on_wait: Callable[[NoBackup], None]) -> RestorePlan | None:
    """The next round's plan; before the first backup exists, wait for it (None: stopped meanwhile)."""
    waiting = False
    while True:
        try:
            # Groups are committed after each round (_finish_round), those first saved later too: a
            # round's plan does not check them.
            return plan_restore(job, replace(
                request.restore, topics=progress.topics, restore_id=progress.restore_id, groups=False,
                only_groups=(), continue_saved=True, peer_objects_seen=progress.seen,
                earlier_writes_acknowledged=progress.acknowledged))
        except NoBackup as nothing_yet:
            if progress.number:  # the backup this run restored from is gone
                raise
            if not waiting:
                on_wait(nothing_yet)
                waiting = True
            if not pause(request.poll_interval_s, stop.is_set):
                return None


def _restart_after(failure: Exception, restarts: RestartBudget, stop: threading.Event,
                   on_restart: Callable[[FollowRestart], None]) -> bool:
    """Wait to run a failed round again (True), or False if stopped meanwhile; refuses once the budget is spent."""
    reason = failure_reason(str(failure))
    delay = restarts.next_delay()
    if delay is None:
        raise TopicvaultError(restarts.give_up("restore --follow", reason)) from None
    on_restart(FollowRestart(restarts.total, reason, delay, len(restarts.times), restarts.max_restarts,
                             restarts.window_s))
    return pause(delay, stop.is_set)


def _finish_round(job: RestoreJob, request: StandbyRequest, plan: RestorePlan, result: RestoreResult,
                  progress: _Progress) -> FollowRound:
    """Record what a round did: late peer objects checked and saved, groups committed, lost ranges named."""
    late_notes: list[str] = []
    if not plan.archive_layout.commit_log:
        check = late_peer_records(job, plan, progress.seen, progress.left_out)
        progress.left_out, late_notes = progress.left_out + check.left_out, check.notes
        progress.seen = _objects_of(plan) - check.gone
        # Saved with what was left out, after the round: a kill before this reads the late objects again.
        save_peer_objects_seen(job.restore_records(), plan.restore_id, progress.seen,
                               [vars(x) for x in progress.left_out])
    progress.number += 1
    moved: list[str] = []
    group_notes: list[str] = []
    if request.restore.groups:
        moved, group_notes = _commit_groups(job, plan.restore_id, request.restore.only_groups,
                                            progress.committed_groups)
    lost = [r for r in lost_ranges(plan) if (r.topic, r.partition, r.end) not in progress.named_lost]
    progress.named_lost.update((r.topic, r.partition, r.end) for r in lost)
    this_round = _round(job, plan, result, progress.number, tuple(moved), tuple(late_notes + group_notes),
                        tuple(progress.left_out), tuple(lost))
    progress.produced += this_round.produced
    progress.skipped.update(dict.fromkeys(this_round.skipped))
    return this_round


def _objects_of(plan: RestorePlan) -> set[tuple[str, int]]:
    """The archive's objects the plan was made from, as (key, size)."""
    return {(o.key, o.bytes) for ps in plan.archive.partitions.values() for o in ps.objects}


@dataclass(frozen=True)
class LateCheck:
    """What checking a round's late peer objects found (see late_peer_records)."""

    left_out: list[LateRecords]  # records the standby can no longer restore, not named before
    notes: list[str]
    # Late objects deleted before they could be read: left out of the objects seen, so that one
    # written again under the same name and size is checked then.
    gone: set[tuple[str, int]]


def late_peer_records(job: RestoreJob, plan: RestorePlan, seen: set[tuple[str, int]],
                      named: Sequence[LateRecords] = ()) -> LateCheck:
    """The records of late peer objects that the standby can no longer restore, and notes.

    A late object is new or written again since the last round (not in `seen`) and may hold offsets
    at or before what its partition had restored (the plan's saved map): one named at or before it,
    or, where a name carries an object's last offset (Lenses), any. The round restored its records
    after that point; those at or before it are read (one object at a time) and checked against
    the map: each run of offsets it does not hold, and no record of `named` names, is left out for
    good, since a standby restores a partition in offset order. An object holding only restored
    offsets there (a sink's re-delivery) gets a note.
    """
    store, peer = job.open_store(), peer_layout(plan.layout, job.key_template)
    check = LateCheck([], [], set())
    for (source, partition), ps in sorted(plan.archive.partitions.items()):
        done = plan.restored.get((source, partition))
        through = done.last_source_offset if done is not None else None
        if source not in plan.topic_map or through is None:
            continue
        first, last = plan.selection.bounds(source, partition)  # offsets the user did not select are not missing
        already = [(x.first_offset, x.last_offset) for x in [*named, *check.left_out]
                   if (x.topic, x.partition) == (source, partition)]
        for entry in ps.objects:
            if (entry.key, entry.bytes) in seen or (peer.name_offset_is_first and entry.first_offset > through):
                continue
            try:
                decoded = decode_peer_object(store, peer, job.peer_options,
                                             PeerKey(entry.key, source, partition, entry.first_offset))
            except ObjectNotFound:
                check.gone.add((entry.key, entry.bytes))
                check.notes.append(f"{source}[{partition}]: object {entry.key} landed after offsets up to {through} were "
                                   "restored and was gone before it could be checked for records the standby lacks; "
                                   "it is checked if it comes back")
                continue
            offsets = sorted({o for o in decoded.table.column("offset").to_pylist()
                              if first <= o <= through and (last is None or o <= last)
                              and not any(a <= o <= b for a, b in already)})
            del decoded
            runs = _runs_not_held(offsets, done.holds(offsets))
            found = [LateRecords(
                entry.key, source, partition, run_first, run_last, count,
                f"object {entry.key} landed (or was written again) after the standby had restored up to offset "
                f"{through}, and a standby restores each partition in offset order; restore these offsets into a "
                "new topic with a new --restore-id") for run_first, run_last, count in runs]
            check.left_out.extend(found)
            already += [(x.first_offset, x.last_offset) for x in found]
            if offsets and not runs:
                check.notes.append(f"{source}[{partition}]: object {entry.key} appeared (or was written again) after "
                                   f"offsets up to {through} were restored: its records up to {through} were restored "
                                   "already (re-delivered by the sink), those after it are restored")
    return check


def _runs_not_held(offsets: list[int], held: list[bool]) -> list[tuple[int, int, int]]:
    """(first, last, count) of each run of `offsets` (ascending) not held, split where a held one lies between."""
    runs = []
    for missing, group in groupby(zip(offsets, held), key=lambda pair: not pair[1]):
        if missing:
            run = [offset for offset, _ in group]
            runs.append((run[0], run[-1], len(run)))
    return runs


def lost_ranges(plan: RestorePlan) -> list[PartitionRange]:
    """The ranges the archive records as lost in the partitions the plan restores."""
    return [r for (source, _), ps in sorted(plan.archive.partitions.items()) if source in plan.topic_map
            for r in ps.lost]


def _round(job: RestoreJob, plan: RestorePlan, result: RestoreResult, number: int, groups: tuple[str, ...],
           extra_notes: tuple[str, ...], left_out: tuple[LateRecords, ...],
           lost: tuple[PartitionRange, ...]) -> FollowRound:
    maps = list(result.outcome.offset_maps)  # what run_restore merged and saved (merged_outcome)
    # The first round's plan notes name every lost range already; a later round names those new to it.
    notes = tuple(plan.notes if number == 1 else [lost_note(r) for r in lost]) + tuple(
        line for r in result.results if r.peer_report is not None for line in r.peer_report.lines()) + extra_notes
    sequence, archive = 0, plan.archive
    if plan.archive_layout.commit_log:
        # Commits that landed while the round ran: what the standby is behind by now.
        sequence, archive = plan.archive.last_sequence, archive_with_newer_commits(job, plan.archive)
    return FollowRound(
        number, plan.restore_id, result.produced, sum(r.already_present for r in result.results), result.bytes,
        result.elapsed_s, tuple(standby_lag(archive, plan.topic_map, maps)), sequence, _commit_age_s(job, sequence),
        newest_sequence=archive.last_sequence, skipped=tuple(result.skipped) + left_out, groups_committed=groups,
        notes=notes, lost=lost,
    )


def archive_with_newer_commits(job: RestoreJob, archive: BackupState) -> BackupState:
    """The partitions of `archive` with the commits after it folded in (one listing, one GET each);
    `archive` itself is left as it is.

    Every object is kept in the copy: a compact or expire commit removes objects by key, and
    folding it onto less than the whole state would find them missing ("inconsistent").
    """
    newer = BackupState(archive.last_sequence, {
        where: replace(ps, objects=list(ps.objects), lost=list(ps.lost), commit_times=list(ps.commit_times))
        for where, ps in archive.partitions.items()}, retired=dict(archive.retired),
        authenticated_from=archive.authenticated_from)
    return read_forward(job.open_store(), newer, keyring=job.keyring())


def standby_lag(archive: BackupState, topic_map: Mapping[str, str], maps: list[OffsetMap]) -> list[PartitionLag]:
    """Per restored partition: the archive's newest offset against the newest restored one."""
    restored = {(m.source_topic, m.partition): m.last_source_offset for m in maps}
    lags = []
    for (source, partition), ps in sorted(archive.partitions.items()):
        if source not in topic_map:
            continue
        # A peer's entries carry the offset in the object's name (first or last of the object).
        if not ps.objects:
            continue
        done = restored.get((source, partition))
        lags.append(PartitionLag(source, partition, topic_map[source], max(o.last_offset for o in ps.objects) + 1,
                                 0 if done is None else done + 1))
    return lags


def _commit_age_s(job: RestoreJob, sequence: int) -> float | None:
    if not sequence:
        return None
    try:
        record = CommitRecord.from_json(job.open_store().get(commit_key(sequence)), commit_key(sequence))
    except ObjectNotFound:
        return None
    return max(0.0, time.time() - record.created_ms / 1000)


def _wait_for_news(job: RestoreJob, plan: RestorePlan, interval_s: float, stop: threading.Event) -> bool:
    """Wait until the archive holds something the plan did not (True) or `stop` is set (False)."""
    store = job.open_store()
    if plan.archive_layout.commit_log:
        next_key = commit_key(plan.archive.last_sequence + 1)

        def news() -> bool:
            return store.head(next_key) is not None  # one request per poll
    else:
        known = {(o.key, o.bytes) for ps in plan.archive.partitions.values() for o in ps.objects}

        def news() -> bool:  # an object new, or written again under its name (another size)
            state, _ = peer_state(store, plan.layout, job.key_template)  # one listing per poll
            return any((o.key, o.bytes) not in known for ps in state.partitions.values() for o in ps.objects)
    while not stop.wait(interval_s):
        if news():
            return True
    return False


def _commit_groups(job: RestoreJob, restore_id: str, only: tuple[str, ...],
                   committed: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Commit each saved group's translated offsets that moved since the last round; returns the
    groups moved and notes (groups active on the target are left alone)."""
    from ..cluster_restore.group_restore import (
        translate_groups,  # groups imports restore: loaded when groups are followed
    )

    positions: dict[str, dict] = {}
    for offset in translate_groups(job, restore_id):
        if not only or offset.group in only:
            positions.setdefault(offset.group, {})[(offset.target_topic, offset.partition)] = offset.target_offset
    moved, notes = [], []
    for group, offsets in sorted(positions.items()):
        if committed.get(group) == offsets:
            continue
        try:
            check_group_inactive(job.kafka, group)
        except TopicvaultError as exc:
            notes.append(f"{exc}; its offsets are not moved while it is active")
            continue
        commit_group_offsets(job.kafka, group, offsets)
        committed[group] = offsets
        moved.append(group)
    return moved, notes
