"""The `topicvault` command line: parses arguments, calls the library, reports."""

from __future__ import annotations

import concurrent.futures
import functools
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from inspect import Parameter
from inspect import signature as signature_of  # `inspect` is a command here
from typing import Callable, List, Optional

import click
import typer

from . import __version__, report
from .core import text
from .core.errors import NoBackup, TopicvaultError

# Option defaults are the library's own (one place each).
from .core.rotation import DEFAULT_MAX_BYTES, DEFAULT_MAX_RECORDS
from .formats.peers import PEERS, PeerOptions
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


def _print_traceback() -> None:
    """The current exception's traceback on stderr (for --debug), secrets scrubbed."""
    from .core.profiles import scrub

    typer.echo(scrub(traceback.format_exc()).rstrip(), err=True)


class Interrupted(Exception):
    """Ctrl-C ended a command; the message is the one line saying what it leaves behind."""


# Set by the handler quiet_spark_interrupts installs: Ctrl-C arrived during this command.
_interrupt_received = threading.Event()


@contextmanager
def interrupt_says(line: Callable[[], str]) -> Iterator[None]:
    """Turn Ctrl-C (SIGINT) inside the block into one line, `line()`, and exit status 130.

    Also an error raised after Ctrl-C arrived: the KeyboardInterrupt can land in the middle of a
    py4j call, leaving that connection's answer unread, and the next call on it (a job's clean-up)
    then fails with "Py4JNetworkError: Answer from Java side is empty" instead (seen in CI)."""
    previous = signal.getsignal(signal.SIGINT)
    _interrupt_received.clear()
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(line()) from None
    except Exception:
        if _interrupt_received.is_set():
            raise Interrupted(line()) from None
        raise
    finally:
        if _in_main_thread():
            signal.signal(signal.SIGINT, previous)


def _in_main_thread() -> bool:
    """Whether signal handlers may be set here: Python sets them in the main thread only, and a
    command run on another thread (an embedding program, the fault tests) gets no Ctrl-C there."""
    return threading.current_thread() is threading.main_thread()


def quiet_spark_interrupts() -> None:
    """Once Spark has started: replace the SIGINT handler pyspark installed with one that only
    raises KeyboardInterrupt.

    pyspark's handler cancels the running jobs through py4j while the interrupted main thread
    still holds its connection: that reentrant call printed about 40 lines of tracebacks
    ("Exception while sending command", "reentrant call"). The jobs end with the driver JVM,
    which stops when this process exits. py4j logs the interrupted call's traceback (through the
    root logger), so logging is off from then on: the process is ending, and an error of a call
    still made is reported as usual, as one line."""
    import logging

    def interrupt(signum, frame) -> None:
        _interrupt_received.set()
        logging.disable(logging.CRITICAL)
        raise KeyboardInterrupt

    if _in_main_thread():
        signal.signal(signal.SIGINT, interrupt)


# --debug after the subcommand too (`topicvault backup ... --debug`): every command gets the option.
DEBUG = typer.Option(False, "--debug", help="Show tracebacks on errors (also before the command).")


