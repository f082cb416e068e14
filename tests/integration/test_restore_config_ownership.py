"""Issue #50 item 2: a restore changes the configs of a topic only if it created that very topic.

Its state records the topics whose CreateTopics it saw succeed, with their topic ids; a rerun sets
loading and saved configs only on a topic whose id is still the one recorded, and refuses, before
any AlterConfigs, to go on into a topic of that name that was deleted and created again since.
"""

from __future__ import annotations

import json

from clitools import run_cli
from kafkatools import consume_all, create_topic, produce_records, recreate_topic, topic_configs
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import Record
from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore
from topicvault.source.restore.restore_plan import RestoreRequest

BASE = 1_700_000_000_000
# What an admin or another team gives a topic of their own.
THEIRS = {"cleanup.policy": "compact", "retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"}


def backed_up(bootstrap: str, topic_factory, tmp_path, records: int = 20):
    """A one-partition topic with `records` records, backed up; its saved configs name a retention."""
    topic = topic_factory(1, prefix="owned")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, BASE + i, 0, ())
                                       for i in range(records)])
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    commit = location / "_topicvault" / "commits" / "0000000000000000001.json"
    body = json.loads(commit.read_text())
    body["topics"][topic].update(configs={"retention.ms": "604800000"}, configs_reported=True)
    commit.write_text(json.dumps(body))
    return topic, location


def test_a_rerun_into_a_topic_deleted_and_created_again_by_someone_else_leaves_its_configs(
        bootstrap, spark, topic_factory, tmp_path):
    topic, location = backed_up(bootstrap, topic_factory, tmp_path)
    target = f"{topic}-o2"
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "owned-a"]
    run_cli(*args)
    assert topic_configs(bootstrap, target) == {"retention.ms": "604800000"}
    # Someone else deletes the restored topic and creates their own under the name, with records of theirs.
    recreate_topic(bootstrap, target, 1, THEIRS)
    produce_records(bootstrap, target, [Record(target, 0, 0, b"theirs", b"x%d" % i, BASE, 0, ()) for i in range(5)])

    out = run_cli(*args, expect_exit=1)
    assert topic_configs(bootstrap, target) == THEIRS
    assert "deleted and created again" in out and target in out, out
    assert [r.value for r in consume_all(bootstrap, target)[0]] == [b"x%d" % i for i in range(5)]


def test_a_topic_created_by_hand_between_plan_and_run_keeps_its_configs_then_and_on_a_rerun(
        bootstrap, spark, topic_factory, tmp_path):
    topic, location = backed_up(bootstrap, topic_factory, tmp_path)
    target = f"{topic}-hand"
    job = RestoreJob(KafkaSettings.of(bootstrap), str(location))
    plan = plan_restore(job, RestoreRequest((topic,), {topic: target}, "owned-b"))
    assert target in plan.topics_to_create
    # The restore's CreateTopics finds the topic there (TOPIC_ALREADY_EXISTS): an admin made it by hand.
    admins = {"cleanup.policy": "compact", "retention.ms": "86400000"}
    create_topic(bootstrap, target, 1, admins)
    result = run_restore(spark, job, plan)
    assert result.produced == 20
    assert topic_configs(bootstrap, target) == admins
    assert any(target in note and "did not create" in note for note in result.notes), result.notes

    # The operator reruns the restore id, as the README says.
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--restore-id", "owned-b")
    assert topic_configs(bootstrap, target) == admins
    assert "not created by restore owned-b" in out, out


def test_create_topics_refusing_one_topic_still_names_those_it_created(bootstrap):
    # Review of #50.2: CreateTopics stopped at the first refused topic, so the topics it had created
    # went unrecorded and a rerun never configured them (old code: TopicvaultError, no `created`).
    import uuid

    import pytest
    from topicvault.core.cluster.kafka import TopicsNotCreated, create_topics

    good, bad = f"owned-{uuid.uuid4().hex[:8]}-good", f"owned-{uuid.uuid4().hex[:8]}-bad"
    with pytest.raises(TopicsNotCreated, match=f"cannot create topic '{bad}'") as refused:
        create_topics(KafkaSettings.of(bootstrap), {bad: 1, good: 1},
                      configs_by_topic={bad: {"cleanup.policy": "nonsense"}})
    assert refused.value.created == {good}
    assert "\n" not in str(refused.value)
