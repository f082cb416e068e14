"""Issue #39 items 1-2: whoever can write the bucket must not make a restore touch what it did not create.

A restore's own state (start offsets, topic configs, offset maps, holes, peer objects seen) is read
only from its state store, or from a location the user names once with --import-state; topic
configs stored in the archive go through an allow-list; internal topics are restored only by name.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from archivetools import edit_saved_configs
from clitools import run_cli
from kafkatools import consume_all, produce_records, topic_exists
from nasty import nasty_records
from restoretools import HOSTILE_CONFIGS, describe
from topicvault.core.envelope import Record
from topicvault.core.stores.locations import open_store
from topicvault.source.restore import restore_state
from topicvault.source.restore.restore_state import RestoreRecords
from topicvault.source.restore.selection import Selection

BASE = 1_700_000_000_000


def _records(bootstrap: str, topic: str) -> int:
    return sum(map(len, consume_all(bootstrap, topic).values()))


@pytest.fixture
def archive_and_payments(bootstrap, spark, topic_factory, tmp_path):
    """A backup of one topic, and an unrelated live topic `payments` holding 5 records."""
    topic = topic_factory(1, prefix="src")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 50, big_values=0))
    location = tmp_path / "archive"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    payments = topic_factory(1, prefix="payments")
    produce_records(bootstrap, payments, [Record(payments, 0, 0, b"k", b"v%d" % i, BASE + i, 0, ()) for i in range(5)])
    return topic, location, payments


def plant_state(directory: Path, restore_id: str, bootstrap: str, topic: str, target: str, start: int) -> Path:
    """A restore state as an older version kept it in the archive, aimed at `target` (not created by it)."""
    directory.mkdir(parents=True)
    (directory / "state.json").write_text(json.dumps({
        "restore_id": restore_id, "target_bootstrap": bootstrap, "topic_map": {topic: target},
        "start_offsets": {f"{target}:0": start}, "selection": Selection().to_json(),
        "topic_configs": {target: {"retention.ms": "1", "cleanup.policy": "compact"}},
        "source_starts": {f"{topic}:0": 0}, "created_ms": 1,
    }))
    return directory


def test_a_restore_state_planted_in_the_archive_is_never_read(bootstrap, archive_and_payments):
    topic, location, payments = archive_and_payments
    plant_state(location / "_topicvault" / "restores" / "evil", "evil", bootstrap, topic, payments, 5)
    configs = describe(bootstrap, payments)
    args = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={payments}"]

    # A plain restore into the non-empty topic is refused, and does not suggest the planted id.
    out = run_cli(*args, expect_exit=1)
    assert "already holds records" in out and "evil" not in out, out
    # Naming the planted id does not make its state this restore's: refused, saying how to import it.
    out = run_cli(*args, "--restore-id", "evil", expect_exit=1)
    assert "not read unless" in out and f"--import-state {location}/_topicvault/restores/evil " in out, out
    assert _records(bootstrap, payments) == 5
    assert describe(bootstrap, payments) == configs


def test_an_imported_state_sets_configs_only_on_topics_the_restore_created(bootstrap, archive_and_payments):
    topic, location, payments = archive_and_payments
    planted = plant_state(location / "_topicvault" / "restores" / "evil", "evil", bootstrap, topic, payments, 5)
    configs = describe(bootstrap, payments)
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={payments}",
                  "--restore-id", "evil", "--import-state", str(planted))
    # The user named it: its start offsets are taken (the records go after the 5), but it did not
    # create payments (it began writing at offset 5), so the configs it names are not set there.
    assert "imported" in out and f"{payments}: not created by restore evil" in out, out
    assert _records(bootstrap, payments) == 55
    assert describe(bootstrap, payments) == configs
    # Imported once: a second import of the same id is refused, the state store's copy stays.
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={payments}",
                  "--restore-id", "evil", "--import-state", str(planted), expect_exit=1)
    assert "already has a state" in out


def test_restores_into_lists_only_the_state_stores_restores(bootstrap, archive_and_payments, restore_state_dir):
    topic, location, payments = archive_and_payments
    plant_state(location / "_topicvault" / "restores" / "evil", "evil", bootstrap, topic, payments, 5)
    records = RestoreRecords(open_store(str(restore_state_dir)), open_store(str(location)))
    assert restore_state.restores_into(records, bootstrap, payments) == []
    assert restore_state.load_restore_state(records, "evil") is None


def test_a_restore_sets_only_allowed_configs_and_prints_what_it_skips(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="cfgs")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 30, big_values=0))
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    edit_saved_configs(location, topic, HOSTILE_CONFIGS)
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert describe(bootstrap, f"{topic}-r") == {"message.timestamp.type": "LogAppendTime",
                                                 "cleanup.policy": "compact", "retention.ms": "-1"}
    [applied] = [line for line in out.splitlines() if "saved configs set" in line]
    [skipped] = [line for line in out.splitlines() if "saved configs not set" in line]
    assert "cleanup.policy=compact" in applied and "unclean.leader.election.enable=true" in skipped, out
    assert "max.message.bytes=1 (below" in skipped and "segment.ms=1000" in skipped, out


def test_internal_topics_are_restored_only_when_named(bootstrap, spark, topic_factory, tmp_path):
    plain = topic_factory(1, prefix="plain")
    internal = topic_factory(1, prefix="__internal")
    for topic in (plain, internal):
        produce_records(bootstrap, topic, nasty_records(topic, 1, 10, big_values=0))
    location = tmp_path / "b"
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", plain, "-t", internal)
    renames = ["--rename", f"{plain}={plain}-r", "--rename", f"{internal}={internal}-r"]
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{plain}={plain}-r")
    assert f"left out internal topic {internal}" in out and "--topic" in out, out
    assert _records(bootstrap, f"{plain}-r") == 10 and not topic_exists(bootstrap, f"{internal}-r")
    out = run_cli("restore", "--from", str(location), "-b", bootstrap, "-t", internal, *renames[2:])
    assert _records(bootstrap, f"{internal}-r") == 10
    # A --rename names it too.
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{plain}={plain}-r2",
            "--rename", f"{internal}={internal}-r2")
    assert _records(bootstrap, f"{plain}-r2") == 10 and _records(bootstrap, f"{internal}-r2") == 10
