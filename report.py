"""What the CLI prints: summaries and listings as plain data, rendered as a table or JSON.

Each command's report is a list of `Line`s (stdout or stderr, in the order they are printed),
built from the result objects the library returns. It sits beside cli.py, above sink/ and
source/, so it names their types; the wording every module shares is core.text.
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from .core.archive.commits import BackupState, ObjectEntry
from .core.cluster.cluster_access import PASSWORD_ENV_PREFIX, AccessPlan, AccessState
from .core.errors import TopicvaultError
from .core.process import Interrupted
from .core.profiles import scrub
from .core.text import iso, plural, rate, show_text, table, terminal_text, to_json
from .formats.saved_registry import check_saved, ids_lacking, registry_summary

if TYPE_CHECKING:  # the CLI imports this module at start; the library's modules only when a command runs
    from .core.executor import ExecutorChoice
    from .core.local.sandbox import Sandbox
    from .sink.backup import BackupResult
    from .sink.continuous_backup import FollowResult
    from .sink.plan import BackupPlan, PartitionPlan
    from .source.cluster_restore.group_restore import GroupOffset
    from .source.maintenance.compact import CompactResult
    from .source.maintenance.expire import ExpireResult
    from .source.maintenance.garbage import Collected
    from .source.object_reader import SkippedObject
    from .source.restore.restore_job import RestorePlan, RestoreResult
    from .source.restore.standby import FollowRestart, FollowRound, FollowSummary
    from .source.verify import VerifyReport

__all__ = ["Line", "show_text", "terminal_text"]  # the CLI prints through these two too


@dataclass(frozen=True)
class Line:
    """One line a command prints; `err`: on stderr (warnings, notes, progress of a long run)."""

    text: str
    err: bool = False


def _out(text: str) -> Line:
    return Line(text)


def _err(text: str) -> Line:
    return Line(text, err=True)


def topic_summary(objects: Iterable[ObjectEntry], elapsed_s: float) -> list[dict]:
    """Per topic: partitions, records, bytes and the time span of the records."""
    by_topic: dict[str, list[ObjectEntry]] = {}
    for entry in objects:
        by_topic.setdefault(entry.topic, []).append(entry)
    return [
        {
            "topic": topic,
            "partitions": len({e.partition for e in entries}),
            "records": sum(e.records for e in entries),
            "bytes": sum(e.bytes for e in entries),
            "first_time": iso(min(e.min_timestamp_ms for e in entries)),
            "last_time": iso(max(e.max_timestamp_ms for e in entries)),
            "elapsed_s": round(elapsed_s, 1),
        }
        for topic, entries in sorted(by_topic.items())
    ]


def median_size(entries: Iterable[ObjectEntry]) -> int | None:
    """The median stored size of objects in bytes (rounded), or None when there are none."""
    sizes = [e.bytes for e in entries]
    return round(statistics.median(sizes)) if sizes else None


SUMMARY_COLUMNS = ["topic", "partitions", "records", "bytes", "first_time", "last_time", "elapsed_s"]


def listing(state: BackupState) -> dict:
    """`ls` as data: every partition's range, records, objects, bytes and time span; also the
    partitions of saved topics that no commit covered offsets of (start and end None), which a
    restore creates (issue #50 item 18)."""
    partitions = [{"topic": topic, "partition": partition, "start": None, "end": None, "records": 0, "objects": 0,
                   "median_object_bytes": None, "bytes": 0, "first_time": None, "last_time": None, "lost": []}
                  for topic, settings in state.topics.items() for partition in range(settings.get("partitions", 0))
                  if (topic, partition) not in state.partitions]
    for (topic, partition), ps in state.partitions.items():
        partitions.append({
            "topic": topic,
            "partition": partition,
            "start": ps.start,
            "end": ps.end,
            "records": ps.records,
            "objects": len(ps.objects),
            # Many small objects make a restore slow and a listing long: compact them.
            "median_object_bytes": median_size(ps.objects),
            "bytes": sum(o.bytes for o in ps.objects),
            "first_time": iso(min((o.min_timestamp_ms for o in ps.objects), default=None)),
            "last_time": iso(max((o.max_timestamp_ms for o in ps.objects), default=None)),
            "lost": [[r.start, r.end] for r in ps.lost],  # [start, end) offsets deleted before a backup read them
        })
    partitions.sort(key=lambda p: (p["topic"], p["partition"]))
    return {
        "partitions": partitions,
        "records": sum(p["records"] for p in partitions),
        "objects": sum(p["objects"] for p in partitions),
        "median_object_bytes": median_size(o for ps in state.partitions.values() for o in ps.objects),
        "commits": state.last_sequence,
        "topics": state.topics,
        "groups": sorted(state.groups),
        # Each group's saved snapshots over time: a restore --until TIME gets the one read at or before TIME.
        # "uncertain": how many were read at a time off by more than UNCERTAIN_SNAPSHOT_MS (and the most).
        "group_snapshots": {
            group: {**dict(zip(("first_time", "last_time", "count"), (iso(first), iso(last), count))),
                    **_uncertainty(state.group_history[group])}
            for group in sorted(state.group_history)
            for first, last, count in [state.group_span(group)]
        },
        "stream": state.last_stream,
        "topic_ids": state.topic_ids,
        "lost": [note for ps in sorted(state.partitions.values(), key=lambda ps: (ps.topic, ps.partition))
                 for note in ps.lost_notes()],
        # Client-side encryption: how many committed objects each key id wrapped (unencrypted: none).
        "encryption_keys": {key_id: count for key_id, count in sorted(Counter(
            o.key_id for ps in state.partitions.values() for o in ps.objects if o.key_id).items())},
        **_access_listing(state),
        **_registry_listing(state),
    }


def _access_listing(state: BackupState) -> dict:
    """The saved ACLs and SCRAM users (restore --cluster-state) and how often they changed; nothing
    when no backup saved any."""
    if not state.access_history:
        return {}
    history = state.access_history
    return {"access": {"summary": AccessState.from_json(state.access).summary(), "changes": len(history),
                       "first_time": iso(history[0]["read_ms"]), "last_time": iso(history[-1]["read_ms"])}}


def _registry_listing(state: BackupState) -> dict:
    """The saved schema registry (subjects, versions, newest change) and the schema ids the records
    use that it lacks; nothing when no backup saved one and no record carries an id."""
    used = state.schema_ids
    if not state.registry_history and not used:
        return {}
    saved = state.registry_at(None)
    listing: dict = {"used_ids": len(used), "used_ids_lacking": ids_lacking(used, saved)}
    if saved is not None:
        try:
            listing.update(registry_summary(check_saved(saved)))
        except ValueError as exc:
            listing["damaged"] = str(exc)
        listing["changes"] = len(state.registry_history)
        listing["last_time"] = iso(state.registry_history[-1]["read_ms"])
    return {"schema_registry": listing}


def _listed(ids: Sequence[int], limit: int = 20) -> str:
    """Schema ids as "1, 2, …" (the first `limit`)."""
    return ", ".join(map(str, ids[:limit])) + (", …" if len(ids) > limit else "")


def _registry_lines(registry: dict | None) -> list[Line]:
    """`ls`'s lines on the saved schema registry (see _registry_listing)."""
    if registry is None:
        return []
    lines = []
    if "damaged" in registry:
        lines.append(_err(f"warning: the saved schema registry is damaged: {registry['damaged']}"))
    elif "subjects" in registry:
        deleted = f" ({registry['deleted_subjects']} soft-deleted)" if registry["deleted_subjects"] else ""
        lines.append(_out(f"schema registry: {plural(registry['subjects'], 'subject')}{deleted}, "
                          f"{plural(registry['versions'], 'version')}, {plural(registry['ids'], 'schema id')}; "
                          f"saved {plural(registry['changes'], 'time')}, newest change {registry['last_time']}"))
    lacking = registry["used_ids_lacking"]
    if lacking:
        shown = _listed(lacking)
        where = "the saved schema registry lacks" if "subjects" in registry else "no schema registry was saved for"
        lines.append(_out(f"schema ids used by records that {where}: {shown} (back up with --schema-registry URL)"))
    return lines


# --- backup ------------------------------------------------------------------------------------

def backup_plan_warnings(plan: BackupPlan, as_json: bool) -> list[Line]:
    """A sink.plan.BackupPlan's warnings on stderr (with --json they are part of the JSON instead)."""
    return [] if as_json else [_err(f"warning: {warning}") for warning in plan.warnings]


def backup_plan(plan: BackupPlan, dry_run: bool, committed: str | None, as_json: bool) -> list[Line]:
    """A backup that reads no records: the plan of a --dry-run, or "nothing new" (and the commit of
    changed topic settings and group offsets, if one was written)."""
    if as_json:
        return [_out(to_json({
            "dry_run": dry_run, "tasks": len(plan.tasks), "commit": committed, "warnings": plan.warnings,
            "partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start, "end": p.end}
                           for p in plan.partitions],
        }))]
    lines = [_out(f"{'plan' if dry_run else 'nothing new to back up'}: {len(plan.tasks)} offset ranges")]
    lines += [_out(f"  {p.topic}[{p.partition}] {_partition_plan(p)}") for p in plan.partitions]
    if committed:
        lines.append(_out(f"saved changed topic settings and consumer-group offsets: committed {committed}"))
    return lines


