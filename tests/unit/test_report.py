"""What each command prints, byte for byte (#21): report turns fixed result objects into the
same stdout and stderr the CLI printed before the report assembly moved out of cli.py.

tests/data/report_golden.json was captured from the CLI of commit 86c42f8 (report assembly still
inline in cli.py), run in-process with these same result objects in place of the library's. Pure
logic: no broker, Spark or S3 server.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from topicvault import report
from topicvault.core import text
from topicvault.core.archive.commits import BackupState, ObjectEntry, PartitionRange, PartitionState
from topicvault.sink.backup import BackupResult
from topicvault.sink.kafka_reader import OffsetRange
from topicvault.sink.plan import BackupPlan, PartitionPlan
from topicvault.source.cluster_restore.group_restore import GroupOffset
from topicvault.source.maintenance.compact import CompactResult, Merge
from topicvault.source.maintenance.expire import ExpireResult, Expiry
from topicvault.source.maintenance.garbage import Collected
from topicvault.source.object_reader import SkippedObject
from topicvault.source.peer_layout import PeerReadReport
from topicvault.source.restore.offset_map import OffsetMap
from topicvault.source.restore.restore_job import RestorePlan, RestoreResult, RestoreTask, TaskResult
from topicvault.source.restore.standby import FollowRound, FollowSummary, PartitionLag
from topicvault.source.verify import VerifyReport

T0 = 1_763_942_400_123  # 2025-11-24T00:00:00.123Z


def entry(topic, partition, first, last, key_id=None):
    return ObjectEntry(f"topic={topic}/partition={partition}/{first:019d}.parquet", topic, partition, first, last,
                       last - first + 1, 1000 * (last - first + 1), T0 + first, T0 + last, "ab" * 32, key_id)


BACKUP_PLAN = BackupPlan(
    partitions=[PartitionPlan("orders", 0, 0, 1500, 0), PartitionPlan("orders", 1, 10, 20, 0),
                PartitionPlan("pay", 0, 0, 3, 0)],
    tasks=[OffsetRange("orders", 0, 0, 1000), OffsetRange("orders", 0, 1000, 1500), OffsetRange("orders", 1, 10, 20),
           OffsetRange("pay", 0, 0, 3)],
    topics={"orders": 2, "pay": 1},
    warnings=["orders[1]: offsets 0..9 were deleted by retention before a backup read them"],
)
EMPTY_PLAN = BackupPlan(partitions=[], tasks=[], topics={"orders": 2}, warnings=[])
BACKUP_RESULT = BackupResult(
    plan=BACKUP_PLAN,
    objects=[entry("orders", 0, 0, 999), entry("orders", 0, 1000, 1499), entry("orders", 1, 10, 19),
             entry("pay", 0, 0, 2)],
    commit_key="_topicvault/commits/0000000000000000007.json", elapsed_s=2.3456,
    warnings=["orders[0]: read ended at 1500"],
)

RESTORE_TASKS = [
    RestoreTask("orders", 0, "orders-copy", 0, (entry("orders", 0, 0, 999), entry("orders", 0, 1000, 1499))),
    RestoreTask("orders", 1, "orders-copy", 0, (entry("orders", 1, 10, 19),)),
    RestoreTask("pay", 0, "pay", 0, (entry("pay", 0, 0, 2),)),
]
RESTORE_PLAN = RestorePlan("r-42", RESTORE_TASKS, {"orders": "orders-copy", "pay": "pay"}, {"orders-copy": 2},
                           resumed=True, notes=["lenses: headers restored as stored"])
SKIPPED = SkippedObject("topic=orders/partition=1/0000000000000000010.parquet", "orders", 1, 10, 19, 10,
                        "checksum differs")


def _map(topic, target, partition):
    return OffsetMap(topic, partition, target, 0)


RESTORE_RESULT = RestoreResult(RESTORE_PLAN, [
    TaskResult("orders-copy", 0, 400, 1100, 1_500_000, 0, _map("orders", "orders-copy", 0)),
    TaskResult("orders-copy", 1, 0, 0, 0, 0, _map("orders", "orders-copy", 1),
               PeerReadReport("orders[1]", duplicates=2, gaps=1, missing=3), (SKIPPED,)),
    TaskResult("pay", 0, 0, 3, 3000, 2, _map("pay", "pay", 0)),
], elapsed_s=4.25)
CLEAN_RESULT = RestoreResult(RESTORE_PLAN, [
    TaskResult("pay", 0, 0, 3, 3000, 0, _map("pay", "pay", 0)),
], elapsed_s=0.0)
GROUPS = [GroupOffset("billing", "orders", p, 100 + p, "orders-copy", 90 + p) for p in range(8)] + [
    GroupOffset("audit", "pay", 0, 3, "pay", 3)]

COLLECTED = Collected(retired=["a.parquet", "b.parquet"], orphans=["c.parquet"], waiting=4)
COMPACT_RESULT = CompactResult(
    merges=(Merge("orders", 0, (entry("orders", 0, 0, 999), entry("orders", 0, 1000, 1499))),
            Merge("pay", 0, (entry("pay", 0, 0, 2),), reencrypt=True)),
    replaced=(entry("orders", 0, 0, 999), entry("orders", 0, 1000, 1499), entry("pay", 0, 0, 2)),
    written=(entry("orders", 0, 0, 1499), entry("pay", 0, 0, 2)),
    commit_key="_topicvault/commits/0000000000000000008.json", collected=COLLECTED)
COMPACT_NOTHING = CompactResult((), (), (), None, Collected())
EXPIRE_BEFORE_MS = T0 + 1200
EXPIRE_RESULT = ExpireResult(EXPIRE_BEFORE_MS, (Expiry("orders", 0, (entry("orders", 0, 0, 999),), 1000),),
                             "_topicvault/commits/0000000000000000009.json", COLLECTED)
EXPIRE_NOTHING = ExpireResult(EXPIRE_BEFORE_MS, (), None, Collected())

VERIFY_OK = VerifyReport(objects=4, records=1513, partitions=3, partitions_compared=3,
                         notes=["pay: compacted"], lost=["orders[1] offsets 0..9"])
VERIFY_BAD = VerifyReport(objects=4, records=1513, partitions=3, problems=["orders[0]: checksum differs"])

ROUND = FollowRound(1, "r-42", 1100, 400, 1_500_000, 1.25,
                    (PartitionLag("orders", 0, "orders-copy", 1500, 1500), PartitionLag("orders", 1, "orders-copy", 20, 12)),
                    7, 3.5, newest_sequence=9, skipped=(SKIPPED,), groups_committed=("billing",),
                    notes=("lenses: headers restored as stored",))
SUMMARY = FollowSummary("r-42", 3, 1100, (SKIPPED,))


LS_STATE = BackupState(
    last_sequence=9,
    partitions={
        ("orders", 0): PartitionState("orders", 0, 0, 1500, [entry("orders", 0, 0, 999, "k1"),
                                                            entry("orders", 0, 1000, 1499, "k2")]),
        ("orders", 1): PartitionState("orders", 1, 0, 20, [entry("orders", 1, 10, 19, "k1")],
                                      [PartitionRange("orders", 1, 0, 10)]),
        ("pay", 0): PartitionState("pay", 0, 0, 0),
    },
    topics={"orders": {"partitions": 2}, "pay": {"partitions": 1}},
    groups={"billing": {"read_ms": T0, "offsets": {}}},
    group_history={"billing": [{"read_ms": T0, "offsets": {}}, {"read_ms": T0 + 5000, "offsets": {}}]},
    last_stream={"committed_ms": T0 + 9000, "lag": {"orders:0": 5, "orders:1": 0, "pay:0": 1200}},
    topic_ids={"orders": "AAAA"},
)
PLAIN_STATE = BackupState(last_sequence=1,
                          partitions={("pay", 0): PartitionState("pay", 0, 0, 3, [entry("pay", 0, 0, 2)])})

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "report_golden.json").read_text())
LOCATION = "/tmp/rep/loc"  # the location the captured commands were given
SKIPPED_EXIT = 3
FOLLOW_RESULT = types.SimpleNamespace(commits=3, records=12345, lag={("orders", 0): 5, ("orders", 1): 7})
COMMITTED = "_topicvault/commits/0000000000000000003.json"


def started(result, as_json: bool) -> list[report.Line]:
    """What a restore prints before it produces."""
    return report.restore_plan_notes(result.plan) + report.restore_started(result.plan)


def _scenarios() -> dict[str, callable]:
    """Golden scenario -> the report lines the CLI prints for it, in order."""
    found = {}
    for js in (False, True):
        found[f"backup_plan dry=False json={js}"] = lambda js=js: (
            report.backup_plan_warnings(EMPTY_PLAN, js) + report.backup_plan(EMPTY_PLAN, False, COMMITTED, js))
        found[f"backup_plan dry=True json={js}"] = lambda js=js: (
            report.backup_plan_warnings(BACKUP_PLAN, js) + report.backup_plan(BACKUP_PLAN, True, None, js))
        found[f"backup json={js}"] = lambda js=js: (
            report.backup_plan_warnings(BACKUP_PLAN, js) + report.backup_summary(BACKUP_RESULT, 0.0, js))
        found[f"restore dry json={js}"] = lambda js=js: (
            report.restore_plan_notes(RESTORE_PLAN) + report.restore_dry_run(RESTORE_PLAN, js))
        found[f"restore groups json={js}"] = lambda js=js: (
            started(RESTORE_RESULT, js) + report.restore_summary(RESTORE_RESULT, GROUPS, js, SKIPPED_EXIT))
        found[f"restore clean json={js}"] = lambda js=js: (
            started(CLEAN_RESULT, js) + report.restore_summary(CLEAN_RESULT, None, js, SKIPPED_EXIT))
        for quiet in (False, True):
            found[f"restore follow json={js} quiet={quiet}"] = lambda js=js, quiet=quiet: (
                [report.restore_following(LOCATION, 10.0)] + report.follow_round(ROUND, js, quiet)
                + report.follow_stopped(SUMMARY, SKIPPED_EXIT))
        for dry in (False, True):
            found[f"compact dry={dry} json={js}"] = lambda dry=dry, js=js: report.compact(COMPACT_RESULT, dry, js)
            found[f"compact nothing dry={dry} json={js}"] = lambda dry=dry, js=js: report.compact(COMPACT_NOTHING, dry, js)
            found[f"expire dry={dry} json={js}"] = lambda dry=dry, js=js: report.expire(EXPIRE_RESULT, dry, js)
            found[f"expire nothing dry={dry} json={js}"] = lambda dry=dry, js=js: report.expire(EXPIRE_NOTHING, dry, js)
        for live in (False, True):
            found[f"verify ok live={live} json={js}"] = lambda live=live, js=js: report.verify(VERIFY_OK, live, js)
            found[f"verify bad live={live} json={js}"] = lambda live=live, js=js: report.verify(VERIFY_BAD, live, js)
        found[f"ls json={js}"] = lambda js=js: report.ls(LS_STATE, js)
        found[f"ls plain json={js}"] = lambda js=js: report.ls(PLAIN_STATE, js)
    found["restore nogroups"] = lambda: started(CLEAN_RESULT, False) + report.restore_summary(
        CLEAN_RESULT, [], False, SKIPPED_EXIT)
    found["backup follow"] = lambda: [report.backup_following(["orders"], None, LOCATION, 2.5),
                                      report.backup_follow_stopped(FOLLOW_RESULT)]
    return found


SCENARIOS = _scenarios()


def test_every_golden_output_has_a_scenario():
    assert sorted(SCENARIOS) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_report_prints_what_the_cli_printed(name):
    lines = SCENARIOS[name]()
    printed = {"stdout": "".join(f"{line.text}\n" for line in lines if not line.err),
               "stderr": "".join(f"{line.text}\n" for line in lines if line.err)}
    assert printed == GOLDEN[name]


def test_rate_of_no_time_is_a_dash():
    assert text.rate(10, 0) == "-"
    assert text.rate(1500, 2.0) == "750/s"
