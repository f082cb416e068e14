"""Issue 33.3.6: DeleteRecords on the source between two backups (under live traffic), and on the
target between a killed restore and its rerun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from clitools import CLI, assert_one_line_error, run_cli
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafkatools import LiveTraffic, consume_all, produce_records
from topicvault.core.envelope import Record

PARTITIONS = (0, 1)


def watermarks(bootstrap: str, topic: str, partitions=PARTITIONS) -> dict[int, tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    lows = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest() for p in partitions})
    highs = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions})
    return {tp.partition: (lows[tp].result(15).offset, highs[TopicPartition(topic, tp.partition)].result(15).offset)
            for tp in lows}


def _high_or_none(bootstrap: str, topic: str) -> int | None:
    """Partition 0's high watermark, or None while the topic is not there or has no leader yet."""
    try:
        return watermarks(bootstrap, topic, (0,))[0][1]
    except Exception:  # noqa: BLE001
        return None


def settled_watermarks(bootstrap: str, topic: str, quiet_s: float = 3.0) -> tuple[int, int]:
    """Partition 0's watermarks once unchanged for `quiet_s`: records a killed producer had sent
    are acknowledged and replicated (the high watermark moves) after it died."""
    deadline = time.monotonic() + 60
    last, since = watermarks(bootstrap, topic, (0,))[0], time.monotonic()
    while time.monotonic() - since < quiet_s:
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"{topic}[0]'s watermarks did not settle within 60 s: {last}")
        time.sleep(0.3)
        now = watermarks(bootstrap, topic, (0,))[0]
        if now != last:
            last, since = now, time.monotonic()
    return last


def delete_records(bootstrap: str, topic: str, before: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, p, o) for p, o in before.items()]).values():
        future.result(30)


def ranges_of(location: Path, kind: str) -> dict[int, list[tuple[int, int]]]:
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in PARTITIONS}
    for path in sorted((location / "_topicvault" / "commits").glob("*.json")):
        for r in json.loads(path.read_text()).get(kind) or []:
            found[r["partition"]].append((r["start"], r["end"]))
    return found


def test_records_deleted_on_the_source_between_backups_under_live_traffic_are_recorded_as_lost(
        cluster, topic_factory, spark, tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(len(PARTITIONS), prefix="deleted")
    location = tmp_path / "b"
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic:
        while traffic.count() < 600:
            time.sleep(0.05)
        run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
        first = {p: ranges[-1][1] for p, ranges in ranges_of(location, "ranges").items()}
        backed_up = consume_all(bootstrap, topic)
        while min(high for _, high in watermarks(bootstrap, topic).values()) < max(first.values()) + 300:
            time.sleep(0.05)
        # Partition 0 loses records no backup read; partition 1 only records the first backup holds.
        delete_records(bootstrap, topic, {0: first[0] + 200, 1: first[1] - 50})
        out = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    assert not traffic.failed, traffic.failed[:3]
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)

    note = f"{topic}[0]: offsets {first[0]}..{first[0] + 199} were deleted by retention"
    assert note in out, out
    assert ranges_of(location, "lost") == {0: [(first[0], first[0] + 200)], 1: []}
    assert f"lost: {note}" in run_cli("ls", str(location))
    checked = run_cli("verify", str(location))
    assert f"lost: {topic}[0]: offsets {first[0]}..{first[0] + 199}" in checked and \
        checked.strip().splitlines()[-1].startswith("ok:"), checked
    restored_out = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    assert f"note: {note}" in restored_out, restored_out

    # Exactly the records not deleted before a backup read them: partition 1 whole (its deleted
    # records were backed up first), partition 0 without the 200.
    source = consume_all(bootstrap, topic)
    restored = consume_all(bootstrap, f"{topic}-r")
    for p in PARTITIONS:
        acked = dict(traffic.acked[p])
        kept = [o for o in range(max(acked) + 1) if not (p == 0 and first[0] <= o < first[0] + 200)]
        assert [r.value for r in restored[p]] == [acked[o] for o in kept]
        known = {r.offset: r for r in backed_up[p] + source[p]}
        assert all((known[o].key, known[o].value, known[o].headers, known[o].timestamp_ms) ==
                   (r.key, r.value, r.headers, r.timestamp_ms) for o, r in zip(kept, restored[p]) if o in known)


def test_records_deleted_on_the_target_after_a_killed_restore_stop_its_rerun(cluster, topic_factory, spark, tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(1, prefix="target-deleted")
    records = [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, 0, (("n", b"%d" % i),))
               for i in range(4000)]
    produce_records(bootstrap, topic, records)
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic, "--max-records", "500")
    target = f"{topic}-r"
    # Killed once the target holds records (a crash point counts records handed to the producer:
    # killed right after, the target held none of them, as in one run of two). Throttled, so it is
    # still writing then.
    args = [CLI, "restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
            "--restore-id", "deleted-on-target", "--master", "local[1]", "--max-records-per-second", "200"]
    log = tmp_path / "restore.log"
    with open(log, "ab") as out:
        restore = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while (_high_or_none(bootstrap, target) or 0) < 500:
            assert restore.poll() is None, log.read_text()[-3000:]
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError(log.read_text()[-3000:])
            time.sleep(0.2)
    finally:
        os.killpg(restore.pid, signal.SIGKILL)  # driver, JVM and workers at once
        restore.wait(30)
    low, high = settled_watermarks(bootstrap, target)
    assert low == 0 and 500 <= high < len(records), (low, high)
    delete_records(bootstrap, target, {0: 100})

    out = run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}",
                  "--restore-id", "deleted-on-target", expect_exit=1)
    assert_one_line_error(out, f"{target}[0] now starts at offset 100", "deleted-on-target", "new topic")
    assert watermarks(bootstrap, target, (0,))[0] == (100, high)  # nothing written

    # Into a new topic with a new id it ends identical.
    run_cli("restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={topic}-again")
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in consume_all(bootstrap, f"{topic}-again")[0]] == \
        [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]
