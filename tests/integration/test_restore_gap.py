"""A resumed restore checks that its target still holds a prefix of the source before producing on.

A delivery that timed out (message.timeout.ms) while later records of the same partition were
delivered leaves a gap: librdkafka's gapless guarantee does not cover timeouts. Counting the
records there and producing from that count would then splice the partition: a record lost
and another written twice. The resume compares the last record there with the record the count
says it is, and stops before producing.
"""

from __future__ import annotations

from clitools import run_cli, run_cli_process
from kafkatools import consume_all, produce_records, strip
from nasty import nasty_records


def test_a_resume_refuses_a_target_with_a_gap_instead_of_splicing_it(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="gap")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 300, big_values=0))
    location = str(tmp_path / "b")
    run_cli("backup", "-b", bootstrap, "--to", location, "-t", topic)
    source = consume_all(bootstrap, topic)[0]
    target = f"{topic}-r"
    args = ["restore", "--from", location, "-b", bootstrap, "--rename", f"{topic}={target}", "--restore-id", "gap"]
    # The restore saves its state and creates the target, then dies before producing anything.
    assert run_cli_process(args, tmp_path / "cli.log", "restore.produce:0") == -9
    assert consume_all(bootstrap, target)[0] == []
    # What a timed-out delivery leaves: records 0..99 and 101..150, record 100 missing.
    produce_records(bootstrap, target, source[:100] + source[101:151])

    out = run_cli(*args, expect_exit=1)
    error = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "Traceback" not in out, out
    assert f"{target}[0]" in error[0] and "not the first 150" in error[0], error[0]
    assert strip(consume_all(bootstrap, target)[0]) == strip(source[:100] + source[101:151])


def test_the_tail_a_count_keeps_is_bounded_in_records_and_bytes(bootstrap, topic_factory):
    """The counting read keeps the last messages whole until it reaches the end: at most 100 of
    them, and about 1 MiB (at least one), whatever the size of the records."""
    from topicvault.core.cluster.kafka import KafkaSettings
    from topicvault.core.envelope import Record, content_fingerprint
    from topicvault.source.restore.kafka_writer import count_records

    topic = topic_factory(2, prefix="tail")
    small = [Record(topic, 0, 0, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, headers=(("h", b"%d" % i),))
             for i in range(150)]
    large = [Record(topic, 1, 0, b"big%d" % i, bytes([i]) * 400_000, 1_700_000_000_000 + i) for i in range(5)]
    produce_records(bootstrap, topic, small + large)
    written = count_records(KafkaSettings.of(bootstrap), {(topic, 0): 0, (topic, 1): 0})
    assert written[(topic, 0)].records == 150 and written[(topic, 1)].records == 5
    assert written[(topic, 0)].tail == tuple(
        (content_fingerprint(r.key, r.value, r.headers), r.timestamp_ms) for r in small[-100:])
    assert written[(topic, 1)].tail == tuple(
        (content_fingerprint(r.key, r.value, r.headers), r.timestamp_ms) for r in large[-2:])