def reports_errors(command: Callable) -> Callable:
    """Turn every error into one line on stderr and exit code 1 (the traceback too with --debug,
    given before or after the command); whatever is printed has the secret settings scrubbed."""

    @functools.wraps(command)
    def wrapper(*args, debug_option: bool = False, **kwargs):
        from .core.profiles import scrub

        global _debug
        _debug = _debug or debug_option
        try:
            return command(*args, **kwargs)
        except (typer.Exit, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except TopicvaultError as exc:
            if _debug:
                _print_traceback()
            typer.echo(f"error: {report.show_text(scrub(str(exc)))}", err=True)
            _release_frames(exc)
            raise typer.Exit(1) from None
        except Interrupted as interrupted:
            typer.echo(str(interrupted), err=True)
            raise typer.Exit(130) from None
        except KeyboardInterrupt:
            typer.echo("interrupted: nothing uncommitted is presented as backed up; run again to continue", err=True)
            raise typer.Exit(130) from None
        except concurrent.futures.TimeoutError as exc:  # an admin request's future, past its wait
            if _debug:
                _print_traceback()
            typer.echo("error: the Kafka cluster did not answer a request in time: check that its brokers are up and "
                       f"reachable, then run again{'' if _debug else ' (--debug shows which request)'}", err=True)
            _release_frames(exc)
            raise typer.Exit(1) from None
        except Exception as exc:  # a bug or an unforeseen library error: still one line, still no secret
            if _debug:
                _print_traceback()
            message = report.show_text(" ".join(scrub(str(exc)).split()))
            hint = "" if _debug else "; run with --debug for the traceback"
            typer.echo(f"error: unexpected {type(exc).__name__}: {message}{hint}", err=True)
            _release_frames(exc)
            raise typer.Exit(1) from None

    signature = signature_of(command, eval_str=True)
    wrapper.__signature__ = signature.replace(parameters=[
        *signature.parameters.values(), Parameter("debug_option", Parameter.KEYWORD_ONLY, default=DEBUG, annotation=bool)])
    return wrapper


def _release_frames(error: BaseException | None) -> None:
    """Drop the local variables of the finished frames an error (and the errors it chains) passed through.

    A traceback keeps its frames' locals, Kafka clients among them, in a reference cycle that
    Python's cyclic collector frees later, on whatever thread allocates then. One of librdkafka's
    own runs Python (the admin client resolves its futures there); a client freed on it makes
    librdkafka abort the process ("calling rd_kafka_destroy() from librdkafka owned thread is
    prohibited": seen after a rerun during a quorum-less outage stopped on a describe request to a
    stopped broker, tests/faults/test_failover.py). Cleared here, they are freed at once, on this thread.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


# Options several commands share, declared once.
CONFIG = typer.Option(None, "--config", help="Config file with named clusters and stores (default: ./topicvault.toml).")
CLUSTER = typer.Option(None, "--cluster", help="Named cluster from the config file (bootstrap servers and librdkafka settings).")
STORE = typer.Option(None, "--store", help="Named store from the config file (URI and store options).")
KAFKA_PROPERTY = typer.Option([], "-X", help="librdkafka property key=value (repeatable).")
STORE_OPTION = typer.Option([], "-S", help="Store option key=value, e.g. endpoint_url=… (repeatable).")
MASTER = typer.Option(None, "--master", help="Spark master (default local[*]).")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress output.")
ENCRYPTION_KEY = typer.Option([], "--encryption-key", help="Client-side encryption key: file:///path (see "
                              "`topicvault keygen`) or kms://KEY_ID_OR_ALIAS. Repeatable for objects and "
                              "commit records of older keys; what is written is encrypted and authenticated with "
                              "the first.")
SCHEMA_REGISTRY = typer.Option(None, "--schema-registry", help="A schema registry's Confluent-compatible API URL "
                               "(auth and TLS in the cluster profile's schema_registry table): backup saves it whole.")


def _settings(config: Optional[str], cluster: Optional[str], store: Optional[str], bootstrap: Optional[str],
              properties: list[str], uri: Optional[str], options: list[str], encryption_keys: list[str] = (),
              schema_registry: Optional[str] = None):
    """Flags over TOPICVAULT_* environment over the config file's profiles."""
    from .core.kafka import parse_properties
    from .core.profiles import resolve

    return resolve(config_file=config, cluster=cluster, store=store, bootstrap_servers=bootstrap,
                   kafka_properties=parse_properties(properties), store_uri=uri,
                   store_options=parse_properties(options), encryption_keys=tuple(encryption_keys),
                   schema_registry_url=schema_registry)


def _keyring_of(settings):
    from .core.crypto import keyring_of

    return keyring_of(settings.encryption_keys)


def _kafka_of(settings):
    from .core.kafka import KafkaSettings, check_client_settings

    if not settings.bootstrap_servers:
        raise TopicvaultError("no Kafka cluster given: pass -b SERVERS, --cluster NAME or set TOPICVAULT_BOOTSTRAP_SERVERS")
    kafka = KafkaSettings.of(settings.bootstrap_servers, settings.kafka_properties)
    check_client_settings(kafka)  # a rejected -X setting fails here, before anything is read or written
    return kafka


def _uri_of(settings, flag: str) -> str:
    if not settings.store_uri:
        raise TopicvaultError(f"no backup location given: pass {flag}, --store NAME or set TOPICVAULT_STORE_URI")
    return settings.store_uri


def _store_of(settings) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(settings.store_options.items()))


def _key_template_of(key_template: Optional[str], time_partition: Optional[str]) -> Optional[str]:
    """The object key template of --key-template or --time-partition (not both; neither: None)."""
    from .keys import time_partitioned_template

    if time_partition and key_template:
        raise TopicvaultError("--time-partition and --key-template both name objects: give one of them")
    return time_partitioned_template(time_partition) if time_partition else key_template


