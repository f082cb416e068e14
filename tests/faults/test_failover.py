"""Issue 33.3, items 1, 2, 3 and 11: brokers lost in the middle of a backup or a restore, under live traffic.

Each test fills a replicated topic (four partitions, tens of thousands of records) and strikes
from observed progress, while a producer keeps writing to the source: a backup is stopped (SIGSTOP)
at its first object while the leader dies, a restore is paced (--max-records-per-second) and hit
once its target holds a first part, so the fault lands mid-run however fast the machine is. Each
ends in an exact restore (what a read_committed consumer sees of the source, record for record,
offsets included) or in a one-line refusal after which a rerun finishes exactly.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from clitools import cli_process, frozen
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafkatools import LiveTraffic, consume_all, produce_records
from nasty import nasty_records
from topicvault.cli import app
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.errors import TopicvaultError
from topicvault.sink.backup import BackupJob
from topicvault.sink.continuous_backup import ContinuousBackupRequest, run_follow
from topicvault.source.restore.restore_job import RestoreJob
from topicvault.source.restore.restore_plan import RestoreRequest
from topicvault.source.restore.standby import StandbyRequest, follow_restore
from topicvault.source.restore.throttle import RateLimit
from typer.testing import CliRunner

PARTITIONS = (0, 1, 2, 3)
PER_PARTITION = 10_000
# Live traffic beside a follow: about 200 records a second, which a loaded 2-core machine backs up
# as they come (at 4,000 a second the follow never caught up on the traffic of the waits).
FOLLOWED_PAUSE_S = 0.2


# --- helpers --------------------------------------------------------------------------------------------------


def exact(records) -> list[tuple]:
    """Everything a restore into a new topic must keep, offsets included."""
    return [(r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type) for r in records]


def view(bootstrap: str, topic: str) -> dict[int, list[tuple]]:
    """The topic as a read_committed consumer sees it, record for record."""
    return {p: exact(records) for p, records in consume_all(bootstrap, topic).items()}


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:  # a hang detector, not a speed check
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def objects(location: Path) -> list[Path]:
    """The data objects a backup stored so far (committed or not)."""
    return [p for p in location.rglob("*.parquet") if "_topicvault" not in p.parts]


def records_in(bootstrap: str, topic: str) -> int:
    """The records a topic holds now (sum of its high watermarks; 0 while it does not exist)."""
    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=10)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        return 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 0})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in metadata.topics[topic].partitions)
    except Exception:  # noqa: BLE001 - a partition without a leader just now: not counted yet
        return 0
    finally:
        consumer.close()


class Background:
    """`fn(*args)` on a thread: `.done`, and `.result()` waits and returns it (or raises what it raised)."""

    def __init__(self, fn, *args) -> None:
        self.value, self.error = None, None

        def run() -> None:
            try:
                self.value = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self, timeout_s: float):
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"still running after {timeout_s:.0f} s"
        if self.error is not None:
            raise self.error
        return self.value


def cli(*args: str) -> tuple[int, str]:
    """Run `topicvault ARGS` in this process (sharing the session's Spark): (exit code, output)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def one_line_refusal(output: str) -> str:
    """The single `error:` line of a failed run (and no traceback)."""
    lines = [line for line in output.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in output, output
    assert not lines[0].startswith("error: unexpected"), lines[0]  # a reason, not an exception's type
    return lines[0]


def filled_topic(topic_factory, bootstrap: str, prefix: str) -> str:
    """A replicated topic of four partitions holding PER_PARTITION varied records each."""
    topic = topic_factory(len(PARTITIONS), prefix=prefix)
    produce_records(bootstrap, topic, nasty_records(topic, len(PARTITIONS), PER_PARTITION, big_values=0))
    return topic


def wait_for_new_leader(cluster, topic: str, partition: int, old: int, timeout_s: float = 60) -> None:
    wait_for(lambda: cluster.leader(topic, partition) not in (old, -1), timeout_s,
             f"a new leader of {topic}[{partition}]")


def keeps_writing(traffic: LiveTraffic, more: int = 200, timeout_s: float = 60) -> None:
    """The live producer gets `more` records acknowledged (the cluster takes writes again)."""
    before = traffic.count()
    wait_for(lambda: traffic.count() >= before + more, timeout_s, "the live producer to be acknowledged again")


# --- 1. the leader of a partition being read is killed ------------------------------------------------------


def test_a_backup_whose_read_leader_is_killed_ends_exact(cluster, spark, topic_factory, tmp_path):
    bootstrap = cluster.bootstrap
    topic = filled_topic(topic_factory, bootstrap, "kill-read")
    location, log = tmp_path / "archive", tmp_path / "backup.log"
    backup = ["backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--max-records", "500",
              "--records-per-task", "2500"]
    # Sixteen tasks, one at a time (local[1]): at the first object fifteen are still to read, and the
    # run is stopped there while the leader dies, so the fault lands mid-backup on any machine.
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic, \
            cli_process([*backup, "--master", "local[1]"], log) as run:
        wait_for(lambda: objects(location) or run.poll() is not None, 180, "the backup's first objects")
        with frozen(run):
            assert run.poll() is None, f"the backup ended before its first object was seen: {log.read_text()}"
            victim, at_fault = cluster.leader(topic, 0), len(objects(location))
            cluster.kill(victim)
        status = run.wait(180)
        keeps_writing(traffic)
    assert not traffic.failed
    output = log.read_text()
    print(f"backup with leader {victim} killed at object {at_fault} of 80: exit {status}\n{output}")
    if status != 0:
        one_line_refusal(output)
    cluster.restart(victim)  # a restore creates its topic with the source's three replicas
    status, output = cli(*backup)  # continues from the last commit: the traffic's records, or the rest
    assert status == 0, output
    source = view(bootstrap, topic)
    assert sum(map(len, source.values())) > len(PARTITIONS) * PER_PARTITION
    target = f"{topic}-r"
    status, output = cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}")
    assert status == 0, output
    assert view(bootstrap, target) == source


def test_a_follow_micro_batch_whose_read_leader_is_killed_ends_exact(cluster, spark, topic_factory, tmp_path):
    bootstrap = cluster.bootstrap
    topic = filled_topic(topic_factory, bootstrap, "kill-follow")
    location = tmp_path / "archive"
    found: dict = {}

    def fault(follow: Follow) -> None:
        with LiveTraffic(bootstrap, topic, PARTITIONS, pause_s=FOLLOWED_PAUSE_S) as traffic:
            # Micro-batches of 4,000 records over a backlog of 40,000: after the first commit, the
            # next batches read back to back; the kill lands in one of them.
            follow.wait(lambda: len(commit_files(location)) >= 2, "the follow's first micro-batch", before_fault=True)
            found["victim"] = victim = cluster.leader(topic, 0)
            cluster.kill(victim)
            wait_for_new_leader(cluster, topic, 0, victim)
            keeps_writing(traffic)
        assert not traffic.failed
        found["source"] = source = view(bootstrap, topic)
        ends = {p: records[-1][0] + 1 for p, records in source.items()}
        follow.wait(lambda: committed_ends(location, topic) == ends, f"the follow to back up every record ({ends})",
                    timeout_s=240)

    follow = Follow(spark, BackupJob(KafkaSettings.of(bootstrap), str(location)), topic, fault)
    print(f"backup --follow with leader {found['victim']} killed: {follow.outcome}\n" + "\n".join(follow.lines))
    cluster.restart(found["victim"])
    status, output = cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)  # continues if it stopped
    assert status == 0, output
    target = f"{topic}-r"
    status, output = cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}")
    assert status == 0, output
    assert view(bootstrap, target) == found["source"]


