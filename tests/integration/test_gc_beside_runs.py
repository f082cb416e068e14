"""Garbage collection beside a running backup or compact. A run longer than the grace keeps its
objects while its lease lives (core.archive.leases) and commits. Should its lease lapse, a compact or
expire deletes its objects as orphans (older than the grace and named by no commit yet); the
run must then fail with one line, committing nothing, never commit a hole.

GC is simulated for real: a collection (archivetools.gc_now) with a grace of 0 runs between a run's writes and
its commit (the moment a long run is most exposed); a lapsed lease is a GC whose clock is past
the lease's lifetime."""
from __future__ import annotations

import pytest
from archivetools import GONE, gc_now, run_compact
from kafkatools import produce_records
from nasty import nasty_records
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.errors import TopicvaultError
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.core.stores.store import missing_objects


def _gc_before_commit(monkeypatch, module, lease_lapsed: bool = True) -> list[int]:
    """Make `module`'s append run a GC (grace 0) first, once; the list counts the GCs."""
    real, ran = module.append, []

    def gc_then_commit(store, state, build, *rest):
        if not ran:
            ran.append(1)
            gc_now(store, lease_lapsed)
        return real(store, state, build, *rest)

    monkeypatch.setattr(module, "append", gc_then_commit)
    return ran


def test_a_backup_longer_than_the_grace_keeps_its_objects_while_its_lease_lives_and_commits(
        bootstrap, spark, topic_factory, tmp_path, monkeypatch):
    from topicvault.sink import backup as backup_module
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    topic = topic_factory(2, prefix="gcl")
    uri = str(tmp_path / "loc")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, seed=1, big_values=0))
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=uri, rotation=Rotation(max_records=15))
    run_backup(spark, job, plan_run(job, [topic]))
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, seed=2, big_values=0))
    ran = _gc_before_commit(monkeypatch, backup_module, lease_lapsed=False)
    second = BackupJob(kafka=job.kafka, store_uri=uri, rotation=job.rotation)
    assert run_backup(spark, second, plan_run(second, [topic])).records == 80
    after = load_state(job.open_store())
    assert ran and after.end_offset(topic, 0) + after.end_offset(topic, 1) == 160
    assert missing_objects(job.open_store(), [o.key for ps in after.partitions.values() for o in ps.objects]) == []


def test_a_backup_whose_objects_gc_deleted_fails_without_committing(bootstrap, spark, topic_factory, tmp_path,
                                                                     monkeypatch):
    from topicvault.sink import backup as backup_module
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    topic = topic_factory(2, prefix="gcb")
    uri = str(tmp_path / "loc")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, seed=1, big_values=0))
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=uri, rotation=Rotation(max_records=15))
    run_backup(spark, job, plan_run(job, [topic]))
    before = load_state(job.open_store())
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, seed=2, big_values=0))
    ran = _gc_before_commit(monkeypatch, backup_module)
    second = BackupJob(kafka=job.kafka, store_uri=uri, rotation=job.rotation)
    with pytest.raises(TopicvaultError, match=GONE):
        run_backup(spark, second, plan_run(second, [topic]))
    assert ran and load_state(job.open_store()) == before
    # The rerun backs the same records up and every committed object is there.
    third = BackupJob(kafka=job.kafka, store_uri=uri, rotation=job.rotation)
    assert run_backup(spark, third, plan_run(third, [topic])).records == 80
    after = load_state(job.open_store())
    assert missing_objects(job.open_store(), [o.key for ps in after.partitions.values() for o in ps.objects]) == []


def test_a_compact_whose_merged_objects_gc_deleted_commits_and_retires_nothing(bootstrap, spark, topic_factory,
                                                                              tmp_path, monkeypatch):
    from topicvault.sink.backup import BackupJob, plan_run, run_backup
    from topicvault.source.maintenance import compact as compact_module
    from topicvault.source.maintenance.compact import CompactJob

    topic = topic_factory(1, prefix="gcc")
    uri = str(tmp_path / "loc")
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=uri, rotation=Rotation(max_records=10))
    for seed in range(2):
        produce_records(bootstrap, topic, nasty_records(topic, 1, 30, seed=seed, big_values=0))
        run = BackupJob(kafka=job.kafka, store_uri=uri, rotation=job.rotation)
        run_backup(spark, run, plan_run(run, [topic]))
    store = job.open_store()
    before = load_state(store)
    originals = [o.key for o in before.partitions[(topic, 0)].objects]
    assert len(originals) >= 4
    ran = _gc_before_commit(monkeypatch, compact_module)
    with pytest.raises(TopicvaultError, match=GONE):
        run_compact(CompactJob(uri, rotation=Rotation(max_records=1000), grace_ms=3_600_000))
    assert ran and load_state(store) == before and not load_state(store).retired
    assert missing_objects(store, originals) == []
    monkeypatch.undo()
    done = run_compact(CompactJob(uri, rotation=Rotation(max_records=1000), grace_ms=3_600_000))
    assert done.commit_key and len(load_state(store).partitions[(topic, 0)].objects) == 1
    live = [o.key for o in load_state(store).partitions[(topic, 0)].objects]
    assert missing_objects(store, live) == []


def test_a_compact_longer_than_the_grace_keeps_its_merged_objects_while_its_lease_lives(
        bootstrap, spark, topic_factory, tmp_path, monkeypatch):
    from topicvault.sink.backup import BackupJob, plan_run, run_backup
    from topicvault.source.maintenance import compact as compact_module
    from topicvault.source.maintenance.compact import CompactJob

    topic = topic_factory(1, prefix="gcm")
    uri = str(tmp_path / "loc")
    for seed in range(2):
        produce_records(bootstrap, topic, nasty_records(topic, 1, 30, seed=seed, big_values=0))
        run = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=uri, rotation=Rotation(max_records=10))
        run_backup(spark, run, plan_run(run, [topic]))
    store = LocalStore(uri)
    ran = _gc_before_commit(monkeypatch, compact_module, lease_lapsed=False)
    done = run_compact(CompactJob(uri, rotation=Rotation(max_records=1000), grace_ms=3_600_000))
    assert ran and done.commit_key and len(load_state(store).partitions[(topic, 0)].objects) == 1
    live = [o.key for o in load_state(store).partitions[(topic, 0)].objects]
    assert missing_objects(store, live) == []
