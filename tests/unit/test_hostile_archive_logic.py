"""The pure-logic half of tests/integration/test_hostile_archive.py (its docstring covers both halves):
Issue #39 items 1-2: whoever can write the bucket must not make a restore touch what it did not create.
"""

from __future__ import annotations

import gzip

import pytest
from restoretools import HOSTILE_CONFIGS
from topicvault.core.errors import TopicvaultError
from topicvault.core.stores.locations import open_store
from topicvault.source.restore import restore_state
from topicvault.source.restore.restore_state import RestoreRecords, load_peer_objects_seen


def test_every_saved_peer_object_list_is_unpacked_within_a_bound(tmp_path, monkeypatch):
    records = RestoreRecords(open_store(str(tmp_path / "state")), open_store(str(tmp_path / "archive")))
    seen = {(f"topic/0/{i:019d}.json", 1000 + i) for i in range(20_000)}
    restore_state.save_peer_objects_seen(records, "r1", seen, [])
    assert load_peer_objects_seen(records, "r1") == (seen, [])
    # A list that unpacks past the bound is refused as it is unpacked, not after.
    monkeypatch.setattr(restore_state, "MAX_STATE_BYTES", 64 * 1024)
    with pytest.raises(TopicvaultError, match="more than 65536 bytes"):
        load_peer_objects_seen(records, "r1")
    bomb = gzip.compress(b"[" + b" " * (8 * 2**20) + b"]", mtime=0)
    records.state.put(records.key("r2", restore_state.PEER_OBJECTS_NAME), bomb)
    with pytest.raises(TopicvaultError, match="more than 65536 bytes"):
        load_peer_objects_seen(records, "r2")




def test_only_configs_on_the_allow_list_and_within_bounds_are_set():
    from topicvault.source.restore.topic_policy import screen_topic_configs

    screened = screen_topic_configs(HOSTILE_CONFIGS)
    assert screened.applied == {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact",
                                "retention.ms": "-1"}
    assert set(screened.skipped) == {"unclean.leader.election.enable", "min.insync.replicas", "segment.ms",
                                     "max.message.bytes", "follower.replication.throttled.replicas"}
    assert screen_topic_configs({"segment.ms": "3600000", "max.message.bytes": "8388608",
                                 "cleanup.policy": "rm -rf"}).applied == {"segment.ms": "3600000",
                                                                          "max.message.bytes": "8388608"}
    applied, skipped = screened.notes("t")
    assert applied == "t: saved configs set once the data is in: cleanup.policy=compact, " \
                      "message.timestamp.type=LogAppendTime, retention.ms=-1"
    assert "min.insync.replicas=1 (durability is the target's)" in skipped and "segment.ms=1000 (below" in skipped


def test_internal_topic_names():
    from topicvault.source.restore.topic_policy import is_internal_topic

    internal = ["__consumer_offsets", "__transaction_state", "_schemas", "connect-configs", "connect-offsets",
                "connect-status", "connect-cluster-configs", "_confluent-license", "mm2-offsets.src.internal"]
    assert all(map(is_internal_topic, internal))
    assert not any(map(is_internal_topic, ["orders", "_orders", "payments.internal.v2"]))
    # Issue #50.3: the names Connect images and tutorials use, Schema Registry's and MirrorMaker 2's
    assert all(map(is_internal_topic, ["docker-connect-configs", "my_connect_configs", "connect-cluster-status",
                                       "x_schemas", "mm2-offset-syncs.a.internal", "heartbeats", "a.heartbeats"]))
    assert is_internal_topic("app-offsets", {"cleanup.policy": "compact"})
    assert not is_internal_topic("app-offsets", {"cleanup.policy": "delete"})
    assert not any(map(is_internal_topic, ["schemas", "heartbeats-v2", "connector-events"]))
    # Review of #50.3: Connect's topics with a suffix (a second Connect cluster, a migration) are
    # Connect's too; missing one hands the target's workers the archive's connector configs, while
    # a user's topic caught by it costs a note and a --topic (old: all restored unnamed).
    assert all(map(is_internal_topic, ["connect-configs-v2", "connect-offsets.prod", "docker-connect-status-2",
                                       "connect-configs-x"]))
    assert is_internal_topic("app-status-v1", {"cleanup.policy": "compact"})
    assert not any(map(is_internal_topic, ["connect-configsx", "configs-v2", "app-status-v1"]))