def _refuse_given(context: typer.Context, refused: Mapping[str, str]) -> None:
    """Refuse the first option of `refused` (parameter name -> the one line saying why it does not
    apply and what to do) that the user gave, before anything is read or written.

    Given means on the command line, even at its default value: an option a run would not honour
    is never dropped in silence."""
    for name, line in refused.items():
        source = context.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            raise TopicvaultError(line)


def _refuse_by_follow(context: typer.Context, follow: bool, one_shot_only: Mapping[str, str],
                      follow_only: Mapping[str, str]) -> None:
    """A command with --follow: refuse the options only a one-shot run honours (with --follow) or
    only --follow honours (without it); see _refuse_given."""
    _refuse_given(context, one_shot_only if follow else follow_only)


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
}
BACKUP_FOLLOW_ONLY = {
    "flush_interval": "--flush-interval works with --follow: add --follow",
    "max_records_per_trigger": "--max-records-per-trigger works with --follow: add --follow",
    "metrics_port": "--metrics-port works with --follow: add --follow (a one-shot backup serves no metrics)",
    "metrics_address": "--metrics-address works with --follow and --metrics-port: add them",
}
RESTORE_ONE_SHOT_ONLY = {
    "dry_run": DRY_RUN_WITH_FOLLOW,
    "cluster_state": "--cluster-state works with a one-shot restore, not --follow: restore the cluster state once, "
                     "then start the standby",
    "schema_registry": "--schema-registry works with a one-shot restore, not --follow: restore the registry (and "
                       "the data) once, then start the standby",
}
RESTORE_FOLLOW_ONLY = {"poll_interval": "--poll-interval works with --follow: add --follow"}


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
    from .core.rotation import Rotation
    from .sink.backup import BackupJob, commit_unread, plan_run

    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, to, store_option, encryption_key,
                         schema_registry)
    job = BackupJob(
        kafka=_kafka_of(settings),
        store_uri=_uri_of(settings, "--to"),
        store_options=_store_of(settings),
        format_name=format_name,
        compression=compression,
        key_template=_key_template_of(key_template, time_partition),
        rotation=Rotation(max_records, max_bytes),
        encryption_keys=settings.encryption_keys,
        schema_registry_url=settings.schema_registry_url,
        schema_registry_settings=tuple(sorted(settings.schema_registry_settings.items())),
    )
    _refuse_by_follow(context, follow, BACKUP_ONE_SHOT_ONLY, BACKUP_FOLLOW_ONLY)
    if follow:
        _follow(job, topic, topics_regex, flush_interval, max_records_per_trigger, master, metrics_port,
                metrics_address)
        return
    backup_plan = plan_run(job, topic, topics_regex, records_per_task, full)
    _print(report.backup_plan_warnings(backup_plan, as_json))
    if dry_run or not backup_plan.has_work:
        committed = None if dry_run else commit_unread(job, backup_plan)
        _print(report.backup_plan(backup_plan, dry_run, committed, as_json))
        return
    result, spark_s = _run_one_backup(job, backup_plan, master, quiet or as_json)
    _print(report.backup_summary(result, spark_s, as_json))


def _run_one_backup(job, backup_plan, master: Optional[str], quiet: bool):
    """Run a planned backup in Spark; return its result and the seconds Spark took to start."""
    from .core.progress import ProgressMonitor
    from .core.spark import get_task_session
    from .sink.backup import run_backup

    # The run commits once, at its end: interrupted before, it leaves the location as it was.
    with interrupt_says(lambda: f"interrupted: this run committed nothing; {job.store_uri} holds what earlier "
                                "backups committed; run again to back up the rest"):
        spark_started = time.monotonic()
        spark = get_task_session(master)  # the job runs plain tasks: no Spark SQL session (seconds of start-up)
        quiet_spark_interrupts()
        spark_s = time.monotonic() - spark_started
        total = sum(p.records_at_most for p in backup_plan.partitions)
        spark_tasks = len(backup_plan.task_groups(spark.sparkContext.defaultParallelism))
        with ProgressMonitor("backup", total, spark_tasks, spark, quiet=quiet) as progress:
            return run_backup(spark, replace(job, progress_dir=progress.directory), backup_plan), spark_s


