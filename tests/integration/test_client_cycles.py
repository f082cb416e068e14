"""Issue #41's crash: a failed admin call must not leave an open AdminClient for the cyclic
garbage collector. The failed future keeps the exception, whose traceback keeps the calling
frame, whose locals keep the future (and the client): a reference cycle. Before the `with`
blocks (e3f6a61) the client in it was still open, and the collector destroyed it later on
whatever thread allocated then, librdkafka's own admin threads included (they run Python to
resolve futures): an abort there, and the kind of native crash confluent-kafka-python #1761
reports. Now the client in the cycle is closed before the error leaves the function."""

from __future__ import annotations

import gc

import pytest
from confluent_kafka.admin import AdminClient
from topicvault.core.cluster.kafka import KafkaSettings, partition_watermarks, topic_ids
from topicvault.core.errors import TopicvaultError


def _open_admin_clients_left_to_the_collector(call) -> tuple[int, int]:
    """(AdminClients the cyclic collector would free after `call` failed, how many of them open)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with pytest.raises(TopicvaultError):
            call()
        gc.collect()
        admins = [o for o in gc.garbage if isinstance(o, AdminClient)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    still_open = 0
    for admin in admins:
        try:
            admin.list_topics(timeout=1)
            still_open += 1
        except RuntimeError:  # "Handle has been closed": destroyed on the calling thread
            pass
    return len(admins), still_open


@pytest.mark.parametrize("call", ["topic_ids", "partition_watermarks"])
def test_a_failed_admin_call_leaves_no_open_client_to_the_garbage_collector(bootstrap, call):
    settings = KafkaSettings.of(bootstrap)
    calls = {
        "topic_ids": lambda: topic_ids(settings, ["no-such-topic-here"]),
        "partition_watermarks": lambda: partition_watermarks(settings, [("no-such-topic-here", 0)]),
    }
    in_cycles, still_open = _open_admin_clients_left_to_the_collector(calls[call])
    assert in_cycles >= 1  # the cycle is still made: the test sees what the collector would free
    assert still_open == 0
