"""Running on a Spark cluster: spark-submit with the package shipped to executors as a wheel.

`local-cluster[2,1,1024]` starts a standalone master, two workers and one executor JVM per
worker, as a real cluster does. Neither the driver's nor the executors' Python here can import
topicvault on its own (a venv that sees the dependencies but not topicvault), so the job only
runs if the wheel given to --py-files reaches both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from clitools import python_without_topicvault, run_cli  # noqa: F401 - a fixture
from kafkatools import consume_all, produce_records
from nasty import nasty_records

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """topicvault built as a wheel, the way docs/operations.md says."""
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy: setuptools leaves build/ behind, whose stale files a later build would pack.
    source = tmp_path_factory.mktemp("src") / "topicvault"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "tests",
                                                                "__pycache__", ".tv-run", "benchmarks"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                   check=True, timeout=300)
    (built,) = out.glob("topicvault-*.whl")
    return built




def test_spark_submit_local_cluster_with_the_wheel(bootstrap, spark, topic_factory, tmp_path, wheel,
                                                   python_without_topicvault):  # noqa: F811
    topic = topic_factory(4, prefix="cluster")
    produce_records(bootstrap, topic, nasty_records(topic, 4, 300, big_values=0))
    total = sum(map(len, consume_all(bootstrap, topic).values()))
    script = tmp_path / "topicvault_main.py"  # what a user gets from the wheel: topicvault/__main__.py
    script.write_bytes(zipfile.ZipFile(wheel).read("topicvault/__main__.py"))
    location = tmp_path / "backup"
    env = {**os.environ, "PYSPARK_PYTHON": str(python_without_topicvault),
           "PYSPARK_DRIVER_PYTHON": str(python_without_topicvault), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("PYTHONPATH", None)
    completed = subprocess.run(
        [str(VENV_BIN / "spark-submit"), "--master", "local-cluster[2,1,1024]", "--py-files", str(wheel),
         "--conf", "spark.ui.enabled=false", str(script),
         "backup", "-b", bootstrap, "--to", str(location), "-t", topic, "--records-per-task", "150",
         # spark-submit merges the Python driver's stderr into its stdout: --quiet keeps stdout pure JSON.
         "--json", "--quiet"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    # The logging set-up travels in the wheel too (core/log4j2.properties, read from inside the zip).
    assert not [line for line in completed.stderr.splitlines() if " INFO " in line], completed.stderr[-4000:]
    summary = json.loads(completed.stdout)
    assert summary["records"] == total and summary["topics"][0]["partitions"] == 4

    # The cluster-written backup restores byte for byte (here with the test's own local session).
    run_cli("restore", "--from", str(location), "-b", bootstrap, "--rename", f"{topic}={topic}-r")
    original, restored = consume_all(bootstrap, topic), consume_all(bootstrap, f"{topic}-r")
    assert {p: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs] for p, rs in restored.items()} == \
        {p: [(r.key, r.value, r.headers, r.timestamp_ms) for r in rs] for p, rs in original.items()}
