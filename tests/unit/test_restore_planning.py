"""Restore planning from facts alone (source.restore.restore_plan): no store, broker or Spark.

Each test builds the facts a restore would gather (the archive's state, the restore's saved
state, the target cluster's topics and watermarks) by hand and checks the plan or the refusal.
"""

from __future__ import annotations

import inspect
from dataclasses import FrozenInstanceError, fields

import pyarrow as pa
import pytest
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionState
from topicvault.core.cluster.cluster_access import AccessState
from topicvault.core.errors import NoBackup, TopicvaultError
from topicvault.formats.peers import LAYOUTS, NATIVE
from topicvault.sink.continuous_backup import ContinuousBackupRequest, run_follow
from topicvault.source.cluster_restore.access_restore import QUOTAS_NOT_SAVED, AccessRequest
from topicvault.source.object_reader import SkippedObject
from topicvault.source.restore.offset_map import OffsetMap
from topicvault.source.restore.restore_job import plan_restore
from topicvault.source.restore.restore_plan import (
    RestoreFacts,
    RestoreRequest,
    TargetFacts,
    build_restore_plan,
    check_on_error,
)
from topicvault.source.restore.restore_state import RestoreState
from topicvault.source.restore.selection import Selection
from topicvault.source.restore.standby import StandbyRequest

NOW_MS = 1_700_000_000_000
BOOTSTRAP = "target:9092"


def entry(topic: str, partition: int, first: int, last: int, time_ms: int = NOW_MS - 1000) -> ObjectEntry:
    return ObjectEntry(f"{topic}-{partition}-{first}", topic, partition, first, last, last - first + 1, 100,
                       time_ms, time_ms, "sha")


def archive(*objects: ObjectEntry, partitions: int = 1, topics: tuple[str, ...] = ("orders",)) -> BackupState:
    """An archive of `topics` with `partitions` partitions each, holding `objects`."""
    state = BackupState(last_sequence=3, topics={t: {"partitions": partitions, "replication_factor": 1,
                                                     "configs": {"cleanup.policy": "delete"}, "configs_reported": True}
                                                 for t in topics})
    for topic in topics:
        for p in range(partitions):
            mine = [o for o in objects if (o.topic, o.partition) == (topic, p)]
            start = mine[0].first_offset if mine else 0
            end = mine[-1].last_offset + 1 if mine else 0
            state.partitions[(topic, p)] = PartitionState(topic, p, start, end, list(mine))
    return state


def facts(state: BackupState, cluster: dict[str, int] | None = None, watermarks: dict | None = None,
          saved: RestoreState | None = None, **more) -> RestoreFacts:
    target = TargetFacts(BOOTSTRAP, cluster or {}, watermarks or {}, brokers=3, default_retention_ms=-1,
                         **more.pop("target", {}))
    return RestoreFacts("s3://bucket/archive", more.pop("layout", NATIVE), state, target, more.pop("restore_id", "r1"),
                        NOW_MS, saved=saved, **more)


def saved_state(topic_map: dict[str, str], starts: dict[str, int], selection: Selection = Selection(),
                source_starts: dict[str, int] | None = None, created: dict[str, str] | None = None) -> RestoreState:
    """A saved state; `created`: the topics its CreateTopics created, with their ids (default: none known)."""
    return RestoreState("r1", BOOTSTRAP, topic_map, starts, selection.to_json(), {"orders-copy": {}},
                        {} if source_starts is None else source_starts, created_ms=NOW_MS - 10_000,
                        created_topics=created or {})


def test_a_fresh_restore_plans_every_partition_into_new_topics_from_offset_zero():
    state = archive(entry("orders", 0, 0, 9), entry("orders", 0, 10, 19), entry("orders", 1, 0, 4), partitions=2)
    plan = build_restore_plan(facts(state), RestoreRequest(renames={"orders": "orders-copy"}))
    assert not plan.resumed and plan.restore_id == "r1"
    assert plan.topic_map == {"orders": "orders-copy"} and plan.topics_to_create == {"orders-copy": 2}
    assert [(t.target, t.target_start, t.records, t.resumed) for t in plan.tasks] == [
        (("orders-copy", 0), 0, 20, False), (("orders-copy", 1), 0, 5, False)]
    assert plan.target_starts == {"orders-copy:0": 0, "orders-copy:1": 0}
    assert plan.source_starts == {"orders:0": 0, "orders:1": 0} and plan.new_source_starts == {}
    assert plan.topic_configs == {"orders-copy": {"cleanup.policy": "delete"}} and plan.replication == {"orders-copy": 1}


