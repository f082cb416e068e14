"""The pure-logic half of tests/integration/test_cluster_access.py (its docstring covers both halves):
Whole-cluster recovery (issue 37): ACLs and SCRAM users saved by backup, restored by `restore --cluster-state` into an empty cluster on Apache Kafka with StandardAuthorizer and a SASL/SCRAM listener; checked with real clients that authenticate as the saved principals.
"""

from __future__ import annotations

import json

import pytest
from accesstools import acl
from topicvault.core.archive.commits import BackupState, CommitRecord
from topicvault.core.cluster.cluster_access import (
    AccessState,
    ScramUser,
    plan_access,
    renamed_access_changes,
    scram_passwords,
)
from topicvault.core.errors import TopicvaultError

SAVED = AccessState(acls=(acl("orders"), acl("ord", pattern="PREFIXED", principal="User:bob"),
                          acl("bob-g", "User:bob", resource="GROUP")),
                    scram_users=(ScramUser("alice", "SCRAM-SHA-256", 8192), ScramUser("bob", "SCRAM-SHA-512", 4096)))


def test_access_state_round_trips_through_its_json():
    assert AccessState.from_json(json.loads(json.dumps(SAVED.to_json()))).to_json() == SAVED.to_json()


@pytest.mark.parametrize("body, needle", [
    ({"acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "MATCH", "principal": "User:a",
                "host": "*", "operation": "READ", "permission": "ALLOW"}]}, "pattern_type"),
    ({"acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL", "principal": "alice",
                "host": "*", "operation": "READ", "permission": "ALLOW"}]}, "principal"),
    ({"acls": [{"resource_type": "TOPIC", "name": "t", "pattern_type": "LITERAL", "principal": "User:a",
                "host": "*", "operation": "ANY", "permission": "ALLOW"}]}, "operation"),
    ({"acls": "all"}, "acls"),
    ({"scram_users": [{"name": "a", "mechanism": "SCRAM-SHA-1", "iterations": 4096}]}, "mechanism"),
    ({"scram_users": [{"name": "a", "mechanism": "SCRAM-SHA-256", "iterations": 10**9}]}, "iterations"),
    ({"scram_users": [{"name": "a", "mechanism": "SCRAM-SHA-256", "iterations": 4096, "password": "x"}]},
     "password"),
])
def test_hostile_access_state_is_refused(body, needle):
    with pytest.raises(ValueError, match=needle):
        AccessState.from_json(body)


def test_commit_record_with_a_bad_access_state_is_unreadable():
    body = {"format_version": 1, "sequence": 1, "created_ms": 1, "ranges": [], "objects": [],
            "access": {"acls": [{"resource_type": "CLUSTER_OF_DOOM"}]}}
    with pytest.raises(TopicvaultError, match="commit record k is unreadable"):
        CommitRecord.from_json(json.dumps(body).encode(), "k")


def test_access_is_kept_over_time_and_found_at_a_time():
    state = BackupState()
    first = {"acls": [acl("orders").to_json()], "scram_users": []}
    second = {"acls": [], "scram_users": []}
    for sequence, (created, access) in enumerate([(1000, first), (2000, None), (3000, second)], start=1):
        state.apply(CommitRecord(sequence, created, (), (), access=access), f"k{sequence}")
    assert state.access == second
    assert [h["read_ms"] for h in state.access_history] == [1000, 3000]
    assert state.access_at(2500) == first
    assert state.access_at(999) is None
    assert state.access_at(None) == second


def test_plan_creates_what_the_target_lacks_and_lists_users_without_a_password():
    plan = plan_access(SAVED, AccessState((), ()), {}, {"alice": "pw"}, merge=False)
    assert set(plan.create_acls) == set(SAVED.acls)
    assert [u.name for u in plan.create_users] == ["alice"]
    assert plan.users_without_password == ["bob"]
    assert "pw" not in repr(plan)


def test_plan_refuses_target_acls_the_archive_does_not_hold_unless_merging():
    extra = acl("orders", "User:mallory", "WRITE")
    target = AccessState((acl("orders"), extra), ())
    with pytest.raises(TopicvaultError, match="1 ACL binding.*--merge-acls"):
        plan_access(SAVED, target, {}, {}, merge=False)
    plan = plan_access(SAVED, target, {}, {}, merge=True)
    assert acl("orders") not in plan.create_acls  # already there
    assert plan.conflicting_acls == [extra]


