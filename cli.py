"""The `topicvault` command line: parses arguments, calls the library, reports."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Mapping
from inspect import Parameter
from inspect import signature as signature_of  # `inspect` is a command here
from typing import Callable, List, Optional

import click
import typer

from . import __version__, report
from .core import text
from .core.errors import TopicvaultError
from .core.executor import executor_name, plan_executor

# Option defaults are the library's own (one place each).
from .core.rotation import DEFAULT_MAX_BYTES, DEFAULT_MAX_RECORDS
from .core.text import terminal_text
from .formats.peers import PEERS, peer_options_of
from .sink.plan import DEFAULT_RECORDS_PER_TASK

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    # Tracebacks with local variables would print settings, passwords included.
    pretty_exceptions_show_locals=False,
    help="Back up Kafka topics to object storage (S3 or a directory) and restore them exactly.",
)
_debug = False
# A restore that finished but left out objects it could not read (--on-error skip).
EXIT_SKIPPED = 3


def _version(value: bool) -> None:
    if value:
        typer.echo(f"topicvault {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Back up Kafka topics to object storage and restore them exactly."""
    global _debug
    _debug = debug


# --debug after the subcommand too (`topicvault backup ... --debug`): every command gets the option.
DEBUG = typer.Option(False, "--debug", help="Show tracebacks on errors (also before the command).")


def reports_errors(command: Callable) -> Callable:
    """Turn every error into one line on stderr and exit code 1 (the traceback too with --debug,
    given before or after the command); whatever is printed has the secret settings scrubbed."""

    @functools.wraps(command)
    def wrapper(*args, debug_option: bool = False, **kwargs):
        from .core.process import release_frames
        from .core.profiles import scrub

        global _debug
        _debug = _debug or debug_option
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except (Exception, KeyboardInterrupt) as exc:
            line, status, with_traceback = report.failure(exc, _debug)
            if with_traceback:
                typer.echo(scrub(traceback.format_exc()).rstrip(), err=True)
            typer.echo(line, err=True)
            release_frames(exc)
            raise typer.Exit(status) from None

    signature = signature_of(command, eval_str=True)
    wrapper.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(), Parameter("debug_option", Parameter.KEYWORD_ONLY, default=DEBUG, annotation=bool)])
    return wrapper


# Options several commands share, declared once.
CONFIG = typer.Option(None, "--config", help="Config file with named clusters and stores (default: ./topicvault.toml).")
CLUSTER = typer.Option(None, "--cluster", help="Named cluster from the config file (bootstrap servers and librdkafka settings).")
STORE = typer.Option(None, "--store", help="Named store from the config file (URI and store options).")
KAFKA_PROPERTY = typer.Option([], "-X", help="librdkafka property key=value (repeatable).")
STORE_OPTION = typer.Option([], "-S", help="Store option key=value, e.g. endpoint_url=… (repeatable).")
MASTER = typer.Option(None, "--master", help="Spark master (default local[*]).")
EXECUTOR = typer.Option(None, "--executor", help="spark, local (in this process, no JVM) or auto (default, or "
                        "$TOPICVAULT_EXECUTOR): local for up to 100,000 records and 64 MiB, without --master.")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress output.")
SCHEMA_REGISTRY = typer.Option(None, "--schema-registry", help="Schema registry URL (auth: the cluster profile): "
                               "backup saves it whole, restore registers it (as of --until) before any record.")
ENCRYPTION_KEY = typer.Option([], "--encryption-key", help="Client-side encryption key: file:///path (see `topicvault "
                              "keygen`) or kms://KEY_ID_OR_ALIAS. Repeatable for objects and commit records of older "
                              "keys; what is written is encrypted and authenticated with the first.")


