"""The `topicvault-kafka` DataFrame writer is held to the CLI restore's limits: its
maxRecordsPerSecond / maxBytesPerSecond options hold for the whole write, and a session with
spark.speculation=true is refused before anything is produced."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from kafkatools import consume_all, create_topic, produce_records
from ratetools import WatermarkWatch, overall_rate
from topicvault.core.envelope import Record

BASE = 1_700_000_000_000


def kafka_rows(spark, bootstrap: str, topic: str):
    return (spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


def exact(records) -> list:
    return [(r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def test_records_per_second_holds_for_the_whole_write(bootstrap, spark, topic_factory):
    limit, partitions, per_partition = 1000, 2, 2000  # 4,000 records: 4 s at the limit
    topic = topic_factory(partitions, prefix="df.slow")
    produce_records(bootstrap, topic, [Record(topic, p, 0, b"k%d" % i, b"v" * 10, BASE + i, 0, ((b"h", b"1"),))
                                       for p in range(partitions) for i in range(per_partition)])
    target = create_topic(bootstrap, f"{topic}-r", partitions)
    watch = WatermarkWatch(bootstrap, target, partitions)
    (kafka_rows(spark, bootstrap, topic).write.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", target).option("maxRecordsPerSecond", str(limit)).mode("append").save())
    overall = overall_rate(watch.stop())
    print(f"DataFrame writer records/s: {overall:.0f}, limit {limit}")
    # Held to the limit for the whole write, shared by its tasks (not the whole limit each).
    assert overall <= 1.2 * limit
    source, written = consume_all(bootstrap, topic), consume_all(bootstrap, target)
    assert all(exact(written[p]) == exact(source[p]) for p in range(partitions))


SPECULATIVE_WRITE = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from topicvault.datasources import register

    bootstrap, topic, target = sys.argv[1:]
    spark = (SparkSession.builder.master("local[2]").config("spark.speculation", "true")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    register(spark)
    rows = spark.read.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    try:
        (rows.write.format("topicvault-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", target).mode("append").save())
        print("WRITTEN")
    except Exception as exc:
        print("WRITE FAILED:", exc)
        sys.exit(3)
    finally:
        spark.stop()
""")


def test_a_session_with_speculation_is_refused_before_anything_is_produced(bootstrap, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="df.spec")
    produce_records(bootstrap, topic, [Record(topic, p, 0, b"k", b"v", BASE + i, 0, ())
                                       for p in range(2) for i in range(20)])
    target = create_topic(bootstrap, f"{topic}-r", 2)
    script = tmp_path / "write.py"
    script.write_text(SPECULATIVE_WRITE)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    with open(tmp_path / "write.log", "w") as log:  # the session's own output goes to a file
        done = subprocess.run([sys.executable, str(script), bootstrap, topic, target], env=env, stdout=log,
                              stderr=subprocess.STDOUT, text=True, timeout=300, stdin=subprocess.DEVNULL)
    output = (tmp_path / "write.log").read_text()
    assert done.returncode == 3, output[-3000:]
    assert "spark.speculation=true" in output and "start the session with spark.speculation=false" in output
    assert sum(len(records) for records in consume_all(bootstrap, target).values()) == 0