def test_renamed_topics_go_to_their_targets_and_a_rename_of_a_topic_not_restored_is_refused():
    state = archive(entry("orders", 0, 0, 9), entry("pay", 0, 0, 2), topics=("orders", "pay"))
    plan = build_restore_plan(facts(state), RestoreRequest(renames={"orders": "o2"}))
    assert plan.topic_map == {"orders": "o2", "pay": "pay"}
    assert [t.target for t in plan.tasks] == [("o2", 0), ("pay", 0)]
    with pytest.raises(TopicvaultError, match="--rename names topics not being restored: nope"):
        build_restore_plan(facts(state), RestoreRequest(renames={"nope": "x"}))
    with pytest.raises(TopicvaultError, match="would all be restored into 'pay'"):
        build_restore_plan(facts(state), RestoreRequest(renames={"orders": "pay"}))


def test_an_existing_nonempty_target_is_refused_naming_the_restore_that_wrote_it():
    state = archive(entry("orders", 0, 0, 9))
    holding = facts(state, {"orders": 1}, {("orders", 0): (0, 5)}, earlier_restores={"orders": ["r0"]})
    with pytest.raises(TopicvaultError, match="already holds records .* restore r0 from this location wrote into it"):
        build_restore_plan(holding, RestoreRequest())
    plan = build_restore_plan(facts(state, {"orders": 1}, {("orders", 0): (0, 5)}, target={"ends": {("orders", 0): 6}}),
                              RestoreRequest(allow_nonempty=True))
    assert plan.topics_to_create == {} and [t.target_start for t in plan.tasks] == [6]  # after the true end
    empty = build_restore_plan(facts(state, {"orders": 1}, {("orders", 0): (7, 7)}), RestoreRequest())
    assert [t.target_start for t in empty.tasks] == [7]


def test_a_target_with_fewer_partitions_than_the_archive_is_refused():
    state = archive(entry("orders", 1, 0, 9), partitions=2)
    with pytest.raises(TopicvaultError, match="target topic 'orders' has 1 partitions but the backup has 2"):
        build_restore_plan(facts(state, {"orders": 1}, {("orders", 0): (0, 0)}), RestoreRequest())


def test_a_rerun_of_a_finished_restore_id_plans_from_its_saved_starts_and_resumes():
    state = archive(entry("orders", 0, 0, 9))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0},
                        created={"orders-copy": "id-1"})
    plan = build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 10)}, saved,
                                    target={"topic_ids": {"orders-copy": "id-1"}}),
                              RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))
    assert plan.resumed and plan.topics_to_create == {}
    # The task counts what the target holds (all 10) and produces nothing: a rerun is a no-op.
    assert [(t.target_start, t.records, t.resumed) for t in plan.tasks] == [(0, 10, True)]
    assert plan.topic_configs == {"orders-copy": {}}  # the configs its state names for the topic it created


def test_a_rerun_sets_configs_only_on_a_topic_its_create_topics_created_with_the_same_id():
    state = archive(entry("orders", 0, 0, 9))
    request = RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1")
    holding = ({"orders-copy": 1}, {("orders-copy", 0): (0, 10)})
    # A state older than created_topics, or one whose CreateTopics found the topic there: no configs.
    for created in ({}, {"other": "id-9"}):
        saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, created=created)
        plan = build_restore_plan(facts(state, *holding, saved), request)
        assert plan.topic_configs == {}
        assert any("not created by restore r1" in note and "did not create it" in note for note in plan.notes)
    # Deleted and created again by someone else since: refused while planning, before any AlterConfigs.
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, created={"orders-copy": "id-1"})
    with pytest.raises(TopicvaultError, match="orders-copy is not the topic restore r1 created .*deleted and created"):
        build_restore_plan(facts(state, *holding, saved, target={"topic_ids": {"orders-copy": "id-2"}}), request)
    # Deleted and not there now: this run creates it again, and sets its configs if that succeeds.
    plan = build_restore_plan(facts(state, {}, {}, saved), request)
    assert plan.topics_to_create == {"orders-copy": 1} and plan.topic_configs == {"orders-copy": {}}


def test_a_rerun_without_topics_follows_the_topics_the_restore_id_began_with():
    state = archive(entry("orders", 0, 0, 9), entry("pay", 0, 0, 2), topics=("orders", "pay"))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    plan = build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 4)}, saved),
                              RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))
    assert plan.topic_map == {"orders": "orders-copy"}