def _settings(config: Optional[str], cluster: Optional[str], store: Optional[str], bootstrap: Optional[str],
              properties: list[str], uri: Optional[str], options: list[str], encryption_keys: list[str] = (),
              schema_registry: Optional[str] = None):
    """Flags over TOPICVAULT_* environment over the config file's profiles."""
    from .core.profiles import resolve_flags

    return resolve_flags(config, cluster, store, bootstrap, properties, uri, options, encryption_keys, schema_registry)


def _refuse_by_follow(context: typer.Context, follow: bool, one_shot_only: Mapping[str, str],
                      follow_only: Mapping[str, str]) -> None:
    """Refuse the first option given (even at its default: never dropped in silence) that only a one-shot
    run honours (with --follow) or only --follow honours (without it): parameter name -> its refusal."""
    for name, line in (one_shot_only if follow else follow_only).items():
        source = context.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise TopicvaultError(line)


def _print(lines: list[report.Line]) -> None:
    """Print a report's lines, each on its stream, in order."""
    for line in lines:
        typer.echo(report.terminal_text(line.text), err=line.err)


@app.command()
@reports_errors
def backup(
    context: typer.Context,
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Kafka bootstrap servers."),
    to: Optional[str] = typer.Option(None, "--to", help="Backup location: s3://bucket/prefix, file:///dir or a path."),
    topic: List[str] = typer.Option([], "--topic", "-t", help="Topic to back up (repeatable)."),
    topics_regex: Optional[str] = typer.Option(None, "--topics-regex", help="Back up every topic matching this regex."),
    format_name: str = typer.Option("parquet", "--format", help="parquet, avro, jsonl or csv."),
    compression: Optional[str] = typer.Option(None, "--compression", help="Codec of the format (default: its own)."),
    key_template: Optional[str] = typer.Option(None, "--key-template", help="Object key template (Aiven syntax)."),
    time_partition: Optional[str] = typer.Option(None, "--time-partition", help="day or hour: folders by record "
                                                 "time (UTC) under each partition; objects are cut at their edges."),
    max_records: int = typer.Option(DEFAULT_MAX_RECORDS, "--max-records", help="Records per object at most."),
    max_bytes: int = typer.Option(DEFAULT_MAX_BYTES, "--max-bytes", help="Payload bytes per object at most."),
    records_per_task: int = typer.Option(DEFAULT_RECORDS_PER_TASK, "--records-per-task", help="Offsets per Spark task."),
    full: bool = typer.Option(False, "--full", help="Start over (the location must hold no backup)."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    kafka_property: List[str] = KAFKA_PROPERTY,
    store_option: List[str] = STORE_OPTION,
    schema_registry: Optional[str] = SCHEMA_REGISTRY,
    master: Optional[str] = MASTER,
    executor: Optional[str] = EXECUTOR,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; read no records, write nothing."),
    follow: bool = typer.Option(False, "--follow", help="Keep backing up new records (Structured Streaming) "
                                "until SIGTERM or Ctrl-C, which finish the running micro-batch first."),
    flush_interval: float = typer.Option(60.0, "--flush-interval", help="With --follow: seconds between micro-batches "
                                         "(each commits its objects)."),
    max_records_per_trigger: Optional[int] = typer.Option(None, "--max-records-per-trigger",
                                                          help="With --follow: records per micro-batch at most."),
    metrics_port: int = typer.Option(0, "--metrics-port", help="With --follow: serve Prometheus metrics on this "
                                     "port (at /metrics); 0: none."),
    metrics_address: str = typer.Option("127.0.0.1", "--metrics-address", help="With --metrics-port: the address "
                                        "to listen on (0.0.0.0: every interface)."),
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the plan or the final summary as JSON."),
    quiet: bool = QUIET,
) -> None:
    """Back up topics to a location; only what is new since the last backup there."""
    from .core.cluster.kafka import cluster_of
    from .core.rotation import Rotation
    from .keys import key_template_of
    from .sink.backup import BackupJob, commit_unread, plan_run, run_one_backup

    executor_name(executor)  # a bad executor fails before any connection
    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, to, store_option, encryption_key,
                         schema_registry)
    job = BackupJob(kafka=cluster_of(settings), store_uri=settings.location("--to"),
                    store_options=settings.store_option_pairs(), format_name=format_name, compression=compression,
                    key_template=key_template_of(key_template, time_partition),
                    rotation=Rotation(max_records, max_bytes), encryption_keys=settings.encryption_keys,
                    schema_registry_url=settings.schema_registry_url,
                    schema_registry_settings=tuple(sorted(settings.schema_registry_settings.items())))
    _refuse_by_follow(context, follow, report.BACKUP_ONE_SHOT_ONLY, report.BACKUP_FOLLOW_ONLY)
    if follow:
        from .datasources import register  # the stream runs through topicvault's data sources
        from .sink.continuous_backup import ContinuousBackupRequest, follow_backup

        request = ContinuousBackupRequest(tuple(topic), topics_regex, flush_interval, max_records_per_trigger)
        result = follow_backup(job, request, master, register, lambda line, err: typer.echo(terminal_text(line), err=err),
                               lambda: _print([report.backup_following(topic, topics_regex, job.store_uri,
                                                                       flush_interval)]), metrics_port, metrics_address)
        _print([report.backup_follow_stopped(result)])
        return
    backup_plan = plan_run(job, topic, topics_regex, records_per_task, full)
    _print(report.backup_plan_warnings(backup_plan, as_json))
    if dry_run or not backup_plan.has_work:
        committed = None if dry_run else commit_unread(job, backup_plan)
        _print(report.backup_plan(backup_plan, dry_run, committed, as_json))
        return
    choice = plan_executor(backup_plan, executor, master)
    _print(report.executor_chosen(choice, quiet or as_json))
    result, spark_s = run_one_backup(job, backup_plan, choice, master, quiet or as_json)
    _print(report.backup_summary(result, spark_s, as_json))


