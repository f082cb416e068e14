"""Spark's own INFO log lines stay out of what a user sees (#40 item 7): the CLI's logging set-up
(core/log4j2.properties) applies under spark-submit too, where the JVM is up before topicvault runs.
Before: a backup under spark-submit printed 89 INFO lines on stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from kafkatools import produce_records
from nasty import nasty_records

VENV_BIN = Path(sys.executable).parent
MAIN = Path(__file__).resolve().parents[2] / "__main__.py"  # what `python -c 'import topicvault.__main__ ...'` names
SPARK_LOG_LINE = re.compile(r"^\S+ \S+ (INFO|WARN) |^\d\d:\d\d:\d\d (INFO|WARN) ", re.M)


def test_spark_submit_backup_prints_no_spark_log_lines(bootstrap, spark, topic_factory, tmp_path):
    topic = topic_factory(2, prefix="submit")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 50, big_values=0))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [str(VENV_BIN / "spark-submit"), "--master", "local[1]", str(MAIN),
         "backup", "-b", bootstrap, "--to", str(tmp_path / "b"), "-t", topic, "--json", "--quiet"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(done.stdout)["records"] == 100
    logged = SPARK_LOG_LINE.findall(done.stderr)
    print(f"{len(logged)} Spark log lines; stderr:\n{done.stderr}")
    assert not logged, done.stderr