def _partition_plan(p: PartitionPlan) -> str:
    """What a backup reads of one partition (a sink.plan.PartitionPlan): its offsets, or that nothing is new
    (a plan made only to save group offsets lists partitions with an empty range)."""
    if p.records_at_most > 0:
        return f"offsets {p.start}..{p.end - 1} (up to {plural(p.records_at_most, 'record')})"
    return f"nothing new (backed up to offset {p.start - 1})" if p.start > 0 else "no records"


def backup_summary(result: BackupResult, spark_start_s: float, as_json: bool) -> list[Line]:
    """A finished backup (a sink.backup.BackupResult): per-topic table and totals, or JSON."""
    summary = topic_summary(result.objects, result.elapsed_s)
    if as_json:
        return [_out(to_json({
            "records": result.records, "bytes": result.bytes, "objects": len(result.objects),
            "elapsed_s": round(result.elapsed_s, 3), "spark_start_s": round(spark_start_s, 3),
            "commit": result.commit_key, "topics": summary, "warnings": result.plan.warnings + result.warnings,
        }))]
    return [_err(f"warning: {warning}") for warning in result.warnings] + [
        _out(table(summary, SUMMARY_COLUMNS)),
        _out(f"backed up {plural(result.records, 'record')} in {plural(len(result.objects), 'object')} ({result.bytes:,} bytes) "
             f"in {result.elapsed_s:.1f} s ({rate(result.records, result.elapsed_s)}; Spark start "
             f"{spark_start_s:.1f} s); committed {result.commit_key}"),
    ]


