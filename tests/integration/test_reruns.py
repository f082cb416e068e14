"""Issue #34: reruns of a restore id keep the guarantees of its first run.

A rerun that picks up records backed up since (a one-shot rerun of a finished id, or a follow
round) produces into topics whose saved configs a finished run applied: it sets the loading
configs first (no LogAppendTime, compaction or retention on records being produced and
counted) and applies the saved ones after. A rerun whose saved state predates source_starts
still notices an expire that dropped records it had not restored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from archivetools import HOUR, backdate_commits, edit_saved_configs, run_expire
from confluent_kafka import Consumer, TopicPartition
from kafkatools import consume_all, produce_records
from restoretools import LOADING, Standby, backed_up, backup_now, overrides, same_as_source
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore
from topicvault.source.restore.restore_plan import RestoreRequest
from topicvault.source.restore.restore_state import STATE_NAME
from topicvault.source.restore.throttle import RateLimit

BASE = 1_700_000_000_000


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def configs_while_producing(bootstrap: str, target: str, already: int, run, names) -> dict[str, str]:
    """`run()` in a thread; the target's values of `names` once it holds more than `already` records
    (while the run still produces: it is rate-limited)."""
    failure: list[BaseException] = []

    def in_thread() -> None:
        try:
            run()
        except BaseException as exc:  # noqa: BLE001 — handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=in_thread, daemon=True)
    thread.start()
    seen = None
    deadline = time.monotonic() + 180
    while thread.is_alive() and time.monotonic() < deadline:
        if high_watermark(bootstrap, target) > already:
            seen = overrides(bootstrap, target, names)
            break
        time.sleep(0.05)
    thread.join(180)
    assert not failure, failure
    assert seen is not None, "the run ended before a record it produced could be seen"
    return seen


def test_a_rerun_of_a_finished_restore_produces_with_loading_configs_and_applies_the_saved_ones_after(
        bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="rerun-configs")
    target, location = f"{topic}-r", tmp_path / "archive"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    backed_up(spark, bootstrap, str(location), topic, 0, 100)
    saved = {"cleanup.policy": "compact", "retention.ms": "60000"}
    edit_saved_configs(location, topic, saved)  # as real Kafka reports overrides (tansu reports none)
    run_restore(spark, job, plan_restore(job, RestoreRequest((topic,), {topic: target}, "rerun")))
    assert overrides(bootstrap, target, saved) == saved  # finished: the target looks like its source

    backed_up(spark, bootstrap, str(location), topic, 100, 100)
    slow = replace(job, rate=RateLimit(records_per_s=40))  # about 2.5 s of producing to look at
    # The rerun counts what the first run wrote and produces the rest: a compacting target (or
    # LogAppendTime, or a short retention) would change or delete records while it does.
    during = configs_while_producing(
        bootstrap, target, 100, lambda: run_restore(spark, slow, plan_restore(slow, RestoreRequest(renames={topic: target}, restore_id="rerun"))),
        LOADING)
    assert during == LOADING
    assert overrides(bootstrap, target, saved) == saved  # and the saved configs once the data is in
    same_as_source(bootstrap, topic, target)


def alike(topic: str, count: int, timestamp_ms: int) -> list[Record]:
    """`count` records alike in every field a restore compares (key, value, headers, timestamp):
    counting them cannot tell one prefix from another, as records with timestamps <= 0 on a
    LogAppendTime target cannot."""
    return [Record(topic, 0, 0, b"k", b"v", timestamp_ms, 0, (("h", b"x"),)) for _ in range(count)]


def predating_source_starts(job: RestoreJob, restore_id: str) -> None:
    """The restore's state as topicvault before source_starts saved it."""
    records = job.restore_records()
    body = records.read(restore_id, STATE_NAME)
    del body["source_starts"]
    records.write(restore_id, STATE_NAME, body)


