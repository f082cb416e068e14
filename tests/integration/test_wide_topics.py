"""Wide topics (issue #18 item 5): one backup task reads many partitions through one consumer."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pytest
from clitools import run_cli
from harness_broker import TANSU_KINDS
from kafkatools import FAST_FAILING, consume_all, produce_records
from nasty import nasty_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.sink.kafka_reader import OffsetRange

BASE = 1_700_000_000_000


def records(topic: str, partitions: int, per_partition: int) -> list[Record]:
    return [Record(topic, p, 0, b"k%d" % i, b"v-%d-%d" % (p, i), BASE + i, 0, ((b"h", b"%d" % p),))
            for p in range(partitions) for i in range(per_partition)]


def spark_tasks(spark, group: str, action):
    """Run `action()` under a Spark job group; return (its result, Spark tasks it launched)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    tasks = sum(tracker.getStageInfo(stage).numTasks
                for job in tracker.getJobIdsForGroup(group) for stage in tracker.getJobInfo(job).stageIds)
    return result, tasks


def test_wide_topic_backup_launches_one_task_per_core_and_costs_about_a_narrow_one(
        bootstrap, spark, topic_factory, tmp_path):
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    measured = {}
    for partitions in (8, 256, 8, 256):  # each twice: the first of each warms up
        topic = topic_factory(partitions, prefix=f"wide{partitions}")
        produce_records(bootstrap, topic, records(topic, partitions, 20))
        job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / topic))
        planned = plan_run(job, [topic])
        started = time.monotonic()
        result, tasks = spark_tasks(spark, topic, lambda job=job, planned=planned: run_backup(spark, job, planned))
        measured[partitions] = (time.monotonic() - started, tasks)
        assert result.records == partitions * 20
    narrow, wide = measured[8], measured[256]
    print(f"\nbackup job time: 8 partitions x 20 records {narrow[0]:.2f} s in {narrow[1]} Spark tasks; "
          f"256 partitions x 20 records {wide[0]:.2f} s in {wide[1]} Spark tasks; ratio {wide[0] / narrow[0]:.2f}")
    cores = spark.sparkContext.defaultParallelism
    assert wide[1] == narrow[1] == cores  # deterministic: one task per core, not one per partition


def test_wide_topic_round_trip_is_exact(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(256, prefix="wide-rt")
    produced = nasty_records(topic, 256, 12)
    produce_records(bootstrap, topic, produced)
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "5")
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    source, restored = consume_all(bootstrap, topic), consume_all(bootstrap, f"{topic}-r")
    assert len(source) == 256 and sum(map(len, source.values())) == len(produced)
    for partition, expected in source.items():
        assert [replace(r, topic=f"{topic}-r") for r in expected] == restored[partition], partition


def _objects_bytes(job) -> dict[tuple[str, int, int], bytes]:
    from topicvault.core.archive.checkpoints import load_state

    store = job.open_store()
    state = load_state(store)
    return {(o.topic, o.partition, o.first_offset): store.get(o.key)
            for ps in state.partitions.values() for o in ps.objects}


def test_grouped_objects_are_byte_identical_to_one_task_per_partition_even_over_the_memory_budget(
        bootstrap, spark, topic_factory, tmp_path):
    # A tiny open-object budget makes a grouped task fall back to one partition at a time
    # halfway: the objects must still be exactly those of one task per partition.
    from topicvault.core.rotation import Rotation
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    topic = topic_factory(6, prefix="budget")
    produce_records(bootstrap, topic, nasty_records(topic, 6, 900))
    base = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri="", rotation=Rotation(250, 40_000))
    outputs = []
    for name, budget, per_task in (("one-per-partition", None, 901), ("grouped", 1, 1_000_000),
                                   ("grouped-default", None, 1_000_000)):
        job = replace(base, store_uri=str(tmp_path / name),
                      **({"open_objects_budget": budget} if budget else {}))
        planned = plan_run(job, [topic], records_per_task=per_task)
        result, tasks = spark_tasks(spark, f"{topic}-{name}", lambda job=job, planned=planned: run_backup(spark, job, planned))
        assert result.records == sum(p.records_at_most for p in planned.partitions) > 6 * 900
        outputs.append((tasks, _objects_bytes(job)))
    assert outputs[0][0] == 6 and outputs[1][0] == outputs[2][0] == spark.sparkContext.defaultParallelism
    assert outputs[0][1] == outputs[1][1] == outputs[2][1]
    assert len(outputs[0][1]) >= 6 * 4  # 901 records in objects of at most 250