def backup_following(topics: list[str], topics_regex: str | None, store_uri: str, flush_interval_s: float) -> Line:
    """The first line of `backup --follow`."""
    return _out(f"following {', '.join(topics) or topics_regex} into {store_uri} "
                f"(a micro-batch every {flush_interval_s:g} s); SIGTERM or Ctrl-C stops")


def backup_follow_stopped(result: FollowResult) -> Line:
    """The last line of `backup --follow` (a sink.continuous_backup result: commits, records, lag)."""
    return _out(f"stopped: {plural(result.commits, 'commit')}, {plural(result.records, 'record')} backed up in this "
                f"run; lag {plural(sum(result.lag.values()), 'record')} at the last commit")


# --- restore -----------------------------------------------------------------------------------

RESTORE_COLUMNS = ["topic", "partitions", "records", "bytes", "elapsed_s"]


def restore_plan_notes(plan: RestorePlan) -> list[Line]:
    """A source.restore.restore_job.RestorePlan's notes on stderr (with --json, in its JSON too)."""
    return [_err(f"note: {note}") for note in plan.notes]


def restore_dry_run(plan: RestorePlan, as_json: bool) -> list[Line]:
    """What `restore --dry-run` would restore, and with --cluster-state which ACLs and users it would change."""
    access = [] if plan.access is None else access_dry_run(plan.access, as_json)
    return _restore_dry_run_records(plan, as_json) + access


def _restore_dry_run_records(plan: RestorePlan, as_json: bool) -> list[Line]:
    if as_json:
        return [_out(to_json({
            "restore_id": plan.restore_id, "records_at_most": plan.records,
            "topics_to_create": plan.topics_to_create, "notes": plan.notes,
            "partitions": [{"source_topic": t.source_topic, "target_topic": t.target_topic,
                            "partition": t.partition, "records_at_most": t.records, "objects": len(t.objects)}
                           for t in plan.tasks],
        }))]
    return [_out(f"plan: up to {plural(plan.records, 'record')} in {plural(len(plan.tasks), 'partition')}")] + [
        _out(f"  {task.source_topic}[{task.partition}] -> {task.target_topic}[{task.partition}]: "
             f"up to {plural(task.records, 'record')} in {plural(len(task.objects), 'object')}")
        for task in plan.tasks]


def access_dry_run(access: AccessPlan, as_json: bool) -> list[Line]:
    """What `restore --cluster-state --dry-run` would change (a core.cluster.cluster_access.AccessPlan): the
    difference between the archive's ACLs and SCRAM users and the target's (on stderr with --json)."""
    line = _err if as_json else _out
    lines = [line(f"ACL to create: {acl.describe()}") for acl in access.create_acls]
    lines += [line(f"ACL on the target the archive does not hold (kept, --merge-acls): {acl.describe()}")
              for acl in access.conflicting_acls]
    lines += [line(f"SCRAM user {user.describe()}: password given: would be created") for user in access.create_users]
    lines += [line(f"SCRAM user {user.describe()}: already on the target: left as it is")
              for user in access.users_present]
    lines += [line(f"SCRAM user {user.describe()}: the target has {user.name} under another mechanism: left "
                   "as it is (--add-scram-mechanisms adds it)") for user in access.mechanisms_not_added]
    lines += [line(f"SCRAM user {user}: no password given: would not be created") for user in
              access.users_without_password]
    if not lines:
        lines.append(line("cluster access: the target already has the archive's ACLs and SCRAM users"))
    return lines