def test_a_resume_with_other_records_selected_is_refused():
    state = archive(entry("orders", 0, 0, 9))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0})
    with pytest.raises(TopicvaultError, match="selected other records"):
        build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 4)}, saved),
                           RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1",
                                          selection=Selection(to_offsets=(("*", 5),))))


def test_a_resume_whose_target_lost_records_it_wrote_is_refused():
    state = archive(entry("orders", 0, 0, 9))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    with pytest.raises(TopicvaultError, match=r"orders-copy\[0\] now starts at offset 3, past offset 0"):
        build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (3, 6)}, saved),
                           RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))


def test_a_continued_restore_starts_each_partition_after_its_saved_offset_map():
    state = archive(entry("orders", 0, 0, 9), entry("orders", 0, 10, 19))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    done = OffsetMap("orders", 0, "orders-copy", 0)
    done.add_offsets(pa.array(range(10), pa.int64()))  # source offsets 0..9 went to target offsets 0..9
    plan = build_restore_plan(
        facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 10)}, saved, saved_maps={("orders", 0): done}),
        RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1", continue_saved=True))
    [task] = plan.tasks
    assert task.target_start == 10 and task.selection.bounds("orders", 0) == (10, None)
    assert [o.first_offset for o in task.objects] == [10]
    assert plan.restored == {("orders", 0): done}


def test_a_partition_expired_before_the_restore_got_to_it_is_refused():
    state = archive(entry("orders", 0, 10, 19))  # an expire moved the start from 0 to 10
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    with pytest.raises(TopicvaultError, match="offsets 0..9 were expired from the archive before restore r1"):
        build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 0)}, saved),
                           RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))


def test_until_keeps_the_objects_up_to_the_time_and_refuses_times_outside_the_archive():
    spanning = ObjectEntry("orders-0-10", "orders", 0, 10, 19, 10, 100, NOW_MS - 4000, NOW_MS - 2000, "sha")
    state = archive(entry("orders", 0, 0, 9, NOW_MS - 5000), spanning, entry("orders", 0, 20, 29, NOW_MS - 1000))
    plan = build_restore_plan(facts(state), RestoreRequest(selection=Selection(until_ms=NOW_MS - 3000)))
    # The second object holds the first record after the time; the third is wholly after it.
    assert [o.first_offset for o in plan.tasks[0].objects] == [0, 10]
    assert plan.tasks[0].selection.until_ms == NOW_MS - 3000
    with pytest.raises(TopicvaultError, match="is in the future"):
        build_restore_plan(facts(state), RestoreRequest(selection=Selection(until_ms=NOW_MS + 3_600_000)))
    with pytest.raises(TopicvaultError, match="is before the backed-up data"):
        build_restore_plan(facts(state), RestoreRequest(selection=Selection(until_ms=NOW_MS - 9000)))


def test_holes_an_earlier_run_left_out_stay_out_and_are_named_again():
    state = archive(entry("orders", 0, 0, 9), entry("orders", 0, 10, 19), entry("orders", 0, 20, 29))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    hole = SkippedObject("orders-0-10", "orders", 0, 10, 19, 10, "damaged")
    plan = build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 10)}, saved,
                                    saved_holes={("orders", 0): [hole]}),
                              RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))
    [task] = plan.tasks
    assert [o.first_offset for o in task.objects] == [0, 20]  # the object inside the hole is not read
    [again] = task.earlier_holes
    assert (again.first_offset, again.last_offset) == (10, 19)
    assert again.reason.startswith("left out by an earlier run of restore r1") and "damaged" in again.reason


def test_a_partition_with_only_a_hole_left_is_planned_again_not_called_complete():
    state = archive(entry("orders", 0, 0, 9))
    saved = saved_state({"orders": "orders-copy"}, {"orders-copy:0": 0}, source_starts={"orders:0": 0})
    hole = SkippedObject("orders-0-0", "orders", 0, 0, 9, 10, "damaged")
    plan = build_restore_plan(facts(state, {"orders-copy": 1}, {("orders-copy", 0): (0, 0)}, saved,
                                    saved_holes={("orders", 0): [hole]}),
                              RestoreRequest(renames={"orders": "orders-copy"}, restore_id="r1"))
    assert [(t.objects, len(t.earlier_holes)) for t in plan.tasks] == [((), 1)]


def test_on_error_skip_is_refused_for_a_peer_archive_before_it_is_read():
    check_on_error(NATIVE, "skip", "s3://b/a")
    with pytest.raises(TopicvaultError, match="--on-error skip works with topicvault archives only; s3://b/a is a lenses"):
        check_on_error(LAYOUTS["lenses"], "skip", "s3://b/a")


