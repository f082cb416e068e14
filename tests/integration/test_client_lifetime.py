"""Issue #41 item 1: an AdminClient is destroyed on the thread that used it, also when its call
failed. Held by a traceback instead, it was destroyed whenever the garbage collector ran, on
whatever thread: librdkafka aborts the process when that is one of its own ("calling
rd_kafka_destroy() from librdkafka owned thread is prohibited", seen in a fault test), and
confluent-kafka-python #1761 reports segfaults from the same."""

from __future__ import annotations

import pytest
from topicvault.core.cluster.kafka import KafkaSettings, topic_ids
from topicvault.core.errors import TopicvaultError


def _admin_held_by(error: BaseException):
    frame_locals = []
    traceback = error.__traceback__
    while traceback is not None:
        frame_locals.append(traceback.tb_frame.f_locals)
        traceback = traceback.tb_next
    return next(found["admin"] for found in frame_locals if "admin" in found)


def test_an_admin_client_whose_call_failed_is_destroyed_before_the_error_is_handled(bootstrap):
    with pytest.raises(TopicvaultError) as failed:
        topic_ids(KafkaSettings.of(bootstrap), ["no-such-topic-here"])
    admin = _admin_held_by(failed.value)  # what the traceback keeps alive
    with pytest.raises(RuntimeError, match="closed|destroyed"):
        admin.list_topics(timeout=5)