def access_restored(result: RestoreResult) -> list[Line]:
    """What `restore --cluster-state` created (result.access, a core.cluster.cluster_access.AccessApplied), and
    the users it could not create (on stderr: they need the operator)."""
    plan, applied = result.plan.access, result.access
    if plan is None or applied is None:
        return []
    users = f"; SCRAM users created: {', '.join(applied.users_created)}" if applied.users_created else ""
    lines = [_err(f"cluster access: {applied.acls_created} ACL bindings created, "
                  f"{len(plan.conflicting_acls)} of the target's own kept{users}")]
    left = sorted({u.name for u in (*plan.users_present, *plan.mechanisms_not_added)})
    if left:
        lines.append(_err(f"SCRAM users already on the target, left as they are: {', '.join(left)}"
                          + (" (a saved mechanism they lack is added only with --add-scram-mechanisms)"
                             if plan.mechanisms_not_added else "")))
    missing = plan.users_without_password
    if missing:
        lines.append(_err(f"SCRAM users left without a password (not created): {', '.join(missing)}: Kafka never "
                          "gives back their passwords; give them in --scram-passwords FILE or "
                          f"{PASSWORD_ENV_PREFIX}<USER> and run the restore again with --restore-id "
                          f"{result.plan.restore_id}, or create them by hand"))
    return lines


def executor_chosen(choice: ExecutorChoice, quiet: bool) -> list[Line]:
    """Where a one-shot job's tasks run and why, on stderr (nothing when `quiet`)."""
    where = "in this process (no Spark)" if choice.name == "local" else "on Spark"
    return [] if quiet else [_err(f"tasks run {where}: {choice.reason}")]


def restore_started(plan: RestorePlan) -> list[Line]:
    """The restore id to resume with, printed before anything is produced (on stderr, so that
    it is there with --json too, whose stdout carries JSON only)."""
    return [_err(f"restore id {plan.restore_id}{' (resuming)' if plan.resumed else ''}: "
                 "if interrupted, run again with --restore-id to continue")]


def _restore_rows(result: RestoreResult) -> list[dict]:
    rows: dict[str, dict] = {}
    for r in result.results:
        row = rows.setdefault(r.target_topic, {"topic": r.target_topic, "partitions": 0, "records": 0, "bytes": 0,
                                               "elapsed_s": round(result.elapsed_s, 1)})
        row["partitions"] += 1
        row["records"] += r.produced + r.already_present
        row["bytes"] += r.bytes
    return [rows[t] for t in sorted(rows)]


def _skipped_lines(skipped: Iterable[SkippedObject]) -> list[Line]:
    # On stderr with --json too: a hole must not go unnoticed.
    return [_err(f"skipped: {left_out.describe()}") for left_out in skipped]


def _group_lines(committed_groups: list[GroupOffset]) -> list[Line]:
    lines = []
    for name in sorted({g.group for g in committed_groups}):
        moved = [g for g in committed_groups if g.group == name]
        lines.append(_out(f"group {name}: committed {len(moved)} offsets (" + ", ".join(
            f"{g.target_topic}[{g.partition}] {g.source_offset}->{g.target_offset}" for g in moved[:6]
        ) + (", …" if len(moved) > 6 else "") + ")"))
    if not committed_groups:
        lines.append(_out("no consumer-group offsets saved for the restored topics"))
    return lines


def restore_summary(result: RestoreResult, committed_groups: list[GroupOffset] | None, as_json: bool, skipped_exit: int) -> list[Line]:
    """A finished restore (a source.restore.restore_job.RestoreResult) and the group offsets it committed (None:
    --groups not given); ends naming `skipped_exit`, the exit status, when objects were left out."""
    plan = result.plan
    already_present = sum(r.already_present for r in result.results)
    lines = _skipped_lines(result.skipped)
    if as_json:
        lines.append(_out(to_json({
            "skipped": [vars(s) for s in result.skipped],
            "restore_id": plan.restore_id, "produced": result.produced, "already_present": already_present,
            "bytes": result.bytes, "elapsed_s": round(result.elapsed_s, 3),
            "timestamps_replaced": result.timestamps_replaced, "notes": plan.notes + result.notes,
            "peer_findings": [r.peer_report.to_json() for r in result.results if r.peer_report is not None],
            "partitions": [{"target_topic": r.target_topic, "partition": r.partition, "produced": r.produced,
                            "already_present": r.already_present} for r in result.results],
            "groups": [vars(g) for g in committed_groups or []],
        })))
    else:
        lines.append(_out(table(_restore_rows(result), RESTORE_COLUMNS)))
        lines.append(_out(
            f"restored {plural(result.produced, 'record')} ({result.bytes:,} bytes) to "
            f"{', '.join(sorted(set(plan.topic_map.values())))} in {result.elapsed_s:.1f} s "
            f"({rate(result.produced, result.elapsed_s)})"
            + (f"; {already_present:,} were already there" if already_present else "")))
        lines += [_err(f"note: {finding}")
                  for r in result.results if r.peer_report is not None for finding in r.peer_report.lines()]
        lines += [_err(f"note: {note}") for note in result.notes]
        if result.timestamps_replaced:
            lines.append(_err(f"warning: {result.timestamps_replaced} records had timestamp <= 0, which Kafka "
                              "clients cannot produce; they carry the produce time instead"))
        if committed_groups is not None:
            lines += _group_lines(committed_groups)
    if result.skipped:
        lines.append(_err(f"restore finished with {len(result.skipped)} unreadable objects left out (listed "
                          f"above); exit status {skipped_exit}"))
    return lines


