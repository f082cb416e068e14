"""Issue #19 item 2: `restore --on-error skip` leaves out objects it cannot read, names them, restores the rest."""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from clitools import run_cli, run_cli_process
from kafkatools import commit_offsets, committed, consume_all, produce_records, strip
from nasty import nasty_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.core.stores.locations import open_store
from topicvault.source.object_reader import SkippedObject
from topicvault.source.restore.offset_map import load_offset_maps, save_hole, saved_holes
from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore
from topicvault.source.restore.restore_plan import RestoreRequest
from topicvault.source.restore.restore_state import RestoreRecords


@pytest.fixture
def damaged_backup(bootstrap, spark, topic_factory, tmp_path):
    """A 2-partition backup (objects of 300 records) whose second object of partition 0 is damaged and whose
    third object of partition 1 is gone; a consumer group stands inside the damaged object."""
    topic = topic_factory(2, prefix="skip")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 1_000, big_values=0))
    group = f"skip-{uuid.uuid4().hex[:6]}"
    source = consume_all(bootstrap, topic)
    commit_offsets(bootstrap, group, {(topic, 0): source[0][450].offset, (topic, 1): source[1][100].offset})
    location = tmp_path / "archive"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "300")
    [commit] = (location / "_topicvault" / "commits").glob("*.json")
    objects = {(o["partition"], i): o for p in (0, 1)
               for i, o in enumerate(sorted((o for o in json.loads(commit.read_text())["objects"] if o["partition"] == p),
                                            key=lambda o: o["first_offset"]))}
    damaged, gone = objects[(0, 1)], objects[(1, 2)]
    path = location / damaged["key"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    (location / gone["key"]).unlink()
    return topic, location, group, source, damaged, gone


def test_damaged_objects_are_skipped_named_and_every_other_record_restored_in_order(
        bootstrap, damaged_backup, tmp_path, restore_state_dir):
    topic, location, group, source, damaged, gone = damaged_backup
    target = f"{topic}-r"
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "skip", "--on-error", "skip"]
    log = tmp_path / "cli.log"
    assert run_cli_process(args, log, "restore.produce:500") == -9, log.read_text()[-2000:]  # and resumed:
    out = run_cli(*args, "--json", "--groups", expect_exit=3)

    holes = {0: (damaged["first_offset"], damaged["last_offset"]), 1: (gone["first_offset"], gone["last_offset"])}
    expected = {p: [r for r in records if not holes[p][0] <= r.offset <= holes[p][1]] for p, records in source.items()}
    assert {p: strip(r) for p, r in consume_all(bootstrap, target).items()} == {p: strip(r) for p, r in expected.items()}
    assert [len(records) for records in expected.values()] == [700, 700]

    report = json.loads(out[out.index("\n{") + 1:out.rindex("}") + 1])
    assert [(s["topic"], s["partition"], s["first_offset"], s["last_offset"], s["key"]) for s in report["skipped"]] == [
        (topic, 0, *holes[0], damaged["key"]), (topic, 1, *holes[1], gone["key"])]
    named = [line for line in out.splitlines() if line.startswith("skipped:")]
    assert len(named) == 2 and f"{topic}[0] offsets {holes[0][0]}..{holes[0][1]}" in named[0] and "checksum" in named[0]
    assert f"{topic}[1] offsets {holes[1][0]}..{holes[1][1]}" in named[1] and "not found" in named[1]

    records = RestoreRecords(open_store(str(restore_state_dir)), open_store(str(location)))
    maps = load_offset_maps(records, "skip")
    assert maps[(topic, 0)].holes == [holes[0]] and maps[(topic, 1)].holes == [holes[1]]
    # The group stood inside the hole of partition 0: it goes on with the first record after it.
    inside = source[0][450].offset
    assert holes[0][0] <= inside <= holes[0][1]
    assert committed(bootstrap, group, target, 2) == {0: sum(1 for r in expected[0] if r.offset < inside), 1: 100}


def test_without_skip_a_damaged_object_stops_the_restore_and_is_named(bootstrap, damaged_backup):
    topic, location, _, _, damaged, gone = damaged_backup
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-stop",
                  expect_exit=1)
    assert (damaged["key"] in out or gone["key"] in out) and "Traceback" not in out, out