class Follow:
    """`backup --follow` of one topic (micro-batches of at most 4,000 records, one a second) run in this
    thread, as Spark needs (it looks its data sources up in the thread that starts the query), while
    `fault(follow)` runs on another; the follow stops once `fault` returns or fails, or by itself.
    `.outcome` says whether it went on or stopped (a one-line reason), `.lines` what it reported."""

    def __init__(self, spark, job: BackupJob, topic: str, fault) -> None:
        self.lines: list[str] = []
        self.stop, self.over = threading.Event(), threading.Event()
        actor = Background(self._act, fault)
        try:
            run_follow(spark, job, ContinuousBackupRequest((topic,), None, 1.0, 4_000), self.stop.is_set, self.lines.append)
            self.outcome = "went on"
        except TopicvaultError as exc:
            self.outcome = f"stopped: {exc}"
            assert "\n" not in str(exc), str(exc)
        except BaseException as exc:
            self.outcome = f"failed: {exc!r}"
            raise
        finally:
            self.over.set()
        actor.result(300)

    def _act(self, fault) -> None:
        try:
            fault(self)
        finally:
            self.stop.set()

    def wait(self, condition, what: str, timeout_s: float = 150, before_fault: bool = False) -> None:
        """Wait for `condition` while the follow runs (or until it stopped: a one-line stop after
        the fault is an outcome; before it, a failure)."""
        try:
            wait_for(lambda: condition() or self.over.is_set(), timeout_s, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the follow reported: {self.lines}") from None
        assert not (before_fault and self.over.is_set()), \
            f"the follow stopped before {what}: {getattr(self, 'outcome', None)} {self.lines}"


def commit_files(location: Path) -> list[Path]:
    folder = location / "_topicvault" / "commits"
    return sorted(folder.glob("*.json")) if folder.exists() else []


def committed_ends(location: Path, topic: str) -> dict[int, int]:
    """The end of the committed ranges of each partition of the topic."""
    import json

    ends: dict[int, int] = {}
    for path in commit_files(location):
        for entry in json.loads(path.read_text()).get("ranges", []):
            if entry["topic"] == topic:
                ends[entry["partition"]] = max(ends.get(entry["partition"], 0), entry["end"])
    return ends


# --- 2. the leader of a partition being written is killed ---------------------------------------------------


def archived_topic(cluster, topic_factory, tmp_path, prefix: str) -> tuple[str, Path, dict[int, list[tuple]]]:
    """A filled topic backed up to a fresh location, and what the archive holds (the topic as it was)."""
    bootstrap = cluster.bootstrap
    topic = filled_topic(topic_factory, bootstrap, prefix)
    location = tmp_path / "archive"
    status, output = cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    assert status == 0, output
    return topic, location, view(bootstrap, topic)


# A paced restore of 40,000 records takes 20 s at least: the fault lands after its first 2,000 whatever
# the machine's speed (unpaced, a quiet machine restored them all before the test saw the first).
PACE = ("--max-records-per-second", "2000")


def restore_under_way(bootstrap: str, target: str, restore: tuple[str, ...] | list[str]) -> Background:
    """`restore` (paced) run in this process, once its target holds a first part of what it writes."""
    run = Background(cli, *restore)
    wait_for(lambda: records_in(bootstrap, target) >= 2_000 or run.done, 120, "the restore's first records")
    assert not run.done, f"the restore ended before its first records were seen: {run.value}"
    return run


def test_a_restore_whose_write_leader_is_killed_ends_exact(cluster, spark, topic_factory, tmp_path):
    bootstrap = cluster.bootstrap
    topic, location, archived = archived_topic(cluster, topic_factory, tmp_path, "kill-write")
    target = f"{topic}-r"
    restore = ("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
               "--restore-id", f"kill-write-{uuid.uuid4().hex[:6]}", *PACE)
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic:
        run = restore_under_way(bootstrap, target, restore)
        victim = cluster.leader(target, 0)
        cluster.kill(victim)
        status, output = run.result(400)
        keeps_writing(traffic)
    assert not traffic.failed
    print(f"restore with leader {victim} killed: exit {status}\n{output}")
    if status != 0:
        one_line_refusal(output)
        prefix_only(view(bootstrap, target), archived)
        status, output = cli(*restore)
        assert status == 0, output
    assert view(bootstrap, target) == archived


def prefix_only(restored: dict[int, list[tuple]], archived: dict[int, list[tuple]]) -> None:
    """After a stopped restore each target partition holds a prefix of its source: nothing wrong written."""
    for partition, records in restored.items():
        assert records == archived[partition][:len(records)], f"partition {partition} is not a prefix"


class Standby:
    """follow_restore on a thread of this process, stopped by an event; its rounds as they end."""

    def __init__(self, spark, bootstrap: str, location: Path, renames: dict[str, str], restore_id: str) -> None:
        self.rounds: list = []
        self.stop = threading.Event()
        # Paced as PACE: a round of 40,000 records takes 20 s, so the fault lands in it.
        job = RestoreJob(KafkaSettings.of(bootstrap), str(location), rate=RateLimit(records_per_s=2_000))
        request = StandbyRequest(RestoreRequest(renames=renames, restore_id=restore_id), poll_interval_s=0.5)
        self.run = Background(follow_restore, spark, job, request, self.stop, self.rounds.append)

    def finish(self, timeout_s: float = 180):
        self.stop.set()
        return self.run.result(timeout_s)


def test_a_restore_follow_round_whose_write_leader_is_killed_ends_exact(cluster, spark, topic_factory, tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(len(PARTITIONS), prefix="kill-standby")
    produce_records(bootstrap, topic, nasty_records(topic, len(PARTITIONS), 500, big_values=0))
    location = tmp_path / "archive"
    backup = ("backup", "-b", bootstrap, "--to", str(location), "-t", topic)
    assert cli(*backup)[0] == 0
    target, restore_id = f"{topic}-standby", f"standby-{uuid.uuid4().hex[:6]}"
    standby = Standby(spark, bootstrap, location, {topic: target}, restore_id)
    wait_for(lambda: standby.rounds or standby.run.done, 150, "the standby's first round")
    assert not standby.run.done, repr(standby.run.error)
    produce_records(bootstrap, topic, nasty_records(topic, len(PARTITIONS), PER_PARTITION, seed=2, big_values=0))
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic:
        status, output = cli(*backup)  # the next commit: a round of 40,000 records
        assert status == 0, output
        wait_for(lambda: records_in(bootstrap, target) >= 2_000 + 4 * 500 or standby.run.done, 120,
                 "the standby's second round to write")
        assert len(standby.rounds) == 1 and not standby.run.done, "the round ended before the fault"
        victim = cluster.leader(target, 0)
        cluster.kill(victim)
        wait_for(lambda: len(standby.rounds) >= 2 or standby.run.done, 400, "the round to end")
        keeps_writing(traffic)
    assert not traffic.failed
    if standby.run.done:  # the round failed: a one-line reason, then a restart with the same id continues
        error = standby.run.error
        print(f"restore --follow with leader {victim} killed: stopped: {error!r}")
        assert isinstance(error, TopicvaultError) and "\n" not in str(error), repr(error)
        standby = Standby(spark, bootstrap, location, {topic: target}, restore_id)
    else:
        print(f"restore --follow with leader {victim} killed: went on: {standby.rounds[-1].line()}")
    cluster.restart(victim)
    assert cli(*backup)[0] == 0  # the live traffic's records
    source = view(bootstrap, topic)
    total = sum(map(len, source.values()))
    wait_for(lambda: records_in(bootstrap, target) >= total or standby.run.done, 180, "the standby to catch up")
    standby.finish()
    assert view(bootstrap, target) == source


# --- 3. two of three brokers stopped during a restore -------------------------------------------------------


# Found by this test (fixed): with two of three nodes down the controller quorum is lost, so the surviving
# leader can neither replicate nor shrink its ISR; it appends what the restore sends above its high watermark
# and the deliveries time out. librdkafka answered a record timed out in its queue by bumping the idempotent
# producer's epoch and numbering the records it still held afresh, among them retries of requests the
# leader had appended: under the new epoch the leader appended them again, and once the nodes returned
# both copies were committed (the first run alone wrote partition 0 with a gap and copies: 22 epochs of
# one producer, source records 3,400..3,999 twice). The restore producer now has no message timeout
# (kafka_writer.restore_producer): a retry keeps its epoch and sequence, so what lands is a prefix of
# what was sent, and -X message.timeout.ms bounds the restore's own wait for deliveries that make no
# progress (kafka_writer.DeliveryWatch). Asserted below: after the restart, before any rerun, the target
# holds a prefix of the archive.


@pytest.mark.parametrize("message_timeout_ms", [None, 8_000], ids=["waits", "stops"])
def test_a_restore_with_two_of_three_brokers_stopped_ends_identical(cluster, spark, topic_factory, tmp_path,
                                                                    message_timeout_ms):
    """With the producer's default delivery timeout (5 minutes) the restore waits the outage out; with a short
    one it stops resumably, a rerun during the outage refuses with one line, what the target holds after the
    restart is a prefix of the archive, and a rerun with its restore id ends identical."""
    bootstrap = cluster.bootstrap
    topic, location, archived = archived_topic(cluster, topic_factory, tmp_path, "two-down")
    target = f"{topic}-r"
    restore = ["restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={target}",
               "--restore-id", f"two-down-{uuid.uuid4().hex[:6]}", *PACE]
    if message_timeout_ms:
        restore += ["-X", f"message.timeout.ms={message_timeout_ms}"]
    started = time.monotonic()
    with LiveTraffic(bootstrap, topic, PARTITIONS) as traffic:
        run = restore_under_way(bootstrap, target, restore)
        kept = cluster.leader(target, 0)
        stopped = [node.node_id for node in cluster.members if node.node_id != kept]
        for node_id in stopped:
            cluster.kill(node_id)
        killed = time.monotonic()
        if message_timeout_ms:
            status, output = run.result(120)
            print(f"restore with nodes {stopped} stopped: exit {status} after {time.monotonic() - killed:.0f} s\n"
                  f"{output}")
            assert status != 0, output
            one_line_refusal(output)
            # A rerun during the outage refuses too, writing nothing.
            rerun = time.monotonic()
            again, refused = Background(cli, *restore).result(120)
            print(f"rerun with nodes {stopped} still stopped: exit {again} after {time.monotonic() - rerun:.0f} s\n"
                  f"{refused}")
            assert again != 0, refused
            one_line_refusal(refused)
        else:
            time.sleep(15)  # the outage, while the restore waits
            assert not run.done, run.value
        restarting = time.monotonic()
        for node_id in stopped:
            cluster.restart(node_id)
        print(f"nodes {stopped} restarted in {time.monotonic() - restarting:.0f} s")
        if not message_timeout_ms:
            status, output = run.result(300)
        keeps_writing(traffic)
    # Stopped until the restore gave up, the outage can outlast the live producer's own delivery
    # timeout: its lost records are its own, not the restore's.
    assert not traffic.failed or message_timeout_ms
    print(f"restore with nodes {stopped} stopped: exit {status}\n{output}")
    if status != 0:
        one_line_refusal(output)
        # What the stopped run left, committed now that the followers copied it: nothing twice, no gap.
        prefix_only(view(bootstrap, target), archived)
        rerun = time.monotonic()
        status, output = cli(*restore)
        assert status == 0, output
        print(f"rerun after the restart: {time.monotonic() - rerun:.0f} s")
    assert view(bootstrap, target) == archived
    print(f"took {time.monotonic() - started:.0f} s from the restore's start")


# --- 11. a broker restarted while backup --follow and restore --follow run ----------------------------------


def restart_gracefully(cluster, node_id: int) -> None:
    """Stop a node as an operator's rolling restart does (SIGTERM: controlled shutdown), then start it again."""
    node = cluster.node(node_id)
    node.process.terminate()
    node.process.wait(90)
    cluster.restart(node_id, timeout_s=180)


def test_a_broker_restarted_under_backup_follow_and_restore_follow_ends_exact(cluster, spark, topic_factory,
                                                                             tmp_path):
    bootstrap = cluster.bootstrap
    topic = topic_factory(len(PARTITIONS), prefix="restart")
    produce_records(bootstrap, topic, nasty_records(topic, len(PARTITIONS), 2_500, big_values=0))
    location = tmp_path / "archive"
    target, restore_id = f"{topic}-standby", f"restart-{uuid.uuid4().hex[:6]}"
    found: dict = {}

    def fault(follow: Follow) -> None:
        with LiveTraffic(bootstrap, topic, PARTITIONS, pause_s=FOLLOWED_PAUSE_S) as traffic:
            follow.wait(lambda: len(commit_files(location)) >= 2, "the follow's first micro-batch", before_fault=True)
            found["standby"] = standby = Standby(spark, bootstrap, location, {topic: target}, restore_id)
            wait_for(lambda: standby.rounds or standby.run.done, 150, "the standby's first round")
            assert not standby.run.done, repr(standby.run.error)
            found["victim"] = victim = cluster.leader(topic, 0)
            restart_gracefully(cluster, victim)
            rounds, commits = len(standby.rounds), len(commit_files(location))
            follow.wait(lambda: (len(standby.rounds) >= rounds + 2 and len(commit_files(location)) >= commits + 2)
                        or standby.run.done, "rounds and commits after the restart")
            keeps_writing(traffic)
        assert not traffic.failed
        found["source"] = source = view(bootstrap, topic)
        ends = {p: records[-1][0] + 1 for p, records in source.items()}
        follow.wait(lambda: committed_ends(location, topic) == ends, "the follow to back up every record",
                    timeout_s=240)

    follow = Follow(spark, BackupJob(KafkaSettings.of(bootstrap), str(location)), topic, fault)
    standby = found["standby"]
    print(f"node {found['victim']} restarted: backup --follow {follow.outcome}, restore --follow "
          f"{'stopped: ' + repr(standby.run.error) if standby.run.done else 'went on'}")
    assert follow.outcome == "went on" and not standby.run.done, "a follower stopped on a broker's restart"
    source = found["source"]
    total = sum(map(len, source.values()))
    wait_for(lambda: records_in(bootstrap, target) >= total or standby.run.done, 180, "the standby to catch up")
    standby.finish()
    assert view(bootstrap, target) == source


def test_the_offsets_of_a_partition_whose_leader_was_just_killed_come_from_the_new_leader(cluster, topic_factory):
    """A restore that produced everything through a failover then asks each partition's end; found with
    the leader killed mid-restore: the query went to the dead leader's handle and failed the restore
    ("Broker handle destroyed without termination") although the new leader answered a moment later."""
    from topicvault.core.cluster.kafka import metadata_consumer, watermarks
    from topicvault.core.envelope import Record

    bootstrap = cluster.bootstrap
    topic = topic_factory(1, prefix="offsets")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"v%d" % i, 1_700_000_000_000, 0, ())
                                       for i in range(10)])
    consumer = metadata_consumer(KafkaSettings.of(bootstrap))
    try:
        assert watermarks(consumer, topic, 0)[1] == 10
        cluster.kill(cluster.leader(topic, 0))
        assert watermarks(consumer, topic, 0)[1] == 10
    finally:
        consumer.close()


