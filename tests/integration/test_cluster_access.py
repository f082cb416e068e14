"""Whole-cluster recovery (issue 37): ACLs and SCRAM users saved by backup, restored by
`restore --cluster-state` into an empty cluster on Apache Kafka with StandardAuthorizer and a
SASL/SCRAM listener; checked with real clients that authenticate as the saved principals."""
from __future__ import annotations

import json
import uuid

import pytest
from accesstools import (
    ANY_ACL,
    EXPECTED_MATRIX,
    PASSWORDS,
    access_matrix,
    acl,
    admin_settings,
    alice_and_bob,
    all_acls,
    as_user,
    can_produce,
    scram_users,
    set_acls,
)
from clitools import assert_one_line_error, run_cli
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkatools import consume_all, create_topic, produce_records
from topicvault.core.envelope import Record
from topicvault.core.local.local_kafka import LocalKafka

BASE = 1_700_000_000_000






@pytest.fixture(scope="module")
def source_cluster():
    with LocalKafka(secured=True) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def target_cluster():
    with LocalKafka(secured=True) as kafka:
        yield kafka










def drop_everything(kafka: LocalKafka) -> None:
    """An empty cluster again: no ACLs, no topics, no users but the admin."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.delete_acls([ANY_ACL]).values():
        future.result(30)
    topics = [t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")]
    for future in (admin.delete_topics(topics, operation_timeout=30).values() if topics else ()):
        future.result(60)
    # One request per user's credential: Kafka refuses one request altering a user twice.
    for user, mechanisms in scram_users(kafka).items():
        for mechanism in mechanisms if user != kafka.admin_user else ():
            for future in admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, mechanism)]).values():
                future.result(30)














# A fresh cluster's group coordinator answers these until its offsets partition is loaded.
COORDINATOR_NOT_READY = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                         KafkaError.NOT_COORDINATOR}


def populate(kafka: LocalKafka) -> None:
    """Two topics with records, alice (SCRAM-SHA-256) may write one, bob (SCRAM-SHA-512) read one in his group;
    bob's group has committed offsets."""
    for topic in ("orders", "payments"):
        create_topic(kafka.bootstrap, topic, 1, {"retention.ms": "-1"})
        produce_records(kafka.bootstrap, topic, [Record(topic, 0, i, b"k%d" % i, b"v%d" % i, BASE + i, 0, ())
                                                for i in range(5)])
    alice_and_bob(kafka)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bob-g"})
    for attempt in range(60):  # a fresh cluster's group coordinator may still be loading: retriable
        try:
            consumer.commit(offsets=[TopicPartition("orders", 0, 3)], asynchronous=False)
            break
        except KafkaException as exc:
            if attempt == 59 or exc.args[0].code() not in COORDINATOR_NOT_READY:
                raise
            consumer.poll(0.5)
    consumer.close()


@pytest.fixture
def backed_up(source_cluster, target_cluster, tmp_path, spark):
    drop_everything(source_cluster)
    drop_everything(target_cluster)
    populate(source_cluster)
    location = str(tmp_path / "archive")
    run_cli("backup", *admin_settings(source_cluster), "--to", location, "-t", "orders", "-t", "payments")
    return location


def test_whole_cluster_restore_gives_the_same_principals_the_same_access(source_cluster, target_cluster,
                                                                         backed_up, tmp_path, spark, monkeypatch):
    before = access_matrix(source_cluster, PASSWORDS)
    assert before == EXPECTED_MATRIX
    listing = run_cli("ls", backed_up)
    assert "3 ACL bindings, 3 SCRAM users (admin, alice, bob)" in listing, listing
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"alice": PASSWORDS["alice"]}))
    monkeypatch.setenv("TOPICVAULT_SCRAM_PASSWORD_BOB", PASSWORDS["bob"])
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state",
                  "--scram-passwords", str(passwords))
    assert PASSWORDS["alice"] not in out and PASSWORDS["bob"] not in out
    assert all_acls(target_cluster) == all_acls(source_cluster)
    # bob's group resumes at the same record (before the checks below commit in it)
    found = Consumer({"bootstrap.servers": target_cluster.bootstrap, "group.id": "bob-g"})
    assert [tp.offset for tp in found.committed([TopicPartition("orders", 0)], timeout=30)] == [3]
    found.close()
    assert access_matrix(target_cluster, PASSWORDS) == EXPECTED_MATRIX
    assert [r.value for r in consume_all(target_cluster.bootstrap, "orders")[0]][:5] == [b"v%d" % i for i in range(5)]
    archive_text = "".join(p.read_text(errors="replace") for p in (tmp_path / "archive").rglob("*.json"))
    assert PASSWORDS["alice"] not in archive_text and "salt" not in archive_text


def test_users_without_a_password_are_listed_and_nothing_else_is_held_back(source_cluster, target_cluster,
                                                                           backed_up, spark):
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state")
    line = next(line for line in out.splitlines() if "without a password" in line)
    assert "alice" in line and "bob" in line
    assert all_acls(target_cluster) == all_acls(source_cluster)
    assert set(scram_users(target_cluster)) == {target_cluster.admin_user}


