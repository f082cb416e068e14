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

import threading
import time

import pytest
from archivetools import run_compact
from clitools import CLI, run_cli
from kafkatools import strip
from topicvault.core.archive import conditional_writes as cw
from topicvault.core.archive.archive_keys import CONDITIONAL_WRITES_KEY
from topicvault.core.archive.checkpoints import load_state
from topicvault.core.archive.commits import fold_commits
from topicvault.core.stores.local_store import LocalStore


@pytest.mark.parametrize("dropped, put, multipart", [("", True, True), ("all", False, False),
                                                     ("multipart", True, False)])
def test_the_probe_tells_what_an_s3_store_does_with_each_upload_path(s3_endpoint, s3_uri, dropped, put, multipart):
    from faultproxy import FaultProxy
    from topicvault.core.stores.s3_store import S3Store

    with FaultProxy(s3_endpoint, drop_conditions=dropped) as proxy:
        store = S3Store(s3_uri, {"endpoint_url": proxy.url})
        found = cw.conditional_writes(store)
        assert (found.put, found.multipart) == (put, multipart)
        assert (proxy.dropped > 0) == bool(dropped)
    assert [i.key for i in S3Store(s3_uri).list("_topicvault/")] == [CONDITIONAL_WRITES_KEY]


def test_an_answer_probed_on_one_s3_endpoint_is_not_trusted_on_another(s3_endpoint, s3_uri):
    # #50.8: the answer names the endpoint and bucket probed; the same keys reached through another
    # endpoint (here a proxy that drops If-None-Match, as a mirror's server might) are probed again.
    from faultproxy import FaultProxy
    from topicvault.core.stores.s3_store import S3Store

    direct = S3Store(s3_uri, {"endpoint_url": s3_endpoint})
    assert cw.conditional_writes(direct).holds
    with FaultProxy(s3_endpoint, drop_conditions="all") as proxy:
        behind = S3Store(s3_uri, {"endpoint_url": proxy.url})
        assert behind.identity() != direct.identity()
        found = cw.conditional_writes(behind)
        assert not found.holds and proxy.dropped > 0 and found.store == behind.identity()


def test_a_commit_under_a_lapsing_turn_is_given_up_before_a_waiter_may_take_the_turn(s3_endpoint, s3_uri,
                                                                                        monkeypatch):
    # #50.9: committer A holds the turn on a store that ignores If-None-Match; its commit request
    # and its renewals are lost on the way, so its turn goes stale and committer B takes it and
    # commits sequence 1. A's client must have given up by then: before the bound, botocore's
    # retries (here 10 attempts of 1 s) sent A's commit again after B's and it replaced B's
    # (old code: commit 1 named A's object; A's append returned as committed).
    from faultproxy import FaultProxy
    from topicvault.core.archive.archive_keys import commit_key
    from topicvault.core.archive.commit_log import append
    from topicvault.core.archive.commits import BackupState, CommitRecord, ObjectEntry, PartitionRange
    from topicvault.core.errors import TopicvaultError
    from topicvault.core.stores.s3_store import S3Store

    monkeypatch.setattr(cw, "TURN_TTL_S", 8.0)
    monkeypatch.setattr(cw, "TURN_RENEW_S", 1.0)
    direct = S3Store(s3_uri)

    def record(state: BackupState, run: str) -> CommitRecord:
        entry = ObjectEntry(f"topic=t/partition=0/{0:019d}-{run}.parquet", "t", 0, 0, 9, 10, 5, 1, 2, "0" * 64)
        direct.put(entry.key, b"batch")
        return CommitRecord(state.last_sequence + 1, 1_000, (PartitionRange("t", 0, 0, 10),), (entry,), {})

    a_turn: list[str] = []
    a_holds, b_committed = threading.Event(), threading.Event()

    def lose(method: str, path: str, body: bytes) -> bool:
        a_commit = "/_topicvault/commits/" in path and b"r00000000000a" in body and not b_committed.is_set()
        return method == "PUT" and (a_commit or bool(a_turn and a_turn[0] in path))

    def build_a(state: BackupState) -> CommitRecord:
        a_turn.extend(info.key for info in direct.list(cw.COMMIT_TURNS_PREFIX))  # A's own, the only one
        a_holds.set()
        return record(state, "r00000000000a")

    outcome: dict[str, object] = {}

    def commit_a(store: S3Store) -> None:
        try:
            outcome["a"] = append(store, BackupState(), build_a).key
        except TopicvaultError as exc:
            outcome["a"] = exc

    with FaultProxy(s3_endpoint, drop_conditions="all", lose=lose) as proxy:
        options = {"endpoint_url": proxy.url, "read_timeout": "1", "max_attempts": "10"}
        assert not cw.conditional_writes(S3Store(s3_uri, options)).holds
        a = threading.Thread(target=commit_a, args=(S3Store(s3_uri, options),), daemon=True)
        a.start()
        if not a_holds.wait(120):
            raise TimeoutError("A never took the turn in 120 s")
        b_key = append(S3Store(s3_uri, {"endpoint_url": proxy.url}), BackupState(),
                       lambda state: record(state, "r00000000000b")).key
        b_committed.set()
        a.join(120)
        assert not a.is_alive(), "A's commit never returned"
        assert proxy.lost >= 1  # A's commit request was lost at least once
    assert b_key == commit_key(1)
    assert b"r00000000000b" in direct.get(commit_key(1)), "A's late commit replaced B's"
    assert isinstance(outcome["a"], TopicvaultError)
    assert "\n" not in str(outcome["a"])


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
    from kafkatools import consume_all, ends_of, produce_records, produce_until
    from topicvault.core.envelope import Record
    from topicvault.core.rotation import Rotation
    from topicvault.core.stores.s3_store import S3Store
    from topicvault.source.maintenance.compact import CompactJob

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
                if time.monotonic() >= deadline:  # a hang detector, not a speed check
                    raise TimeoutError(f"timed out waiting for {what}: {[i.key for i in store.list('_topicvault/')]}; "
                                       f"see {log}")
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
                compacted += len(run_compact(job).replaced)
                assert follower.poll() is None, log.read_text()[-3000:]
            done.set()
            producer.join(60)
            produce_records(bootstrap, topic, [Record(topic, p, 0, b"end", b"end", 1_700_000_000_000, 0, ())
                                               for p in (0, 1)])
            source = consume_all(bootstrap, topic)
            ends = ends_of(source)
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
