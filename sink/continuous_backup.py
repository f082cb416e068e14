"""`backup --follow`: a Structured Streaming query from the topics to the backup location.

Every run starts with a fresh Spark checkpoint, so it begins at the location's committed
ends: the commit records are the one truth, whether the last run was followed or one-shot,
stopped or killed. What a killed run wrote but did not commit is not part of the backup and
is read again.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from ..core.archive.checkpoints import load_state, read_forward
from ..core.archive.commits import CommitRecord
from ..core.errors import TopicvaultError
from ..core.process import stop_on_signals
from ..core.restarts import RestartBudget, pause
from ..core.spark import failure_reason, get_spark
from ..core.text import backup_follow_commit
from .backup import BackupJob, commit_unread, plan_run
from .metrics import FollowMetrics, MetricsServer, batch_durations, own_commits
from .stream import deleted_followed_topic

# How long a graceful stop waits for the running micro-batch to finish and commit.
STOP_GRACE_S = 120.0


@dataclass
class FollowResult:
    """What a followed backup committed while it ran."""

    commits: int
    records: int
    lag: dict[str, int]


@dataclass(frozen=True)
class ContinuousBackupRequest:
    """What a followed backup (backup --follow) reads, and how often it commits."""

    topics: tuple[str, ...] = ()
    topics_regex: str | None = None
    flush_interval_s: float = 60.0  # seconds between micro-batches (each commits its objects)
    max_records_per_trigger: int | None = None  # records per micro-batch at most (None: no bound)


def _options(job: BackupJob) -> dict[str, str]:
    kafka = {f"kafka.{k}": v for k, v in job.kafka.properties}
    kafka["kafka.bootstrap.servers"] = job.kafka.bootstrap_servers
    store = {f"store.{k}": v for k, v in job.store_options}
    encryption = {"encryptionKey": ",".join(job.encryption_keys)} if job.encryption_keys else {}
    return {**kafka, **store, **encryption}


def follow_backup(job: BackupJob, request: ContinuousBackupRequest, master: str | None,
                  register: Callable[[object], None], say: Callable[[str, bool], None], started: Callable[[], None],
                  metrics_port: int = 0, metrics_address: str = "127.0.0.1") -> FollowResult:
    """`backup --follow` until SIGTERM or Ctrl-C: serve metrics on `metrics_port` (0: none; bound before
    Spark starts, so a port in use fails at once), start Spark with task retries, `register` the data
    sources on it, call `started()` once signals are handled, then run_follow. `say(line, to_stderr)`
    prints a line of the run (the caller makes it safe for a terminal)."""
    if not metrics_port:
        return _follow_in_spark(job, request, master, register, say, started, None)
    metrics = FollowMetrics()
    with MetricsServer(metrics, metrics_port, metrics_address):
        say(f"serving Prometheus metrics on port {metrics_port} of {metrics_address} (/metrics)", False)
        return _follow_in_spark(job, request, master, register, say, started, metrics)


def _follow_in_spark(job: BackupJob, request: ContinuousBackupRequest, master: str | None,
                     register: Callable[[object], None], say: Callable[[str, bool], None], started: Callable[[], None],
                     metrics: FollowMetrics | None) -> FollowResult:
    """Start Spark, stop on the first SIGTERM or SIGINT after the running micro-batch, run_follow."""
    stop = threading.Event()

    def stopping() -> None:
        say("stopping: finishing the running micro-batch, then committing", True)
        stop.set()

    spark = get_spark(master, retry_tasks=True)  # a crashed worker costs a task attempt, not the follower
    register(spark)  # the stream runs through topicvault's data sources
    stop_on_signals(stopping)
    started()
    return run_follow(spark, job, request, stop.is_set, lambda line: say(line, False), metrics)


def run_follow(
    spark,
    job: BackupJob,
    request: ContinuousBackupRequest,
    should_stop: Callable[[], bool],
    report: Callable[[str], None],
    metrics: FollowMetrics | None = None,
) -> FollowResult:
    """Back up continuously until `should_stop()`; then finish the running micro-batch and return.
    `metrics` (if given) are kept up to date from the commits and Spark's progress.

    `spark` must have topicvault's data sources registered (topicvault.datasources.register):
    the stream runs through them.
    """
    if request.flush_interval_s <= 0:
        raise TopicvaultError("--flush-interval must be positive (seconds)")
    # Plan once as a one-shot backup would: unknown topics, a recreated topic and offsets lost
    # to retention are reported before anything runs.
    start_plan = plan_run(job, list(request.topics), request.topics_regex)
    for warning in start_plan.warnings:
        report(f"warning: {warning}")
    # Topic settings, IDs, group offsets and offsets lost to retention, saved once per run;
    # no task runs, so the only ranges committed are the lost ones (the stream starts after them).
    key = commit_unread(job, start_plan)
    if key:
        report(f"saved topic settings, consumer-group offsets and lost offsets: committed {key}")
    common = _options(job)
    store = job.open_store()
    state = load_state(store, job.keyring())  # kept in memory and read forward: never reloaded on a timer
    first_sequence, first_records = state.last_sequence, _records(state)
    if metrics is not None:
        metrics.observe_state(state)
    restarts = RestartBudget()
    while True:
        try:
            state = _run_query(spark, job, common, request, store, state, should_stop, report, metrics)
            break
        except QueryFailed as failure:
            if metrics is not None:
                metrics.observe_errors("micro_batch")
            deleted = deleted_followed_topic(job.kafka, _ids_followed(state, request), job.store_uri)
            if deleted is not None:  # the failure (a read ended short, say) was the topic going away
                raise deleted from None
            delay = restarts.next_delay() if failure.restartable else None
            if delay is None:
                raise TopicvaultError(restarts.give_up("followed backup", failure.reason)
                                      if failure.restartable else str(failure)) from None
            state = read_forward(store, state)
            report(f"restart {restarts.total}: the query failed ({failure.reason}); starting again from commit "
                   f"{state.last_sequence} in {delay:.0f} s ({len(restarts.times)} of at most "
                   f"{restarts.max_restarts} restarts in {restarts.window_s:.0f} s)")
            if metrics is not None:
                metrics.observe_restart()
            if not pause(delay, should_stop):
                break
    return FollowResult(
        state.last_sequence - first_sequence, _records(state) - first_records, (state.last_stream or {}).get("lag", {})
    )


def _ids_followed(state, request: ContinuousBackupRequest) -> dict[str, str]:
    """The Kafka topic IDs the location's commits recorded ({topic: ID}) of the topics `request`
    follows: named, or matching its regex (as core.cluster.kafka.select_topics matches)."""
    pattern = re.compile(request.topics_regex) if request.topics_regex else None
    return {topic: topic_id for topic, topic_id in state.topic_ids.items()
            if topic in request.topics or (pattern is not None and pattern.fullmatch(topic))}


class QueryFailed(TopicvaultError):
    """The stream's query failed: `reason` is its one line; `restartable` unless a TopicvaultError
    of a task (bad input or a state a restart would meet again) caused it."""

    def __init__(self, reason: str, restartable: bool) -> None:
        super().__init__(f"followed backup failed: {reason}")
        self.reason = reason
        self.restartable = restartable


def _run_query(spark, job: BackupJob, common: dict[str, str], stream: ContinuousBackupRequest, store, state,
               should_stop: Callable[[], bool], report: Callable[[str], None], metrics: FollowMetrics | None):
    """Run one streaming query from the location's committed ends until `should_stop()`; return
    the state read forward to its last commit. Raises QueryFailed when the query fails."""
    reader = spark.readStream.format("topicvault-kafka").options(**common).option("startFromLocation", job.store_uri)
    # A micro-batch over hundreds of partitions runs about one task per core (see group_ranges).
    reader = reader.option("minPartitions", str(spark.sparkContext.defaultParallelism))
    if stream.topics:
        reader = reader.option("subscribe", ",".join(stream.topics))
    if stream.topics_regex:
        reader = reader.option("subscribePattern", stream.topics_regex)
    if stream.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(stream.max_records_per_trigger))
    stream_id = uuid.uuid4().hex
    writer_options = {
        **common,
        "format": job.format_name,
        "maxRecords": str(job.rotation.max_records),
        "maxBytes": str(job.rotation.max_bytes),
        "streamId": stream_id,
        # The rows come unfiltered from our own reader: their offset gaps are the topic's own.
        "allowOffsetGaps": "true",
        # Group offsets with every micro-batch that changed them: restore --until TIME --groups needs them over time.
        "saveGroups": "true",
    }
    if job.compression:
        writer_options["compression"] = job.compression
    if job.key_template:
        writer_options["keyTemplate"] = job.key_template
    checkpoint = tempfile.mkdtemp(prefix="topicvault-follow-")
    query = (
        reader.load()
        .writeStream.format("topicvault")
        .options(**writer_options)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{stream.flush_interval_s} seconds")
        .start(job.store_uri)
    )
    watch = _BatchWatch(spark, query, stream_id, metrics, job.keyring())
    try:
        while query.isActive and not should_stop():
            _await(query, 1)
            # Spark's progress (held in memory) tells when a micro-batch read records; only then
            # are the commits after the known sequence read, so an idle follower makes no store request.
            if not watch.batches_ran():
                continue
            if watch.failed_attempts:
                report(f"{watch.failed_attempts} failed task attempt(s) retried (a task failed or its Python worker "
                       "crashed); the micro-batch went on")
            state = watch.read_forward(store, state)
            if watch.new_commits:
                report(backup_follow_commit(watch.new_commits, _records(state), (state.last_stream or {}).get("lag", {})))
        _stop_after_batch(query)
        if query.exception() is not None:
            raise _failed(str(query.exception()))
    finally:
        if query.isActive:
            query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
    watch.batches_ran()  # the last micro-batch's duration, for the metrics
    return watch.read_forward(store, state)


class _BatchWatch:
    """What the follow loop learns of its micro-batches from Spark (in memory, no store request):
    whether one read records since the last look, how long each took and which task attempts
    failed; and, with metrics, the commit records a read-forward finds, counted once each."""

    def __init__(self, spark, query, stream_id: str, metrics: FollowMetrics | None, keyring=None) -> None:
        self.keyring = keyring  # commits read forward are authenticated with it
        self.spark = spark
        self.query = query
        self.stream_id = stream_id
        self.metrics = metrics
        self.last_report = ""  # timestamp of the newest progress report handled (ISO-8601, sortable)
        self.durations: dict[int, float] = {}
        self.jobs_counted: set[int] = set()
        self.failed_attempts = 0  # found by the last batches_ran()
        self.new_commits: list[CommitRecord] = []  # this stream's commits the last read_forward found

    def batches_ran(self) -> bool:
        """True if a micro-batch that read records reported progress since the last call.

        Idle triggers report progress too (every 10 s by default), so reports are told apart by
        their timestamps and a micro-batch is one that read records."""
        progress = self.query.lastProgress
        if not progress or progress.get("timestamp", "") <= self.last_report:
            return False
        fresh = [p for p in self.query.recentProgress if p.get("timestamp", "") > self.last_report]
        self.last_report = max([progress["timestamp"]] + [p["timestamp"] for p in fresh])
        ran = batch_durations(fresh)
        self.durations.update(ran)
        self.failed_attempts = self._new_failed_attempts() if ran else 0
        if self.metrics is not None:
            self.metrics.observe_errors("task_attempt", self.failed_attempts)
        return bool(ran)

    def read_forward(self, store, state):
        """read_forward, keeping this stream's new commit records (`self.new_commits`) and feeding the metrics."""
        records: list[CommitRecord] = []
        state = read_forward(store, state, on_commit=records.append, keyring=self.keyring)
        self.new_commits = own_commits(records, self.stream_id)
        if self.metrics is None:
            return state
        for record in self.new_commits:
            batch = int(record.stream["batch"])
            self.metrics.observe_commit(record, self.durations.get(batch))
            # Commits come in batch order: durations of this batch and earlier ones are done with.
            self.durations = {b: d for b, d in self.durations.items() if b > batch}
        self.metrics.observe_state(state)
        return state

    def _new_failed_attempts(self) -> int:
        """Task attempts that failed (and were retried) in the stream's jobs not counted yet.
        Spark runs a query's jobs under the job group of its run id."""
        tracker = self.spark.sparkContext.statusTracker()
        failed = 0
        jobs = tracker.getJobIdsForGroup(str(self.query.runId))
        self.jobs_counted &= set(jobs)  # Spark forgets old jobs; so does this set
        for job in jobs:
            info = tracker.getJobInfo(job)
            if job in self.jobs_counted or info is None or info.status == "RUNNING":
                continue
            self.jobs_counted.add(job)
            failed += sum(stage.numFailedTasks for stage in map(tracker.getStageInfo, info.stageIds) if stage)
        return failed


def _await(query, seconds: float) -> None:
    """Wait for the query; a query that failed is a one-line TopicvaultError, not Spark's traceback."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination(seconds)
    except StreamingQueryException as exc:
        raise _failed(str(exc)) from None


def _failed(text: str) -> QueryFailed:
    """The failure of a query whose exception reads `text`: a TopicvaultError a task raised is
    final (a restart would meet it again); anything else (a crashed worker) may be restarted."""
    return QueryFailed(failure_reason(text), restartable="TopicvaultError: " not in text)


def _records(state) -> int:
    return sum(ps.records for ps in state.partitions.values())


def _stop_after_batch(query) -> None:
    """Let a running micro-batch finish (and commit) before stopping the query."""
    deadline = time.monotonic() + STOP_GRACE_S
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


