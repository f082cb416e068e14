"""A warm standby (`restore --follow`) beside `compact` and `expire` of the archive it follows.

Compaction replaces objects the standby restored with merged ones (fresh keys, same offsets):
a round selects by offset, so it restores what is new exactly once. Expiry that drops records
the standby has not restored yet would splice its copy: the round stops with a one-line error
naming the partition and the offsets gone. While following, the standby's topics keep their
loading configs (no compaction or retention acting on a partition being written); the saved
configs are applied when it stops for good.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from archivetools import backdate_commits, edit_saved_configs, run_compact, run_expire
from kafkatools import consume_all, produce_records
from restoretools import LOADING, Standby, backed_up, overrides, same_as_source, standby_records
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.errors import TopicvaultError
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.sink.backup import BackupJob, plan_run, run_backup
from topicvault.source.maintenance.compact import CompactJob
from topicvault.source.restore.restore_job import (
    RestoreJob,
    plan_restore,
    restore_group,
    run_restore,
    start_restore,
)
from topicvault.source.restore.restore_plan import RestoreRequest
from topicvault.source.restore.standby import StandbyRequest, archive_with_newer_commits, standby_lag

BASE = 1_700_000_000_000


HOUR_MS = 3_600_000






def backdated(location: str) -> LocalStore:
    """The archive, its commits stamped before the records' times (see test_expire.backdate_commits)."""
    backdate_commits(Path(location), BASE - HOUR_MS)
    return LocalStore(location)




def standby_of_a_first_backup(spark, bootstrap: str, topic_factory, tmp_path, prefix: str, restore_id: str):
    """A topic whose first 100 records were backed up, and a standby that restored them in one round
    and stopped: (topic, target, location, job, request)."""
    topic = topic_factory(1, prefix=prefix)
    target, location = f"{topic}-standby", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    request = StandbyRequest(RestoreRequest(renames={topic: target}, restore_id=restore_id), poll_interval_s=0.3)
    backed_up(spark, bootstrap, location, topic, 0, 100)
    standby = Standby(spark, job, request)
    standby.wait_rounds(1)
    standby.finish()
    return topic, target, location, job, request


def test_after_compact_merges_restored_and_new_objects_a_round_restores_only_the_new_records(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="standby-compact")
    target, location = f"{topic}-standby", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    request = StandbyRequest(RestoreRequest(renames={topic: target}, restore_id="compacted"), poll_interval_s=0.3)
    backed_up(spark, bootstrap, location, topic, 0, 100)
    standby = Standby(spark, job, request)
    standby.wait_rounds(1)
    for sequence in (2, 3):
        backed_up(spark, bootstrap, location, topic, (sequence - 1) * 100, 100)
        standby.wait_rounds(sequence)
    standby.finish()
    backed_up(spark, bootstrap, location, topic, 300, 100)  # commit 4: not restored yet

    merged = run_compact(CompactJob(location, rotation=Rotation(max_records=10_000), grace_ms=HOUR_MS))
    assert (len(merged.replaced), [(o.first_offset, o.last_offset) for o in merged.written]) == (4, [(0, 399)])
    restarted = Standby(spark, job, request)
    after = restarted.wait_rounds(1)
    # Offsets 0..299 of the merged object were restored already: skipped by offset, not produced again.
    assert (after.produced, after.already_present, after.archive_sequence) == (100, 0, 5)
    restarted.finish()
    same_as_source(bootstrap, topic, target)


def test_a_round_planned_before_a_compact_whose_grace_passed_stops_clearly_and_the_restart_is_exact(
        bootstrap, spark, topic_factory, tmp_path):
    topic, target, location, job, request = standby_of_a_first_backup(spark, bootstrap, topic_factory, tmp_path,
                                                                      "standby-grace", "grace")
    # A round killed after its producers flushed, before it saved its map: commit 2's records are in the target.
    backed_up(spark, bootstrap, location, topic, 100, 100)
    restore_group(job, plan_restore(job, RestoreRequest((topic,), {topic: target}, "grace", continue_saved=True)).tasks)
    # The next round is planned, then a compact merges every object and deletes the planned ones at once.
    backed_up(spark, bootstrap, location, topic, 200, 100)
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "grace", continue_saved=True))
    assert [(o.first_offset, o.last_offset) for t in planned.tasks for o in t.objects] == [(100, 199), (200, 299)]
    run_compact(CompactJob(location, rotation=Rotation(max_records=10_000), grace_ms=0))
    with pytest.raises(TopicvaultError, match="named by the commit records was not found"):
        run_restore(spark, job, planned, configure=False)

    restarted = Standby(spark, job, request)
    after = restarted.wait_rounds(1)
    assert (after.already_present, after.produced) == (100, 100)  # counted inside the merged object, by offset
    restarted.finish()
    same_as_source(bootstrap, topic, target)