def test_a_peer_archive_is_planned_by_record_without_object_times_or_holes():
    state = archive(ObjectEntry("t/0/5.json", "orders", 0, 5, 5, 0, 10, 0, 0, ""),
                    ObjectEntry("t/0/9.json", "orders", 0, 9, 9, 0, 10, 0, 0, ""))
    plan = build_restore_plan(facts(state, layout=LAYOUTS["lenses"], layout_notes=("layout lenses: keeps ...",)),
                              RestoreRequest())
    assert plan.layout == "lenses" and plan.notes[0] == "layout lenses: keeps ..."
    assert [o.key for o in plan.tasks[0].objects] == ["t/0/5.json", "t/0/9.json"]
    assert plan.source_starts == {}  # a peer's listing says nothing of where it started


def test_a_restore_id_planted_in_the_archive_is_refused_unless_imported():
    with pytest.raises(TopicvaultError, match="add --import-state s3://bucket/archive/_topicvault/restores/r1"):
        build_restore_plan(facts(archive(entry("orders", 0, 0, 9)), legacy_state_planted=True),
                           RestoreRequest(restore_id="r1"))


def test_an_empty_archive_is_no_backup_and_internal_topics_are_left_out_with_a_note():
    with pytest.raises(NoBackup):
        build_restore_plan(facts(BackupState()), RestoreRequest())
    state = archive(entry("orders", 0, 0, 9), entry("__consumer_offsets", 0, 0, 1), topics=("orders", "__consumer_offsets"))
    plan = build_restore_plan(facts(state), RestoreRequest())
    assert plan.topic_map == {"orders": "orders"}
    assert "left out internal topic __consumer_offsets (Kafka's own): restore it by name with --topic " \
           "__consumer_offsets" in plan.notes


# Issue #50.3: Connect's, Schema Registry's and MirrorMaker 2's topics under the names their images
# and tutorials use, and a compacted topic named like Connect's; each left out with a note naming it.
TOOL_TOPICS = ("docker-connect-configs", "my_connect_configs", "connect-cluster-offsets", "kafka-connect-status",
               "_schemas", "registry_schemas", "mm2-configs.src.internal", "mm2-offset-syncs.src.internal",
               "src.checkpoints.internal", "heartbeats", "src.heartbeats", "cfg_configs")


def test_tool_topics_under_other_names_are_left_out_unless_named():
    state = archive(*(entry(t, 0, 0, 1) for t in ("orders", *TOOL_TOPICS)), topics=("orders", *TOOL_TOPICS))
    state.topics["cfg_configs"]["configs"] = {"cleanup.policy": "compact"}
    plan = build_restore_plan(facts(state), RestoreRequest())
    assert plan.topic_map == {"orders": "orders"}
    for topic in TOOL_TOPICS:
        [note] = [n for n in plan.notes if n.startswith(f"left out internal topic {topic} (")]
        assert note.endswith(f"restore it by name with --topic {topic}"), note
    assert any("cfg_configs (Kafka Connect's, by its name and cleanup.policy=compact)" in n for n in plan.notes)
    # The same name with the saved cleanup.policy=delete is a user's topic; a named tool topic is restored.
    state.topics["cfg_configs"]["configs"] = {"cleanup.policy": "delete"}
    assert "cfg_configs" in build_restore_plan(facts(state), RestoreRequest()).topic_map
    named = build_restore_plan(facts(state), RestoreRequest(topics=("docker-connect-configs",)))
    assert named.topic_map == {"docker-connect-configs": "docker-connect-configs"}


def test_a_renamed_topic_whose_access_under_the_saved_acls_differs_gets_a_note():
    # Issue #50.5: a saved ALLOW User:etl READ PREFIXED "orders." covers orders.restored, not orders.
    state = archive(entry("orders", 0, 0, 9))
    state.access = {"acls": [{"resource_type": "TOPIC", "name": "orders.", "pattern_type": "PREFIXED",
                              "principal": "User:etl", "host": "*", "operation": "READ", "permission": "ALLOW"}]}
    plan = build_restore_plan(facts(state), RestoreRequest(renames={"orders": "orders.restored"}))
    assert any(n.startswith("orders -> orders.restored: gains ALLOW User:etl READ, under the ACLs the backup saved")
               for n in plan.notes), plan.notes
    plan = build_restore_plan(facts(state), RestoreRequest(renames={"orders": "orders2"}))
    assert not any("->" in n for n in plan.notes), plan.notes