def _follow(job, topics: list[str], topics_regex: Optional[str], flush_interval: float,
            max_records_per_trigger: Optional[int], master: Optional[str], metrics_port: int,
            metrics_address: str) -> None:
    if not metrics_port:
        _run_follow(job, topics, topics_regex, flush_interval, max_records_per_trigger, master, None)
        return
    from .sink.metrics import FollowMetrics, MetricsServer

    metrics = FollowMetrics()
    # Bound before Spark starts or anything is written: a port in use is a one-line error at once.
    with MetricsServer(metrics, metrics_port, metrics_address):
        typer.echo(f"serving Prometheus metrics on port {metrics_port} of {metrics_address} (/metrics)")
        _run_follow(job, topics, topics_regex, flush_interval, max_records_per_trigger, master, metrics)


def _run_follow(job, topics: list[str], topics_regex: Optional[str], flush_interval: float,
                max_records_per_trigger: Optional[int], master: Optional[str], metrics) -> None:
    from .core.spark import get_spark
    from .datasources import register
    from .sink.follow import run_follow

    stop_requested = []

    def request_stop(signum, frame) -> None:
        if not stop_requested:
            typer.echo("stopping: finishing the running micro-batch, then committing", err=True)
        stop_requested.append(signum)

    spark = get_spark(master, retry_tasks=True)  # a crashed worker costs a task attempt, not the follower
    register(spark)  # the stream runs through topicvault's data sources
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _print([report.backup_following(topics, topics_regex, job.store_uri, flush_interval)])
    result = run_follow(spark, job, topics, topics_regex, flush_interval, max_records_per_trigger,
                        lambda: bool(stop_requested), lambda text: typer.echo(report.terminal_text(text)), metrics)
    _print([report.backup_follow_stopped(result)])


@app.command()
@reports_errors
def restore(
    context: typer.Context,
    from_uri: Optional[str] = typer.Option(None, "--from", help="Backup location to restore from."),
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Target Kafka bootstrap servers."),
    topic: List[str] = typer.Option([], "--topic", "-t", help="Source topic to restore (default: all)."),
    rename: List[str] = typer.Option([], "--rename", help="Restore topic OLD under NEW: OLD=NEW (repeatable)."),
    restore_id: Optional[str] = typer.Option(None, "--restore-id", help="Id to resume an interrupted restore."),
    state: Optional[str] = typer.Option(None, "--state", help="Where the restore keeps its state and offset map "
                                        "(a directory or s3:// URI; default: $TOPICVAULT_STATE_DIR, else "
                                        "~/.local/state/topicvault). Never the archive, which is only read."),
    import_state: Optional[str] = typer.Option(None, "--import-state", help="With --restore-id: first copy that "
                                               "restore's records from this folder (e.g. the archive's "
                                               "_topicvault/restores/ID/ an older version wrote) into --state, "
                                               "once. Nothing of a restore's own is read from the archive "
                                               "otherwise."),
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
    cluster_state: bool = typer.Option(False, "--cluster-state", help="Whole-cluster recovery: also create the "
                                       "saved ACLs and SCRAM users (as of --until) once the topics exist and before "
                                       "the data, and commit group offsets after it (as --groups). Users are "
                                       "created only with a password given (--scram-passwords or "
                                       "TOPICVAULT_SCRAM_PASSWORD_<USER>); the others are listed. See "
                                       "docs/recovery-runbook.md."),
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
    peer_header_encoding: Optional[str] = typer.Option(None, "--peer-header-encoding", help="Confluent, Lenses "
                                                       "JSON, Aiven jsonl: how header values were stored as text: "
                                                       "text (SimpleHeaderConverter, the default) or base64 "
                                                       "(ByteArrayConverter)."),
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
    schema_registry: Optional[str] = typer.Option(None, "--schema-registry", help="Register the archive's saved "
                                                  "schema registry (as of --until) into this one's "
                                                  "Confluent-compatible API before any record."),
    schema_ids: str = typer.Option("preserve", "--schema-ids", help="With --schema-registry: preserve (ask for the "
                                   "saved ids; stop before any record if the target gives others) or remap (new "
                                   "ids, rewritten in every record key and value that carries one)."),
    master: Optional[str] = MASTER,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be restored; produce nothing."),
    follow: bool = typer.Option(False, "--follow", help="A warm standby: restore what the location holds, then "
                                "keep restoring what lands in it until SIGTERM or Ctrl-C, which finish the running "
                                "round first. Resume after a crash with the same --restore-id."),
    poll_interval: Optional[float] = typer.Option(None, "--poll-interval", help="With --follow: seconds between "
                                                  "looks for new commits or objects (default 10)."),
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the plan or the final summary as JSON (with "
                                 "--follow: one JSON line per round)."),
    quiet: bool = QUIET,
) -> None:
    """Restore a backup to a Kafka cluster: same partitions, same order, same bytes."""
    from .source.follow import DEFAULT_POLL_INTERVAL_S, StandbyRequest, check_follow_options
    from .source.restore import parse_renames
    from .source.throttle import RateLimit

    rate = RateLimit.of(max_records_per_second, max_bytes_per_second)  # a bad limit fails before any connection
    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, from_uri, store_option,
                         encryption_key, schema_registry)
    _keyring_of(settings)  # an unreadable key file or unknown KMS key fails before anything else
    job = _restore_job(settings, layout, key_template, state, on_error, rate,
                       PeerOptions(tuple(f.strip() for f in peer_fields.split(",") if f.strip()),
                                   peer_value_encoding, peer_header_encoding, peer_key_encoding))
    _check_restore_flags(context, cluster_state, scram_passwords,
                         merge_acls or add_scram_mechanisms or accept_renamed_access, follow)
    groups = groups or cluster_state  # group offsets are part of the cluster's state
    if group and not groups:
        raise TopicvaultError("--group works with --groups: add --groups")
    request = StandbyRequest(tuple(topic), parse_renames(rename), restore_id,
                             _selection(until, until_mode, from_offset, to_offset), allow_nonempty, create_topics,
                             configs, groups, tuple(group),
                             DEFAULT_POLL_INTERVAL_S if poll_interval is None else poll_interval)
    if import_state:
        _import_state(job, restore_id, import_state, settings.store_options, dry_run)
        if dry_run:
            return
    if follow:
        check_follow_options(request.selection, request.poll_interval_s)
        _follow_restore(job, request, master, as_json, quiet)
        return
    restore_plan = _plan_one_restore(job, request, cluster_state, scram_passwords, merge_acls,
                                     add_scram_mechanisms, accept_renamed_access)
    if dry_run:
        _print(report.restore_dry_run(restore_plan, as_json))
        if restore_plan.access is not None:
            _print(report.access_dry_run(restore_plan.access, as_json))
        if schema_registry:
            from .source.schema_registry import check_schema_id_mode, saved_registry

            check_schema_id_mode(schema_ids)
            _print(report.registry_dry_run(saved_registry(job, request.selection.until_ms), schema_ids))
        return
    registry = None
    if schema_registry:  # registered before any record; a refusal stops here
        from .source.schema_registry import registry_before_data

        job, registry = registry_before_data(job, restore_plan.restore_id, request.selection.until_ms,
                                             settings.schema_registry_url, settings.schema_registry_settings,
                                             schema_ids)
        _print(report.registry_restored(registry, schema_ids))
    result, committed_groups = _run_one_restore(job, restore_plan, request, master, as_json or quiet)
    _print(report.ids_rewritten(result, registry))
    _print(report.access_restored(result))
    _print(report.restore_summary(result, committed_groups, as_json, EXIT_SKIPPED))
    if result.skipped:
        raise typer.Exit(EXIT_SKIPPED)