def test_grouped_task_reports_each_partition_where_it_really_stopped(bootstrap, spark, topic_factory, tmp_path):
    # A partition whose broker-reported end was too high (simulated by the plan) ends short;
    # the other partitions of the same task are still read and committed whole.
    from topicvault.core.archive.checkpoints import load_state
    from topicvault.sink.backup import BackupJob, plan_run, run_backup
    from topicvault.sink.plan import PartitionPlan

    topic = topic_factory(4, prefix="wide-short")
    produce_records(bootstrap, topic, records(topic, 4, 10))
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "b"))
    planned = plan_run(job, [topic])
    planned.partitions[2] = PartitionPlan(topic, 2, 0, 15, 0)
    planned.tasks[2] = OffsetRange(topic, 2, 0, 15)
    result, tasks = spark_tasks(spark, topic, lambda: run_backup(spark, job, planned))
    assert tasks <= spark.sparkContext.defaultParallelism
    assert result.records == 40 and "committed up to 10" in result.warnings[0]
    state = load_state(job.open_store())
    assert {p: state.partitions[(topic, p)].end for p in range(4)} == {0: 10, 1: 10, 2: 10, 3: 10}


def test_a_wide_task_stores_the_objects_of_its_partitions_concurrently(bootstrap, topic_factory, tmp_path, monkeypatch):
    # Each object put costs a round trip (S3) or fsyncs (a directory): a task of many small
    # partitions must not pay them one after another. Deterministic: every put waits at a
    # barrier that only four puts in flight at once can pass (one at a time breaks it).
    from topicvault.core.stores.local_store import LocalStore
    from topicvault.sink.backup import BackupJob, backup_group, plan_run

    topic = topic_factory(8, prefix="wide-puts")
    produce_records(bootstrap, topic, records(topic, 8, 5))
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "b"))
    planned = plan_run(job, [topic])
    barrier, put = threading.Barrier(4, timeout=30), LocalStore.put

    def put_when_four_are_in_flight(store, key, data, **conditions):
        barrier.wait()
        return put(store, key, data, **conditions)

    monkeypatch.setattr(LocalStore, "put", put_when_four_are_in_flight)
    results = backup_group(job, planned.tasks)
    assert [(r.task.partition, r.end, [o.records for o in r.objects]) for r in results] == [
        (p, 5, [5]) for p in range(8)]


def test_offsets_of_a_wide_topic_take_two_requests_per_broker_not_two_per_partition(bootstrap, topic_factory, caplog):
    # What backup planning (and each --follow micro-batch) asks the cluster for: the low and
    # high watermark of every partition. Counted from librdkafka's protocol log: deterministic.
    from topicvault.core.cluster.kafka import all_partitions, broker_count, partition_watermarks

    topic = topic_factory(64, prefix="wide-offsets")
    produce_records(bootstrap, topic, records(topic, 64, 3))
    kafka = KafkaSettings.of(bootstrap, {"debug": "protocol"})
    with caplog.at_level(logging.DEBUG, logger="topicvault.kafka"):
        offsets = partition_watermarks(kafka, all_partitions({topic: 64}))
    assert offsets == {(topic, p): (0, 3) for p in range(64)}
    sent = sum("Sent ListOffsetsRequest" in record.getMessage() for record in caplog.records)
    assert 1 <= sent <= 2 * broker_count(kafka), sent


def test_one_consumer_cannot_read_two_ranges_of_one_partition(bootstrap):
    from topicvault.sink.kafka_reader import read_ranges

    with pytest.raises(TopicvaultError, match=r"t\[0\] twice"):
        list(read_ranges(KafkaSettings.of(bootstrap), [OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 5, 9)]))


def test_read_ranges_over_budget_finishes_one_partition_before_the_next(bootstrap, topic_factory):
    # Past the memory budget each remaining range is read alone, start to end, so its objects
    # are all stored before the next partition's begin.
    from topicvault.sink.kafka_reader import RangeEnd, read_ranges

    topic = topic_factory(6, prefix="oneatatime")
    produce_records(bootstrap, topic, records(topic, 6, 900))
    tasks = [OffsetRange(topic, p, 0, 900) for p in range(6)]
    # Small fetches, so that partitions read at once really interleave.
    kafka = KafkaSettings.of(bootstrap, {"max.partition.fetch.bytes": "2000", "fetch.max.bytes": "12000", "message.max.bytes": "12000"})
    items = list(read_ranges(kafka, tasks, batch_records=100, one_at_a_time=lambda: True))
    blocks = [index for n, (index, _) in enumerate(items) if n == 0 or items[n - 1][0] != index]
    assert blocks == [0, 1, 2, 3, 4, 5]
    for index in range(6):
        mine = [item for i, item in items if i == index]
        assert mine[-1] == RangeEnd(900) and not any(isinstance(item, RangeEnd) for item in mine[:-1])
        assert [o for b in mine[:-1] for o in b.column("offset").to_pylist()] == list(range(900))