def test_a_retention_bytes_smaller_than_what_a_partition_gets_is_warned_of_with_the_figures():
    # Issue #50.7: each object holds 100 bytes; partition 0 gets 300 of them, partition 1 100.
    state = archive(entry("orders", 0, 0, 9), entry("orders", 0, 10, 19), entry("orders", 0, 20, 29),
                    entry("orders", 1, 0, 9), partitions=2)
    state.topics["orders"]["configs"] = {"retention.bytes": "150"}
    plan = build_restore_plan(facts(state), RestoreRequest())
    [note] = [n for n in plan.notes if "retention.bytes" in n and "deletes" in n]
    assert note.startswith("orders: gets retention.bytes=150 per partition, but the restore writes about 300 bytes "
                           "into partition 0"), note
    state.topics["orders"]["configs"] = {}
    plan = build_restore_plan(facts(state, target={"default_retention_bytes": 50}), RestoreRequest())
    assert any(n.startswith("orders: gets the target's default retention.bytes=50 per partition") and
               "(2 partitions over it)" in n for n in plan.notes), plan.notes
    # An existing target keeps its own; a limit above what goes in, or none (-1), says nothing.
    empty = {("orders", p): (0, 0) for p in range(2)}
    plan = build_restore_plan(facts(state, {"orders": 2}, empty, target={"retention_bytes": {"orders": 200}}),
                              RestoreRequest())
    assert any(n.startswith("orders: the existing target keeps retention.bytes=200 per partition") for n in plan.notes)
    for limit in (300, -1):
        plan = build_restore_plan(facts(state, {"orders": 2}, empty, target={"retention_bytes": {"orders": limit}}),
                                  RestoreRequest())
        assert not any("retention.bytes" in n for n in plan.notes), plan.notes


def test_a_log_append_time_topic_is_named_in_a_note():
    # Issue #50.6: its records come back typed CreateTime.
    state = archive(entry("orders", 0, 0, 9), entry("pay", 0, 0, 9), topics=("orders", "pay"))
    state.topics["orders"]["configs"] = {"message.timestamp.type": "LogAppendTime"}
    plan = build_restore_plan(facts(state), RestoreRequest(renames={"orders": "o2"}))
    [note] = [n for n in plan.notes if "typed CreateTime" in n]
    assert note.startswith("o2: orders was a LogAppendTime topic: its records keep their timestamp values"), note


def test_a_created_topic_whose_saved_retention_deletes_old_records_gets_a_note():
    state = archive(entry("orders", 0, 0, 9, NOW_MS - 10 * 86_400_000))
    state.topics["orders"]["configs"] = {"retention.ms": str(86_400_000)}
    plan = build_restore_plan(facts(state), RestoreRequest())
    assert any(n.startswith("orders: gets retention.ms=86400000 after the restore") for n in plan.notes)


def test_plan_restore_standby_and_continuous_backup_each_take_one_request():
    # Issue #49.3: one RestoreRequest from the CLI to the planner, none unpacked into positional arguments.
    assert list(inspect.signature(plan_restore).parameters) == ["job", "request"]
    assert [f.name for f in fields(StandbyRequest)] == ["restore", "poll_interval_s"]
    assert StandbyRequest(RestoreRequest(groups=True)).restore.groups
    assert list(inspect.signature(run_follow).parameters)[:3] == ["spark", "job", "request"]
    assert inspect.signature(run_follow).parameters["request"].annotation in (ContinuousBackupRequest,
                                                                             "ContinuousBackupRequest")


def test_the_planner_decides_groups_and_access_and_nothing_changes_the_plan_after():
    state = archive(entry("orders", 0, 0, 9))
    planned = facts(state, target_access=AccessState((), ()))
    plan = build_restore_plan(planned, RestoreRequest(groups=True, access=AccessRequest()))
    assert plan.groups == () and plan.access is not None
    assert QUOTAS_NOT_SAVED in plan.notes and any("saved no ACLs or SCRAM users" in n for n in plan.notes)
    with pytest.raises(FrozenInstanceError):
        plan.access = None  # type: ignore[misc]
    plain = build_restore_plan(planned, RestoreRequest())
    assert (plain.groups, plain.access) == (None, None)
    with pytest.raises(TopicvaultError, match="holds no offsets of consumer group"):
        build_restore_plan(planned, RestoreRequest(groups=True, only_groups=("nope",)))