def registry_restored(registry, mode: str) -> list[Line]:
    """What `restore --schema-registry` registered (a source.cluster_restore.registry_restore.RegistryRestored; None: nothing asked)."""
    if registry is None:
        return []
    changed = registry.changed
    said = (f"; {plural(len(changed), 'schema id')} changed, rewritten in the records (map saved with the restore)"
            if changed else "; every schema id kept")
    lines = [_err(f"schema registry: {plural(registry.versions, 'version')} registered ({mode}){said}")]
    if registry.subjects_left:
        lines.append(_err(f"schema registry: {plural(len(registry.subjects_left), 'subject')} the target held already "
                          f"left as they were (no soft delete, no compatibility set): "
                          f"{', '.join(registry.subjects_left[:10])}"))
    if registry.global_left:
        lines.append(_err(f"schema registry: the saved global compatibility {registry.global_left} was not set: the "
                          "target held subjects before the restore (set it by hand if it should change)"))
    if registry.import_left:
        lines.append(_err("warning: the target schema registry was in IMPORT mode before this restore and stays so "
                          "(a killed restore with another --restore-id leaves it so; it refuses producers' "
                          "registrations): set READWRITE (PUT /mode) once no import runs"))
    if registry.ids_lacking:
        lines.append(_err(f"warning: records of the archive carry schema ids the saved registry lacks "
                          f"({_listed(registry.ids_lacking)}): they are restored as they are, and a consumer that "
                          "fetches their schema by id from the target finds none (`topicvault ls` names them)"))
    return lines


def registry_dry_run(registry, saved: dict | None) -> list[Line]:
    """What `restore --schema-registry --dry-run` would register (nothing is: the target is not asked);
    `registry`: a source.cluster_restore.registry_restore.RegistryRequest, None when not asked (nothing said)."""
    if registry is None:
        return []
    mode = registry.mode
    if saved is None:
        return [_err("schema registry: the archive saved none (as of --until): a restore with --schema-registry "
                     "would stop")]
    summary = registry_summary(saved)
    return [_err(f"schema registry: would register {plural(summary['versions'], 'version')} of "
                 f"{plural(summary['subjects'], 'subject')} ({mode}); the target registry is not asked in a dry run, "
                 "so whether it keeps the ids shows only when it runs")]


def ids_rewritten(result: RestoreResult, registry) -> list[Line]:
    """How many records `--schema-ids remap` changed (nothing without a registry restore)."""
    if registry is None or not registry.changed:
        return []
    return [_err(f"schema ids rewritten in {plural(result.ids_rewritten, 'record')} (the others are byte-exact)")]


def restore_following(store_uri: str, poll_interval_s: float) -> Line:
    """The first line of `restore --follow` (on stderr: stdout carries the rounds)."""
    return _err(f"following {store_uri} (looking for new data every {poll_interval_s:g} s); SIGTERM or Ctrl-C stops")


def standby_waiting(nothing_yet: Exception, poll_interval_s: float) -> Line:
    """`restore --follow` started before the first backup (a core.errors.NoBackup): it waits, once said."""
    return _err(f"waiting for the first backup ({nothing_yet}; looking again every {poll_interval_s:g} s)")


def follow_round(finished: FollowRound, as_json: bool, quiet: bool) -> list[Line]:
    """One round of `restore --follow` (a source.restore.standby.FollowRound): a line, or a JSON line."""
    lines = _skipped_lines(finished.skipped)
    if as_json:
        return lines + [_out(json.dumps(finished.to_json(), sort_keys=True))]
    lines += [_err(f"note: {note}") for note in finished.notes]
    return lines + ([] if quiet else [_out(finished.line())])


def follow_restart(restart: FollowRestart, as_json: bool) -> list[Line]:
    """A restart of a failed `restore --follow` round (a source.restore.standby.FollowRestart): a line, or a JSON line."""
    return [_out(json.dumps(restart.to_json(), sort_keys=True))] if as_json else [_err(restart.line())]


