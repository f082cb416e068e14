"""The pure-logic half of tests/integration/test_worker_crash.py (its docstring covers both halves):
Issue 41: a follower survives a Python worker that dies of SIGSEGV in the middle of a micro-batch, and the crash leaves a Python traceback in the log (faulthandler).
"""

from __future__ import annotations

from topicvault.core.spark import LOCAL_TASK_ATTEMPTS


def test_a_local_master_of_a_follower_retries_tasks():
    from topicvault.core.spark import task_retries

    assert task_retries("local[2]") == f"local[2,{LOCAL_TASK_ATTEMPTS}]"
    assert task_retries("local[*]") == f"local[*,{LOCAL_TASK_ATTEMPTS}]"
    assert task_retries("local") == f"local[1,{LOCAL_TASK_ATTEMPTS}]"
    for chosen in ("local[2,1]", "local[*,8]", "spark://host:7077", "yarn"):
        assert task_retries(chosen) == chosen  # the user's own attempts, or a cluster's spark.task.maxFailures


def test_a_crashed_worker_is_reported_by_spark_s_cause_not_its_header():
    from topicvault.core.spark import failure_reason

    text = ("[STREAM_FAILED] Query [id = f34a, runId = 956c] terminated with exception: Job aborted due to stage "
            "failure: Task 0 in stage 0.0 failed 4 times, most recent failure: Lost task 0.3 in stage 0.0 (TID 3) "
            "(localhost executor driver): org.apache.spark.SparkException: Python worker exited unexpectedly "
            "(crashed). Consider setting 'spark.sql.execution.pyspark.udf.faulthandler.enabled' or'spark.python."
            "worker.faulthandler.enabled' configuration to 'true' for the better Python traceback.\n\tat x.y(z)")
    assert failure_reason(text) == "SparkException: Python worker exited unexpectedly (crashed)"


def test_restarts_back_off_and_are_bounded_in_a_window():
    from topicvault.core.restarts import RestartBudget

    now = [0.0]
    budget = RestartBudget(max_restarts=3, window_s=100, clock=lambda: now[0])
    assert [budget.next_delay() for _ in range(3)] == [1, 2, 4]
    assert budget.next_delay() is None  # the fourth within 100 s: give up
    assert "after 3 restarts in 100 s, giving up: boom" in budget.give_up("followed backup", "boom")
    now[0] = 150.0  # the earlier restarts left the window
    assert budget.next_delay() == 1 and budget.total == 4