def test_the_offsets_planning_asks_for_while_a_leader_moves_come_from_the_new_leader(cluster, topic_factory):
    """The many-partition query of planning (ListOffsets, partition_watermarks) asks again while a leader
    moves: found in CI, where a one-node broker answered UNKNOWN_LEADER_EPOCH for a topic made a moment
    before and the backup stopped ("cannot read offsets of moved[0]")."""
    from topicvault.core.cluster.kafka import partition_watermarks
    from topicvault.core.envelope import Record

    bootstrap = cluster.bootstrap
    topic = topic_factory(1, prefix="plan-offsets")
    produce_records(bootstrap, topic, [Record(topic, 0, 0, b"k", b"v%d" % i, 1_700_000_000_000, 0, ())
                                       for i in range(10)])
    cluster.kill(cluster.leader(topic, 0))
    assert partition_watermarks(KafkaSettings.of(bootstrap), [(topic, 0)]) == {(topic, 0): (0, 10)}


def test_the_in_sync_replicas_on_stopped_brokers_are_found_silent(cluster, topic_factory, monkeypatch):
    """With two of three nodes stopped no controller can shrink the ISR: the metadata still lists them in it,
    so only asking each broker itself finds them (what a resumed restore checks before it counts)."""
    from observetools import record_new_clients
    from topicvault.core.cluster import cluster_admin as cluster_state
    from topicvault.core.cluster.cluster_admin import BROKER_ANSWER_TIMEOUT_S, silent_isr_brokers

    settings = KafkaSettings.of(cluster.bootstrap)
    topic = topic_factory(1, prefix="silent")
    wait_for(lambda: not silent_isr_brokers(settings, [(topic, 0)]), 30, "a healthy cluster to answer")
    kept = cluster.leader(topic, 0)
    stopped = sorted(node.node_id for node in cluster.members if node.node_id != kept)
    for node_id in stopped:
        cluster.kill(node_id)
    isr = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=20).topics[topic]
    assert sorted(isr.partitions[0].isrs) == sorted([kept, *stopped])  # the stale ISR the check must see through
    asked = record_new_clients(monkeypatch, cluster_state, ("list_topics",))
    assert silent_isr_brokers(settings, [(topic, 0)]) == {node_id: [(topic, 0)] for node_id in stopped}
    # Each listed broker of the ISR was asked at most once, by a client bootstrapped on it alone, and
    # given BROKER_ANSWER_TIMEOUT_S to answer: a stopped one costs that wait, not a metadata
    # timeout (20 s) or more.
    servers = [config["bootstrap.servers"] for config in asked.configs]
    assert len(servers) == len(set(servers)) <= 3 and not [s for s in servers if "," in s], servers
    assert [(call.client, call.timeout(0)) for call in asked.of("list_topics")] == [
        (client, BROKER_ANSWER_TIMEOUT_S) for client in range(len(servers))]