def test_expire_of_records_the_standby_has_not_restored_stops_it_naming_the_offsets_gone(
        bootstrap, spark, topic_factory, tmp_path):
    topic, target, location, job, request = standby_of_a_first_backup(spark, bootstrap, topic_factory, tmp_path,
                                                                      "standby-expire", "expired")
    backed_up(spark, bootstrap, location, topic, 100, 100)
    # Expiring what the standby restored already is harmless: it goes on with commit 2.
    assert [e.new_start for e in run_expire(backdated(location), BASE + 100, HOUR_MS).expiries] == [100]
    restarted = Standby(spark, job, request)
    assert restarted.wait_rounds(1).produced == 100
    restarted.finish()

    backed_up(spark, bootstrap, location, topic, 200, 100)
    backed_up(spark, bootstrap, location, topic, 300, 100)
    # Offsets 200..299 go before the standby read them: following on would splice 199 to 300.
    assert [e.new_start for e in run_expire(backdated(location), BASE + 300, HOUR_MS).expiries] == [300]
    assert load_state(LocalStore(location)).partitions[(topic, 0)].start == 300
    stopped = Standby(spark, job, request)
    with pytest.raises(TopicvaultError) as failure:
        stopped.wait_rounds(1)
    message = str(failure.value)
    assert "\n" not in message
    assert f"{topic}[0]: offsets 200..299 were expired from the archive" in message
    assert "--restore-id" in message
    assert sum(map(len, consume_all(bootstrap, target).values())) == 200  # nothing spliced in


def test_a_restore_resumed_after_expire_dropped_records_it_had_not_restored_stops_naming_them(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="resume-expire")
    target, location = f"{topic}-r", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    for first in range(0, 400, 100):
        backed_up(spark, bootstrap, location, topic, first, 100)
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "resumed"))
    # Killed after the first object's records went in (offsets 0..99 of 0..399).
    run_restore(spark, job, replace(planned, tasks=[replace(t, objects=t.objects[:1]) for t in planned.tasks]))
    assert sum(map(len, consume_all(bootstrap, target).values())) == 100
    run_expire(backdated(location), BASE + 200, HOUR_MS)  # the archive now starts at offset 200
    with pytest.raises(TopicvaultError, match=rf"{topic}\[0\]: offsets 0\.\.199 were expired from the archive"):
        plan_restore(job, RestoreRequest((topic,), {topic: target}, "resumed"))
    assert sum(map(len, consume_all(bootstrap, target).values())) == 100  # nothing spliced in


def test_a_compact_and_an_expire_committed_during_a_round_are_folded_into_the_standbys_lag(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="standby-fold")
    target, location = f"{topic}-standby", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    for first in (0, 100, 200):
        backed_up(spark, bootstrap, location, topic, first, 100)
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "folded", continue_saved=True))
    maps = [r.offset_map for r in run_restore(spark, job, planned, configure=False).results]
    # While the round ran: an expire dropped offsets 0..99 (already restored), a compact merged the other two
    # objects and a backup added 300..399. The round's end folds these commits to say how far behind it is.
    assert [e.new_start for e in run_expire(backdated(location), BASE + 100, HOUR_MS).expiries] == [100]
    assert len(run_compact(CompactJob(location, rotation=Rotation(max_records=10_000), grace_ms=HOUR_MS)).replaced) == 2
    backed_up(spark, bootstrap, location, topic, 300, 100)
    now = archive_with_newer_commits(job, planned.archive)
    assert now.last_sequence == planned.archive.last_sequence + 3 and now.partitions[(topic, 0)].start == 100
    [lag] = standby_lag(now, {topic: target}, maps)
    assert (lag.archive_end, lag.restored_end, lag.behind) == (400, 300, 100)
    # The plan's own state is left as it was.
    assert [(o.first_offset, o.last_offset) for o in planned.archive.partitions[(topic, 0)].objects] == [
        (0, 99), (100, 199), (200, 299)]


def test_expire_after_a_killed_round_into_a_partition_empty_when_the_restore_began_stops_the_restart(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="standby-late")
    target, location = f"{topic}-standby", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    backed_up(spark, bootstrap, location, topic, 0, 10)  # partition 1 is empty when the standby begins
    run_restore(spark, job, plan_restore(job, RestoreRequest((topic,), {topic: target}, "late", continue_saved=True)), configure=False)
    # Partition 1 gets offsets 0..99 in objects of 25; a round restores the first object and is killed
    # after its producer flushed, before it saved its offset map.
    produce_records(bootstrap, topic, [replace(r, partition=1) for r in standby_records(topic, 0, 100)])
    backup_job = BackupJob(KafkaSettings.of(bootstrap), location, rotation=Rotation(max_records=25))
    run_backup(spark, backup_job, plan_run(backup_job, [topic]))
    killed = plan_restore(job, RestoreRequest((topic,), {topic: target}, "late", continue_saved=True))
    start_restore(job, killed)
    restore_group(job, [replace(t, objects=t.objects[:1]) for t in killed.tasks if t.partition == 1])
    assert len(consume_all(bootstrap, target)[1]) == 25
    # Offsets 0..49 are expired: the restart must not count 25 records against a sequence starting at 50.
    assert [(e.partition, e.new_start) for e in run_expire(backdated(location), BASE + 50, HOUR_MS).expiries] == [
        (0, 10), (1, 50)]
    with pytest.raises(TopicvaultError, match=rf"{topic}\[1\]: offsets 0\.\.49 were expired from the archive"):
        plan_restore(job, RestoreRequest((topic,), {topic: target}, "late", continue_saved=True))
    assert len(consume_all(bootstrap, target)[1]) == 25  # nothing spliced in


