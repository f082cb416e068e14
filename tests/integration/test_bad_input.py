"""Bad input: one line naming what is wrong, a non-zero exit, no traceback, nothing half-done."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import assert_one_line_error, run_cli
from kafkatools import consume_all, produce_records, topic_exists
from nasty import nasty_records
from topicvault.core.local.embedded_broker import free_port


@pytest.fixture
def small_backup(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="bad")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 300, big_values=0))
    location = tmp_path / "backup"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "100")
    return topic, location


@pytest.mark.network
def test_unreachable_bootstrap_fails_fast(tmp_path, caplog, monkeypatch):
    from observetools import record_new_clients
    from topicvault.core.cluster import kafka

    clients = record_new_clients(monkeypatch, kafka, ("list_topics",))
    servers = f"127.0.0.1:{free_port()}"
    with caplog.at_level("WARNING", logger="topicvault.kafka"):
        out = run_cli("backup", "-b", servers, "--to", str(tmp_path), "-t", "x", expect_exit=1)
    assert_one_line_error(out, "cannot reach Kafka", "--bootstrap-servers")
    # What it waited for before giving up: one metadata request, answered by nobody within
    # SLOW_ANSWER_S, then the rest of METADATA_TIMEOUT_S (20 s in all), nothing more.
    assert [call.timeout(0) for call in clients.of("list_topics")] == [
        kafka.SLOW_ANSWER_S, kafka.METADATA_TIMEOUT_S - kafka.SLOW_ANSWER_S]
    # The ~20 s of waiting are announced while they pass (#40 item 9), once.
    assert [r.getMessage() for r in caplog.records if "no answer yet" in r.getMessage()] == [
        f"no answer yet from Kafka at {servers}; still trying (a cluster that does not answer fails after 20 s)"]


def test_missing_bucket(bootstrap, s3_endpoint):
    out = run_cli("ls", "s3://no-such-bucket-tv/x", expect_exit=1)
    assert_one_line_error(out, "no-such-bucket-tv", "NoSuchBucket")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--format", "xml"], ["unknown format 'xml'", "parquet"]),
        (["--format", "jsonl", "--compression", "zstd"], ["no compression 'zstd'"]),
        (["--key-template", "{{topic}}{{partition}}{{start_offset}}"], ["side by side"]),
        (["--key-template", "{{topic}}/{{partition}}"], ["lacks {{start_offset}}"]),
        (["--max-records", "0"], ["must be positive"]),
        (["-X", "nonsense"], ["key=value"]),
    ],
)
def test_bad_backup_options(bootstrap, tmp_path, args, needles):
    out = run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / "b"), "-t", "x", *args, expect_exit=1)
    assert_one_line_error(out, *needles)
    assert not (tmp_path / "b").exists()


def test_corrupt_object_stops_before_producing_that_partition(bootstrap, small_backup):
    topic, location = small_backup
    commit = json.loads(next((location / "_topicvault" / "commits").glob("*.json")).read_text())
    victim = [o for o in commit["objects"] if o["partition"] == 1][1]
    path = location / victim["key"]
    path.write_bytes(path.read_bytes()[:-100])
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
                  expect_exit=1)
    assert_one_line_error(out, victim["key"])
    restored = consume_all(bootstrap, f"{topic}-r")
    # Partition 1 stops before the corrupt object: only the records of the objects before it.
    assert len(restored[1]) <= victim["first_offset"]


def test_restore_id_reused_for_a_different_restore(bootstrap, small_backup):
    topic, location = small_backup
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-a",
            "--restore-id", "same-id")
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-b",
                  "--restore-id", "same-id", expect_exit=1)
    assert_one_line_error(out, "same-id", "different restore")
    assert not topic_exists(bootstrap, f"{topic}-b")


def test_rename_of_a_topic_not_in_the_backup(bootstrap, small_backup):
    _, location = small_backup
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", "ghost=x", expect_exit=1)
    assert_one_line_error(out, "ghost")


def test_damaged_commit_record_is_named(small_backup):
    _, location = small_backup
    commit = next((location / "_topicvault" / "commits").glob("*.json"))
    commit.write_text("{not json")
    out = run_cli("ls", str(location), expect_exit=1)
    assert_one_line_error(out, Path(commit).name)


def test_concurrent_backups_cannot_both_commit(bootstrap, spark, topic_factory, tmp_path):
    from topicvault.core.cluster.kafka import KafkaSettings
    from topicvault.core.errors import TopicvaultError
    from topicvault.sink.backup import BackupJob, plan_run, run_backup

    topic = topic_factory(1, prefix="race")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 50, big_values=0))
    job = BackupJob(kafka=KafkaSettings.of(bootstrap), store_uri=str(tmp_path / "b"))
    first, second = plan_run(job, [topic]), plan_run(job, [topic])  # both planned from the same state
    run_backup(spark, job, first)
    with pytest.raises(TopicvaultError, match="another backup committed"):
        run_backup(spark, job, second)
    assert len(list((tmp_path / "b" / "_topicvault" / "commits").glob("*.json"))) == 1


def test_full_backup_into_a_used_location_is_refused(bootstrap, small_backup):
    topic, location = small_backup
    out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--full", expect_exit=1)
    assert_one_line_error(out, "already holds a backup", "new location")


def test_no_create_topics_with_a_missing_target(bootstrap, small_backup):
    topic, location = small_backup
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-missing",
                  "--no-create-topics", expect_exit=1)
    assert_one_line_error(out, f"{topic}-missing", "--no-create-topics")
    assert not topic_exists(bootstrap, f"{topic}-missing")


def test_committed_object_with_an_unknown_format_is_named(bootstrap, small_backup):
    topic, location = small_backup
    commit_path = next((location / "_topicvault" / "commits").glob("*.json"))
    commit = json.loads(commit_path.read_text())
    entry = commit["objects"][0]
    strange = entry["key"].replace(".parquet", ".xyz")
    (location / entry["key"]).rename(location / strange)
    entry["key"] = strange
    commit_path.write_text(json.dumps(commit))
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-x",
                  "--topic", topic, expect_exit=1)
    assert_one_line_error(out, strange)


def test_bad_topics_regex(bootstrap, tmp_path):
    out = run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / "b"), "--topics-regex", "orders[", expect_exit=1)
    assert_one_line_error(out, "bad --topics-regex")
