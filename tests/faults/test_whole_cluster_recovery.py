"""Issue 37, done when: a three-broker cluster with an authorizer, SCRAM users, ACLs (a DENY
among them), client quotas, replicated topics with configs and consumer groups is backed up, lost
(every node stopped) and brought back into a fresh three-broker cluster with the commands
docs/recovery-runbook.md gives; then records, configs, group offsets and what each user may and
may not do (real clients logging in over SCRAM) are the source's. Client quotas are not saved
(confluent-kafka has no DescribeClientQuotas): `ls` and the restore say so.

The clusters do not use the suite's `cluster` fixture: they are secured, and the source is lost
for good. One runs at a time (three JVMs on two cores)."""

from __future__ import annotations

import json

from accesstools import EXPECTED_MATRIX, PASSWORDS, access_matrix, acl, admin_settings, alice_and_bob, all_acls
from clitools import run_cli
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafkatools import consume_all, create_topic, produce_records, set_client_quotas
from topicvault.core.envelope import Record
from topicvault.core.local.local_kafka import LocalKafka

BASE = 1_700_000_000_000
TOPICS = {"orders": 3, "payments": 2}
CONFIGS = {"orders": {"retention.ms": "-1", "max.message.bytes": "2000000", "min.insync.replicas": "2"},
           "payments": {"retention.ms": "-1", "cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}}
GROUPS = {"bob-g": {("orders", 0): 7, ("orders", 2): 3}, "reporting": {("payments", 1): 5}}
# An extra rule beside test_cluster_access's: bob may read every topic starting "pay" but payments.
EXTRA_ACLS = (acl("pay", "User:bob", "READ", pattern="PREFIXED"),
              acl("payments", "User:bob", "READ", permission="DENY"))


def records(topic: str, partitions: int) -> list[Record]:
    """Ten records a partition with keys, headers (a duplicate and a null among them) and timestamps."""
    return [Record(topic, p, i, b"k%d" % (i % 4), b"%s-%d-%d" % (topic.encode(), p, i), BASE + 1000 * p + i, 0,
                   (("h", b"%d" % i), ("h", b"%d" % i), ("n", None)))
            for p in range(partitions) for i in range(10)]


def populate(kafka: LocalKafka) -> None:
    for topic, partitions in TOPICS.items():
        create_topic(kafka.bootstrap, topic, partitions, CONFIGS[topic], replication_factor=3)
        produce_records(kafka.bootstrap, topic, records(topic, partitions))
    alice_and_bob(kafka, *EXTRA_ACLS)
    for group, offsets in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
        consumer.close()
    set_client_quotas(kafka.bootstrap, {"slow-client": {"producer_byte_rate": 50_000}})


def snapshot(kafka: LocalKafka) -> dict:
    """Everything the checks compare, read as the operator (the PLAINTEXT super user)."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    metadata = admin.list_topics(timeout=30).topics
    shape = {t: (len(metadata[t].partitions), {len(p.replicas) for p in metadata[t].partitions.values()})
             for t in TOPICS}
    configs = {}
    for resource, future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in TOPICS]).items():
        configs[resource.name] = {name: entry.value for name, entry in future.result(30).items()
                                  if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    data = {t: {p: [(r.offset, r.key, r.value, r.timestamp_ms, r.timestamp_type, r.headers) for r in rs]
                for p, rs in consume_all(kafka.bootstrap, t).items()} for t in TOPICS}
    groups = {}
    for group, offsets in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
        found = consumer.committed([TopicPartition(t, p) for t, p in offsets], timeout=30)
        consumer.close()
        groups[group] = {(tp.topic, tp.partition): tp.offset for tp in found}
    users = {user: sorted((i.mechanism.name, i.iterations) for i in description.scram_credential_infos)
             for user, description in admin.describe_user_scram_credentials().result(30).items()}
    return {"shape": shape, "configs": configs, "data": data, "groups": groups, "acls": all_acls(kafka),
            "users": users}


def test_a_lost_three_broker_cluster_comes_back_with_the_runbooks_commands(tmp_path, spark):
    location = str(tmp_path / "archive")
    with LocalKafka(nodes=3, secured=True, folder=tmp_path / "old") as old:
        populate(old)
        before = snapshot(old)
        assert before["data"]["orders"][0][3][1:3] == (b"k3", b"orders-0-3")  # the data is what was produced
        assert before["configs"] == CONFIGS and before["groups"] == GROUPS
        # The runbook's "before the loss": a regular backup, as the admin over SCRAM.
        run_cli("backup", *admin_settings(old), "--to", location, "--topics-regex", "orders|payments")
        listing = run_cli("ls", location)
        assert "5 ACL bindings, 3 SCRAM users (admin, alice, bob)" in listing, listing
        assert "client quotas and SCRAM passwords are not saved" in listing
        # after the backup: the probes commit in bob-g
        assert access_matrix(old, PASSWORDS) == EXPECTED_MATRIX
    # lost: every node stopped

    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    with LocalKafka(nodes=3, secured=True, folder=tmp_path / "new") as new:
        restore = ["restore", "--from", location, *admin_settings(new), "--cluster-state",
                   "--scram-passwords", str(passwords)]
        dry = run_cli(*restore, "--dry-run")
        assert dry.count("ACL to create:") == 5, dry
        assert "DENY User:bob READ on TOPIC 'payments'" in dry
        assert "SCRAM user alice (SCRAM-SHA-256, 8192 iterations): password given: would be created" in dry
        assert "client quotas" in dry, dry  # what the restore cannot bring back is said before it runs
        assert all_acls(new) == set()
        out = run_cli(*restore)
        assert PASSWORDS["alice"] not in out and PASSWORDS["bob"] not in out
        assert "client quotas" in out, out
        after = snapshot(new)
        assert after["acls"] == before["acls"]
        assert after["users"] == before["users"]
        assert after["shape"] == before["shape"] == {"orders": (3, {3}), "payments": (2, {3})}
        # min.insync.replicas is the target's to choose (source.restore.topic_policy), and the restore says so
        assert "saved configs not set (the target's defaults stay): min.insync.replicas=2" in out
        assert after["configs"] == {**before["configs"], "orders": {k: v for k, v in CONFIGS["orders"].items()
                                                                    if k != "min.insync.replicas"}}
        assert after["data"] == before["data"]
        assert after["groups"] == before["groups"]
        assert access_matrix(new, PASSWORDS) == EXPECTED_MATRIX
