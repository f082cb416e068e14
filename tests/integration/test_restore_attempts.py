"""A retried restore task attempt and the holes an earlier attempt of it saved ahead (issue #35 item 3)."""

from __future__ import annotations

from dataclasses import replace

from clitools import run_cli
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.source.restore.offset_map import saved_holes
from topicvault.source.restore.restore_job import (
    RestoreJob,
    merged_outcome,
    plan_restore,
    restore_group,
    save_outcome,
    start_restore,
)
from topicvault.source.restore.restore_plan import RestoreRequest


def test_a_retried_attempt_leaves_out_what_an_earlier_attempt_left_out(bootstrap, topic_factory, tmp_path):
    """--on-error skip: a first attempt leaves a damaged object out, saves that hole ahead and produces
    the records after it, then its result is lost (its executor died). The object reads again when
    the task is retried. The retry counted the target against the sequence with the object and
    refused ("not the first 60 this restore selects") though the saved hole says how the target
    was written; it now leaves the object out as the attempt before it did, and reports it."""
    topic = topic_factory(1, prefix="attempts")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 90, big_values=0))
    [source] = consume_all(bootstrap, topic).values()
    location = tmp_path / "archive"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "30")
    target = f"{topic}-copy"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location), state_uri=str(tmp_path / "state"), on_error="skip")
    plan = plan_restore(job, RestoreRequest((topic,), {topic: target}, "attempts"))
    start_restore(job, plan)
    [task] = plan.tasks
    assert [(o.first_offset, o.last_offset) for o in task.objects] == [(0, 29), (30, 59), (60, 89)]
    damaged = location / task.objects[1].key
    good = damaged.read_bytes()
    damaged.write_bytes(good[: len(good) // 2])

    [lost] = restore_group(job, [task])  # attempt 0: finished, but its result never reached the driver
    assert lost.produced == 60 and [h.first_offset for h in lost.skipped] == [30]
    damaged.write_bytes(good)  # the object reads again (a flaky read, a repaired copy)

    [retried] = restore_group(job, [replace(task)])  # attempt 1 of the same task
    assert (retried.already_present, retried.produced) == (60, 0)
    assert [(h.first_offset, h.last_offset) for h in retried.skipped] == [(30, 59)]
    assert retried.offset_map.ranges == [(0, 0, 30), (60, 30, 30)] and retried.offset_map.holes == [(30, 59)]
    save_outcome(job.restore_records(), plan.restore_id, merged_outcome(plan, [retried]))
    assert [h.first_offset for h in saved_holes(job.restore_records(), plan.restore_id)[(topic, 0)]] == [30]
    saved = job.restore_records().read(plan.restore_id, "offset-map.json")
    assert saved["partitions"][0]["holes"] == [[30, 59]]
    [restored] = consume_all(bootstrap, target).values()
    content = [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored]
    assert content == [(r.key, r.value, r.headers, r.timestamp_ms) for r in source[:30] + source[60:]]
