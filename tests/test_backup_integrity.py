"""Issue #16 (backup side): topic identity, commit what was read, lost ranges, isolation level."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import run_cli
from confluent_kafka.admin import AdminClient
from kafkatools import create_topic, produce_records
from topicvault.core.commits import BackupState, CommitRecord, load_state
from topicvault.core.envelope import Record
from topicvault.core.errors import TopicvaultError
from topicvault.core.store import open_store
from topicvault.sink.plan import plan_backup

CLI = str(Path(sys.executable).with_name("topicvault"))
BASE = 1_700_000_000_000


def records(topic: str, start: int, count: int, tag: str) -> list[Record]:
    return [Record(topic, 0, 0, b"k%d" % i, f"{tag}-{i}".encode(), BASE + i, 0, (("n", b"%d" % i),))
            for i in range(start, start + count)]


def commits(location: Path) -> list[dict]:
    folder = location / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def assert_one_line_error(output: str, *needles: str) -> None:
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], lines[0]


def recreate(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # Kafka deletes asynchronously: create fails until the old topic is gone
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except Exception:
            assert time.monotonic() < deadline, f"could not re-create {topic}"
            time.sleep(0.2)


# --- item 1: a deleted and re-created topic is refused, never spliced ------------------------------

def test_recreated_topic_is_refused_by_the_next_backup(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="ident")
    produce_records(bootstrap, topic, records(topic, 0, 100, "old"))
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    first = commits(location)
    assert first[0]["topic_ids"][topic]  # the identity is recorded
    recreate(bootstrap, topic)
    produce_records(bootstrap, topic, records(topic, 0, 150, "new"))  # more than before: offsets alone can't tell
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, f"topic {topic} was deleted and re-created", first[0]["topic_ids"][topic],
                          "new location")
    assert commits(location) == first  # nothing appended
    # The new topic backs up whole to a new location.
    run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / "new"), "-t", topic)
    assert load_state(open_store(str(tmp_path / "new"))).partitions[(topic, 0)].records == 150


def test_recreated_topic_stops_a_followed_backup(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="identf")
    produce_records(bootstrap, topic, records(topic, 0, 100, "old"))
    location = tmp_path / "b"
    log = tmp_path / "follow.log"
    with open(log, "ab") as out:
        follower = subprocess.Popen(
            [CLI, "backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, "--flush-interval", "1",
             "--master", "local[1]"], stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not any(r["end"] == 100 for c in commits(location) for r in c["ranges"]):
            assert time.monotonic() < deadline and follower.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        recreate(bootstrap, topic)
        produce_records(bootstrap, topic, records(topic, 0, 150, "new"))
        assert follower.wait(180) == 1, log.read_text()[-3000:]
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
            follower.wait(30)
    output = log.read_text()
    assert f"topic {topic} was deleted and re-created" in output, output[-3000:]
    assert "Traceback" not in output
    state = load_state(open_store(str(location)))
    assert state.partitions[(topic, 0)].end == 100 and state.partitions[(topic, 0)].records == 100
    # Starting it again is refused before anything runs.
    out = run_cli("backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, "was deleted and re-created")


def test_commits_without_topic_ids_still_load_and_are_accepted():
    old = {"format_version": 1, "sequence": 1, "created_ms": 0, "topics": {},
           "ranges": [{"topic": "t", "partition": 0, "start": 0, "end": 5}], "objects": []}
    record = CommitRecord.from_json(json.dumps(old).encode(), "k")
    assert record.topic_ids is None
    state = BackupState()
    state.apply(record, "k")
    plan = plan_backup({"t": 1}, {("t", 0): (0, 9)}, state, topic_ids={"t": "ID1"})
    assert [(t.start, t.end) for t in plan.tasks] == [(5, 9)] and plan.topic_ids == {"t": "ID1"}
    with pytest.raises(TopicvaultError, match="deleted and re-created"):
        state.apply(CommitRecord(2, 0, (), (), topic_ids={"t": "ID1"}), "k2")
        plan_backup({"t": 1}, {("t", 0): (0, 9)}, state, topic_ids={"t": "ID2"})


# --- item 12: read_uncommitted is refused for backups -------------------------------------------------

@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_read_uncommitted_is_refused_before_anything_is_written(bootstrap, topic_factory, tmp_path, follow):
    topic = topic_factory(1, prefix="iso")
    produce_records(bootstrap, topic, records(topic, 0, 3, "a"))
    out = run_cli("backup", *follow, "-b", bootstrap, "--to", str(tmp_path / "b"), "-t", topic,
                  "-X", "isolation.level=Read_Uncommitted", expect_exit=1)
    assert_one_line_error(out, "isolation.level=Read_Uncommitted", "aborted")
    assert not (tmp_path / "b").exists()
