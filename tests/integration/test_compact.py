"""`topicvault compact`: small committed objects merged byte-exact in one commit; replaced
objects deleted only after the grace period; safe under SIGKILL and beside a running follower."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from archivetools import backdate_commits, run_compact, run_expire
from clitools import CLI, assert_one_line_error, run_cli
from kafkatools import consume_all, ends_of, produce_records, produce_until, strip
from nasty import nasty_records
from topicvault.core.archive.commits import fold_commits
from topicvault.core.archive.leases import LEASE_TTL_MS, LEASES_PREFIX
from topicvault.core.crypto import write_key_file
from topicvault.core.envelope import Record
from topicvault.core.rotation import Rotation
from topicvault.core.stores.local_store import LocalStore
from topicvault.source.maintenance.compact import CompactJob
from topicvault.source.restore.restore_plan import RestoreRequest


def backed_up_in_rounds(bootstrap, topic: str, location: str, rounds: int = 4, per_round: int = 60,
                        max_records: int = 25, partitions: int = 2) -> None:
    """Back up `rounds` batches of new records, each as small objects."""
    for seed in range(rounds):
        produce_records(bootstrap, topic, nasty_records(topic, partitions, per_round, seed=seed, big_values=0))
        run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", str(max_records))


def data_files(root: Path) -> dict[str, bytes]:
    """Every object outside _topicvault/ as the store lists it (its own lock files left out)."""
    store = LocalStore(str(root))
    return {i.key: store.get(i.key) for i in store.list() if not i.key.startswith("_topicvault/")}


def live_objects(location: str):
    return [o for ps in fold_commits(LocalStore(location)).partitions.values() for o in ps.objects]


def assert_restores_exactly(bootstrap, topic: str, location: str, *extra: str) -> None:
    target = f"{topic}-r{time.monotonic_ns() % 10**8}"
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}", *extra)
    assert {p: strip(r) for p, r in consume_all(bootstrap, target).items()} == \
        {p: strip(r) for p, r in consume_all(bootstrap, topic).items()}


def test_compact_writes_what_one_backup_would_have_and_restores_exactly(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="compact")
    small, reference = tmp_path / "small", tmp_path / "reference"
    backed_up_in_rounds(bootstrap, topic, str(small), rounds=3)
    assert len(live_objects(str(small))) == 2 * 3 * 3

    files = data_files(small)
    dry = json.loads(run_cli("compact", str(small), "--max-records", "100", "--dry-run", "--json"))
    assert [(m["partition"], m["objects"], m["records"]) for m in dry["merges"]] == [(0, 9, 180), (1, 9, 180)]
    assert data_files(small) == files and dry["commit"] is None, "--dry-run wrote"
    out = run_cli("compact", str(small), "--max-records", "100", "--grace", "0s")
    assert "committed _topicvault/commits/0000000000000000004.json" in out, out
    assert len(live_objects(str(small))) == 2 * 2  # 180 records per partition in objects of 100
    assert "ok:" in run_cli("verify", str(small), "-b", bootstrap)
    # Byte for byte what one backup of the same records with --max-records 100 writes (keys differ by run id).
    run_cli("backup", "-b", bootstrap, "--to", str(reference), "-t", topic, "--max-records", "100")
    strip_run = lambda key: key.rsplit("-r", 1)[0]  # noqa: E731
    assert {strip_run(k): v for k, v in data_files(small).items()} == \
        {strip_run(k): v for k, v in data_files(reference).items()}, "merged objects differ from a backup's"
    assert_restores_exactly(bootstrap, topic, str(small))
    # Nothing left to merge: a second run commits nothing.
    assert "nothing to commit" in run_cli("compact", str(small), "--max-records", "100")


def test_replaced_objects_stay_for_the_grace_period_and_orphans_go(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="grace")
    location = tmp_path / "b"
    backed_up_in_rounds(bootstrap, topic, str(location), rounds=2, per_round=40, max_records=20, partitions=1)
    replaced = [o.key for o in live_objects(str(location))]
    orphan = location / f"topic={topic}/partition=0/{0:019d}-r0123456789ab.parquet"
    orphan.write_bytes(b"left by a killed run")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    young = location / f"topic={topic}/partition=0/{5:019d}-r0123456789ac.parquet"
    young.write_bytes(b"a running backup is about to commit me")
    foreign = location / f"topic={topic}/partition=0/notes.txt"
    foreign.write_bytes(b"not ours")
    nested = location / "nested" / f"topic={topic}/partition=0/{0:019d}-r0123456789ad.parquet"
    nested.parent.mkdir(parents=True)
    nested.write_bytes(b"another location's, inside this one")
    (location / "nested" / "_topicvault" / "commits").mkdir(parents=True)
    (location / "nested" / "_topicvault" / "commits" / f"{1:019d}.json").write_bytes(b"{}")
    for old in (foreign, nested):
        os.utime(old, (0, 0))

    # With no grace, a compact deletes what it replaces in the same run: its dry run says so too.
    planned = run_compact(CompactJob(str(location), grace_ms=0), dry_run=True)
    assert sorted(planned.collected.retired) == sorted(replaced)
    assert planned.collected.orphans == sorted(str(f.relative_to(location)) for f in (orphan, young))
    out = json.loads(run_cli("compact", str(location), "--grace", "1h", "--json"))
    assert out["replaced"] == 4 and out["written"] == 1
    assert out["deleted_orphans"] == [str(orphan.relative_to(location))] and out["deleted_retired"] == []
    assert all((location / key).exists() for key in replaced), "deleted within the grace period"
    assert young.exists() and foreign.exists() and not orphan.exists()
    # Replaced objects still there, merged ones committed: a restore reads the merged ones.
    assert_restores_exactly(bootstrap, topic, str(location))

    dry = json.loads(run_cli("compact", str(location), "--grace", "0s", "--dry-run", "--json"))
    assert sorted(dry["deleted_retired"]) == sorted(replaced)
    assert all((location / key).exists() for key in replaced), "--dry-run deleted"
    out = json.loads(run_cli("compact", str(location), "--grace", "0s", "--json"))
    assert sorted(out["deleted_retired"]) == sorted(replaced)
    assert not any((location / key).exists() for key in replaced) and not young.exists()
    assert foreign.exists() and nested.exists()
    assert "ok:" in run_cli("verify", str(location))
    assert_restores_exactly(bootstrap, topic, str(location))
    # The next compact commit makes the state forget the deleted ones: it does not grow for ever.
    backed_up_in_rounds(bootstrap, topic, str(location), rounds=1, per_round=40, max_records=20, partitions=1)
    run_cli("compact", str(location), "--grace", "1h")
    retired = fold_commits(LocalStore(str(location))).retired
    assert len(retired) == 3 and not set(replaced) & set(retired)


def run_compact_process(args: list[str], log: Path, crash_at: str | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICVAULT_CRASH_AT")}
    if crash_at:
        env["TOPICVAULT_CRASH_AT"] = crash_at
    with open(log, "ab") as out:
        process = subprocess.Popen([CLI, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                   start_new_session=True)
        return process.wait(timeout=300)


def test_compact_killed_before_during_and_after_its_commit_then_rerun(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="compact-crash")
    location = tmp_path / "b"
    backed_up_in_rounds(bootstrap, topic, str(location), rounds=3, per_round=50, max_records=10)
    commits = location / "_topicvault" / "commits"
    args = ["compact", str(location), "--max-records", "40", "--grace", "0s"]
    log = tmp_path / "compact.log"

    for point in ("backup.object:1", "backup.object:3", "compact.commit:0"):
        assert run_compact_process(args, log, point) == -9, log.read_text()[-2000:]
        assert len(list(commits.glob("*.json"))) == 3, f"crash at {point} committed"
        assert "ok:" in run_cli("verify", str(location))
    assert run_compact_process(args, log, "retire.delete:0") == -9  # committed, nothing deleted yet
    assert len(list(commits.glob("*.json"))) == 4
    assert "ok:" in run_cli("verify", str(location))
    assert run_compact_process(args, log, "retire.delete:3") == -9  # killed among the deletes
    assert "ok:" in run_cli("verify", str(location))
    assert_restores_exactly(bootstrap, topic, str(location))

    # The three compacts killed before their commit left their leases; a clock 10 minutes on
    # (their mtimes moved back) makes them expired, so their merged objects are orphans now.
    leases = list((location / "_topicvault" / "leases").iterdir())
    assert len(leases) == 3
    for lease in leases:
        os.utime(lease, (time.time() - LEASE_TTL_MS / 1000 - 1,) * 2)
    assert run_compact_process(args, log) == 0, log.read_text()[-2000:]
    assert len(list(commits.glob("*.json"))) == 4, "the rerun found nothing left to merge"
    assert not list(LocalStore(str(location)).list(LEASES_PREFIX)), "expired leases left behind"
    live = {o.key for o in live_objects(str(location))}
    assert set(data_files(location)) == live, "retired objects or orphans left behind"
    assert "ok:" in run_cli("verify", str(location), "-b", bootstrap)
    assert_restores_exactly(bootstrap, topic, str(location))


def test_compact_and_expire_beside_a_running_follower_keep_every_record(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="compact-follow")
    location = tmp_path / "b"
    log = tmp_path / "follow.log"
    done = threading.Event()

    def commit_count() -> int:
        folder = location / "_topicvault" / "commits"
        return len(list(folder.glob("*.json"))) if folder.exists() else 0

    def wait_for(condition, what: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(f"timed out waiting for {what}; see {log}")
            time.sleep(0.5)

    producer_thread = threading.Thread(target=produce_until, args=(done, bootstrap, topic, lambda i: b"k%d" % (i % 5),
                                                                  20, 0.05), daemon=True)
    producer_thread.start()
    with open(log, "ab") as out:
        follower = subprocess.Popen([CLI, "backup", "--follow", "-b", bootstrap, "--to", str(location), "-t", topic,
                                     "--flush-interval", "1", "--max-records", "50", "--master", "local[2]"],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    job = CompactJob(str(location), rotation=Rotation(max_records=400), grace_ms=3_600_000)
    compacted, expired = 0, ()
    try:
        for _ in range(2):
            seen = commit_count()
            wait_for(lambda s=seen: commit_count() >= s + 2, "two commits of the follower")
            if not expired:  # once an expire commit (before compact merges them): records older than T0 + 100 go
                backdate_commits(location, 1_700_000_000_000 - 3_600_000)  # and committed before then
                expired = run_expire(LocalStore(str(location)), 1_700_000_000_100, 3_600_000).expiries
            compacted += len(run_compact(job).replaced)  # library call: a compact commit among the micro-batches
        done.set()
        producer_thread.join(60)
        produce_records(bootstrap, topic, [Record(topic, p, 0, b"end", b"end", 1_700_000_000_000, 0, ())
                                           for p in (0, 1)])
        source = consume_all(bootstrap, topic)
        ends = ends_of(source)
        wait_for(lambda: all(fold_commits(LocalStore(str(location))).end_offset(topic, p) == e
                             for p, e in ends.items()), "the follower to reach the end")
        os.kill(follower.pid, signal.SIGTERM)  # the topicvault process only: it finishes its batch
        assert follower.wait(120) == 0, log.read_text()[-3000:]
    finally:
        done.set()
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
    assert compacted > 0
    state = fold_commits(LocalStore(str(location)))
    assert any(c for c in state.retired), "no compact commit landed"
    assert "ok:" in run_cli("verify", str(location), "-b", bootstrap)
    run_cli("compact", str(location), "--grace", "0s", "--max-records", "400")
    assert set(data_files(location)) == {o.key for o in live_objects(str(location))}
    assert all(len(source[p]) > 100 for p in (0, 1))
    starts = {p: ps.start for (_, p), ps in fold_commits(LocalStore(str(location))).partitions.items()}
    assert {e.partition: e.new_start for e in expired} == starts and all(0 < s <= 100 for s in starts.values())
    target = f"{topic}-r"
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}")
    restored = consume_all(bootstrap, target)
    for partition in (0, 1):
        assert strip(restored[partition]) == strip(r for r in source[partition] if r.offset >= starts[partition])


def test_compact_reencrypts_with_the_key_it_is_given(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="compact-key")
    location = str(tmp_path / "b")
    old, new = (tmp_path / "old.key", tmp_path / "new.key")
    write_key_file(str(old))
    write_key_file(str(new))
    produce_records(bootstrap, topic, nasty_records(topic, 1, 80, big_values=0))
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "20",
            "--encryption-key", f"file://{old}")
    # Without the key the objects cannot be read: refused before anything is written.
    assert_one_line_error(run_cli("compact", location, expect_exit=1), "encrypted with key")
    run_cli("compact", location, "--max-records", "50", "--grace", "0s",
            "--encryption-key", f"file://{new}", "--encryption-key", f"file://{old}")
    objects = live_objects(location)
    new_id = json.loads(run_cli("ls", location, "--json"))["encryption_keys"]
    assert len(objects) == 2 and len(new_id) == 1 and list(new_id.values()) == [2]
    assert all(b"TVENC" == (Path(location) / o.key).read_bytes()[:5] for o in objects)
    # The objects are all under the new key; the commit records written before stay authenticated
    # by the old one, so verify (which reads every commit) is given both, the new one first.
    assert "ok:" in run_cli("verify", location, "--encryption-key", f"file://{new}", "--encryption-key", f"file://{old}")
    assert_restores_exactly(bootstrap, topic, location, "--encryption-key", f"file://{new}",
                            "--encryption-key", f"file://{old}")


def test_compact_bad_input_is_one_line_before_anything_is_written(bootstrap, spark, topic_factory, tmp_path):
    assert_one_line_error(run_cli("compact", str(tmp_path / "none"), expect_exit=1), "no backup at")
    topic = topic_factory(1, prefix="compact-bad")
    location = tmp_path / "b"
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"v%d" % i, 1_700_000_000_000 + i, 0, ())
                                       for i in range(30)])
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "10",
            "--time-partition", "day")
    before = data_files(location)
    assert_one_line_error(run_cli("compact", str(location), "--grace", "soon", expect_exit=1), "bad --grace")
    assert_one_line_error(run_cli("compact", str(location), "--max-records", "0", expect_exit=1), "--max-records")
    assert_one_line_error(run_cli("compact", str(location), "--compression", "lz77", expect_exit=1), "lz77")
    assert_one_line_error(run_cli("compact", str(location), expect_exit=1), "--key-template")
    assert data_files(location) == before
    # With the backups' own layout, merged objects stay in their day folders.
    objects_before = len(live_objects(str(location)))
    run_cli("compact", str(location), "--time-partition", "day", "--grace", "0s")
    assert all("/date=" in o.key for o in live_objects(str(location)))
    assert len(live_objects(str(location))) < objects_before
    assert_restores_exactly(bootstrap, topic, str(location))


def test_a_restore_planned_before_a_compact_whose_grace_passed_stops_clearly_then_resumes(
        bootstrap, spark, topic_factory, tmp_path):
    from topicvault.core.cluster.kafka import KafkaSettings
    from topicvault.source.restore.restore_job import RestoreJob, plan_restore, run_restore

    topic = topic_factory(1, prefix="compact-late")
    location = str(tmp_path / "b")
    backed_up_in_rounds(bootstrap, topic, location, rounds=2, per_round=40, max_records=20, partitions=1)
    job = RestoreJob(KafkaSettings.of(bootstrap), location)
    target = f"{topic}-late"
    restore_plan = plan_restore(job, RestoreRequest((topic,), {topic: target}, "late-restore"))
    run_cli("compact", location, "--grace", "0s")  # the planned objects are retired and deleted at once
    with pytest.raises(Exception, match="named by the commit records was not found"):
        run_restore(spark, job, restore_plan)
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "late-restore")
    assert strip(consume_all(bootstrap, target)[0]) == strip(consume_all(bootstrap, topic)[0])


def test_compact_on_s3_deletes_only_what_no_commit_needs(bootstrap, spark, topic_factory, s3_uri):
    from topicvault.core.archive.checkpoints import load_state
    from topicvault.core.stores.locations import open_store

    topic = topic_factory(1, prefix="compact-s3")
    backed_up_in_rounds(bootstrap, topic, s3_uri, rounds=2, per_round=30, max_records=10, partitions=1)
    store = open_store(s3_uri)
    orphan = f"topic={topic}/partition=0/{0:019d}-r0123456789ab.parquet"
    store.put(orphan, b"written by a run that never committed")
    assert all(i.modified_ms and abs(i.modified_ms - time.time() * 1000) < 600_000 for i in store.list())

    out = json.loads(run_cli("compact", s3_uri, "--grace", "1h", "--json"))
    assert out["replaced"] == 6 and out["deleted_orphans"] == [] and out["waiting"] == 7
    out = json.loads(run_cli("compact", s3_uri, "--grace", "0s", "--json"))
    assert out["deleted_orphans"] == [orphan] and len(out["deleted_retired"]) == 6
    live = {o.key for ps in load_state(store).partitions.values() for o in ps.objects}
    assert {i.key for i in store.list() if not i.key.startswith("_topicvault/")} == live
    assert "ok:" in run_cli("verify", s3_uri, "-b", bootstrap)
    assert_restores_exactly(bootstrap, topic, s3_uri)
