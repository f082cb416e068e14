"""Checkpoints of the folded state: reads that do not grow with history, and correctness first.

Commits are made with the library (small synthetic records through the real committer
function), not with hundreds of backups. Request counts are taken at the S3 server: a
moto_server of this module's own logs one line per request.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from archivetools import TOPICS, make_commits
from clitools import run_cli
from harness_s3 import logged_requests, moto_server
from topicvault.core.archive.checkpoints import (
    CHECKPOINT_INTERVAL,
    checkpoint_key,
    load_state,
    read_forward,
)
from topicvault.core.archive.commits import (
    ObjectEntry,
    fold_commits,
)
from topicvault.core.archive.conditional_writes import conditional_writes
from topicvault.core.stores.local_store import LocalStore
from topicvault.core.stores.locations import open_store
from topicvault.sink.backup_datasource import ObjectsWritten
from topicvault.sink.stream import ObjectStreamWriter


@pytest.fixture(scope="module")
def counted_s3(s3_endpoint, tmp_path_factory):
    """A moto_server of this module's own (credentials from the s3_endpoint fixture) and its log."""
    log_dir = tmp_path_factory.mktemp("moto-counted")
    with moto_server(log_dir) as endpoint:
        yield endpoint, next(log_dir.glob("moto-*.log"))


def _bucket(endpoint: str) -> str:
    import uuid

    import boto3

    name = f"tv-count-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


def requests_during(log: Path, bucket: str, action) -> list[str]:
    """The S3 requests to `bucket` the server logged while `action()` ran (each bucket is one test's)."""
    before = len(logged_requests(log, bucket))
    action()
    return logged_requests(log, bucket)[before:]


REQUEST_COUNTS: dict[int, tuple[int, int]] = {}


def expected_state_reads(history: int) -> int:
    """S3 requests of one state read after `history` commits: the pointer GET, the checkpoint
    listing and the commit listing, the newest checkpoint and its commit when there is one, and
    one GET per commit after it. Bounded by 5 + CHECKPOINT_INTERVAL - 1, whatever the history."""
    since = history % CHECKPOINT_INTERVAL
    return 3 + (2 if history >= CHECKPOINT_INTERVAL else 0) + since


@pytest.mark.parametrize("history", [10, 60, 500, 510])
def test_requests_of_ls_and_of_a_micro_batch_do_not_grow_with_commits(counted_s3, history):
    endpoint, log = counted_s3
    bucket = _bucket(endpoint)
    uri = f"s3://{bucket}/loc"
    store = open_store(uri, {"endpoint_url": endpoint})
    state = make_commits(store, history)  # the follower's in-memory state too
    ls = requests_during(log, bucket, lambda: run_cli("ls", uri, "-S", f"endpoint_url={endpoint}"))
    writer = ObjectStreamWriter({"path": uri, "store.endpoint_url": endpoint, "streamId": "s2"})
    start = state.end_offset(TOPICS[0], 0)
    entry = ObjectEntry(f"topic={TOPICS[0]}/partition=0/{start:019d}.parquet", TOPICS[0], 0, start, start, 1, 10,
                        0, 0, "00")
    store.put(entry.key, b"object")  # written by the batch's task, before its commit
    conditional_writes(store)  # probed once per location, by its first commit

    def micro_batch() -> None:
        # The sink's commit (a state read and a conditional PUT), then the follower's read-forward.
        writer.commit([ObjectsWritten([entry])], 7)
        read_forward(store, state)

    batch = requests_during(log, bucket, micro_batch)
    assert state.end_offset(TOPICS[0], 0) == start + 1 and state == fold_commits(store)
    print(f"{history} commits: ls {len(ls)} S3 requests, micro-batch {len(batch)}")
    # Exactly what the state read needs, so 10 and 500 commits cost alike (500 sits on a
    # checkpoint: 5; 10 folds 10 commits: 13), and 60 and 510 (10 after a checkpoint) are equal.
    # ls: the state read, and the GET of the remembered conditional-write answer it shows (#50.8).
    assert len(ls) == expected_state_reads(history) + 1, "\n".join(ls)
    # Commit: the state read, the GET of whether the store honours conditional writes, one
    # listing of the object's folder (it still exists, see core.archive.leases.check_objects_held) and one PUT;
    # read-forward: one listing and one GET.
    assert len(batch) == expected_state_reads(history) + 1 + 1 + 1 + 2, batch
    assert len(ls) <= 5 + CHECKPOINT_INTERVAL - 1 + 1
    REQUEST_COUNTS[history] = (len(ls), len(batch))
    if 60 in REQUEST_COUNTS and 510 in REQUEST_COUNTS:
        assert REQUEST_COUNTS[60] == REQUEST_COUNTS[510], REQUEST_COUNTS


@pytest.mark.parametrize("partitions", [64])
def test_a_wide_micro_batch_checks_its_objects_with_one_listing_per_partition(counted_s3, partitions):
    endpoint, log = counted_s3
    bucket = _bucket(endpoint)
    uri = f"s3://{bucket}/loc"
    store = open_store(uri, {"endpoint_url": endpoint})
    topic = TOPICS[0]
    entries = [ObjectEntry(f"topic={topic}/partition={p}/{first:019d}-r0000000000a1.parquet", topic, p, first, first + 9,
                           10, 6, 0, 0, "00") for p in range(partitions) for first in (0, 10)]
    for e in entries:  # two objects per partition, as a micro-batch that rotated would write
        store.put(e.key, b"object")
    writer = ObjectStreamWriter({"path": uri, "store.endpoint_url": endpoint, "streamId": "wide"})
    conditional_writes(store)  # probed once per location, by its first commit
    batch = requests_during(log, bucket, lambda: writer.commit([ObjectsWritten(entries)], 0))
    lists = [line for line in batch if "list-type=2" in line and "partition%3D" in line]
    print(f"{partitions} partitions x 2 objects: commit {len(batch)} S3 requests, {len(lists)} of them the check")
    assert len(lists) == partitions, batch
    # The state read of an empty location, the GET of whether the store honours conditional
    # writes, the listings and the commit's PUT: nothing per object.
    assert len(batch) == expected_state_reads(0) + 1 + partitions + 1, batch


def test_a_real_backup_that_makes_commit_50_writes_the_checkpoint_and_restores_exactly(
        bootstrap, spark, topic_factory, tmp_path):
    from kafkatools import consume_all, produce_records
    from topicvault.core.envelope import Record

    location = tmp_path / "loc"
    make_commits(LocalStore(str(location)), CHECKPOINT_INTERVAL - 1)  # history of other topics
    topic = topic_factory(1, prefix="ckpt")
    records = [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, 0, (("h", b"x"),)) for i in range(30)]
    produce_records(bootstrap, topic, records[:29])
    produce_records(bootstrap, topic, records[29:])  # tansu: a last single-record batch makes the end exact
    run_cli("backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--master", "local[2]")
    store = LocalStore(str(location))
    assert store.head(checkpoint_key(CHECKPOINT_INTERVAL)) is not None
    assert load_state(store) == fold_commits(store)
    assert load_state(store).end_offset(topic, 0) == 30
    run_cli("restore", "--from", str(location), "-b", bootstrap, "-t", topic, "--rename", f"{topic}={topic}-r")
    restored = consume_all(bootstrap, f"{topic}-r")[0]
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in restored] == \
           [(r.key, r.value, r.headers, r.timestamp_ms) for r in consume_all(bootstrap, topic)[0]]