def test_streaming_micro_batch_over_many_partitions_runs_one_task_per_core_and_writes_the_fused_objects(
        bootstrap, spark, topic_factory, tmp_path):
    # What `backup --follow` runs: readStream topicvault-kafka -> writeStream topicvault.
    from topicvault.core.archive.checkpoints import load_state
    from topicvault.core.rotation import Rotation
    from topicvault.core.stores.locations import open_store
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    topic = topic_factory(64, prefix="wide-stream")
    produce_records(bootstrap, topic, nasty_records(topic, 64, 30))
    cores = spark.sparkContext.defaultParallelism
    streamed = str(tmp_path / "streamed")
    query = (spark.readStream.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("minPartitions", str(cores)).load()
             .writeStream.format("topicvault").option("maxRecords", "7").option("allowOffsetGaps", "true")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start(streamed))
    query.awaitTermination(300)
    assert query.exception() is None
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(str(query.runId))
    tasks = [tracker.getStageInfo(stage).numTasks for job in jobs for stage in tracker.getJobInfo(job).stageIds]
    assert tasks and max(tasks) <= cores, tasks

    fused = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "fused"), rotation=Rotation(7))
    run_backup(spark, fused, plan_run(fused, [topic]))
    streamed_store = open_store(streamed)
    streamed_state = load_state(streamed_store)
    assert sum(ps.records for ps in streamed_state.partitions.values()) > 64 * 30
    assert {(o.topic, o.partition, o.first_offset): streamed_store.get(o.key)
            for ps in streamed_state.partitions.values() for o in ps.objects} == _objects_bytes(fused)


def test_grouped_read_stops_short_in_the_partition_whose_offsets_are_gone(bootstrap, broker_kind, topic_factory, request):
    # Records deleted after planning (retention, DeleteRecords), in one of many partitions read
    # together: that partition's read stops short where the broker stopped serving it (the others
    # go on), never skips ahead.
    if broker_kind in TANSU_KINDS:
        request.applymarker(pytest.mark.xfail(strict=True, reason="tansu has no DeleteRecords"))
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    from topicvault.sink.kafka_reader import RangeEnd, read_ranges

    topic = topic_factory(3, prefix="wide-gone")
    produce_records(bootstrap, topic, records(topic, 3, 5))
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a dropped client never completes its futures
    list(admin.delete_records([TopicPartition(topic, 1, 3)]).values())[0].result(30)
    tasks = [OffsetRange(topic, 0, 0, 5), OffsetRange(topic, 1, 1, 5), OffsetRange(topic, 2, 0, 5)]
    items = list(read_ranges(KafkaSettings.of(bootstrap, FAST_FAILING), tasks, idle_timeout_s=5))
    ends = {index: item.stopped_at for index, item in items if isinstance(item, RangeEnd)}
    assert ends == {0: 5, 1: 1, 2: 5}  # partition 1 stops short where the broker stopped serving it
    assert sum(item.num_rows for index, item in items if index == 1 and not isinstance(item, RangeEnd)) == 0


def test_dataframe_read_of_many_partitions_groups_them_per_task(bootstrap, spark, topic_factory):
    # The DataFrame reader reads each task's partitions one after another through one consumer,
    # so each partition's rows stay one run (as the topicvault writer cuts objects by run).
    topic = topic_factory(40, prefix="wide-df")
    produce_records(bootstrap, topic, records(topic, 40, 20))
    rows = (spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("minPartitions", "3").load())
    assert rows.rdd.getNumPartitions() == 3
    got = rows.select("partition", "offset", "value").collect()
    assert len(got) == 800
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in got) == [
        (p, i, b"v-%d-%d" % (p, i)) for p in range(40) for i in range(20)]
    per_task = rows.rdd.glom().map(lambda part: [r.partition for r in part]).collect()
    for partitions in per_task:  # each Kafka partition's rows are contiguous within its task
        runs = [p for n, p in enumerate(partitions) if n == 0 or partitions[n - 1] != p]
        assert len(runs) == len(set(runs))


def test_large_records_are_read_in_batches_of_a_few_mib(bootstrap, topic_factory):
    # 20,000 records of 2 KB per batch held 80 MB in a backup worker (as bytes, then as Arrow):
    # batches follow the records' size (issue #20 item 4); every record still comes, in order.
    from topicvault.sink.kafka_reader import RangeEnd, read_ranges

    topic = topic_factory(1, prefix="large")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", bytes([i % 251]) * 2048, 1 + i, 0, ())
                                       for i in range(12_000)] + [Record(topic, 0, 0, b"last", b"", 1, 0, ())])
    items = list(read_ranges(KafkaSettings.of(bootstrap), [OffsetRange(topic, 0, 0, 12_001)]))
    batches = [item for _, item in items if not isinstance(item, RangeEnd)]
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(12_001))
    assert max(b.nbytes for b in batches) <= 16 * 2**20, [b.nbytes for b in batches]
