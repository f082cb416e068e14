"""A Kafka client setting librdkafka rejects: one line naming it, as a real subprocess prints it,
with no traceback and no secret, --debug included."""
from __future__ import annotations


def test_a_message_size_limit_above_the_fetch_size_backs_up_and_restores(bootstrap, spark, topic_factory, tmp_path):
    # One -X set for both commands: the restore's producer takes records up to message.max.bytes, and the
    # backup's consumer refused to start with it above its fetch size ("fetch.max.bytes must be >= ...").
    from clitools import run_cli
    from kafkatools import consume_all, produce_records
    from topicvault.core.envelope import Record

    topic = topic_factory(1, prefix="msgmax")
    records = [Record(topic, 0, 0, b"k%d" % i, bytes([i]) * (3 << 20 if i == 1 else 10), 1_000 + i, 0, ()) for i in range(3)]
    produce_records(bootstrap, topic, records)
    limit = ["-X", f"message.max.bytes={20 << 20}"]
    run_cli("backup", "-b", bootstrap, "--to", str(tmp_path / "b"), "-t", topic, *limit)
    run_cli("restore", "--from", str(tmp_path / "b"), "-b", bootstrap, "--rename", f"{topic}={topic}-r", *limit)
    assert [(r.key, r.value) for r in consume_all(bootstrap, f"{topic}-r")[0]] == [(r.key, r.value) for r in records]