def test_rename_moves_literal_acls_and_grants_prefixed_ones_on_the_new_name():
    plan = plan_access(SAVED, AccessState((), ()), {"orders": "orders-restored"}, {}, merge=False)
    assert acl("orders") not in plan.create_acls
    assert acl("orders-restored") in plan.create_acls
    # bob read every topic starting with "ord", orders among them: the new name starts with it too
    assert acl("ord", pattern="PREFIXED", principal="User:bob") in plan.create_acls
    plan = plan_access(SAVED, AccessState((), ()), {"orders": "restored"}, {}, merge=False)
    assert acl("restored", "User:bob") in plan.create_acls
    assert any("orders" in note and "restored" in note for note in plan.notes)


def test_a_user_the_target_has_by_name_is_left_alone_unless_mechanisms_may_be_added():
    # Issue #50.4: alice is on the target with SCRAM-SHA-512 only; the archive holds her SCRAM-SHA-256.
    target = AccessState((), (ScramUser("alice", "SCRAM-SHA-512", 4096),))
    plan = plan_access(SAVED, target, {}, {"alice": "pw", "bob": "pw2"}, merge=False)
    assert [u.name for u in plan.create_users] == ["bob"] and "alice" not in plan.passwords
    assert plan.mechanisms_not_added == [ScramUser("alice", "SCRAM-SHA-256", 8192)]
    plan = plan_access(SAVED, target, {}, {"alice": "pw"}, merge=False, add_mechanisms=True)
    assert ScramUser("alice", "SCRAM-SHA-256", 8192) in plan.create_users and plan.mechanisms_not_added == []
    # The same mechanism is never added again, with the flag or without.
    same = AccessState((), (ScramUser("alice", "SCRAM-SHA-256", 4096),))
    plan = plan_access(SAVED, same, {}, {"alice": "pw"}, merge=False, add_mechanisms=True)
    assert plan.users_present == [ScramUser("alice", "SCRAM-SHA-256", 8192)] and plan.create_users == []


def test_access_a_renamed_topic_gets_under_a_prefixed_acl_is_computed_and_refused_unless_accepted():
    # Issue #50.5: "orders." covers orders.restored, not orders: etl would read the restored topic; a DENY
    # of the same shape would take access away.
    grant = acl("orders.", "User:etl", pattern="PREFIXED")
    deny = acl("orders.", "User:bob", pattern="PREFIXED", permission="DENY")
    saved = AccessState(acls=(acl("orders", "User:bob"), grant, deny), scram_users=())
    with pytest.raises(TopicvaultError, match="--accept-renamed-access") as refused:
        plan_access(saved, AccessState((), ()), {"orders": "orders.restored"}, {}, merge=False)
    assert "orders -> orders.restored: gains DENY User:bob READ, ALLOW User:etl READ" in str(refused.value)
    plan = plan_access(saved, AccessState((), ()), {"orders": "orders.restored"}, {}, merge=False,
                       accept_renamed_access=True)
    assert [(c.source, c.target, c.lost) for c in plan.renamed_access] == [("orders", "orders.restored", ())]
    assert grant in plan.create_acls and any(n.startswith("--accept-renamed-access: orders ->") for n in plan.notes)
    # Literal and covering prefixes move with the name: nothing differs, nothing to accept.
    assert plan_access(SAVED, AccessState((), ()), {"orders": "restored"}, {}, merge=False).renamed_access == []
    assert renamed_access_changes(saved.acls, saved.acls, {"payments": "orders.p"})[0].gained == (
        ("User:bob", "*", "READ", "DENY"), ("User:etl", "*", "READ", "ALLOW"))


def test_passwords_come_from_a_file_or_per_user_environment(tmp_path):
    path = tmp_path / "passwords.json"
    path.write_text(json.dumps({"alice": "from-file"}))
    env = {"TOPICVAULT_SCRAM_PASSWORD_BOB_SMITH": "from-env"}
    assert scram_passwords(str(path), env, ["alice", "bob.smith", "carol"]) == {"alice": "from-file",
                                                                                "bob.smith": "from-env"}
    path.write_text("alice=oops")
    with pytest.raises(TopicvaultError, match="JSON object") as raised:
        scram_passwords(str(path), {}, ["alice"])
    assert "oops" not in str(raised.value)


