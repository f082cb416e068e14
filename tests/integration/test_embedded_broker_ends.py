"""issue 40.2: the embedded broker (tansu) reports a partition's end as the base offset of its
last batch + 1. A backup planned up to that report committed 3 of a user's 3,000 records, exit 0,
without a word. A backup must take every record there is."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
from clitools import run_cli
from confluent_kafka import Producer
from kafkatools import create_topic
from topicvault.core.local.embedded_broker import EmbeddedBroker


@pytest.fixture
def embedded_bootstrap(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path)) as broker:
        yield broker.bootstrap


def test_backup_on_the_embedded_broker_takes_every_record(embedded_bootstrap, spark, tmp_path):
    topic = create_topic(embedded_bootstrap, "user-orders", 1)
    # A plain producer, as a user's: records go in batches of many.
    producer = Producer({"bootstrap.servers": embedded_bootstrap, "linger.ms": 50})
    now = int(time.time() * 1000)
    for i in range(3_000):
        producer.produce(topic, b"v%d" % i, b"k%d" % i, timestamp=now + i)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(30) == 0
    del producer  # no reconnect attempts (and their log lines) once the broker is stopped
    location = tmp_path / "backup"

    out = run_cli("backup", "-b", embedded_bootstrap, "-t", topic, "--to", str(location), "--quiet")

    values = [row["value"] for path in sorted(location.rglob("*.parquet")) if "_topicvault" not in path.parts
              for row in pq.read_table(path).to_pylist()]
    assert sorted(values) == sorted(b"v%d" % i for i in range(3_000)), out
    assert run_cli("backup", "-b", embedded_bootstrap, "-t", topic, "--to", str(location), "--quiet")


def test_the_end_a_backup_plans_to_is_found_while_writes_outpace_its_read(bootstrap, topic_factory):
    """The other side of the read above, found by the retention fault test: planning reads each
    partition from its high watermark to partition EOF; a consumer slower than the producers (slow
    fetch settings on a loaded machine there, a fetch quota for a user) never met EOF, and the
    backup hung in planning, silent, for as long as the traffic lasted. The read now stops chasing
    a partition a moment after its first record: its end is the record after the last one read."""
    import threading

    from kafkatools import LiveTraffic, consume_all
    from topicvault.core.cluster.kafka import KafkaSettings, ends_past, metadata_consumer

    topic = topic_factory(2, prefix="outpaced")
    # About a batch a partition a second (a fetch fills the 1 kB queue, the next waits 1 s), while the
    # traffic writes thousands of records a second.
    slow = {"fetch.max.bytes": "2000", "message.max.bytes": "2000", "max.partition.fetch.bytes": "1000",
            "queued.min.messages": "1", "queued.max.messages.kbytes": "1", "fetch.queue.backoff.ms": "1000"}
    consumer = metadata_consumer(KafkaSettings.of(bootstrap, slow), **{"enable.partition.eof": True})
    found: dict = {}
    read = threading.Thread(target=lambda: found.update(ends=ends_past(consumer, reported)), daemon=True)
    with LiveTraffic(bootstrap, topic, partitions=(0, 1), pause_s=0.001) as traffic:
        deadline = time.monotonic() + 60
        while min(map(len, traffic.acked.values())) < 200:
            if time.monotonic() >= deadline:  # a hang detector, not a speed check
                raise TimeoutError("no live traffic")
            time.sleep(0.05)
        # Planning asks for the watermarks, then groups, ACLs and configs, then reads: a backlog by then.
        reported = {(topic, p): max(offset for offset, _ in traffic.acked[p]) + 1 for p in (0, 1)}
        time.sleep(1)
        read.start()
        read.join(30)  # a hang detector: the read's own chase limit (END_CHASE_S) ends it
        if read.is_alive():
            raise TimeoutError("planning's read to the end still chases the traffic after 30 s")
    consumer.close()
    source = consume_all(bootstrap, topic)
    for p in (0, 1):
        end = found["ends"][(topic, p)]
        # A record boundary past the reported end, every record below it there.
        # (the reported end itself if the partition gave no record within the read's longer wait)
        assert reported[(topic, p)] <= end <= len(source[p]), (p, end, reported)
        assert [r.offset for r in source[p][:end]] == list(range(end))
    print(f"ends {found['ends']} from {reported}")
