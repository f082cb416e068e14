"""The DataFrame writers are as safe as the CLI (issue #16 item 10).

- `topicvault` writer: commits only offsets it really wrote, contiguous from the committed end;
  a filtered DataFrame is refused, not committed as a complete backup.
- Both writers refuse mode("overwrite") instead of silently appending.
- `topicvault-kafka` writer: a retried task never produces again (see the subprocess test).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clitools import run_cli
from kafkatools import consume_all, create_topic, produce_committed_transactions, produce_records
from nasty import nasty_records


def kafka_rows(spark, bootstrap, topic):
    return (spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


def commits(root: Path) -> list[dict]:
    folder = root / "_topicvault" / "commits"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


@pytest.mark.parametrize("condition", ["offset % 2 = 0", "offset < 100 or offset >= 150", "offset >= 100"])
def test_a_filtered_dataframe_is_not_committed_as_a_complete_backup(bootstrap, spark, topic_factory, tmp_path,
                                                                    condition):
    topic = topic_factory(1, prefix="df.filtered")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 300, big_values=0))
    root = tmp_path / "b"
    if condition == "offset >= 100":  # the gap is between the committed end and the rows
        kafka_rows(spark, bootstrap, topic).where("offset < 50").write.format("topicvault").mode("append").save(str(root))
        assert [r["end"] for r in commits(root)[0]["ranges"]] == [50]
    with pytest.raises(Exception, match=r"offsets .* missing"):
        kafka_rows(spark, bootstrap, topic).where(condition).write.format("topicvault").mode("append").save(str(root))
    assert len(commits(root)) == (1 if condition == "offset >= 100" else 0)


def test_unfiltered_rows_commit_and_gaps_can_be_allowed_for_the_topics_own_gaps(bootstrap, spark, topic_factory,
                                                                              tmp_path):
    topic = topic_factory(2, prefix="df.whole")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 300, big_values=0))
    root = tmp_path / "b"
    rows = kafka_rows(spark, bootstrap, topic)
    rows.where("offset < 120").write.format("topicvault").option("maxRecords", "50").mode("append").save(str(root))
    rows.where("offset >= 120").write.format("topicvault").option("maxRecords", "50").mode("append").save(str(root))
    assert [sorted((r["partition"], r["start"], r["end"]) for r in c["ranges"]) for c in commits(root)] == \
        [[(0, 0, 120), (1, 0, 120)], [(0, 120, 300), (1, 120, 300)]]
    assert "ok:" in run_cli("verify", str(root))

    # Gaps the topic itself has (transaction markers, compaction) are allowed when the user says so.
    gapped = tmp_path / "g"
    (rows.where("offset % 3 != 1").write.format("topicvault").option("allowOffsetGaps", "true")
     .mode("append").save(str(gapped)))
    assert sorted((r["partition"], r["start"], r["end"]) for r in commits(gapped)[0]["ranges"]) == [(0, 0, 300), (1, 0, 300)]


@pytest.mark.parametrize("source", ["topicvault", "topicvault-kafka"])
def test_mode_overwrite_is_refused_before_anything_is_written(bootstrap, spark, topic_factory, tmp_path, source):
    topic = topic_factory(1, prefix="df.o")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 40, big_values=0))
    root = tmp_path / "fresh"
    target = create_topic(bootstrap, f"{topic}-r", 1)
    writer = kafka_rows(spark, bootstrap, topic).write.format(source).mode("overwrite")
    with pytest.raises(Exception, match=r'mode\("overwrite"\) is not supported'):
        if source == "topicvault":
            writer.save(str(root))
        else:
            writer.option("kafka.bootstrap.servers", bootstrap).option("topic", target).save()
    assert not root.exists() or not any(root.rglob("*"))
    assert consume_all(bootstrap, target)[0] == []


RETRYING_WRITE = textwrap.dedent("""
    import sys
    from topicvault.core.spark import get_spark
    from topicvault.datasources import register

    location, bootstrap, target = sys.argv[1:]
    spark = get_spark("local[2,4]")  # Spark retries a failed task up to 4 times
    register(spark)
    rows = spark.read.format("topicvault").load(location)
    try:
        (rows.write.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", target).mode("append").save())
    except Exception as exc:
        print("WRITE FAILED:", exc)
        sys.exit(3)
    finally:
        spark.stop()
""")


def test_kafka_writer_task_retry_never_produces_again(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="df.retry")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 400, big_values=0))
    root = tmp_path / "b"
    kafka_rows(spark, bootstrap, topic).write.format("topicvault").mode("append").save(str(root))
    target = topic_factory(1, prefix="df.retry-r")  # takes the records' far timestamps, as the source did
    script = tmp_path / "write.py"
    script.write_text(RETRYING_WRITE)
    # The first attempt fails after all its records were delivered (as when an executor is lost).
    env = {**os.environ, "TOPICVAULT_FAIL_FIRST_ATTEMPT_AT": "kafka_writer.partition:1",
           "TOPICVAULT_FAULT_LOG": str(tmp_path / "faults")}
    done = subprocess.run([sys.executable, str(script), str(root), bootstrap, target], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert (tmp_path / "faults").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "faults").read_text().count("failed attempt 0") == 1
    # The retry produced nothing: the target holds what the first attempt delivered, once.
    source = [(r.key, r.value, r.headers, r.timestamp_ms) for r in consume_all(bootstrap, topic)[0]]
    written = [(r.key, r.value, r.headers, r.timestamp_ms) for r in consume_all(bootstrap, target)[0]]
    assert written == source
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert "is a retry" in done.stdout and "topicvault restore" in done.stdout


def test_transaction_markers_need_allow_offset_gaps_and_then_restore_exactly(bootstrap, spark, topic_factory,
                                                                           tmp_path):
    topic = topic_factory(1, prefix="df.tx")
    produce_committed_transactions(bootstrap, topic, 4)
    root = tmp_path / "b"
    rows = kafka_rows(spark, bootstrap, topic)
    with pytest.raises(Exception, match="allowOffsetGaps=true"):
        rows.write.format("topicvault").mode("append").save(str(root))
    rows.write.format("topicvault").option("allowOffsetGaps", "true").mode("append").save(str(root))
    run_cli("restore", "--from", str(root), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    strip = [(r.key, r.value, r.timestamp_ms) for r in consume_all(bootstrap, topic)[0]]
    assert [(r.key, r.value, r.timestamp_ms) for r in consume_all(bootstrap, f"{topic}-r")[0]] == strip


@pytest.mark.parametrize("missing", ["topic", "partition"])
def test_kafka_writer_refuses_a_missing_target_before_producing(bootstrap, spark, topic_factory, missing):
    from topicvault.core.cluster.kafka import KafkaSettings, list_topic_partitions

    topic = topic_factory(2, prefix="df.missing")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, big_values=0))
    rows = kafka_rows(spark, bootstrap, topic)
    if missing == "topic":
        target, expected = f"{topic}-absent", rf"target topic '{topic}-absent' does not exist"
    else:  # rows of partition 1 into a topic of one partition
        target, expected = create_topic(bootstrap, f"{topic}-one", 1), rf"target partition {topic}-one\[1\] does not exist"
        rows = rows.where("partition = 1")
    writer = (rows.write.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("kafka.message.timeout.ms", "10000").option("topic", target).mode("append"))
    with pytest.raises(Exception, match=expected) as refused:
        writer.save()
    message = str(refused.value)
    assert "like Spark's own Kafka sink, does not create topics" in message
    assert "--restore-id" not in message and "-X " not in message
    partitions = list_topic_partitions(KafkaSettings.of(bootstrap))
    if missing == "topic":
        assert target not in partitions
    else:
        assert partitions[target] == 1 and consume_all(bootstrap, target)[0] == []


def test_reader_messages_name_options_not_cli_flags(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(1, prefix="df.words")
    produce_records(bootstrap, topic, nasty_records(topic, 1, 20, big_values=0))
    root = str(tmp_path / "b")
    kafka_rows(spark, bootstrap, topic).write.format("topicvault").mode("append").save(root)
    for options, expected in (({"layout": "bogus"}, r'bad option\("layout"\) \'bogus\''),
                              ({"key_template": "{topic}/{partition}"}, r'drop option\("key_template"\)'),
                              ({"encryptionKey": "bogus"}, r'bad option\("encryptionKey"\) \'bogus\''),
                              ({"peer_value_encoding": "bogus"}, r'bad option\("peer_value_encoding"\) \'bogus\'')):
        with pytest.raises(Exception, match=expected) as refused:
            spark.read.format("topicvault").options(**options).load(root).collect()
        assert not any(flag in str(refused.value) for flag in ("--layout", "--key-template", "--encryption-key",
                                                                   "--peer-"))
