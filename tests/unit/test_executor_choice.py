"""Where a one-shot job's tasks run (core.executor): the choice, from the plan's size and the options."""

from __future__ import annotations

import sys

import pytest
from topicvault.core.errors import TopicvaultError
from topicvault.core.executor import EXECUTOR_ENV, LOCAL_MAX_BYTES, LOCAL_MAX_RECORDS, choose_executor
from topicvault.core.spark import InProcessSession, run_tasks, task_attempt


@pytest.fixture(autouse=True)
def no_spark_configured(monkeypatch):
    for name in (EXECUTOR_ENV, "TOPICVAULT_SPARK_MASTER", "PYSPARK_GATEWAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    # A worker of the suite that ran an integration test first holds a Spark session, which auto
    # obeys (the choice depended on which tests ran before in the same process).
    if "pyspark" in sys.modules:
        from pyspark.sql import SparkSession

        monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))


def test_auto_runs_a_small_plan_in_process():
    assert choose_executor(None, 4, None, None).name == "local"
    assert choose_executor("auto", LOCAL_MAX_RECORDS, LOCAL_MAX_BYTES, None).name == "local"


def test_auto_runs_a_large_plan_on_spark():
    by_records = choose_executor("auto", LOCAL_MAX_RECORDS + 1, None, None)
    assert by_records.name == "spark" and "100,001 records" in by_records.reason
    by_bytes = choose_executor("auto", 10, LOCAL_MAX_BYTES + 1, None)
    assert by_bytes.name == "spark" and "bytes" in by_bytes.reason


def test_auto_runs_on_spark_when_a_master_is_configured(monkeypatch):
    assert choose_executor("auto", 1, 1, "local[2]") == choose_executor(None, 1, 1, "local[2]")
    assert choose_executor(None, 1, 1, "spark://h:7077").reason == "--master spark://h:7077"
    monkeypatch.setenv("TOPICVAULT_SPARK_MASTER", "local[1]")
    assert choose_executor(None, 1, 1, None).name == "spark"
    monkeypatch.delenv("TOPICVAULT_SPARK_MASTER")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")  # the Python driver spark-submit started
    assert choose_executor(None, 1, 1, None).reason == "spark-submit"


def test_asked_executor_is_obeyed_whatever_the_size(monkeypatch):
    assert choose_executor("spark", 1, 1, None).name == "spark"
    assert choose_executor("local", 10 * LOCAL_MAX_RECORDS, None, None).name == "local"
    monkeypatch.setenv(EXECUTOR_ENV, "spark")  # the default when --executor is not given
    assert choose_executor(None, 1, 1, None).name == "spark"
    assert choose_executor("local", 1, 1, None).name == "local"  # the option wins over the variable


def test_bad_executor_or_local_with_a_master_is_one_line(monkeypatch):
    with pytest.raises(TopicvaultError, match=r"--executor 'jvm' is not an executor: give auto, spark or local"):
        choose_executor("jvm", 1, 1, None)
    with pytest.raises(TopicvaultError, match=r"--executor local runs the tasks in this process, but --master "
                                              r"local\[2\] asks for Spark"):
        choose_executor("local", 1, 1, "local[2]")
    monkeypatch.setenv(EXECUTOR_ENV, "sparkk")
    with pytest.raises(TopicvaultError, match=r"\$TOPICVAULT_EXECUTOR 'sparkk' is not an executor"):
        choose_executor(None, 1, 1, None)


def test_in_process_session_runs_tasks_in_order_and_passes_errors():
    session = InProcessSession()
    assert session.sparkContext.defaultParallelism == 1
    assert session.sparkContext.getConf().get("spark.speculation") is None
    assert run_tasks(session, lambda spec: spec * 2, [3, 1, 2]) == [6, 2, 4]
    assert task_attempt() == 0

    def failing(spec):
        raise TopicvaultError(f"task {spec} failed")

    with pytest.raises(TopicvaultError, match="^task 1 failed$"):
        run_tasks(session, failing, [1])