@app.command()
@reports_errors
def restore(
    context: typer.Context,
    from_uri: Optional[str] = typer.Option(None, "--from", help="Backup location to restore from."),
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Target Kafka bootstrap servers."),
    topic: List[str] = typer.Option([], "--topic", "-t", help="Source topic to restore (default: all)."),
    rename: List[str] = typer.Option([], "--rename", help="Restore topic OLD under NEW: OLD=NEW (repeatable)."),
    restore_id: Optional[str] = typer.Option(None, "--restore-id", help="Id to resume an interrupted restore."),
    state: Optional[str] = typer.Option(None, "--state", help="Where the restore keeps its state (a directory or "
                                        "s3:// URI; default: $TOPICVAULT_STATE_DIR, else ~/.local/state/topicvault)."),
    import_state: Optional[str] = typer.Option(None, "--import-state", help="With --restore-id: first copy that "
                                               "restore's records from this folder (e.g. _topicvault/restores/ID/ "
                                               "of an older version) into --state, once."),
    until: Optional[str] = typer.Option(None, "--until", help="Point in time: restore each partition up to the "
                                        "first record after TIME (ISO-8601 or epoch ms)."),
    until_mode: str = typer.Option("prefix", "--until-mode", help="prefix: stop each partition at the first "
                                   "record after TIME; filter: leave out every record after TIME."),
    from_offset: List[str] = typer.Option([], "--from-offset", help="First source offset to restore: N (every "
                                          "partition) or TOPIC:PARTITION=N (repeatable)."),
    to_offset: List[str] = typer.Option([], "--to-offset", help="Last source offset to restore (inclusive): N or "
                                        "TOPIC:PARTITION=N (repeatable)."),
    groups: bool = typer.Option(False, "--groups", help="Then commit the saved consumer-group offsets, translated "
                                "to the restored offsets (groups must be inactive on the target)."),
    group: List[str] = typer.Option([], "--group", help="With --groups: only this group (repeatable)."),
    cluster_state: bool = typer.Option(False, "--cluster-state", help="Whole-cluster recovery: also the saved ACLs "
                                       "and SCRAM users (as of --until) before the data, group offsets after it (as "
                                       "--groups). Users need a password (--scram-passwords or TOPICVAULT_SCRAM_"
                                       "PASSWORD_<USER>); the others are listed. See docs/recovery-runbook.md."),
    scram_passwords: Optional[str] = typer.Option(None, "--scram-passwords", help="With --cluster-state: a JSON "
                                                  "file {\"user\": \"password\"} of the SCRAM users to create."),
    merge_acls: bool = typer.Option(False, "--merge-acls", help="With --cluster-state: keep ACLs the target "
                                    "already has that the archive does not hold (refused otherwise)."),
    add_scram_mechanisms: bool = typer.Option(False, "--add-scram-mechanisms", help="With --cluster-state: add "
                                              "a saved SCRAM mechanism to a user the target already has under "
                                              "another one (such users are left alone otherwise)."),
    accept_renamed_access: bool = typer.Option(False, "--accept-renamed-access", help="With --cluster-state and "
                                               "--rename: restore the ACLs even where a prefixed or wildcard ACL "
                                               "gives a renamed topic other access than its source had (refused "
                                               "otherwise)."),
    configs: bool = typer.Option(True, "--configs/--no-configs", help="Create topics with their saved configs."),
    layout: str = typer.Option("auto", "--layout", help="Whose archive it is: auto, topicvault, or the "
                               f"sink that wrote it: {', '.join(sorted(PEERS))} (a restore notes what each keeps)."),
    key_template: Optional[str] = typer.Option(None, "--key-template", help="A peer's file.name.template, if not "
                                               "its default (Aiven syntax)."),
    peer_fields: str = typer.Option("value", "--peer-fields", help="Aiven csv: format.output.fields, in order."),
    peer_value_encoding: str = typer.Option("base64", "--peer-value-encoding", help="Aiven/Confluent: how bytes "
                                            "were written as text: base64 (ByteArrayConverter), none (strings) or "
                                            "json (JsonConverter: JSON text, strings with their quotes)."),
    peer_key_encoding: Optional[str] = typer.Option(None, "--peer-key-encoding", help="Aiven jsonl/json, Confluent "
                                                    "JSON: the same for keys, when the sink's key.converter differs "
                                                    "from its value.converter (default: as --peer-value-encoding)."),
    peer_header_encoding: Optional[str] = typer.Option(None, "--peer-header-encoding", help="Confluent, Lenses JSON, "
                                                       "Aiven jsonl: header values stored as text (SimpleHeaderConverter,"
                                                       " the default) or base64 (ByteArrayConverter)."),
    peer_envelope: Optional[str] = typer.Option(None, "--peer-envelope", help="Aiven's format.output.envelope."),
    max_records_per_second: Optional[float] = typer.Option(None, "--max-records-per-second", help="Produce at most "
                                                           "this many records per second, all tasks together."),
    max_bytes_per_second: Optional[float] = typer.Option(None, "--max-bytes-per-second", help="Produce at most this "
                                                         "many payload bytes (key, value, headers) per second, all "
                                                         "tasks together."),
    create_topics: bool = typer.Option(True, "--create-topics/--no-create-topics", help="Create missing topics."),
    allow_nonempty: bool = typer.Option(False, "--allow-nonempty", help="Append to target topics holding records."),
    on_error: str = typer.Option("stop", "--on-error", help="stop: end at an object that cannot be read (damaged, "
                                 "missing, undecodable); skip: leave it out, name it, restore the rest and exit "
                                 f"with status {EXIT_SKIPPED}."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    kafka_property: List[str] = KAFKA_PROPERTY,
    store_option: List[str] = STORE_OPTION,
    schema_registry: Optional[str] = SCHEMA_REGISTRY,
    master: Optional[str] = MASTER,
    executor: Optional[str] = EXECUTOR,
    schema_ids: str = typer.Option("preserve", "--schema-ids", help="With --schema-registry: preserve (saved ids, or "
                                   "stop), remap (new ids, rewritten where a <topic>-key/-value subject is) or remap-all."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be restored; produce nothing."),
    follow: bool = typer.Option(False, "--follow", help="A warm standby: keep restoring what lands in the location "
                                "until SIGTERM or Ctrl-C (the round finishes); resume with the same --restore-id."),
    poll_interval: Optional[float] = typer.Option(None, "--poll-interval", help="--follow: seconds between looks."),
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the plan or summary (--follow: each round) as JSON."),
    quiet: bool = QUIET,
) -> None:
    """Restore a backup to a Kafka cluster: same partitions, same order, same bytes."""
    from .core.cluster.kafka import cluster_of
    from .source.cluster_restore.access_restore import AccessRequest
    from .source.cluster_restore.group_restore import restore_planned_groups
    from .source.cluster_restore.registry_restore import RegistryRequest, registry_before_data, saved_registry
    from .source.object_reader import check_on_error
    from .source.restore.restore_job import RestoreJob, RestoreRequest, parse_renames, plan_restore, run_one_restore
    from .source.restore.restore_state import import_state as import_restore_state
    from .source.restore.selection import selection_of
    from .source.restore.standby import DEFAULT_POLL_INTERVAL_S, StandbyRequest, run_standby
    from .source.restore.throttle import RateLimit

    rate = RateLimit.of(max_records_per_second, max_bytes_per_second)  # a bad limit fails before any connection
    executor_name(executor)  # so does a bad executor
    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, from_uri, store_option,
                         encryption_key, schema_registry)
    registry = RegistryRequest.of(schema_registry and settings.schema_registry_url, settings.schema_registry_settings,
                                  schema_ids)
    settings.keyring()  # an unreadable key file or unknown KMS key fails before anything else
    peers = peer_options_of(peer_fields, peer_value_encoding, peer_header_encoding, peer_key_encoding, peer_envelope)
    job = RestoreJob(cluster_of(settings), settings.location("--from"), settings.store_option_pairs(), layout=layout,
                     key_template=key_template, state_uri=state, on_error=check_on_error(on_error),
                     encryption_keys=settings.encryption_keys, peer_options=peers, rate=rate)
    access = AccessRequest.of(cluster_state, scram_passwords, merge_acls, add_scram_mechanisms, accept_renamed_access)
    _refuse_by_follow(context, follow, report.RESTORE_ONE_SHOT_ONLY, report.RESTORE_FOLLOW_ONLY)
    request = RestoreRequest(tuple(topic), parse_renames(rename), restore_id, allow_nonempty, create_topics,
                             selection_of(until, until_mode, from_offset, to_offset), configs,
                             groups or cluster_state, tuple(group), access)  # group offsets are cluster state
    if import_state:
        typer.echo(import_restore_state(job.restore_records(), job.state_uri, restore_id, import_state,
                                        settings.store_options, dry_run))
        if dry_run:
            return
    if follow:
        poll_s = DEFAULT_POLL_INTERVAL_S if poll_interval is None else poll_interval
        summary = run_standby(job, StandbyRequest(request, poll_s), master,
                              lambda finished: _print(report.follow_round(finished, as_json, quiet)),
                              lambda restart: _print(report.follow_restart(restart, as_json)),
                              lambda nothing_yet: _print([report.standby_waiting(nothing_yet, poll_s)]),
                              lambda line: typer.echo(line, err=True),
                              lambda: _print([report.restore_following(job.store_uri, poll_s)]))
        _print(report.follow_stopped(summary, EXIT_SKIPPED))
        if summary.skipped:
            raise typer.Exit(EXIT_SKIPPED)
        return
    restore_plan = plan_restore(job, request)
    _print(report.restore_plan_notes(restore_plan))
    if dry_run:
        saved = registry and saved_registry(job, request.selection.until_ms)
        _print(report.restore_dry_run(restore_plan, as_json) + report.registry_dry_run(registry, saved))
        return
    job, registered = registry_before_data(job, restore_plan, request.selection.until_ms, registry)
    _print(report.registry_restored(registered, schema_ids))
    choice = plan_executor(restore_plan, executor, master)
    _print(report.restore_started(restore_plan) + report.executor_chosen(choice, as_json or quiet))
    result = run_one_restore(job, restore_plan, choice, master, as_json or quiet)
    committed_groups = restore_planned_groups(job, restore_plan)
    _print(report.ids_rewritten(result, registered) + report.access_restored(result))
    _print(report.restore_summary(result, committed_groups, as_json, EXIT_SKIPPED))
    if result.skipped:
        raise typer.Exit(EXIT_SKIPPED)


@app.command("ls")
@reports_errors
def list_backup(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the listing as JSON."),
) -> None:
    """List what a backup location holds, from its commit records."""
    from .source.inspect import archive_listing

    settings = _settings(config, None, store, None, [], uri, store_option)
    state, conditional_writes = archive_listing(settings.location("URI"), settings.store_options)
    _print(report.ls(state, as_json, conditional_writes))


@app.command()
@reports_errors
def verify(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Compare with this cluster."),
    topic: List[str] = typer.Option([], "--topic", "-t", help="Only this topic (repeatable)."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    kafka_property: List[str] = KAFKA_PROPERTY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Also fail on damaged files readers work around."),
    state: Optional[str] = typer.Option(None, "--state", help="Check the restore records kept there too."),
) -> None:
    """Check every committed object (checksum, count, offsets) and file under _topicvault/; -b: the live topics too."""
    from .core.cluster.kafka import cluster_of
    from .source.verify import verify_location

    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, uri, store_option, encryption_key)
    kafka = cluster_of(settings) if settings.bootstrap_servers else None
    verified = verify_location(settings.location("URI"), settings.store_options, topic, kafka, settings.keyring(), state)
    _print(report.verify(verified, kafka is not None, as_json, strict))
    if not (verified.ok_strict if strict else verified.ok):
        raise typer.Exit(1)


@app.command()
@reports_errors
def inspect(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    object_key: Optional[str] = typer.Option(None, "--object", help="Print this object (key under the location)."),
    topic: Optional[str] = typer.Option(None, "--topic", "-t", help="Print this topic's records (default: all)."),
    partition: Optional[int] = typer.Option(None, "--partition", "-p", help="Only this partition."),
    offset: int = typer.Option(0, "--offset", help="Start at this offset."),
    limit: int = typer.Option(20, "--limit", help="Records to print at most."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="One JSON object per record (bytes as base64)."),
) -> None:
    """Print records of one object, a topic(-partition), or the first of a backup, like a console consumer."""
    from .source.inspect import json_line, records_to_show, text_line

    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    for record in records_to_show(settings.location("URI"), settings.store_options, object_key, topic, partition,
                                  offset, limit, settings.keyring()):
        typer.echo(json_line(record) if as_json else text_line(record))


GRACE = typer.Option("24h", "--grace", help="Delete retired objects this long after their commit, uncommitted ones this "
                     "long after written: longer than your longest restore or write (e.g. 24h, 90m, 0s).")


@app.command("compact")
@reports_errors
def compact_command(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    max_records: int = typer.Option(DEFAULT_MAX_RECORDS, "--max-records", help="Records per merged object at most."),
    max_bytes: int = typer.Option(DEFAULT_MAX_BYTES, "--max-bytes", help="Payload bytes per merged object at most."),
    compression: Optional[str] = typer.Option(None, "--compression", help="Codec of merged objects."),
    key_template: Optional[str] = typer.Option(None, "--key-template", help="The key template the backups used."),
    time_partition: Optional[str] = typer.Option(None, "--time-partition", help="day or hour, if the backups used it."),
    grace: str = GRACE,
    encryption_key: List[str] = ENCRYPTION_KEY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be merged and deleted; write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Merge each partition's small committed objects into objects of the rotation size, in one
    commit; with --encryption-key, what it writes is encrypted with the (first) key given."""
    from .core.instants import grace_to_ms
    from .core.rotation import Rotation
    from .keys import key_template_of
    from .source.maintenance.compact import CompactJob, execute_compact, plan_compact, read_compact

    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    job = CompactJob(settings.location("URI"), settings.store_option_pairs(), Rotation(max_records, max_bytes),
                     compression, key_template_of(key_template, time_partition), settings.encryption_keys,
                     grace_to_ms(grace))
    location = job.open_store()
    plan = plan_compact(read_compact(job, location, dry_run), job)
    _print(report.compact(execute_compact(location, plan, dry_run), dry_run, as_json))


@app.command("expire")
@reports_errors
def expire_command(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    before: str = typer.Option(..., "--before", help="Drop whole objects whose records are all older than TIME and "
                               "committed before it: ISO-8601, epoch ms, or an age such as 30d or 12h."),
    grace: str = GRACE,
    encryption_key: List[str] = ENCRYPTION_KEY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Drop the records older than TIME, whole objects only, recorded in a commit; never a record at or after TIME."""
    from .core.instants import grace_to_ms
    from .core.stores.locations import open_store
    from .source.maintenance.expire import before_of, execute_expire, plan_expire, read_expire

    before_ms = before_of(before)  # --before 0s, or a time to come, are refused here
    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    grace_ms = grace_to_ms(grace)
    location, keyring = open_store(settings.location("URI"), settings.store_options), settings.keyring()
    plan = plan_expire(read_expire(location, before_ms, grace_ms, dry_run, keyring=keyring), before_ms, grace_ms)
    _print(report.expire(execute_expire(location, plan, dry_run, keyring=keyring), dry_run, as_json))


@app.command()
@reports_errors
def keygen(path: str = typer.Argument(..., help="File to create (never overwritten); keep it safe.")) -> None:
    """Write a new random encryption key file (base64 of 32 bytes, owner-only) for --encryption-key file://PATH."""
    from .core.crypto import write_key_file

    typer.echo(report.key_written(write_key_file(path), path))


@app.command("config")
@reports_errors
def show_config(
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Kafka bootstrap servers."),
    kafka_property: List[str] = KAFKA_PROPERTY,
    uri: Optional[str] = typer.Option(None, "--uri", help="Backup location."),
    store_option: List[str] = STORE_OPTION,
) -> None:
    """Show the settings a command would use (flags > TOPICVAULT_* environment > config file); secrets as ***."""
    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, uri, store_option)
    typer.echo(text.to_json(settings.redacted()))


@app.command()
@reports_errors
def demo(
    records: int = typer.Option(20_000, "--records", help="Sample records to produce."),
    directory: Optional[str] = typer.Option(None, "--dir", help="Backup directory (default: a temporary one)."),
    master: Optional[str] = MASTER,
) -> None:
    """Embedded broker + local directory: back up a topic, restore it under a new name, compare."""
    from .source.demo import run_demo

    if not run_demo(records, directory, master, typer.echo):
        raise typer.Exit(1)


@app.command()
@reports_errors
def sandbox(
    bucket: str = typer.Option("topicvault", "--bucket", help="Bucket to create on the S3 server."),
    sample_records: int = typer.Option(1_000, "--sample-records", help="Records of the sample topic `orders`."),
) -> None:
    """A single-node Apache Kafka and a local S3 server with a bucket, to try topicvault; until Ctrl-C."""
    from .source.demo import run_sandbox

    run_sandbox(bucket, sample_records, lambda line: typer.echo(line, err=True),
                lambda running, topic: _print(report.sandbox_started(running, topic, sample_records)))


def main() -> None:
    """Console-script entry point."""
    from .core.process import start_command

    start_command()
    app()


if __name__ == "__main__":
    sys.exit(main())