def follow_stopped(summary: FollowSummary, skipped_exit: int) -> list[Line]:
    """The end of `restore --follow` (a source.restore.standby.FollowSummary); names `skipped_exit`, the exit
    status, when objects were left out."""
    if summary.restore_id is None:
        return [_err("stopped before the first backup landed: nothing restored")]
    lines = [_err(f"stopped: {plural(summary.rounds, 'round')}, {plural(summary.produced, 'record')} restored in this "
                  f"run; restore id {summary.restore_id} (run again with --restore-id {summary.restore_id} to continue)")]
    if summary.skipped:
        lines.append(_err(f"{len(summary.skipped)} objects or ranges of records were left out (listed above); exit status "
                          f"{skipped_exit}"))
    return lines


# --- ls, verify --------------------------------------------------------------------------------

LS_COLUMNS = ["topic", "partition", "offsets", "records", "objects", "median_object_bytes", "bytes",
              "first_time", "last_time"]


# A group snapshot whose time may be off by more than this is named by `ls`: `restore --until TIME
# --groups` near it may pick the snapshot before or after (see core.cluster.cluster_admin.with_clock_skew).
UNCERTAIN_SNAPSHOT_MS = 1000


def _uncertainty(history: list[dict]) -> dict:
    """{"uncertain": count, "max_uncertain_ms": ms} of a group's snapshots whose time is off by more than
    UNCERTAIN_SNAPSHOT_MS ({} when none is)."""
    off = [s.get("uncertain_ms", 0) for s in history if s.get("uncertain_ms", 0) > UNCERTAIN_SNAPSHOT_MS]
    return {"uncertain": len(off), "max_uncertain_ms": max(off)} if off else {}


def ls(state: BackupState, as_json: bool, conditional_writes: str | None = None) -> list[Line]:
    """`ls`: the listing (see `listing`) as JSON, or a table of partitions and what else the location holds;
    `conditional_writes`: what the location remembers of them (core.archive.conditional_writes)."""
    data = listing(state)
    if conditional_writes is not None:
        data["conditional_writes"] = conditional_writes
    if as_json:
        return [_out(to_json(data))]
    rows = [{**p, "offsets": None if p["start"] is None else f"{p['start']}..{p['end'] - 1}"}
            for p in data["partitions"]]
    median = f" (median {data['median_object_bytes']:,} bytes)" if data["objects"] else ""
    lines = [
        _out(table(rows, LS_COLUMNS)),
        _out(f"{plural(len(rows), 'partition')}, {plural(data['records'], 'record')}, "
             f"{plural(data['objects'], 'object')}{median}, {plural(data['commits'], 'commit')}"
             + (f"; consumer groups saved: {', '.join(data['groups'])}" if data["groups"] else "")),
    ]
    spans = data["group_snapshots"].values()
    if spans:
        lines.append(_out(f"consumer-group snapshots: {sum(s['count'] for s in spans)} from "
                          f"{min(s['first_time'] for s in spans)} to {max(s['last_time'] for s in spans)}"))
        uncertain = sum(s.get("uncertain", 0) for s in spans)
        if uncertain:
            worst_s = max(s.get("max_uncertain_ms", 0) for s in spans) / 1000
            lines.append(_out(
                f"{uncertain} consumer-group snapshot{' has' if uncertain == 1 else 's have'} a time uncertain by more "
                f"than a second (up to {worst_s:,.1f} s: records were stamped that far after this host's clock when "
                "they were read, or reading the offsets took that long): restore --until TIME --groups within that "
                "of a snapshot may take the one before or after it"))
    if "access" in data:
        access = data["access"]
        lines.append(_out(f"cluster access: {access['summary']}; saved {access['changes']} time"
                          f"{'s' * (access['changes'] != 1)} from {access['first_time']} to {access['last_time']} "
                          "(restore --cluster-state; client quotas and SCRAM passwords are not saved)"))
    lines += _registry_lines(data.get("schema_registry"))
    lines += [_out(f"lost: {note}") for note in data["lost"]]
    if data["encryption_keys"]:
        lines.append(_out("encrypted: " + ", ".join(f"{n} objects with key {k}"
                                                    for k, n in data["encryption_keys"].items())
                          + "; restore, verify and inspect need these keys (--encryption-key)"))
    if conditional_writes is not None:
        lines.append(_out(f"conditional writes: {conditional_writes}"))
    if state.last_stream:
        lag = state.last_stream.get("lag", {})
        lines.append(_out(f"followed backup: last commit at {iso(state.last_stream['committed_ms'])}, lag "
                          f"{sum(lag.values()):,} records then"
                          + "".join(f"; {k}: {v:,}" for k, v in sorted(lag.items()) if v)))
    return lines