def _restore_job(settings, layout: str, key_template: Optional[str], state: Optional[str], on_error: str, rate,
                 peer_options: PeerOptions):
    """The restore's job: where from, where to, how to read the archive (checked before anything is read)."""
    from .source.object_reader import check_on_error
    from .source.restore import RestoreJob

    return RestoreJob(_kafka_of(settings), _uri_of(settings, "--from"), _store_of(settings), layout=layout,
                      key_template=key_template, state_uri=state, on_error=check_on_error(on_error),
                      encryption_keys=settings.encryption_keys, peer_options=peer_options, rate=rate)


def _selection(until: Optional[str], until_mode: str, from_offset: list[str], to_offset: list[str]):
    """Which records of each partition: --until, --until-mode, --from-offset, --to-offset."""
    from .source.selection import Selection, check_until_mode, parse_offset_bounds, parse_until

    return Selection(
        until_ms=parse_until(until) if until else None,
        until_mode=check_until_mode(until_mode),
        from_offsets=parse_offset_bounds(from_offset, "--from-offset"),
        to_offsets=parse_offset_bounds(to_offset, "--to-offset"),
    )


def _check_restore_flags(context: typer.Context, cluster_state: bool, scram_passwords: Optional[str],
                         access_flags: bool, follow: bool) -> None:
    """Refuse flags that only work with another one, naming the one to add or drop (`access_flags`: one of
    --merge-acls, --add-scram-mechanisms, --accept-renamed-access given)."""
    if (scram_passwords or access_flags) and not cluster_state:
        raise TopicvaultError("--scram-passwords, --merge-acls, --add-scram-mechanisms and --accept-renamed-access "
                              "work with --cluster-state: add --cluster-state")
    _refuse_by_follow(context, follow, RESTORE_ONE_SHOT_ONLY, RESTORE_FOLLOW_ONLY)