UNTIL_BASE = 1_700_000_000_000


@pytest.fixture
def cut_in_damaged_object(bootstrap, spark, topic_factory, tmp_path):
    """A 1-partition backup of 40 records in objects of 7 (0-6, 7-13, ...), every record within
    --until (UNTIL_BASE + 1 s) but offset 10, 50 s late: the point-in-time prefix is 0..9. The
    object holding that cut point, 7-13, is damaged."""
    topic = topic_factory(1, prefix="skip-until")
    records = [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, UNTIL_BASE + (50_000 if i == 10 else i * 10), 0, ())
               for i in range(40)]
    produce_records(bootstrap, topic, records)
    location = tmp_path / "archive"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "7")
    [commit] = (location / "_topicvault" / "commits").glob("*.json")
    [damaged] = [o for o in json.loads(commit.read_text())["objects"] if o["first_offset"] == 7]
    assert (damaged["first_offset"], damaged["last_offset"]) == (7, 13)
    path = location / damaged["key"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return topic, location, damaged


def test_until_prefix_ends_at_a_left_out_object_that_may_hold_the_cut(bootstrap, cut_in_damaged_object):
    topic, location, damaged = cut_in_damaged_object
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
                  "--until", str(UNTIL_BASE + 1_000), "--on-error", "skip", expect_exit=3)
    # The cut (offset 10) is somewhere in the left-out object: records after it are past TIME for all
    # the restore can tell, so none is restored (they were: 14..39 came back after the hole).
    assert [r.value for r in consume_all(bootstrap, f"{topic}-r")[0]] == [b"v%d" % i for i in range(7)]
    [named] = [line for line in out.splitlines() if line.startswith("skipped:")]
    assert f"{topic}[0] offsets 7..13" in named and damaged["key"] in named and "--until" in named, out


def test_a_resumed_until_prefix_ends_at_an_earlier_runs_hole_that_may_hold_the_cut(
        bootstrap, cut_in_damaged_object, tmp_path, restore_state_dir):
    topic, location, damaged = cut_in_damaged_object
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
            "--until", str(UNTIL_BASE + 1_000), "--on-error", "skip", "--restore-id", "cut"]
    log = tmp_path / "cli.log"
    assert run_cli_process(args, log, "restore.produce:3") == -9, log.read_text()[-2000:]
    # What a run that read on past the damaged object saves before producing anything after it.
    records = RestoreRecords(open_store(str(restore_state_dir)), open_store(str(location)))
    save_hole(records, "cut", SkippedObject(damaged["key"], topic, 0, 7, 13, 7, "checksum"))
    run_cli(*args, expect_exit=3)
    assert [r.value for r in consume_all(bootstrap, f"{topic}-r")[0]] == [b"v%d" % i for i in range(7)]


def test_objects_left_out_are_recorded_where_the_driver_keeps_the_restore_state(
        bootstrap, spark, damaged_backup, tmp_path, monkeypatch):
    # On a cluster of several machines a local state path names a directory on each machine: the
    # tasks saved the objects they left out on theirs, where the driver (planning a resume) never
    # looks. Simulated here: /proc/self/cwd is each process's own working directory, and the
    # driver moves to another one than Spark's Python workers (started before) work in.
    topic, location, _, _, damaged, gone = damaged_backup
    name = f"state-{uuid.uuid4().hex[:8]}"
    workers_state = Path.cwd() / name
    monkeypatch.chdir(tmp_path)
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location), state_uri=f"/proc/self/cwd/{name}", on_error="skip")
    try:
        result = run_restore(spark, job, plan_restore(job, RestoreRequest((topic,), {topic: f"{topic}-cluster"}, "cluster")))
    finally:
        shutil.rmtree(workers_state, ignore_errors=True)
    assert [(s.partition, s.key) for s in result.skipped] == [(0, damaged["key"]), (1, gone["key"])]
    records = RestoreRecords(open_store(str(tmp_path / name)), open_store(str(location)))
    assert {where: [h.key for h in holes] for where, holes in saved_holes(records, "cluster").items()} == {
        (topic, 0): [damaged["key"]], (topic, 1): [gone["key"]]}
