"""Issue #50 item 10: a resume that cannot tell shifted sequences apart by content refuses instead.

A resumed restore counts what its target holds and checks that the last of those records are the
last of as many selected records. With identical records (same key, value, headers and timestamp)
that check passes for any shifted sequence: an object restored earlier that can no longer be read
(--on-error skip) shifts everything after it by its length. Such a resume is refused, naming the object.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import replace

from clitools import run_cli
from kafkatools import consume_all, produce_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore
from topicvault.source.restore.restore_plan import RestoreRequest

BASE = 1_700_000_000_000


def test_a_resume_past_an_object_restored_before_and_unreadable_now_is_refused(bootstrap, spark, topic_factory,
                                                                                tmp_path):
    topic = topic_factory(1, prefix="same")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"same", BASE, 0, ()) for _ in range(15)])
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "5")
    [commit] = (location / "_topicvault" / "commits").glob("*.json")
    first, *_ = sorted(json.loads(commit.read_text())["objects"], key=lambda o: o["first_offset"])
    target = f"{topic}-r"
    # A first run that got through the first object only (as one killed there would).
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    plan = plan_restore(job, RestoreRequest((topic,), {topic: target}, "same"))
    plan = replace(plan, tasks=[replace(task, objects=task.objects[:1]) for task in plan.tasks])
    run_restore(spark, job, plan)
    assert len(consume_all(bootstrap, target)[0]) == 5

    # That object can no longer be read: a resume that leaves it out counts the 5 records the target
    # holds against the next object's 5, which look the same.
    path = location / first["key"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--restore-id", "same", "--on-error", "skip", expect_exit=1)
    assert len(consume_all(bootstrap, target)[0]) == 5  # nothing produced after a splice
    assert first["key"] in out and "already holds" in out, out


def aiven_values_and_offsets(offsets: range, value: bytes) -> bytes:
    """An Aiven csv object with fields value,offset (no timestamps), the value base64 as Aiven writes it."""
    return "\n".join(f"{base64.b64encode(value).decode()},{offset}" for offset in offsets).encode()


def test_a_rerun_past_a_peer_object_added_since_inside_what_was_restored_is_refused(bootstrap, spark, tmp_path):
    topic = f"late-{uuid.uuid4().hex[:8]}"
    archive = tmp_path / "aiven"
    archive.mkdir()
    (archive / f"{topic}-0-0").write_bytes(aiven_values_and_offsets(range(0, 5), b"same"))
    (archive / f"{topic}-0-10").write_bytes(aiven_values_and_offsets(range(10, 15), b"same"))
    target = f"{topic}-r"
    args = ["restore", "--from", str(archive), "-b", bootstrap, "--layout", "aiven", "--peer-fields", "value,offset",
            "--rename", f"{topic}={target}", "--restore-id", "late"]
    run_cli(*args)  # offsets 5..9 are a gap: the sink's object for them is late
    assert len(consume_all(bootstrap, target)[0]) == 10

    # The late object arrives; its records look like every other. Counting 10 records in the target
    # against the first 10 of the archive (offsets 0..9 now) would pass, and offsets 10..14 go in twice.
    (archive / f"{topic}-0-5").write_bytes(aiven_values_and_offsets(range(5, 10), b"same"))
    out = run_cli(*args, expect_exit=1)
    assert len(consume_all(bootstrap, target)[0]) == 10
    assert "offset 5" in out and "added to the archive" in out, out