def _plan_one_restore(job, request, cluster_state: bool, scram_passwords: Optional[str], merge_acls: bool,
                      add_scram_mechanisms: bool = False, accept_renamed_access: bool = False):
    """Plan a one-shot restore, with what --groups and --cluster-state add; print its notes. Groups it
    cannot commit and target ACLs the archive does not hold are refused here, before anything is written."""
    from .source.restore import plan_restore

    restore_plan = plan_restore(job, list(request.topics), request.renames, request.restore_id,
                                request.allow_nonempty, request.create_missing, request.selection,
                                request.apply_configs)
    if request.groups:
        from .source.groups import check_groups

        restore_plan.notes.extend(check_groups(restore_plan, list(request.only_groups) or None))
    if cluster_state:
        from .source.access import plan_cluster_access

        restore_plan.access = plan_cluster_access(job, restore_plan, scram_passwords, merge_acls,
                                                  add_mechanisms=add_scram_mechanisms,
                                                  accept_renamed_access=accept_renamed_access)
        restore_plan.notes.extend(restore_plan.access.notes)
    _print(report.restore_plan_notes(restore_plan))
    return restore_plan


def _run_one_restore(job, restore_plan, request, master: Optional[str], quiet: bool):
    """Run a planned restore in Spark, then commit the translated group offsets (--groups); return the
    result and the offsets committed (None: --groups not given)."""
    from .core.progress import ProgressMonitor
    from .core.spark import get_task_session
    from .source.restore import run_restore

    _print(report.restore_started(restore_plan))
    with interrupt_says(lambda: report.restore_interrupted(restore_plan.restore_id)):
        spark = get_task_session(master)  # the job runs plain tasks: no Spark SQL session (seconds of start-up)
        quiet_spark_interrupts()
        with ProgressMonitor("restore", restore_plan.records, len(restore_plan.tasks), spark,
                             quiet=quiet) as progress:
            result = run_restore(spark, replace(job, progress_dir=progress.directory), restore_plan)
    if not request.groups:
        return result, None
    from .source.groups import restore_groups

    return result, restore_groups(job, restore_plan.restore_id, list(request.only_groups) or None)


def _import_state(job, restore_id: Optional[str], uri: str, store_options, dry_run: bool) -> None:
    """Copy a restore's records the user named into the state store (restore --import-state); with
    `dry_run`, check them and write nothing (the plan, read from the state store, would not hold them)."""
    from .core.locations import open_store_beside
    from .source.restore_state import import_restore_records

    if not restore_id:
        raise TopicvaultError("--import-state works with --restore-id: give the id of the restore it holds")
    names = import_restore_records(job.restore_records(), restore_id, open_store_beside(uri, store_options), dry_run)
    if dry_run:
        typer.echo(f"dry run: would import restore {restore_id}'s records from {uri} into {job.state_uri}: "
                   f"{', '.join(names)} (checked; nothing was written). Its plan shows once they are imported: "
                   "run without --dry-run")
        return
    typer.echo(f"imported restore {restore_id}'s records from {uri} into {job.state_uri}: {', '.join(names)}")


def _follow_restore(job, request, master: Optional[str], as_json: bool, quiet: bool) -> None:
    """Run a standby until SIGTERM/SIGINT; a second signal ends the process at once (the state of
    the last finished round is saved, and a restart with the same --restore-id continues exactly)."""
    import os
    import threading

    from .core.spark import get_spark
    from .source.follow import follow_restore

    stop = threading.Event()

    def request_stop(signum, frame) -> None:
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        typer.echo("stopping: finishing the running round, then saving its state", err=True)
        stop.set()

    def print_round(finished) -> None:
        _print(report.follow_round(finished, as_json, quiet))

    spark = get_spark(master, retry_tasks=True)  # a crashed worker costs a task attempt, not the follower
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    _print([report.restore_following(job.store_uri, request.poll_interval_s)])
    summary = follow_restore(spark, job, request, stop, print_round,
                             lambda restart: _print(report.follow_restart(restart, as_json)),
                             lambda nothing_yet: _print([report.standby_waiting(nothing_yet, request.poll_interval_s)]))
    _print(report.follow_stopped(summary, EXIT_SKIPPED))
    if summary.skipped:
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
    from .core.archive.checkpoints import load_state
    from .core.archive.conditional_writes import remembered_conditional_writes
    from .core.locations import open_store

    settings = _settings(config, None, store, None, [], uri, store_option)
    location = _uri_of(settings, "URI")
    opened = open_store(location, settings.store_options)
    state = load_state(opened)
    if not state.last_sequence:  # commits covering no offsets yet are a backup too (of topics with no records)
        raise NoBackup(location)
    _print(report.ls(state, as_json, remembered_conditional_writes(opened)))