@pytest.mark.parametrize("finished", [True, False], ids=["finished", "interrupted"])
def test_a_restore_whose_state_predates_source_starts_is_not_resumed_after_an_expire_dropped_what_it_began_with(
        bootstrap, spark, topic_factory, tmp_path, finished):
    topic = topic_factory(1, prefix="legacy-expire")
    target, location = f"{topic}-r", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    for timestamp_ms in (BASE, BASE + 1000):  # offsets 0..199 in two objects
        produce_records(bootstrap, topic, alike(topic, 100, timestamp_ms))
        backup_now(spark, bootstrap, location, topic)
    planned = plan_restore(job, RestoreRequest((topic,), {topic: target}, "legacy"))
    if finished:  # its offset map was saved: it says where the restore began
        run_restore(spark, job, planned)
    else:  # killed after its first object went in: no offset map
        run_restore(spark, job, replace(planned, tasks=[replace(t, objects=t.objects[:1]) for t in planned.tasks]))
    written = len(consume_all(bootstrap, target)[0])
    predating_source_starts(job, "legacy")
    backdate_commits(Path(location), 1_600_000_000_000)
    assert [e.new_start for e in run_expire(LocalStore(location), BASE + 1, HOUR).expiries] == [100]
    produce_records(bootstrap, topic, alike(topic, 100, BASE + 1000))
    backup_now(spark, bootstrap, location, topic)
    # Counted against the archive as it is now (100..299), the target's records would say the restore got
    # to offset 100 + written - 1, and alike records pass the tail check: it would leave out or double some.
    with pytest.raises(TopicvaultError) as refused:
        plan_restore(job, RestoreRequest(renames={topic: target}, restore_id="legacy"))
    message = str(refused.value)
    assert "\n" not in message and f"{topic}[0]" in message and "--restore-id" in message
    assert "expire" in message
    assert len(consume_all(bootstrap, target)[0]) == written  # nothing produced


def test_a_standby_names_a_range_a_later_backup_records_as_lost_in_the_round_that_steps_over_it_once(
        bootstrap, spark, topic_factory, tmp_path):
    from topicvault.core.archive.checkpoints import load_state
    from topicvault.core.cluster.kafka import topic_ids
    from topicvault.sink.backup import BackupJob, run_backup
    from topicvault.sink.plan import ClusterRead, plan_backup
    from topicvault.source.restore.standby import StandbyRequest

    topic = topic_factory(1, prefix="standby-lost")
    target, location = f"{topic}-standby", str(tmp_path / "archive")
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    backed_up(spark, bootstrap, location, topic, 0, 10)
    standby = Standby(spark, job, StandbyRequest(RestoreRequest(renames={topic: target}, restore_id="lost"), poll_interval_s=0.3))
    try:
        first = standby.wait_rounds(1)
        assert not any("deleted by retention" in n for n in first.notes)
        # tansu cannot delete records: the backup is planned as if retention had moved the log start to 25.
        produce_records(bootstrap, topic, alike(topic, 20, BASE))  # offsets 10..29
        backup = BackupJob(KafkaSettings.of(bootstrap), location)
        run_backup(spark, backup, plan_backup(ClusterRead({topic: 1}, {(topic, 0): (25, 30)}, topic_ids=topic_ids(backup.kafka, [topic])),
                                              load_state(backup.open_store())))
        stepped = standby.wait_rounds(2)
        note = f"{topic}[0]: offsets 10..24 were deleted by retention on the cluster before any backup read them"
        assert any(note in n for n in stepped.notes), stepped.notes
        assert stepped.to_json()["lost"] == [{"topic": topic, "partition": 0, "first_offset": 10, "last_offset": 24}]
        backed_up(spark, bootstrap, location, topic, 30, 5)  # offsets 30..34: nothing lost this time
        later = standby.wait_rounds(3)
        assert not any("deleted by retention" in n for n in later.notes) and "lost" not in later.to_json()
    finally:
        standby.finish()
    assert len(consume_all(bootstrap, target)[0]) == 20  # 0..9, then 25..34
