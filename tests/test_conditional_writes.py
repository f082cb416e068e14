"""Stores that ignore conditional writes never lose a commit (issue #34 items 1 and 7).

Older MinIO and Ceph releases and some S3-compatible services ignore `If-None-Match: *` on
PutObject, some only on CompleteMultipartUpload: a compact that read the state before a
follower's micro-batch then wrote its commit over the follower's, and the follower's next batch
was committed across the gap (`allowOffsetGaps`). Each location is probed once; where the
condition does not hold, committers take turns (an exclusive lease made of plain writes and a
listing). Pure logic over a local directory store that drops the condition; the S3 cases run
through an HTTP proxy that drops the header in front of the S3 server.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest
from clitools import run_cli
from stores import FaultyStore
from test_maintenance_commits import T, backup, commit, entry, three_small_objects
from topicvault.core.archive import conditional_writes as cw
from topicvault.core.archive.archive_keys import CONDITIONAL_WRITES_KEY, commit_key
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commit_log import append
from topicvault.core.archive.commits import BackupState, CommitRecord, RemovedObject, fold_commits
from topicvault.core.errors import PreconditionFailed, TopicvaultError
from topicvault.core.local_store import LocalStore


def condition_dropping_store(uri: str) -> FaultyStore:
    """A directory store that ignores If-None-Match and If-Match, as some S3-compatible stores do:
    every put simply replaces the object (`.puts`: the keys put)."""
    return FaultyStore(LocalStore(uri), drop_conditions=True)




def compact_of_the_first_two(current: BackupState) -> CommitRecord:
    return CommitRecord(current.last_sequence + 1, 5, (), (entry(0, 19, "r00000000000c"),), kind="compact",
                        removed=(RemovedObject(T, 0, entry(0, 9).key), RemovedObject(T, 0, entry(10, 19).key)))


# --- the probe -------------------------------------------------------------------------------


def test_a_directory_store_honours_the_condition_and_the_answer_is_remembered(tmp_path):
    store = LocalStore(str(tmp_path / "loc"))
    found = cw.conditional_writes(store)
    assert found.holds and found.put and found.multipart is None
    assert json.loads(store.get(CONDITIONAL_WRITES_KEY))["put"] is True
    # Probe objects are removed: only the remembered answer stays under _topicvault/.
    assert [i.key for i in store.list("_topicvault/")] == [CONDITIONAL_WRITES_KEY]


def test_a_store_that_ignores_the_condition_is_found_out_once(tmp_path):
    store = condition_dropping_store(str(tmp_path / "loc"))
    found = cw.conditional_writes(store)
    assert not found.holds and not found.put
    assert "If-None-Match" in found.behaviour()
    puts = len(store.puts)
    assert cw.conditional_writes(store) == found  # read back, not probed again
    assert len(store.puts) == puts


def test_a_store_that_ignores_the_condition_only_on_multipart_uploads_is_found_out(tmp_path):
    found = cw.conditional_writes(FaultyStore(LocalStore(str(tmp_path / "loc")), drop_conditions="multipart"))
    assert found.put and found.multipart is False and not found.holds
    assert "multipart" in found.behaviour()


# --- commits in turns where the condition does not hold --------------------------------------


def test_a_compact_on_a_stale_state_never_replaces_a_followers_commit(tmp_path):
    """The reproduction of item 1: without turns the compact's commit 4 replaced the follower's."""
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    stale = load_state(store)  # the compact reads the state ...
    commit(store, state, backup(state, [entry(30, 39)], stream={"id": "f", "batch": 3}))  # ... a batch lands ...
    store.put(entry(0, 19, "r00000000000c").key, b"merged")
    record = append(store, stale, compact_of_the_first_two)
    key = record.key  # ... and the compact commits
    assert key == commit_key(5) and record.sequence == 5
    folded = fold_commits(store)
    assert [o.key for o in folded.partitions[(T, 0)].objects] == [
        entry(0, 19, "r00000000000c").key, entry(20, 29).key, entry(30, 39).key]
    assert (folded.partitions[(T, 0)].start, folded.partitions[(T, 0)].end) == (0, 40)
    assert not list(store.list(cw.COMMIT_TURNS_PREFIX))  # the turn is given back


@contextmanager
def turn_held(store) -> Iterator[threading.Event]:
    """Another committer holds the commit turn (on a thread) until the event yielded is set, or the
    block ends."""
    took_turn, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cw.CommitTurn(store):
            took_turn.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert took_turn.wait(10)
        yield release
    finally:
        release.set()
        holder.join()


def test_committers_take_turns_and_wait_for_the_one_committing(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    three_small_objects(store)
    store.put(entry(30, 39).key, b"batch")
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.05)
    with turn_held(store) as release:
        threading.Timer(1.0, release.set).start()
        started = time.monotonic()
        key = append(store, load_state(store), lambda s: backup(s, [entry(30, 39)])).key
    assert time.monotonic() - started >= 0.9  # it waited for the holder
    assert key == commit_key(4)


def test_a_turn_held_for_too_long_is_a_one_line_refusal_naming_the_store_behaviour(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    monkeypatch.setattr(cw, "TURN_WAIT_S", 0.5)
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.05)
    with turn_held(store), pytest.raises(TopicvaultError) as failed:
        append(store, state, lambda s: backup(s, [entry(30, 39)]))
    message = str(failed.value)
    assert "\n" not in message and "If-None-Match" in message and "nothing was committed" in message
    assert fold_commits(store).last_sequence == 3


def test_a_killed_committers_turn_expires_once_seen_unchanged_for_its_ttl(tmp_path, monkeypatch):
    store = condition_dropping_store(str(tmp_path / "loc"))
    state = three_small_objects(store)
    store.put(entry(30, 39).key, b"batch")
    store.put(cw.COMMIT_TURNS_PREFIX + "c0123456789ab", b'{"renewed_ms": 1}')  # a killed run's
    # The holder refuses to commit once its turn was last renewed over TTL/2 ago: with a TTL of 0.5 s
    # and the default 15 s renewals, a committer slowed by load for 0.25 s refused (flaky under load).
    # The ratio of the real settings (120 s, renewed every 15 s) is kept instead.
    monkeypatch.setattr(cw, "TURN_TTL_S", 2.0)
    monkeypatch.setattr(cw, "TURN_RENEW_S", 0.25)
    started = time.monotonic()
    key = append(store, state, lambda s: backup(s, [entry(30, 39)])).key
    assert key == commit_key(4)
    assert time.monotonic() - started >= 2.0  # it waited for the killed run's turn to expire
    assert not list(store.list(cw.COMMIT_TURNS_PREFIX))


def test_where_the_condition_holds_no_turn_is_taken(tmp_path):
    store = condition_dropping_store(str(tmp_path / "loc"))
    store.put(CONDITIONAL_WRITES_KEY, json.dumps({"put": True, "multipart": None, "probed_ms": 1}).encode())
    state = three_small_objects(store)
    store.puts.clear()
    store.put(entry(30, 39).key, b"batch")
    append(store, state, lambda s: backup(s, [entry(30, 39)]))
    assert not any(k.startswith(cw.COMMIT_TURNS_PREFIX) for k in store.puts)


# --- a micro-batch or DataFrame write never commits across a gap before its rows ---------------


def test_a_batch_whose_rows_start_past_the_committed_end_fails_whatever_allow_offset_gaps_says(tmp_path, monkeypatch):
    """The follower's next batch after its lost commit: rows from 40 onto a committed end of 30."""
    from topicvault.sink import stream
    from topicvault.sink.datasource import ObjectsWritten

    store = LocalStore(str(tmp_path / "loc"))
    three_small_objects(store)
    monkeypatch.setattr(stream, "open_store", lambda uri, options=None: store)
    writer = stream.ObjectStreamWriter({"path": store.uri, "streamId": "f", "allowOffsetGaps": "true"})
    store.put(entry(40, 49).key, b"batch")
    with pytest.raises(TopicvaultError) as failed:
        writer.commit([ObjectsWritten([entry(40, 49)])], 4)
    message = str(failed.value)
    assert "\n" not in message and "30..39" in message and "nothing was committed" in message
    assert fold_commits(store).last_sequence == 3