@app.command()
@reports_errors
def verify(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    bootstrap_servers: Optional[str] = typer.Option(None, "--bootstrap-servers", "-b", help="Also compare with "
                                                    "the live topics of this cluster."),
    topic: List[str] = typer.Option([], "--topic", "-t", help="Only this topic (repeatable)."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    kafka_property: List[str] = KAFKA_PROPERTY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    cluster: Optional[str] = CLUSTER,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Also fail on a damaged file under _topicvault/ that "
                                "readers work around (checkpoint, pointer, lease, saved restore state)."),
    state: Optional[str] = typer.Option(None, "--state", help="Where restore records are kept (as restore "
                                        "--state); their saved states of this archive are read too."),
) -> None:
    """Check every committed object (checksum, count, offsets) and every file under _topicvault/;
    optionally compare with the live topics."""
    from .core.locations import open_store, open_store_beside
    from .source.restore_state import default_state_uri
    from .source.verify import verify_backup

    settings = _settings(config, cluster, store, bootstrap_servers, kafka_property, uri, store_option, encryption_key)
    kafka = _kafka_of(settings) if settings.bootstrap_servers else None
    verified = verify_backup(open_store(_uri_of(settings, "URI"), settings.store_options), topic, kafka,
                             keyring=_keyring_of(settings),
                             state_store=open_store_beside(state or default_state_uri(), settings.store_options))
    _print(report.verify(verified, kafka is not None, as_json, strict))
    if not (verified.ok_strict if strict else verified.ok):
        raise typer.Exit(1)


@app.command()
@reports_errors
def inspect(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    object_key: Optional[str] = typer.Option(None, "--object", help="Print this object (key under the location)."),
    topic: Optional[str] = typer.Option(None, "--topic", "-t", help="Print this topic's committed records "
                                        "(default: every topic's, by name)."),
    partition: Optional[int] = typer.Option(None, "--partition", "-p", help="Only this partition."),
    offset: int = typer.Option(0, "--offset", help="Start at this offset."),
    limit: int = typer.Option(20, "--limit", help="Records to print at most."),
    encryption_key: List[str] = ENCRYPTION_KEY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    as_json: bool = typer.Option(False, "--json", help="One JSON object per record (bytes as base64)."),
) -> None:
    """Print records of one object, of a topic(-partition), or (with neither) the first records of a backup,
    like a console consumer."""
    from .core.locations import open_store
    from .source.inspect import json_line, records_of_object, records_of_topic, text_line

    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    location = open_store(_uri_of(settings, "URI"), settings.store_options)
    if object_key is not None and topic is not None:
        raise TopicvaultError("pass either --object KEY or --topic NAME (with --partition P), not both")
    keyring = _keyring_of(settings)
    records = (records_of_object(location, object_key, offset, keyring) if object_key
               else records_of_topic(location, topic, partition, offset, keyring))
    for count, record in enumerate(records):
        if count >= limit:
            break
        typer.echo(json_line(record) if as_json else text_line(record))


GRACE = typer.Option("24h", "--grace", help="Delete replaced/expired objects only this long after the commit that "
                     "retired them, and uncommitted objects only this long after they were written (a running "
                     "backup or compact holds a lease that protects its own): longer than your longest restore, "
                     "DataFrame write and --follow micro-batch (e.g. 24h, 90m, 0s).")


def _grace_ms(text: str) -> int:
    from .core.instants import duration_to_ms

    try:
        return duration_to_ms(text)
    except ValueError:
        raise TopicvaultError(f"bad --grace {text!r}: give a duration such as 24h, 90m, 30s or 0s") from None


