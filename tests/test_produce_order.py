"""A restore's producer keeps every record, once and in order, when its local queue refuses some
(issue #20: the per-record produce loop runs in C and resumes after the refused record)."""

from __future__ import annotations

from kafkatools import consume_all
from nasty import nasty_records
from topicvault.core.envelope import records_to_batch
from topicvault.core.kafka import KafkaSettings
from topicvault.source.kafka_writer import produce_streams


def fields(records):
    return [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def test_records_a_full_local_queue_refuses_are_produced_again_once_and_in_order(bootstrap, topic_factory):
    target = topic_factory(1, prefix="fullq")
    records = nasty_records("src", 1, 3000, big_values=0)
    batch = records_to_batch(records)
    # A queue of 5 records refuses most produce calls: each refusal ends a pass of the loop.
    settings = KafkaSettings.of(bootstrap, {"queue.buffering.max.messages": "5", "linger.ms": "0"})
    [result] = produce_streams(settings, [(target, 0, iter([batch.slice(0, 1000), batch.slice(1000)]))])
    assert result.records == 3000
    assert fields(consume_all(bootstrap, target)[0]) == fields(records)