# --- item 7: a commit whose reply was lost -----------------------------------------------------


def reply_lost(key: str, data: bytes) -> None:
    """The commit record lands, but its reply is lost: the retried put finds the object there
    (PreconditionFailed)..."""
    if key.startswith("_topicvault/commits/"):
        raise PreconditionFailed(f"conditional write of {key} failed (PreconditionFailed)")


def confirming_read_fails(key: str) -> None:
    """...and the read that would confirm it is ours fails too."""
    if key.startswith("_topicvault/commits/"):
        raise TopicvaultError(f"S3 endpoint timed out on {key}: raise store option read_timeout")


def test_a_commit_whose_reply_and_confirming_read_were_lost_says_the_outcome_is_unknown(tmp_path):
    store = FaultyStore(LocalStore(str(tmp_path / "loc")), after_put=reply_lost, before_get=confirming_read_fails)
    store.put(entry(0, 9).key, b"objects")
    with pytest.raises(TopicvaultError) as failed:
        append(store, BackupState(), lambda s: backup(s, [entry(0, 9)]))
    message = str(failed.value)
    assert "\n" not in message and "nothing" not in message
    assert "unknown" in message and "safe" in message
    assert LocalStore(store.uri).head(commit_key(1)) is not None  # it was committed


# --- S3 through a proxy that drops the condition ------------------------------------------------