@app.command("compact")
@reports_errors
def compact_command(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    max_records: int = typer.Option(DEFAULT_MAX_RECORDS, "--max-records", help="Records per merged object at most."),
    max_bytes: int = typer.Option(DEFAULT_MAX_BYTES, "--max-bytes", help="Payload bytes per merged object at most."),
    compression: Optional[str] = typer.Option(None, "--compression", help="Codec of merged objects (default: "
                                              "their format's default)."),
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
    from .core.rotation import Rotation
    from .source.maintenance.compact import CompactJob, execute_compaction, plan_compaction

    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    key_template = _key_template_of(key_template, time_partition)
    job = CompactJob(_uri_of(settings, "URI"), _store_of(settings), Rotation(max_records, max_bytes), compression,
                     key_template, settings.encryption_keys, _grace_ms(grace))
    location = job.open_store()
    plan = plan_compaction(job, location, dry_run)
    _print(report.compact(plan.dry_result() if dry_run else execute_compaction(job, location, plan), dry_run, as_json))


@app.command("expire")
@reports_errors
def expire_command(
    uri: Optional[str] = typer.Argument(None, help="Backup location (or --store NAME)."),
    before: str = typer.Option(..., "--before", help="Drop each partition's oldest whole objects whose records are "
                               "all older than TIME and that were committed before TIME: ISO-8601, epoch ms, or an "
                               "age such as 30d or 12h."),
    grace: str = GRACE,
    encryption_key: List[str] = ENCRYPTION_KEY,
    store_option: List[str] = STORE_OPTION,
    config: Optional[str] = CONFIG,
    store: Optional[str] = STORE,
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; write nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Drop the records older than TIME, whole objects only, recorded in a commit; never a record at or after TIME."""
    from .core.instants import instant_or_age_to_epoch_ms
    from .core.locations import open_store
    from .source.maintenance.expire import check_before, execute_expiry, plan_expiry

    now_ms = int(time.time() * 1000)
    try:
        before_ms = instant_or_age_to_epoch_ms(before, now_ms)
    except ValueError:
        raise TopicvaultError(f"bad --before {before!r}: give ISO-8601 (2026-11-01T00:00:00Z), epoch milliseconds "
                              "or an age such as 30d, 12h") from None
    check_before(before_ms, now_ms)  # --before 0s, or a time to come
    settings = _settings(config, None, store, None, [], uri, store_option, encryption_key)
    grace_ms = _grace_ms(grace)
    location, keyring = open_store(_uri_of(settings, "URI"), settings.store_options), _keyring_of(settings)
    plan = plan_expiry(location, before_ms, grace_ms, dry_run, keyring=keyring)
    result = plan.dry_result() if dry_run else execute_expiry(location, plan, grace_ms, keyring=keyring)
    _print(report.expire(result, dry_run, as_json))


@app.command()
@reports_errors
def keygen(path: str = typer.Argument(..., help="File to create (never overwritten); keep it safe: "
                                      "without it the archives it encrypted cannot be read.")) -> None:
    """Write a new random encryption key file (base64 of 32 bytes, owner-only) for --encryption-key file://PATH."""
    from pathlib import Path

    from .core.crypto import write_key_file

    key_id = write_key_file(path)
    typer.echo(f"wrote key {key_id} to {path}: use --encryption-key file://{Path(path).resolve()}")


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


SANDBOX_TOPIC = "orders"  # README's quick start backs it up


@app.command()
@reports_errors
def sandbox(
    bucket: str = typer.Option("topicvault", "--bucket", help="Bucket to create on the S3 server."),
    sample_records: int = typer.Option(1_000, "--sample-records", help="Records of the sample topic `orders` "
                                       "(null keys, tombstones, repeated headers); 0: no such topic."),
) -> None:
    """A single-node Apache Kafka and a local S3 server with a bucket, to try topicvault; until Ctrl-C."""
    from .core.sandbox import sandbox as start_sandbox
    from .source.demo import sample_topic

    def stop(signum, frame) -> None:
        raise KeyboardInterrupt

    # Ctrl-C or SIGTERM stops it, also when started where SIGINT is ignored (a background job).
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    typer.echo("starting Apache Kafka (one node) and an S3 server (moto)...", err=True)
    try:
        with start_sandbox(bucket) as running:
            if sample_records > 0:
                sample_topic(running.bootstrap, SANDBOX_TOPIC, sample_records)
            _print(report.sandbox_started(running, SANDBOX_TOPIC if sample_records > 0 else None, sample_records))
            while True:
                signal.pause()
    except KeyboardInterrupt:
        typer.echo("sandbox stopped: Kafka and the S3 server are gone, with their data", err=True)


def main() -> None:
    """Console-script entry point."""
    # SIGTERM unwinds like Ctrl-C would, so child processes (embedded broker) are stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    app()


if __name__ == "__main__":
    sys.exit(main())
