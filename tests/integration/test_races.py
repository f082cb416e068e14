"""Backups racing into one location: a committed object is never overwritten (issue #16 item 2).

Two runs plan from the same committed state but different offset snapshots (records arrive
between their plans), so both want an object starting at the same offset with different
content. Whichever commits first wins; the other's commit is refused, and whatever it wrote,
before or after the winner's commit, must leave the winner's objects intact: verify passes
and a restore is exact.
"""

from __future__ import annotations

import pytest
from clitools import run_cli
from kafkatools import consume_all, produce_records
from nasty import nasty_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.sink.backup import BackupJob, backup_group, plan_run, run_backup
from topicvault.sink.objects import put_once


def strip(records):
    return [(r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]


def assert_verify_and_restore_exact(bootstrap, topic, uri, restored_name):
    out = run_cli("verify", uri)
    assert "ok:" in out, out
    run_cli("restore", "--from", uri, "-b", bootstrap, "--rename", f"{topic}={restored_name}")
    source = {p: strip(r) for p, r in consume_all(bootstrap, topic).items()}
    assert {p: strip(r) for p, r in consume_all(bootstrap, restored_name).items()} == source


@pytest.mark.parametrize("winner", ["first-planned", "second-planned"])
@pytest.mark.parametrize("key_template", [None, "{{topic}}/{{partition}}/{{start_offset}}"])
def test_racing_backups_from_different_snapshots_never_overwrite_committed_objects(
    bootstrap, spark, topic_factory, store_uri, winner, key_template
):
    topic = topic_factory(2, prefix="race")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 300, big_values=0))
    settings = KafkaSettings.of(bootstrap)
    early = BackupJob(kafka=settings, store_uri=store_uri, key_template=key_template)
    early_plan = plan_run(early, [topic])
    produce_records(bootstrap, topic, nasty_records(topic, 2, 200, seed=2, big_values=0))
    late = BackupJob(kafka=settings, store_uri=store_uri, key_template=key_template)
    late_plan = plan_run(late, [topic])
    assert early_plan.tasks[0].start == late_plan.tasks[0].start == 0
    assert early_plan.tasks[0].end < late_plan.tasks[0].end  # same first object key, different content

    runs = [(early, early_plan), (late, late_plan)]
    (won, won_plan), (lost, lost_plan) = runs if winner == "first-planned" else runs[::-1]
    assert run_backup(spark, won, won_plan).commit_key
    # The loser writes its objects after the winner committed, then its commit is refused.
    with pytest.raises(TopicvaultError, match="another backup committed"):
        run_backup(spark, lost, lost_plan)

    produce_records(bootstrap, topic, nasty_records(topic, 2, 50, seed=3, big_values=0))
    run_cli("backup", "-b", bootstrap, "--to", store_uri, "-t", topic)  # continues where the winner ended
    assert_verify_and_restore_exact(bootstrap, topic, store_uri, f"{topic}-r")


@pytest.mark.parametrize("leftover_writes", ["after-the-new-commit", "before-the-new-run"])
def test_objects_of_a_killed_run_never_block_or_damage_the_next_run(bootstrap, spark, topic_factory, local_uri,
                                                                   leftover_writes):
    # A run planned [0, 300) per partition and was killed: its objects are written before the
    # next run starts (a crash after writing, before committing), or its executors live on and
    # write them after the next run, which backs up [0, 500), committed.
    topic = topic_factory(2, prefix="leftover")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 300, big_values=0))
    settings = KafkaSettings.of(bootstrap)
    killed = BackupJob(kafka=settings, store_uri=local_uri)
    killed_plan = plan_run(killed, [topic])
    produce_records(bootstrap, topic, nasty_records(topic, 2, 200, seed=2, big_values=0))
    if leftover_writes == "before-the-new-run":
        for task in killed_plan.tasks:
            backup_group(killed, [task])
    run_cli("backup", "-b", bootstrap, "--to", local_uri, "-t", topic)
    if leftover_writes == "after-the-new-commit":
        for task in killed_plan.tasks:
            backup_group(killed, [task])
    assert_verify_and_restore_exact(bootstrap, topic, local_uri, f"{topic}-r")


def test_an_object_key_is_written_once_a_retry_with_the_same_bytes_goes_on(store_uri):
    store = open_store(store_uri)
    key = "topic=t/partition=0/0000000000000000000-r0123456789ab.parquet"
    put_once(store, key, b"first attempt")
    put_once(store, key, b"first attempt")  # a retried attempt of the same task
    with pytest.raises(TopicvaultError, match="never overwritten"):
        put_once(store, key, b"other records")
    assert store.get(key) == b"first attempt"


@pytest.mark.parametrize("format_name", ["parquet", "avro", "jsonl", "csv"])
def test_a_retried_attempt_that_writes_the_same_objects_again_goes_on(store_uri, format_name):
    """An attempt retried after its objects were stored writes the same keys and bytes: each
    format's writer output must compare equal to what the store gives back, whatever type
    holds it (a Parquet object is a view of Arrow's buffer, not a bytes copy)."""
    from dataclasses import replace

    from topicvault.core.envelope import records_to_batch
    from topicvault.core.rotation import Rotation
    from topicvault.formats import resolve_format
    from topicvault.keys.codec import default_codec
    from topicvault.sink.objects import write_objects

    records = [replace(r, offset=i) for i, r in enumerate(nasty_records("races", 1, 300, big_values=0))]
    store = open_store(store_uri)

    def attempt():
        return write_objects([records_to_batch(records)], store, default_codec(), resolve_format(format_name, None),
                             Rotation(100, 1 << 20), run_id="r0123456789ab")

    first = attempt()
    assert len(first) == 3
    assert attempt() == first