def content(records_) -> list[tuple]:
    return [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records_]


def test_a_rerun_after_skip_left_out_an_object_a_compact_retired_keeps_the_hole_and_duplicates_nothing(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="skip-compact")
    target, location = f"{topic}-r", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location, on_error="skip")
    produce_records(bootstrap, topic, standby_records(topic, 0, 40))
    backup_job = BackupJob(KafkaSettings.of(bootstrap), location, rotation=Rotation(max_records=10))
    run_backup(spark, backup_job, plan_run(backup_job, [topic]))
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "holed"))
    [task] = planned.tasks
    store = LocalStore(location)
    kept = {o.key: store.get(o.key) for o in task.objects}
    # A compact merged the objects after this was planned and its grace passed; the restore read the objects it
    # planned while only the second (offsets 10..19) was already deleted: left out, the ones after it restored.
    run_compact(CompactJob(location, rotation=Rotation(max_records=10_000), grace_ms=0))
    for key, data in kept.items():
        if key != task.objects[1].key:
            store.put(key, data)
    start_restore(job, planned)
    [killed] = restore_group(job, [replace(task, objects=task.objects[:3])])  # killed before saving its map
    assert [(s.first_offset, s.last_offset) for s in killed.skipped] == [(10, 19)]
    source = consume_all(bootstrap, topic)[0]
    holed = content(source[:10] + source[20:])
    assert content(consume_all(bootstrap, target)[0]) == holed[:20]

    # The rerun reads the merged object, which holds 10..19 again: they cannot go in after 20..29, so the
    # hole stays (and is named), and the target is not counted against a sequence with them in.
    for _ in (1, 2):  # resumed after the kill, then run again once finished
        result = run_restore(spark, job, plan_restore(job, RestoreRequest((topic,), {topic: target}, "holed")))
        assert [(s.first_offset, s.last_offset) for s in result.skipped] == [(10, 19)]
        assert "new --restore-id" in result.skipped[0].reason
        assert content(consume_all(bootstrap, target)[0]) == holed


def test_a_rerun_names_a_hole_again_when_nothing_else_of_the_partition_is_left_to_read(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="skip-only-hole")
    target, location = f"{topic}-r", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location, on_error="skip")
    backed_up(spark, bootstrap, location, topic, 0, 10)
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "only-hole"))
    LocalStore(location).delete(planned.tasks[0].objects[0].key)
    for _ in (1, 2):  # the rerun does not read the object again, and still says the partition is not complete
        result = run_restore(spark, job, plan_restore(job, RestoreRequest((topic,), {topic: target}, "only-hole")))
        assert [(s.first_offset, s.last_offset, s.key) for s in result.skipped] == [
            (0, 9, planned.tasks[0].objects[0].key)]
    assert consume_all(bootstrap, target) == {0: []}




def test_standby_topics_keep_loading_configs_while_following_and_get_saved_ones_when_stopped(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="standby-configs")
    target, location = f"{topic}-standby", tmp_path / "archive"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    request = StandbyRequest(RestoreRequest(renames={topic: target}, restore_id="configs"), poll_interval_s=0.3)
    backed_up(spark, bootstrap, str(location), topic, 0, 100)
    saved = {"cleanup.policy": "compact", "retention.ms": "60000"}
    edit_saved_configs(location, topic, saved)  # as real Kafka reports overrides (tansu reports none)

    standby = Standby(spark, job, request)
    standby.wait_rounds(1)
    # A compacting target would lose records of a round a kill interrupts, and the restart would count too few.
    assert overrides(bootstrap, target, LOADING) == LOADING
    backed_up(spark, bootstrap, str(location), topic, 100, 100)
    standby.wait_rounds(2)
    assert overrides(bootstrap, target, LOADING) == LOADING
    standby.finish()
    assert overrides(bootstrap, target, saved) == saved  # stopped for good (SIGTERM): it looks like its source

    restarted = Standby(spark, job, request)  # the standby goes on: loading configs again before it produces
    restarted.wait_rounds(1)
    assert overrides(bootstrap, target, LOADING) == LOADING
    restarted.finish()
    assert overrides(bootstrap, target, saved) == saved
    same_as_source(bootstrap, topic, target)