@pytest.mark.parametrize("dropped, put, multipart", [("", True, True), ("all", False, False),
                                                     ("multipart", True, False)])
def test_the_probe_tells_what_an_s3_store_does_with_each_upload_path(s3_endpoint, s3_uri, dropped, put, multipart):
    from faultproxy import FaultProxy
    from topicvault.core.s3_store import S3Store

    with FaultProxy(s3_endpoint, drop_conditions=dropped) as proxy:
        store = S3Store(s3_uri, {"endpoint_url": proxy.url})
        found = cw.conditional_writes(store)
        assert (found.put, found.multipart) == (put, multipart)
        assert (proxy.dropped > 0) == bool(dropped)
    assert [i.key for i in S3Store(s3_uri).list("_topicvault/")] == [CONDITIONAL_WRITES_KEY]


def test_dataframe_rows_past_the_committed_end_commit_only_over_the_topics_own_gaps(bootstrap, spark, topic_factory,
                                                                                    tmp_path):
    from kafkatools import consume_all, produce_committed_transactions, produce_records
    from nasty import nasty_records

    def rows(topic):
        return (spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", topic).load())

    def write(frame, root, **options):
        writer = frame.write.format("topicvault").option("allowOffsetGaps", "true").mode("append")
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save(str(root))

    # Transactions: offset 3 is a commit marker, the topic's own gap right before the rows from 4.
    tx = topic_factory(1, prefix="gap.tx")
    produce_committed_transactions(bootstrap, tx, 4)
    root = tmp_path / "tx"
    write(rows(tx).where("offset < 3"), root)
    with pytest.raises(Exception, match=r"offsets 3\.\.3 lie between .*kafka\.bootstrap\.servers"):
        write(rows(tx).where("offset > 3"), root)
    write(rows(tx).where("offset > 3"), root, **{"kafka.bootstrap.servers": bootstrap})
    assert fold_commits(LocalStore(str(root))).end_offset(tx, 0) == 17
    run_cli("restore", "--from", str(root), "-b", bootstrap, "--rename", f"{tx}={tx}-r")
    assert [(r.key, r.value) for r in consume_all(bootstrap, f"{tx}-r")[0]] == \
        [(r.key, r.value) for r in consume_all(bootstrap, tx)[0]]

    # Records between the committed end and the rows: never committed across, gaps allowed or not.
    plain = topic_factory(1, prefix="gap.plain")
    produce_records(bootstrap, plain, nasty_records(plain, 1, 150, big_values=0))
    root = tmp_path / "plain"
    write(rows(plain).where("offset < 50"), root)
    with pytest.raises(Exception, match=r"offsets 50\.\.99 lie between .* holds 50 record"):
        write(rows(plain).where("offset >= 100"), root, **{"kafka.bootstrap.servers": bootstrap})
    assert fold_commits(LocalStore(str(root))).end_offset(plain, 0) == 50


def test_a_follower_and_compacts_beside_it_keep_every_record_on_a_store_that_ignores_the_condition(
        bootstrap, spark, topic_factory, s3_endpoint, s3_uri, tmp_path):
    """The end-to-end case of item 1: `backup --follow` (1 s micro-batches, live traffic) with
    compact run beside it, through a proxy that drops If-None-Match in front of the S3 server."""
    import os
    import signal
    import subprocess

    from faultproxy import FaultProxy
    from kafkatools import consume_all, produce_records, produce_until
    from test_compact import CLI, strip
    from topicvault.core.envelope import Record
    from topicvault.core.rotation import Rotation
    from topicvault.core.s3_store import S3Store
    from topicvault.maintenance.compact import CompactJob, compact

    topic = topic_factory(2, prefix="cw-follow")
    log = tmp_path / "follow.log"
    done = threading.Event()
    with FaultProxy(s3_endpoint, drop_conditions="all") as proxy:
        store = S3Store(s3_uri, {"endpoint_url": proxy.url})

        def sequence() -> int:
            return max((int(i.key.rsplit("/", 1)[1].split(".")[0]) for i in store.list("_topicvault/commits/")),
                       default=0)

        def wait_for(condition, what: str, timeout_s: float = 600) -> None:
            deadline = time.monotonic() + timeout_s
            while not condition():
                assert time.monotonic() < deadline, \
                    f"timed out waiting for {what}: {[i.key for i in store.list('_topicvault/')]}; see {log}"
                time.sleep(0.3)

        producer = threading.Thread(target=produce_until, args=(done, bootstrap, topic, lambda i: b"k%d" % i, 5, 0.2),
                                    daemon=True)
        producer.start()
        with open(log, "ab") as out:
            follower = subprocess.Popen(
                [CLI, "backup", "--follow", "-b", bootstrap, "--to", s3_uri, "-S", f"endpoint_url={proxy.url}",
                 "-t", topic, "--flush-interval", "1", "--max-records", "100", "--master", "local[2]"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        job = CompactJob(s3_uri, (("endpoint_url", proxy.url),), rotation=Rotation(max_records=400),
                         grace_ms=3_600_000)
        compacted = 0
        try:
            for _ in range(5):
                seen = sequence()
                wait_for(lambda s=seen: sequence() >= s + 2, "two commits of the follower")
                compacted += len(compact(job).replaced)
                assert follower.poll() is None, log.read_text()[-3000:]
            done.set()
            producer.join(60)
            produce_records(bootstrap, topic, [Record(topic, p, 0, b"end", b"end", 1_700_000_000_000, 0, ())
                                               for p in (0, 1)])
            source = consume_all(bootstrap, topic)
            ends = {p: records[-1].offset + 1 for p, records in source.items()}
            wait_for(lambda: all(load_state(store).end_offset(topic, p) == e for p, e in ends.items()),
                     "the follower to reach the end")
            os.kill(follower.pid, signal.SIGTERM)
            assert follower.wait(120) == 0, log.read_text()[-3000:]
        finally:
            done.set()
            if follower.poll() is None:
                os.killpg(follower.pid, signal.SIGKILL)
        assert proxy.dropped > 0 and compacted > 0
        assert not cw.conditional_writes(store).holds
        assert not list(store.list(cw.COMMIT_TURNS_PREFIX))
    assert "ok:" in run_cli("verify", s3_uri, "-b", bootstrap)
    run_cli("restore", "--from", s3_uri, "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    restored = consume_all(bootstrap, f"{topic}-r")
    assert {p: strip(r) for p, r in restored.items()} == {p: strip(r) for p, r in source.items()}
