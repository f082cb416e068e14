"""The backup job: plan on the driver, consume and write objects in Spark tasks, commit once.

Tasks are fused (each consumes its range and writes objects inside one Python worker and
returns only object entries), because moving rows from one Python data source to another
through the JVM costs more than reading them from the broker (see docs/design.md).
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaException, TopicPartition

from ..core.archive.checkpoints import load_state
from ..core.archive.commit_log import append, backup_record
from ..core.archive.commits import BackupState, CommitRecord, ObjectEntry, check_topic_ids
from ..core.archive.leases import RunLease
from ..core.cluster.cluster_access import changed_access
from ..core.cluster.cluster_admin import group_offsets, read_access, topic_settings, with_clock_skew
from ..core.cluster.kafka import (
    KafkaSettings,
    all_partitions,
    ends_past,
    list_topic_partitions,
    metadata_consumer,
    partition_watermarks,
    select_topics,
    topic_ids,
)
from ..core.cluster.registry_client import RegistryClient
from ..core.crypto import Keyring, keyring_of
from ..core.errors import TopicvaultError
from ..core.executor import ExecutorChoice, monitored, open_executor
from ..core.hotloop import rare_cyclic_gc
from ..core.local.faults import crash_after, crash_now
from ..core.process import interrupt_says
from ..core.progress import ProgressMonitor, counted
from ..core.rotation import DEFAULT_MAX_BYTES, Rotation
from ..core.spark import run_tasks
from ..core.stores.locations import open_store
from ..formats import resolve_format
from ..formats.saved_registry import changed_registry
from ..keys import KeyCodec, default_codec, new_run_id, template_codec
from .kafka_reader import OffsetRange, RangeEnd, check_backup_properties, read_ranges
from .objects import PartitionObjects
from .plan import DEFAULT_RECORDS_PER_TASK, BackupPlan, ClusterRead, ReadExtent, TaskResult, plan_backup, read_extent


@dataclass(frozen=True)
class BackupJob:
    """Everything a backup task needs, as plain picklable data."""

    kafka: KafkaSettings
    store_uri: str
    store_options: tuple[tuple[str, str], ...] = ()
    format_name: str = "parquet"
    compression: str | None = None
    key_template: str | None = None
    rotation: Rotation = field(default_factory=Rotation)
    idle_timeout_s: float = 60.0
    # Payload of open objects a task may hold while it reads many partitions at once (see backup_group).
    open_objects_budget: int = 2 * DEFAULT_MAX_BYTES
    progress_dir: str | None = None  # see core.progress
    # Names this run's objects, so no other run can overwrite them (see sink.objects).
    run_id: str = field(default_factory=new_run_id)
    # --encryption-key specs (file:///path or kms://KEY); each worker loads them (core.crypto.keyring_of).
    # The first encrypts new objects and authenticates the commit; the others vouch for older
    # commit records they authenticated (after a key rotation).
    encryption_keys: tuple[str, ...] = ()
    # --schema-registry URL and its settings (core.cluster.registry_client.SETTINGS): read whole by the
    # plan and saved by the commit when it changed (issue #52); None: not saved.
    schema_registry_url: str | None = None
    schema_registry_settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_backup_properties(self.kafka)  # before a Spark session starts or anything is written
        self.keyring()  # an unreadable key file or unknown KMS key fails here, before anything is written
        if self.schema_registry_url is not None:  # a URL that is none, or an unknown setting, fails here too
            RegistryClient(self.schema_registry_url, dict(self.schema_registry_settings))

    def keyring(self) -> Keyring | None:
        """The keys: the first encrypts new objects (None: not encrypted)."""
        return keyring_of(self.encryption_keys)

    def codec(self) -> KeyCodec:
        """The object-key codec this backup names objects with."""
        return template_codec(self.key_template) if self.key_template else default_codec()

    def open_store(self):
        """The object store of the backup location."""
        return open_store(self.store_uri, dict(self.store_options))


@dataclass
class BackupResult:
    """What a backup run did."""

    plan: BackupPlan
    objects: list[ObjectEntry]  # the committed ones
    commit_key: str | None
    elapsed_s: float
    spark_start_s: float = 0.0
    warnings: list[str] = field(default_factory=list)  # partitions that ended below the plan, see read_extent

    @property
    def records(self) -> int:
        return sum(o.records for o in self.objects)

    @property
    def bytes(self) -> int:
        return sum(o.bytes for o in self.objects)


def backup_group(job: BackupJob, tasks: list[OffsetRange]) -> list[TaskResult]:
    """Consume ranges of distinct partitions through one consumer and write each partition's
    records as its own objects (runs in a Spark worker); return one result per range.

    Messages arrive interleaved and go to one object writer per partition, which rotates by
    records as a task of that range alone would: the same keys and bytes. Each object closed
    is stored by one of `store.concurrent_puts` threads while the read goes on. Memory: while
    the open objects of all partitions hold at most `job.open_objects_budget` bytes of payload,
    all are read at once; past it, the rest are read one partition after another (each
    finished before the next begins); objects waiting to be stored hold at most the budget
    too (a new one waits while more is in flight), so a task holds at most about twice the
    budget plus two objects (`rotation.max_bytes`; an encrypted one twice) plus the
    consumer's read-ahead.
    """
    store, codec, object_format = job.open_store(), job.codec(), resolve_format(job.format_name, job.compression)
    keyring = job.keyring()
    # Each put costs a round trip (S3) or fsyncs (a directory) whatever its size: a task of
    # hundreds of small partitions stores their objects on threads rather than one by one
    # (measured: 256 partitions x 20 records, 2.1 s of 3.9 s in fsync), and a task of big
    # partitions reads on while an object uploads.
    with ThreadPoolExecutor(store.concurrent_puts, thread_name_prefix="store") as pool, rare_cyclic_gc():
        in_flight: dict[Future, int] = {}  # stores not yet known to be done -> payload they hold

        def store_on_a_thread(store_object, payload: int) -> Future:
            while True:
                for future in [future for future in in_flight if future.done()]:
                    future.result()  # a failed store fails the task now, not after the whole read
                    del in_flight[future]
                if len(in_flight) < 4 * store.concurrent_puts and sum(in_flight.values()) <= job.open_objects_budget:
                    break
                wait(in_flight, return_when=FIRST_COMPLETED)
            future = pool.submit(store_object)
            in_flight[future] = payload
            return future

        writers = [PartitionObjects(store, codec, object_format, job.rotation, run_id=job.run_id, keyring=keyring,
                                    store_elsewhere=store_on_a_thread) for _ in tasks]
        ended: dict[int, RangeEnd] = {}

        def over_budget() -> bool:
            return sum(writer.open_payload for writer in writers) > job.open_objects_budget

        def batches():
            for index, item in read_ranges(job.kafka, tasks, job.idle_timeout_s, one_at_a_time=over_budget):
                if isinstance(item, RangeEnd):
                    writers[index].close()
                    ended[index] = item
                else:
                    writers[index].add(item)
                    yield item

        first = tasks[0] if tasks else OffsetRange("", 0, 0, 0)
        try:
            for _ in counted(batches(), job.progress_dir, f"{first.topic}-{first.partition}-{first.start}"):
                pass  # the batches are written as they go by; counted() reports progress
            return [TaskResult(task, ended[index].stopped_at, writers[index].stored_entries(),
                               ended[index].last_record)
                    for index, task in enumerate(tasks)]
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def plan_run(
    job: BackupJob,
    topics: list[str],
    topics_regex: str | None = None,
    records_per_task: int = DEFAULT_RECORDS_PER_TASK,
    full: bool = False,
) -> BackupPlan:
    """Plan one backup run: read the cluster (topics, group offsets, ACLs and SCRAM users, topic
    IDs and settings, watermarks) and the location's state, then plan what is new since its last commit
    (sink.plan.plan_backup, pure)."""
    job.codec()  # a bad template fails before anything is read
    resolve_format(job.format_name, job.compression)
    state = load_state(job.open_store(), job.keyring())
    if full and state.last_sequence:
        raise TopicvaultError(
            f"{job.store_uri} already holds a backup: --full starts over, so give it a new location"
        )
    selected = select_topics(list_topic_partitions(job.kafka), topics, topics_regex)
    # Group offsets are read before the offset snapshot, so every saved offset lies within the
    # backed-up range (a group cannot have committed past an end that did not exist yet).
    groups, warnings = _read_groups(job.kafka, selected)
    access, access_warnings = read_access(job.kafka)
    # Topic IDs are read before the offsets, and again before the commit (see commit_backup).
    ids = topic_ids(job.kafka, selected)
    partitions = all_partitions(selected)
    # The log's ends, read before the last stable offsets (so records arriving in between are not
    # taken for records an open transaction holds back).
    log_ends = {where: high for where, (_, high) in partition_watermarks(job.kafka, partitions,
                                                                         "read_uncommitted").items()}
    offsets = _with_true_ends(job.kafka, partition_watermarks(job.kafka, partitions))
    log_ends = {where: max(end, offsets[where][1]) for where, end in log_ends.items()}
    held_since = _first_record_times(job.kafka, {where: offsets[where][1] for where, end in log_ends.items()
                                                 if end > offsets[where][1]})
    cluster = ClusterRead(
        selected, offsets, topic_ids=ids,
        topic_settings={t: s.to_json() for t, s in topic_settings(job.kafka, selected).items()},
        groups=groups, warnings=warnings + access_warnings, log_ends=log_ends, access=access.to_json(),
        held_since=held_since, schema_registry=_read_registry(job),
    )
    return plan_backup(cluster, state, records_per_task, job.store_uri)


def _read_registry(job: BackupJob) -> dict | None:
    """The whole schema registry of `--schema-registry` (None when not given); RegistryError stops
    the backup before anything is written."""
    if job.schema_registry_url is None:
        return None
    return RegistryClient(job.schema_registry_url, dict(job.schema_registry_settings)).read_all()


# How long a backup waits for the first records open transactions hold back (only to say since when).
FIRST_RECORD_WAIT_S = 10.0


def _first_record_times(kafka: KafkaSettings, starts: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """The timestamp (ms) of the record at each partition's offset in `starts`, read_uncommitted:
    at a last stable offset below the log's end, the first record of the open transaction that
    holds the partition back. Only to tell the operator since when (sink.plan._held_back), so best
    effort: a partition whose record does not come within FIRST_RECORD_WAIT_S, or has no
    timestamp, is left out."""
    if not starts:
        return {}
    consumer = metadata_consumer(kafka, **{"isolation.level": "read_uncommitted", "auto.offset.reset": "error"})
    read: dict[tuple[str, int], int] = {}  # -1: no timestamp
    try:
        consumer.assign([TopicPartition(topic, partition, offset) for (topic, partition), offset in starts.items()])
        deadline = time.monotonic() + FIRST_RECORD_WAIT_S
        while len(read) < len(starts) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            where = (message.topic(), message.partition())
            if where in starts and where not in read:
                read[where] = message.timestamp()[1]
                consumer.pause([TopicPartition(*where)])
    except KafkaException:
        pass  # said without a time
    finally:
        consumer.close()
    return {where: ms for where, ms in read.items() if ms >= 0}


def _with_true_ends(kafka: KafkaSettings, offsets: dict[tuple[str, int], tuple[int, int]]
                    ) -> dict[tuple[str, int], tuple[int, int]]:
    """The (low, high) watermarks with each high moved to where a read_committed read from it
    reaches partition EOF.

    Some Kafka-compatible brokers report a high watermark below the true end (the embedded
    broker: the base offset of the last batch + 1): a plan up to it backed up 3 of a user's
    3,000 records, said nothing and exited 0. On Apache Kafka the read finds nothing (one fetch
    for all partitions), or the records written since the watermarks were read."""
    consumer = metadata_consumer(kafka, **{"enable.partition.eof": True})
    try:
        ends = ends_past(consumer, {where: high for where, (_, high) in offsets.items()})
    finally:
        consumer.close()
    return {where: (low, max(high, ends[where])) for where, (low, high) in offsets.items()}


def _read_groups(kafka: KafkaSettings, topics: dict[str, int]) -> tuple[dict | None, list[str]]:
    try:
        return group_offsets(kafka, topics), []
    except TopicvaultError as exc:  # e.g. no Describe ACL on groups: the data backup still matters more
        return None, [f"consumer-group offsets not saved: {exc}"]


def run_backup(spark, job: BackupJob, backup_plan: BackupPlan) -> BackupResult:
    """Run the planned tasks and commit what they wrote; nothing is committed if any task fails."""
    started = time.monotonic()
    groups = backup_plan.task_groups(spark.sparkContext.defaultParallelism)
    # From before the first object to after the commit: a compact or expire leaves this run's
    # objects alone, however long it runs (core.archive.leases).
    with RunLease(job.open_store(), job.run_id) if groups else nullcontext():
        results = [r for group in run_tasks(spark, lambda tasks: backup_group(job, tasks), groups) for r in group]
        extent = read_extent(backup_plan.partitions, results)
        commit_key = commit_backup(job, backup_plan, extent) if backup_plan.needs_commit else None
    return BackupResult(backup_plan, extent.objects, commit_key, time.monotonic() - started, warnings=extent.warnings)


def commit_unread(job: BackupJob, backup_plan: BackupPlan) -> str | None:
    """Without running any task: commit what the plan saves by itself (changed topic settings and
    IDs, consumer-group offsets, offsets lost to retention) when it `needs_commit`; the commit's
    key, or None when there is nothing to save."""
    return commit_backup(job, backup_plan) if backup_plan.needs_commit else None


def commit_backup(job: BackupJob, backup_plan: BackupPlan, extent: ReadExtent | None = None) -> str:
    """Write the commit record of a run: the ranges its tasks read (`extent`; None when no task
    ran), the offsets lost to retention, topic settings and IDs, and group offsets."""
    extent = extent or read_extent(backup_plan.partitions, [])
    store = job.open_store()
    state = load_state(store, job.keyring())
    # A topic deleted and re-created while this run read it must not be committed as the old one.
    check_topic_ids(backup_plan.topic_ids, topic_ids(job.kafka, backup_plan.topic_ids), job.store_uri)

    def build(state: BackupState) -> CommitRecord:
        # Re-checked on the newer state when another run committed first (see append): a
        # backup's ranges must still continue; a compact or expire moves no end.
        return backup_record(
            state, extent.ranges, extent.objects,
            topics=backup_plan.topic_settings or {t: {"partitions": n} for t, n in backup_plan.topics.items()},
            groups=with_clock_skew(backup_plan.groups, max((o.max_timestamp_ms for o in extent.objects), default=None),
                                   int(time.time() * 1000)),
            topic_ids=dict(backup_plan.topic_ids),
            lost=tuple(backup_plan.lost),
            last_records=extent.last_records or None,
            access=changed_access(state.access, backup_plan.access),
            schema_registry=changed_registry(state.registry_at(None), backup_plan.schema_registry),
        )

    build(state)  # fails before the crash point below when the ranges no longer continue
    if crash_after("backup.commit") is not None:
        crash_now()
    return append(store, state, build, job.keyring()).key


def run_one_backup(job: BackupJob, backup_plan: BackupPlan, choice: ExecutorChoice, master: str | None,
                   quiet: bool = False) -> tuple[BackupResult, float]:
    """Open the executor `choice` names (Spark's task session, or this process), show progress unless
    `quiet`, and run the planned backup; returns its result and the seconds the executor took to
    start (about 0 in process). Ctrl-C raises core.process.Interrupted naming what the location holds."""
    # The run commits once, at its end: interrupted before, it leaves the location as it was.
    with interrupt_says(lambda: f"interrupted: this run committed nothing; {job.store_uri} holds what earlier "
                                "backups committed; run again to back up the rest"):
        spark_started = time.monotonic()
        spark = open_executor(choice, master)
        spark_s = time.monotonic() - spark_started
        total = backup_plan.records
        spark_tasks = len(backup_plan.task_groups(spark.sparkContext.defaultParallelism))
        with ProgressMonitor("backup", total, spark_tasks, monitored(spark), quiet=quiet) as progress:
            return run_backup(spark, replace(job, progress_dir=progress.directory), backup_plan), spark_s
