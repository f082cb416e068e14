"""README's DataFrame snippet runs as written (#40 item 5): extracted from README.md and run as a
script in a fresh process with the venv's Python, not activated, so the `python3` on PATH is one
without topicvault (as a user has it). Before: `spark` was never defined, and once it was, Spark's
workers started that `python3` and failed with "No module named 'topicvault'"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import python_without_topicvault  # noqa: F401 - a fixture
from kafkatools import produce_records
from nasty import nasty_records
from topicvault.core.errors import TopicvaultError

README = Path(__file__).resolve().parents[2] / "README.md"


def dataframe_snippet() -> str:
    """The first python block under README's "## DataFrame API"."""
    section = README.read_text().split("\n## DataFrame API\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def path_without_topicvault(tmp_path, python_without_topicvault) -> str:  # noqa: F811
    """PATH whose `python3` (and `python`) cannot import topicvault."""
    bin_dir = tmp_path / "user-bin"
    bin_dir.mkdir()
    for name in ("python3", "python"):
        (bin_dir / name).symlink_to(python_without_topicvault)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_readme_dataframe_snippet_runs_as_a_script(bootstrap, spark, topic_factory, s3_uri, tmp_path,
                                                   path_without_topicvault):
    topic = topic_factory(2, prefix="snippet")
    produce_records(bootstrap, topic, nasty_records(topic, 2, 40, big_values=0))
    code = dataframe_snippet()
    for placeholder in ("localhost:9092", '"orders"', "s3://my-bucket/kafka"):
        assert placeholder in code, placeholder
    script = tmp_path / "pipeline.py"
    script.write_text(code.replace("localhost:9092", bootstrap).replace('"orders"', f'"{topic}"')
                      .replace("s3://my-bucket/kafka", s3_uri))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env |= {"PATH": path_without_topicvault, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=400, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    shown = [line for line in done.stdout.splitlines() if line.startswith("|")]
    assert shown[0].replace(" ", "").startswith("|key|value|topic|partition|offset|"), done.stdout
    assert len(shown) > 1 and all(f"|{topic}|0|" in line.replace(" ", "") for line in shown[1:]), done.stdout
    assert "No module named" not in done.stderr


def test_register_runs_the_sources_workers_on_this_python_when_the_sessions_cannot_import_topicvault(
        spark, python_without_topicvault, monkeypatch):  # noqa: F811
    from topicvault.core.spark import workers_python

    context = spark.sparkContext
    monkeypatch.setattr(context, "pythonExec", str(python_without_topicvault))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert workers_python(context) == sys.executable  # a local master: the workers run on this machine
    monkeypatch.setattr(context, "pythonExec", sys.executable)
    assert workers_python(context) == sys.executable


def test_register_refuses_a_chosen_python_without_topicvault_in_one_line(
        spark, python_without_topicvault, monkeypatch):  # noqa: F811
    from topicvault.core.spark import workers_python

    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(python_without_topicvault))
    monkeypatch.setenv("PYSPARK_PYTHON", str(python_without_topicvault))  # the user's choice: not overridden
    with pytest.raises(TopicvaultError) as refused:
        workers_python(spark.sparkContext)
    message = str(refused.value)
    assert "\n" not in message
    assert f"Spark's Python workers ({python_without_topicvault}) cannot import topicvault" in message
    assert "No module named 'topicvault'" in message and f"PYSPARK_PYTHON={sys.executable}" in message
