"""Backup and restore tasks run their per-record loops with the cyclic collector running rarely (issue #20)."""
from __future__ import annotations

import gc

import pyarrow as pa
from kafkatools import produce_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record, records_to_batch
from topicvault.core.hotloop import HOT_LOOP_THRESHOLDS


def test_a_restore_produces_and_a_backup_reads_with_the_collector_running_rarely(
        bootstrap, topic_factory, tmp_path, monkeypatch):
    from topicvault.sink.backup import BackupJob, backup_group, plan_run
    from topicvault.sink.objects import PartitionObjects
    from topicvault.source.restore.kafka_writer import produce_streams

    topic, target = topic_factory(1, prefix="gc"), topic_factory(1, prefix="gc-target")
    records = [Record(topic, 0, i, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i) for i in range(50)]
    produce_records(bootstrap, topic, records)
    seen: list[tuple[int, int, int]] = []

    def batches():
        seen.append(gc.get_threshold())
        yield records_to_batch(records).slice(0, 25)
        seen.append(gc.get_threshold())
        yield records_to_batch(records).slice(25)

    produce_streams(KafkaSettings.of(bootstrap), [(target, 0, batches())])
    assert seen == [HOT_LOOP_THRESHOLDS] * 2 and gc.get_threshold() != HOT_LOOP_THRESHOLDS

    add = PartitionObjects.add

    def add_and_look(self, batch: pa.RecordBatch) -> None:
        seen.append(gc.get_threshold())
        add(self, batch)

    monkeypatch.setattr(PartitionObjects, "add", add_and_look)
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "b"))
    results = backup_group(job, plan_run(job, [topic]).tasks)
    assert sum(o.records for r in results for o in r.objects) == 50
    assert seen[2:] and all(t == HOT_LOOP_THRESHOLDS for t in seen[2:]) and gc.get_threshold() != HOT_LOOP_THRESHOLDS