def test_conflicting_acls_on_the_target_are_refused_unless_merging(source_cluster, target_cluster, backed_up, spark):
    intruder = acl("payments", "User:mallory", "READ")
    set_acls(target_cluster, intruder)
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state",
                  expect_exit=1)
    assert_one_line_error(out, "User:mallory", "--merge-acls")
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap})
    assert "orders" not in admin.list_topics(timeout=30).topics  # nothing written
    assert len(all_acls(target_cluster)) == 1
    run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state", "--merge-acls")
    assert all_acls(target_cluster) == all_acls(source_cluster) | {intruder.key()}


def test_dry_run_prints_the_difference_and_applies_nothing(source_cluster, target_cluster, backed_up):
    set_acls(target_cluster, acl("orders", "User:alice", "WRITE"))
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state", "--dry-run")
    assert "ACL to create: ALLOW User:bob READ on TOPIC prefixed 'ord'" in out, out
    assert "ALLOW User:alice WRITE on TOPIC 'orders'" not in out.split("ACL to create")[-1]
    assert "SCRAM user alice: no password given" in out
    assert len(all_acls(target_cluster)) == 1


def test_rename_renames_the_topics_acls_and_says_so(source_cluster, target_cluster, backed_up, spark):
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state",
                  "-t", "orders", "--rename", "orders=sales")
    assert "ACL" in out and "'orders'" in out and "'sales'" in out
    acls = all_acls(target_cluster)
    assert acl("sales", "User:alice", "WRITE").key() in acls
    assert acl("orders", "User:alice", "WRITE").key() not in acls
    assert acl("sales", "User:bob", "READ").key() in acls  # bob read it through prefix "ord"


def test_until_restores_the_access_of_that_time(source_cluster, target_cluster, backed_up, spark):
    import time

    first_ms = int(time.time() * 1000)
    time.sleep(1.1)
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap})
    for future in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                                                           AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        future.result(30)
    run_cli("backup", *admin_settings(source_cluster), "--to", backed_up, "-t", "orders", "-t", "payments")
    assert "saved 2 times" in run_cli("ls", backed_up)
    run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state",
            "--until", str(first_ms), "--restore-id", f"until-{uuid.uuid4().hex[:6]}")
    assert acl("orders", "User:alice", "WRITE").key() in all_acls(target_cluster)


def test_a_user_the_target_already_has_gets_no_credential_added(source_cluster, target_cluster, backed_up, spark,
                                                                tmp_path):
    # Issue #50.4: the target has alice with SCRAM-SHA-512 and a password of its own; the archive holds
    # alice with SCRAM-SHA-256. Nothing may let the restore's password log in as the target's alice.
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap})
    own = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"own-pw")
    for future in admin.alter_user_scram_credentials([own]).values():
        future.result(30)
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state",
                  "--scram-passwords", str(passwords))
    assert scram_users(target_cluster)["alice"] == [ScramMechanism.SCRAM_SHA_512]
    assert set(scram_users(target_cluster)["bob"]) == {ScramMechanism.SCRAM_SHA_512}
    [left] = [line for line in out.splitlines() if "already on the target, left as they are" in line]
    assert "alice" in left and "--add-scram-mechanisms" in left, out
    # Asked for, the saved mechanism is added with the restore's password (the target's own stays).
    run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state", "-t", "payments",
            "--rename", "payments=payments2", "--scram-passwords", str(passwords), "--add-scram-mechanisms")
    assert set(scram_users(target_cluster)["alice"]) == {ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256}
    assert can_produce(as_user(target_cluster, "alice", PASSWORDS["alice"], "SCRAM-SHA-256"), "orders") is None


def test_a_rename_that_changes_a_topics_access_is_refused_unless_accepted(source_cluster, target_cluster,
                                                                         backed_up, spark):
    # Issue #50.5: ALLOW User:etl READ PREFIXED "orders." covers orders.restored but never covered orders.
    set_acls(source_cluster, acl("orders.", "User:etl", "READ", pattern="PREFIXED"))
    run_cli("backup", *admin_settings(source_cluster), "--to", backed_up, "-t", "orders", "-t", "payments")
    rename = ["-t", "orders", "--rename", "orders=orders.restored"]
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state", *rename,
                  expect_exit=1)
    assert_one_line_error(out, "orders -> orders.restored: gains ALLOW User:etl READ", "--accept-renamed-access")
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap})
    assert "orders.restored" not in admin.list_topics(timeout=30).topics and all_acls(target_cluster) == set()
    out = run_cli("restore", "--from", backed_up, *admin_settings(target_cluster), "--cluster-state", *rename,
                  "--accept-renamed-access")
    assert "--accept-renamed-access: orders -> orders.restored: gains ALLOW User:etl READ" in out, out
    assert acl("orders.", "User:etl", "READ", pattern="PREFIXED").key() in all_acls(target_cluster)
