"""What a Spark user would write instead of topicvault, timed: Spark's own Kafka source and sink.

    python benchmarks/spark_kafka.py --jars DIR --master local[2]

Runs as a process of its own, driven by benchmarks/run.py: its driver JVM starts with the
connector's jars (spark.jars, resolved by ci/spark-kafka-jars.sh) and Spark's default JVM
options, as a Spark user's session would (topicvault's task session starts with the quick
compiler only). One JSON command a line on stdin, one answer a line on stdout after ANSWER:

- {"op": "read", "bootstrap", "topic", "path"}: the topic from its earliest to its latest
  offsets with includeHeaders=true, written as Parquet to path -> {"seconds", "rows"}
- {"op": "write", "bootstrap", "path", "topic"}: the Parquet rows (key, value, headers,
  partition) written to the topic by Spark's Kafka sink -> {"seconds"}; the sink cannot set a
  record's timestamp, so the records get the producer's clock.

The Spark session starts before the first command and is left out of the timings, as
topicvault's Spark start is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ANSWER = "ANSWER:"


def session(master: str, jars: Path):
    """A Spark session with the connector's jars, the UI and progress bar off."""
    from pyspark.sql import SparkSession

    paths = sorted(str(jar) for jar in jars.glob("*.jar"))
    if not any("spark-sql-kafka" in path for path in paths):
        raise SystemExit(f"no spark-sql-kafka jar in {jars}: run `bash ci/spark-kafka-jars.sh`")
    spark = (SparkSession.builder.master(master).appName("spark-kafka-bench")
             .config("spark.jars", ",".join(paths))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read(spark, bootstrap: str, topic: str, path: str) -> dict:
    """Spark's Kafka source, the whole topic with headers, to Parquet."""
    started = time.monotonic()
    (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
     .option("startingOffsets", "earliest").option("endingOffsets", "latest").option("includeHeaders", "true")
     .load().write.mode("overwrite").parquet(path))
    seconds = time.monotonic() - started
    return {"seconds": seconds, "rows": spark.read.parquet(path).count()}


def write(spark, bootstrap: str, path: str, topic: str) -> dict:
    """Spark's Kafka sink: the Parquet rows back to Kafka, each to its partition, with headers."""
    started = time.monotonic()
    (spark.read.parquet(path).select("key", "value", "headers", "partition")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
     .save())
    return {"seconds": time.monotonic() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jars", type=Path, required=True)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    spark = session(args.master, args.jars)
    print(ANSWER, json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "read":
            answer = read(spark, command["bootstrap"], command["topic"], command["path"])
        elif command["op"] == "write":
            answer = write(spark, command["bootstrap"], command["path"], command["topic"])
        else:
            raise SystemExit(f"unknown command {command!r}")
        print(ANSWER, json.dumps(answer), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
