"""Where a one-shot backup's or restore's tasks run: in Spark, or in this process without a JVM.

The plan is built whole before any task runs, so its size is known when the choice is made.
Only *where* the tasks run differs: the same task functions (sink.backup.backup_group,
source.restore.restore_job.restore_group) return what they did, and the driver records it once, either way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .errors import TopicvaultError

# `--executor`, when not given (the test suite sets it to spark, so its jobs keep running on Spark).
EXECUTOR_ENV = "TOPICVAULT_EXECUTOR"
EXECUTORS = ("auto", "spark", "local")

# The largest plan `auto` runs in process. Spark's fixed cost on this 2-core machine is 4-5 s of
# wall time and 7-9 CPU-s before the first record (docs/performance.md, "Fixed cost"); what it buys
# is the other cores. One task in process moves about 75,000 records/s of 200 B and 25,000 of 2 KB
# (50 MB/s) on one core (benchmarks/one_task.py), so the in-process run stays ahead until its data
# takes about twice Spark's start (~8 s: ~600,000 records of 200 B, ~400 MB). The limits sit well
# below that, at ~1.5 s of data, so a machine with more cores than this one loses little by them.
LOCAL_MAX_RECORDS = 100_000
LOCAL_MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ExecutorChoice:
    """Where a job's tasks run (`local` or `spark`) and why, for the run's output."""

    name: str
    reason: str


def choose_executor(asked: str | None, records: int, stored_bytes: int | None, master: str | None
                    ) -> ExecutorChoice:
    """Where a planned job of `records` records (`stored_bytes` of objects to read, None when the
    plan cannot know, as a backup's before it reads) runs its tasks.

    `asked`: --executor (None: $TOPICVAULT_EXECUTOR, else auto). `spark` and `local` are obeyed;
    `auto` is Spark when one is configured (--master, $TOPICVAULT_SPARK_MASTER, spark-submit, a
    session already running in this process) or the plan is past LOCAL_MAX_RECORDS /
    LOCAL_MAX_BYTES, else local. Raises TopicvaultError for an unknown name, or for local with a
    master given (the two contradict each other).
    """
    name = executor_name(asked)
    if name == "local" and master:
        source = "--executor local" if asked else f"${EXECUTOR_ENV}=local"
        raise TopicvaultError(f"{source} runs the tasks in this process, but --master {master} asks for Spark: "
                              "drop one of them")
    configured = _spark_configured(master)
    if name != "auto":
        return ExecutorChoice(name, f"--executor {name}")
    if configured:
        return ExecutorChoice("spark", configured)
    if records > LOCAL_MAX_RECORDS:
        return ExecutorChoice("spark", f"{records:,} records, more than {LOCAL_MAX_RECORDS:,}")
    if stored_bytes is not None and stored_bytes > LOCAL_MAX_BYTES:
        return ExecutorChoice("spark", f"{stored_bytes:,} bytes, more than {LOCAL_MAX_BYTES:,}")
    return ExecutorChoice("local", f"a small plan ({records:,} records at most)")


def plan_executor(plan, asked: str | None, master: str | None) -> ExecutorChoice:
    """Where a planned job's tasks run: choose_executor by the plan's `records` and `stored_bytes`
    (a sink.plan.BackupPlan or source.restore.restore_plan.RestorePlan)."""
    return choose_executor(asked, plan.records, plan.stored_bytes, master)


def executor_name(asked: str | None) -> str:
    """The executor asked for: `asked` (--executor), else $TOPICVAULT_EXECUTOR, else auto; one of
    EXECUTORS, or a TopicvaultError naming the bad value (checked before anything is read)."""
    name = (asked or os.environ.get(EXECUTOR_ENV) or "auto").strip().lower()
    if name not in EXECUTORS:
        source = "--executor" if asked else f"${EXECUTOR_ENV}"
        raise TopicvaultError(f"{source} {name!r} is not an executor: give auto, spark or local")
    return name


def _spark_configured(master: str | None) -> str | None:
    """Why Spark is the user's choice for this run (None: it is not)."""
    if master:
        return f"--master {master}"
    if os.environ.get("TOPICVAULT_SPARK_MASTER"):
        return "$TOPICVAULT_SPARK_MASTER"
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return "spark-submit"
    if "pyspark" in sys.modules:  # only then can a session be running (a program using topicvault as a library)
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is not None:
            return "a Spark session already running"
    return None


def open_executor(choice: ExecutorChoice, master: str | None):
    """The session a one-shot job's tasks run in: core.spark.InProcessSession for `local`, else
    Spark's plain-task session (core.spark.get_task_session: no Spark SQL start-up), whose JVM then
    leaves Ctrl-C to this process (core.process.quiet_spark_interrupts)."""
    from .process import quiet_spark_interrupts
    from .spark import InProcessSession, get_task_session

    if choice.name == "local":
        return InProcessSession()
    session = get_task_session(master)
    quiet_spark_interrupts()
    return session


def monitored(session):
    """The session whose Spark tasks a progress line counts (None: tasks in this process)."""
    from .spark import InProcessSession

    return None if isinstance(session, InProcessSession) else session
