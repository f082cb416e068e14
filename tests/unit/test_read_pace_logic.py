"""The pure-logic half of tests/integration/test_read_pace.py (its docstring covers both halves):
A backup read keeps pace once the task is busy elsewhere (issue #20).
"""

from __future__ import annotations

import pytest
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.sink.kafka_reader import range_consumer_config


def test_our_consumers_refetch_soon_after_their_queue_drains():
    from topicvault.core.cluster.kafka import consumer_config

    for config in (range_consumer_config(KafkaSettings.of("localhost:9092")),
                   consumer_config(KafkaSettings.of("localhost:9092"))):
        assert int(config["fetch.queue.backoff.ms"]) <= 50
    # The user's -X still wins.
    assert consumer_config(KafkaSettings.of("h:1", {"fetch.queue.backoff.ms": "500"}))["fetch.queue.backoff.ms"] == "500"


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_restore_producer_can_queue_the_largest_record_it_may_send(native, monkeypatch):
    # librdkafka refuses (BufferError) a message larger than its local queue even when the
    # queue is empty, and a restore retries a BufferError until the queue drains: a record
    # over the queue size (possible with -X message.max.bytes above it) hung the restore.
    # No broker needed: produce only queues locally. Both paths (native where it loads).
    import pyarrow as pa
    from topicvault.core.envelope import Record, records_to_batch
    from topicvault.sink.native_reader import NATIVE_ENV
    from topicvault.source.restore.kafka_writer import restore_producer
    from topicvault.source.restore.native_writer import NativeProducer, records_array

    monkeypatch.setenv(NATIVE_ENV, native)
    settings = KafkaSettings.of("127.0.0.1:9", {"message.max.bytes": str(48 * 1024 * 1024)})
    producer = restore_producer(settings, lambda error, message: None)
    if isinstance(producer, NativeProducer):
        batch = records_to_batch([Record("t", 0, 0, b"k", b"v" * (40 * 1024 * 1024), 1, 0, ())])
        assert producer.produce_arrow("t", 0, records_array(batch, pa.array([1]))) == (1, None)  # 0: queue full
    else:
        producer.produce("t", b"v" * (40 * 1024 * 1024), b"k", 0)  # raised BufferError: Local: Queue full
    producer.purge()


def test_our_reads_to_eof_refetch_soon_after_a_fetch_error():
    from topicvault.core.cluster.kafka import metadata_consumer_config

    assert int(metadata_consumer_config(KafkaSettings.of("localhost:9092"))["fetch.error.backoff.ms"]) <= 50
    # The user's -X still wins.
    user = KafkaSettings.of("h:1", {"fetch.error.backoff.ms": "500"})
    assert metadata_consumer_config(user)["fetch.error.backoff.ms"] == "500"
