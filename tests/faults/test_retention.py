"""Issue 33.3.5: time retention deletes segments while a backup reads them and between backups,
under live traffic; the lost offsets are recorded, and `ls`, `verify` and `restore` name them.

The retention check runs every second here (a broker setting: this test runs its own one-node
cluster) and the topic rolls a segment a second. It keeps records an hour, except when the test
strikes: then retention.ms drops to 2 s until the log start has passed the offsets it aims at
(a Spark start under load takes longer than any fixed short retention would keep its records).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from clitools import cli_process, frozen, run_cli
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec
from kafkatools import LiveTraffic, consume_all, create_topic
from topicvault.core.local.local_kafka import LocalKafka

KEEP_MS, STRIKE_MS = "3600000", "2000"
PARTITIONS = (0, 1)


@pytest.fixture(scope="module")
def retaining_kafka(tmp_path_factory):
    """One node whose log cleaner looks for segments past retention every second."""
    kafka = LocalKafka(nodes=1, heap="384m", folder=tmp_path_factory.mktemp("kafka-retention"),
                       config={"log.retention.check.interval.ms": "1000"})
    try:
        yield kafka.start(timeout_s=180)
    finally:
        kafka.stop()


def log_starts(bootstrap: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): OffsetSpec.earliest() for p in PARTITIONS}
    return {tp.partition: future.result(15).offset for tp, future in admin.list_offsets(asked).items()}


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in PARTITIONS}
    return {tp.partition: future.result(15).offset for tp, future in admin.list_offsets(asked).items()}


def set_retention(bootstrap: str, topic: str, retention_ms: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", retention_ms, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def retention_strikes(bootstrap: str, topic: str, past: dict[int, int]) -> None:
    """Time retention deletes each partition's segments up to past the offset given."""
    set_retention(bootstrap, topic, STRIKE_MS)
    try:
        wait_for(lambda: all(log_starts(bootstrap, topic)[p] > past[p] for p in PARTITIONS),
                 f"retention deleting {topic} past {past}")
    finally:
        set_retention(bootstrap, topic, KEEP_MS)


def wait_for(condition, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.3)


def commits(location: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((location / "_topicvault" / "commits").glob("*.json"))]


def ranges_of(location: Path, kind: str) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the archived ("ranges") or lost ("lost") offset ranges of every commit."""
    found: dict[int, list[tuple[int, int]]] = {p: [] for p in PARTITIONS}
    for commit in commits(location):
        for r in commit.get(kind) or []:
            found[r["partition"]].append((r["start"], r["end"]))
    return found


def test_retention_deleting_segments_during_and_between_backups_is_recorded_and_reported(
        retaining_kafka, spark, tmp_path):
    bootstrap = retaining_kafka.bootstrap
    topic = create_topic(bootstrap, f"retained-{uuid.uuid4().hex[:8]}", len(PARTITIONS),
                         {"retention.ms": KEEP_MS, "segment.ms": "1000"})
    location = tmp_path / "b"
    log = tmp_path / "backup.log"
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic:
        wait_for(lambda: traffic.count() >= 4000, "4000 records of live traffic")
        # A backup whose consumer holds about one batch ahead of what it wrote (so that the
        # broker, not its read-ahead, serves the offsets deleted while it is stopped).
        slow_reads = [f"-X{setting}" for setting in ("message.max.bytes=1000", "fetch.max.bytes=1000",
                                                     "max.partition.fetch.bytes=1000", "queued.max.messages.kbytes=1")]
        with cli_process(["backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "200",
                          "--master", "local[1]", *slow_reads], log) as backup:
            wait_for(lambda: any(location.rglob("*.parquet")) or backup.poll() is not None, "a first object", 180)
            with frozen(backup):
                assert backup.poll() is None, log.read_text()[-3000:]
                planned_below = high_watermarks(bootstrap, topic)  # the backup planned no further than this
                retention_strikes(bootstrap, topic, planned_below)
            assert backup.wait(180) == 0, log.read_text()[-3000:]
        first = log.read_text()
        assert "retention" in first, first[-3000:]
        read_first = {p: ranges[0][1] for p, ranges in ranges_of(location, "ranges").items()}

        # The next backup records what retention deleted after the first one's read stopped.
        second = run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
        lost = ranges_of(location, "lost")
        for p in PARTITIONS:
            assert lost[p] and lost[p][0][0] == read_first[p], (lost, read_first)
            assert f"offsets {lost[p][0][0]}..{lost[p][0][1] - 1} were deleted by retention" in second, second
        # Retention deletes more between this backup and the next.
        ended = {p: ranges[-1][1] for p, ranges in ranges_of(location, "ranges").items()}
        wait_for(lambda: all(high > ended[p] + 100 for p, high in high_watermarks(bootstrap, topic).items()),
                 "records written after the second backup")
        retention_strikes(bootstrap, topic, ended)
        run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    assert not traffic.failed, traffic.failed[:3]
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)  # to the end of the traffic

    lost, archived = ranges_of(location, "lost"), ranges_of(location, "ranges")
    starts, ends = log_starts(bootstrap, topic), high_watermarks(bootstrap, topic)
    notes = []
    for p in PARTITIONS:
        assert len(lost[p]) == 2 and lost[p][1][0] == ended[p], lost
        # The commits' ranges run on from the archive's first offset to the log's end (a lost range
        # lies inside the range of the backup that found it), and what is called lost really is gone.
        tiles = archived[p]
        assert all(a[1] == b[0] for a, b in zip(tiles, tiles[1:])) and tiles[-1][1] == ends[p], tiles
        assert all(end <= starts[p] for _, end in lost[p])
        notes += [f"{topic}[{p}]: offsets {start}..{end - 1} were deleted by retention" for start, end in lost[p]]

    listing = run_cli("ls", str(location))
    checked = run_cli("verify", str(location))
    assert checked.strip().splitlines()[-1].startswith("ok:"), checked
    restored = run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r",
                       "--no-configs")
    for note in notes:
        assert f"lost: {note}" in listing, listing
        assert note.split(" were")[0] in checked, checked
        assert f"note: {note}" in restored, restored

    # The restore holds exactly the records the archive kept, as the producer wrote them; those
    # still in the source log also with their timestamps.
    source = consume_all(bootstrap, topic)
    target = consume_all(bootstrap, f"{topic}-r")
    for p in PARTITIONS:
        acked = dict(traffic.acked[p])
        gone = {offset for start, end in lost[p] for offset in range(start, end)}
        kept = [offset for start, end in archived[p] for offset in range(start, end) if offset not in gone]
        assert [r.value for r in target[p]] == [acked[offset] for offset in kept]
        assert all(r.headers == (("n", r.value.split(b"-")[2]), ("n", None)) for r in target[p])
        still = {r.offset: r for r in source[p]}
        pairs = [(still[o], r) for o, r in zip(kept, target[p]) if o in still]
        assert pairs and all((s.key, s.value, s.headers, s.timestamp_ms) == (r.key, r.value, r.headers, r.timestamp_ms)
                             for s, r in pairs)
