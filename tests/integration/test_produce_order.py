"""A restore's producer keeps every record, once and in order, when its local queue refuses some
(issue #20: the per-record produce loop runs in C and resumes after the refused record)."""

from __future__ import annotations

import pytest
from kafkatools import consume_all
from nasty import nasty_records
from topicvault.core.cluster.kafka import KafkaSettings
from topicvault.core.envelope import records_to_batch
from topicvault.source.restore.kafka_writer import produce_streams


def fields(records):
    return [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]


@pytest.mark.parametrize("native", ["0", "1"], ids=["confluent-kafka", "native"])
def test_records_a_full_local_queue_refuses_are_produced_again_once_and_in_order(bootstrap, topic_factory, monkeypatch,
                                                                              native):
    from topicvault.sink.native_reader import NATIVE_ENV

    monkeypatch.setenv(NATIVE_ENV, native)
    target = topic_factory(1, prefix="fullq")
    records = nasty_records("src", 1, 3000, big_values=0)
    batch = records_to_batch(records)
    # A queue of 5 records refuses most produce calls: each refusal ends a pass of the loop.
    settings = KafkaSettings.of(bootstrap, {"queue.buffering.max.messages": "5", "linger.ms": "0"})
    [result] = produce_streams(settings, [(target, 0, iter([batch.slice(0, 1000), batch.slice(1000)]))])
    assert result.records == 3000
    assert fields(consume_all(bootstrap, target)[0]) == fields(records)


def test_a_producer_of_many_partitions_reads_a_few_of_them_at_a_time(bootstrap, topic_factory):
    """Each partition being read holds its current object (up to --max-bytes) in memory: a task of
    many partitions must not open them all at once (32 partitions of 64 MiB objects were 2 GiB)."""
    from topicvault.core.envelope import Record
    from topicvault.source.restore.kafka_writer import OPEN_STREAMS

    target = topic_factory(8, prefix="window")
    open_now, most = [0], [0]
    sent = {p: [Record(target, p, 0, b"k%d" % i, b"v%d-%d" % (p, i), 1_700_000_000_000 + i) for i in range(30)]
            for p in range(8)}

    def stream(partition: int):
        open_now[0] += 1
        most[0] = max(most[0], open_now[0])
        for start in range(0, 30, 10):
            yield records_to_batch(sent[partition][start:start + 10])
        open_now[0] -= 1

    results = produce_streams(KafkaSettings.of(bootstrap), [(target, p, stream(p)) for p in range(8)])
    assert [r.records for r in results] == [30] * 8
    assert most[0] == OPEN_STREAMS == 2
    got = consume_all(bootstrap, target)
    assert {p: fields(got[p]) for p in range(8)} == {p: fields(sent[p]) for p in range(8)}


@pytest.mark.parametrize("native", [False, True], ids=["confluent-kafka", "native"])
def test_a_restore_producer_sends_its_first_record_without_waiting_for_the_producer_id_timer(bootstrap, topic_factory,
                                                                                              monkeypatch, native):
    """librdkafka's idempotent producer asks for its producer id on a metadata response that comes
    while a broker is up, and otherwise on a 500 ms timer: a fresh producer waited 0.5-1 s before
    its first send, in every restore task and every follow round (issue #20, fixed cost)."""
    from confluent_kafka import Producer
    from observetools import ClientLog, recording
    from topicvault.core.envelope import Record
    from topicvault.sink.native_reader import NATIVE_ENV, native_module
    from topicvault.source.restore import kafka_writer, native_writer

    target = topic_factory(1, prefix="pidwait")
    batch = records_to_batch([Record(target, 0, 0, b"k", b"v", 1_700_000_000_000)])
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    clients, calls = ClientLog(), []
    if native:
        assert native_module() is not None, "the native module is not built: run `make setup` (ci/native.sh)"

        class RecordedNativeProducer(native_writer.NativeProducer):
            def list_topics(self, topic=None, timeout=-1):
                calls.append(("list_topics", topic))
                return super().list_topics(topic, timeout)

            def produce_arrow(self, topic, *args):
                calls.append(("produce", topic))
                return super().produce_arrow(topic, *args)

        monkeypatch.setattr(native_writer, "NativeProducer", RecordedNativeProducer)
    else:
        monkeypatch.setattr(kafka_writer, "Producer", recording(Producer, clients, ("list_topics", "produce")))
    [result] = produce_streams(KafkaSettings.of(bootstrap), [(target, 0, iter([batch]))])
    assert result.records == 1
    assert len(consume_all(bootstrap, target)[0]) == 1
    # Before its first record the producer got two metadata responses for the target (the
    # first learns the brokers through the bootstrap address, which does not count; the second
    # comes from a broker), so it asked for its producer id then, not on the timer.
    calls += [(call.method, call.args[0] if call.args else call.kwargs.get("topic")) for call in clients.calls]
    assert calls[:3] == [("list_topics", target), ("list_topics", target), ("produce", target)], calls


def test_a_restore_producer_never_creates_a_topic(bootstrap, topic_factory):
    """A restore creates its topics itself, with their partitions and loading configs. Its
    producer's metadata requests must not have the broker create a missing one with defaults
    (a target deleted during the restore came back as a new, different topic)."""
    from confluent_kafka.admin import AdminClient

    missing = f"{topic_factory(1, prefix='gone')}-never-created"
    [result] = produce_streams(KafkaSettings.of(bootstrap), [(missing, 0, iter([]))])
    assert result.records == 0
    assert missing not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