def verify(verified: VerifyReport, compared_live: bool, as_json: bool, strict: bool = False) -> list[Line]:
    """`verify` (a source.verify.VerifyReport); `compared_live`: the live topics were compared too;
    `strict`: a damaged file fails it."""
    if as_json:
        return [_out(to_json({
            "ok": verified.ok, "objects": verified.objects, "records": verified.records,
            "partitions": verified.partitions, "partitions_compared": verified.partitions_compared,
            "problems": verified.problems, "notes": verified.notes, "lost": verified.lost,
            "damaged": verified.damaged, "ok_strict": verified.ok_strict}))]
    lines = ([_out(f"note: {note}") for note in verified.notes] + [_out(f"lost: {note}") for note in verified.lost]
             + [_out(f"warning: damaged: {file}") for file in verified.damaged]
             + [_out(f"DIFFERS: {problem}") for problem in verified.problems])
    if not verified.ok:
        return lines + [_err(f"verify failed: {len(verified.problems)} problems")]
    if strict and verified.damaged:
        return lines + [_err(f"verify --strict failed: {len(verified.damaged)} damaged files under _topicvault/ "
                             "(the data is whole)")]
    compared = (f"; {plural(verified.partitions_compared, 'partition')} "
                f"{'matches' if verified.partitions_compared == 1 else 'match'} the live topics") if compared_live else ""
    return lines + [_out(f"ok: {plural(verified.objects, 'object')}, {plural(verified.records, 'record')} in "
                         f"{plural(verified.partitions, 'partition')}{compared}")]


# --- compact, expire ---------------------------------------------------------------------------

def collected_line(collected: Collected, verb: str = "deleted") -> str:
    """What a garbage collection (a source.maintenance.garbage.Collected) deleted, or with another verb would delete."""
    return (f"{verb} {collected.deleted} unreferenced objects ({len(collected.retired)} retired, "
            f"{len(collected.orphans)} never committed); {collected.waiting} wait for the grace period")


def _collected_json(collected: Collected) -> dict:
    return {"deleted_retired": collected.retired, "deleted_orphans": collected.orphans, "waiting": collected.waiting}


def _maintenance_end(collected: Collected, dry_run: bool, plan: str, done: str) -> list[Line]:
    """The end of compact's and expire's text: the plan and what would be deleted, or what was
    committed and what was deleted."""
    if dry_run:
        return [_out(f"{plan}; {collected_line(collected, 'would delete')}")]
    return [_out(done), _out(collected_line(collected))]


def compact(result: CompactResult, dry_run: bool, as_json: bool) -> list[Line]:
    """`compact` (a source.maintenance.compact.CompactResult): each run of objects merged, and what was deleted."""
    if as_json:
        return [_out(to_json({
            "dry_run": dry_run, "commit": result.commit_key,
            "merges": [{"topic": m.topic, "partition": m.partition, "objects": len(m.objects), "records": m.records,
                        "first_offset": m.objects[0].first_offset, "last_offset": m.objects[-1].last_offset}
                       for m in result.merges],
            "replaced": len(result.replaced), "written": len(result.written), **_collected_json(result.collected),
        }))]
    lines = [_out(f"  {m.topic}[{m.partition}] offsets {m.objects[0].first_offset}..{m.objects[-1].last_offset}: "
                  f"{len(m.objects)} objects, {m.records:,} records" + (" (re-encrypt)" if m.reencrypt else ""))
             for m in result.merges]
    return lines + _maintenance_end(
        result.collected, dry_run, f"plan: {len(result.merges)} runs of objects to merge",
        f"compacted {len(result.replaced)} objects into {len(result.written)}"
        + (f"; committed {result.commit_key}" if result.commit_key else "; nothing to commit"))


def expire(result: ExpireResult, dry_run: bool, as_json: bool) -> list[Line]:
    """`expire` (a source.maintenance.expire.ExpireResult): each partition's dropped prefix, and what was deleted."""
    before = iso(result.before_ms)
    if as_json:
        return [_out(to_json({
            "dry_run": dry_run, "before": before, "before_ms": result.before_ms, "commit": result.commit_key,
            "partitions": [{"topic": e.topic, "partition": e.partition, "objects": len(e.dropped),
                            "records": e.records, "new_start": e.new_start} for e in result.expiries],
            **({"held": [{"topic": h.topic, "partition": h.partition, "objects": h.objects, "records": h.records,
                          "committed": iso(h.committed_ms), "committed_ms": h.committed_ms} for h in result.held]}
               if result.held else {}),
            **_collected_json(result.collected),
        }))]
    lines = [_out(f"  {e.topic}[{e.partition}]: offsets {e.dropped[0].first_offset}..{e.new_start - 1} "
                  f"({e.records:,} records in {len(e.dropped)} objects); the archive then starts at {e.new_start}")
             for e in result.expiries]
    lines += [_out(f"  {h.topic}[{h.partition}]: {h.records:,} records in {h.objects} objects are older than {before} "
                   f"by their timestamps but were backed up after it (committed {iso(h.committed_ms)}): kept until "
                   "they were backed up longer ago than that") for h in result.held]
    records = sum(e.records for e in result.expiries)
    return lines + _maintenance_end(
        result.collected, dry_run, f"plan: {records:,} records older than {before} would go",
        f"expired {records:,} records older than {before}"
        + (f"; committed {result.commit_key}" if result.commit_key else ": nothing that old"))


