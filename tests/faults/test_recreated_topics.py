"""Issue 33.3.10: a topic deleted and re-created (a new topic id) under live traffic, between two
backups and while `backup --follow` runs: refused, naming the topic and its ids, and the archive
keeps exactly the old topic's records (nothing of the new one spliced after them).

The live producer keeps writing through the deletion; the broker may re-create the topic for it
(auto.create.topics.enable) before the test does: either way the topic comes back with a new id.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from clitools import assert_one_line_error, followed_backup, run_cli
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafkatools import LiveTraffic, consume_all, produce_records
from topicvault.core.envelope import Record


def topic_id(bootstrap: str, topic: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        return str(admin.describe_topics(TopicCollection([topic]))[topic].result(15).topic_id)
    except Exception:
        return None


def delete_and_recreate(bootstrap: str, topic: str) -> str:
    """Delete the topic and have it back with a new id (made here or by the live producer)."""
    old = topic_id(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        now = topic_id(bootstrap, topic)
        if now is not None and now != old:
            return now
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"{topic} did not come back with a new id")
        if now is None:
            try:
                admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
            except Exception:  # the old one still being deleted, or the producer made it first
                pass
        time.sleep(0.3)


def wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.1)


def fill_new_topic(bootstrap: str, topic: str, count: int) -> None:
    """Records in the re-created topic from a fresh producer: the live one may have failed for
    good (its sequence numbers mean nothing to the new topic's partition)."""
    produce_records(bootstrap, topic, [Record(topic, 0, 0, None, b"new-%d" % i, 1_700_000_000_000 + i, 0, ())
                                       for i in range(count)])


def commits(location: Path) -> list[dict]:
    folder = location / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def archived_end(location: Path) -> int:
    return max((r["end"] for c in commits(location) for r in c["ranges"]), default=0)


def assert_archive_is_the_old_topic(bootstrap: str, location: Path, topic: str, snapshot: list) -> None:
    """The archive restores to the old topic's records 0..end-1: LiveTraffic's i-th record of
    partition 0 took offset i in it, so the new topic's records (later i) cannot pass for them;
    those read before the deletion also keep their timestamps."""
    end = archived_end(location)
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    restored = consume_all(bootstrap, f"{topic}-r")[0]
    assert [(r.key, r.value, r.headers) for r in restored] == [
        (b"k%d" % (i % 7), b"live-0-%d-" % i + b"x" * 100, (("n", b"%d" % i), ("n", None))) for i in range(end)]
    assert snapshot and [(r.value, r.timestamp_ms) for r in restored[:len(snapshot)]] == \
        [(r.value, r.timestamp_ms) for r in snapshot[:end]]


def test_a_topic_recreated_between_backups_under_live_traffic_is_refused(cluster, topic_factory, spark, tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(1, prefix="recreated")
    location = tmp_path / "b"
    with LiveTraffic(bootstrap, topic) as traffic:
        wait_for(lambda: traffic.count() >= 300, "300 records of live traffic")
        run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
        before = commits(location)
        old_id = before[0]["topic_ids"][topic]
        snapshot = consume_all(bootstrap, topic)[0]
        new_id = delete_and_recreate(bootstrap, topic)
        fill_new_topic(bootstrap, topic, archived_end(location) + 100)  # more than before: offsets alone can't tell
        out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, f"topic {topic} was deleted and re-created", old_id, new_id, "new location")
    assert commits(location) == before
    assert_archive_is_the_old_topic(bootstrap, location, topic, snapshot)


def test_a_topic_recreated_under_a_followed_backup_and_live_traffic_stops_it(cluster, topic_factory, spark, tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(1, prefix="recreatedf")
    location = tmp_path / "b"
    log = tmp_path / "follow.log"
    with LiveTraffic(bootstrap, topic) as traffic:
        wait_for(lambda: traffic.count() >= 100, "100 records of live traffic")
        with followed_backup(bootstrap, location, topic, log) as follower:
            deadline = time.monotonic() + 240
            while archived_end(location) < 300:
                assert follower.poll() is None, log.read_text()[-3000:]
                if time.monotonic() >= deadline:  # a hang detector, not a speed check
                    raise TimeoutError(log.read_text()[-3000:])
                time.sleep(0.3)
            snapshot = consume_all(bootstrap, topic)[0]
            old_id = commits(location)[0]["topic_ids"][topic]
            delete_and_recreate(bootstrap, topic)
            fill_new_topic(bootstrap, topic, archived_end(location) + 100)
            assert follower.wait(180) == 1, log.read_text()[-3000:]
    output = log.read_text()
    # "deleted and re-created", or "deleted ... now none" when a trigger met the topic while it was gone.
    assert f"topic {topic} was deleted" in output and old_id in output and "Traceback" not in output, output[-3000:]
    assert_archive_is_the_old_topic(bootstrap, location, topic, snapshot)
    out = run_cli("backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic, expect_exit=1)
    assert_one_line_error(out, "was deleted and re-created")