def sandbox_started(sandbox: Sandbox, sample_topic: str | None = None, sample_records: int = 0) -> list[Line]:
    """What `topicvault sandbox` prints once both servers answer (and its sample topic holds its records):
    the lines to paste."""
    store = f"s3://{sandbox.bucket}/backups"
    sample = f", topic {sample_topic} with {plural(sample_records, 'sample record')}" if sample_topic else ""
    return [
        _out(f"sandbox running: Apache Kafka at {sandbox.bootstrap}{sample}, S3 server at {sandbox.endpoint}, "
             f"bucket {sandbox.bucket}"),
        _out("in another shell, paste (it points topicvault at both servers):"),
        _out(f"  {sandbox.export_line}"),
        _out(f"then use  -b {sandbox.bootstrap}  and  --to/--from {store}, e.g.:"),
        _out(f"  topicvault backup -b {sandbox.bootstrap} --topic orders --to {store}"),
        _out(f"  topicvault restore --from {store} -b {sandbox.bootstrap} --rename orders=orders.restored"),
        _out("Ctrl-C here stops both and deletes their data."),
    ]


# The one-line refusals of options a run would not honour (cli._refuse_by_follow): parameter name -> line.
DRY_RUN_WITH_FOLLOW = "--dry-run shows one plan and --follow runs until stopped: drop --follow to see the plan"
BACKUP_ONE_SHOT_ONLY = {
    "dry_run": DRY_RUN_WITH_FOLLOW,
    "full": "--full starts a location over with a one-shot backup, --follow continues what the location holds "
            "(on an empty one, from each log's start): drop --full",
    "records_per_task": "--records-per-task sizes a one-shot backup's Spark tasks, --follow reads in micro-batches: "
                        "size them with --max-records-per-trigger instead",
    "as_json": "--json prints a one-shot backup's plan or summary, --follow prints a line per micro-batch: drop "
               "--json (--metrics-port serves a follower's figures)",
    "quiet": "--quiet hides a one-shot backup's progress, --follow prints a line per micro-batch: drop --quiet",
    "schema_registry": "--schema-registry is saved by a one-shot backup: run one beside the follower to save it",
    "executor": "--executor chooses where a one-shot run's tasks run, --follow always runs on Spark: drop --executor",
}
BACKUP_FOLLOW_ONLY = {
    "flush_interval": "--flush-interval works with --follow: add --follow",
    "max_records_per_trigger": "--max-records-per-trigger works with --follow: add --follow",
    "metrics_port": "--metrics-port works with --follow: add --follow (a one-shot backup serves no metrics)",
    "metrics_address": "--metrics-address works with --follow and --metrics-port: add them",
}
RESTORE_ONE_SHOT_ONLY = {
    "dry_run": DRY_RUN_WITH_FOLLOW,
    "executor": BACKUP_ONE_SHOT_ONLY["executor"],
    "cluster_state": "--cluster-state works with a one-shot restore, not --follow: restore the cluster state once, "
                     "then start the standby",
    "schema_registry": "--schema-registry works with a one-shot restore, not --follow: restore the registry (and "
                       "the data) once, then start the standby",
}
RESTORE_FOLLOW_ONLY = {"poll_interval": "--poll-interval works with --follow: add --follow"}


def failure(error: BaseException, debug: bool) -> tuple[str, int, bool]:
    """The one line that an error ending a command prints on stderr (secrets scrubbed), the exit
    status, and whether its traceback goes before it (with --debug; never for an interrupt)."""
    if isinstance(error, Interrupted):
        return str(error), 130, False
    if isinstance(error, KeyboardInterrupt):
        return "interrupted: nothing uncommitted is presented as backed up; run again to continue", 130, False
    if isinstance(error, TopicvaultError):
        return f"error: {show_text(scrub(str(error)))}", 1, debug
    if isinstance(error, concurrent.futures.TimeoutError):  # an admin request's future, past its wait
        return ("error: the Kafka cluster did not answer a request in time: check that its brokers are up and "
                f"reachable, then run again{'' if debug else ' (--debug shows which request)'}"), 1, debug
    # A bug or an unforeseen library error: still one line, still no secret.
    message = show_text(" ".join(scrub(str(error)).split()))
    hint = "" if debug else "; run with --debug for the traceback"
    return f"error: unexpected {type(error).__name__}: {message}{hint}", 1, debug


def key_written(key_id: str, path: str) -> str:
    """What `keygen` prints once it wrote a key file."""
    return f"wrote key {key_id} to {path}: use --encryption-key file://{Path(path).resolve()}"
