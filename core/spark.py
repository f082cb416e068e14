"""The Spark session topicvault runs its jobs in, and registration of its data sources."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TopicvaultError

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


# Settings of every session topicvault starts.
SESSION_SETTINGS = (
    ("spark.ui.enabled", "false"),
    ("spark.ui.showConsoleProgress", "false"),
    ("spark.sql.shuffle.partitions", "8"),
    ("spark.task.maxFailures", "4"),
    # A speculative copy of a restore task is a second producer writing the same partition
    # (see check_no_speculation); this wins over spark-defaults.conf and --conf.
    ("spark.speculation", "false"),
    ("spark.python.worker.reuse", "true"),
    ("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"),
)


def get_spark(master: str | None = None, app_name: str = "topicvault"):
    """Return the active Spark session or start one (default master local[*]).

    Workers must run this interpreter (the one topicvault is installed in), so PYSPARK_PYTHON
    is set before the session starts unless the user already chose one.
    """
    _prepare_environment()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if _master(master):
        builder = builder.master(_master(master))
    for name, value in SESSION_SETTINGS:
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    _started(spark.sparkContext)
    return spark


# The driver JVM of a task session only schedules tasks and passes their small specs and
# results: the quick (C1) compiler alone and the serial collector start it in about half the
# time on 2 busy cores (JVM + context + first job: 6-12 s against 15-21 s measured), as no
# C2 compiler or parallel GC threads compete with the workers and the broker.
TASK_DRIVER_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class TaskSession:
    """What the fused backup and restore jobs use of a Spark session: its SparkContext (they run
    plain tasks, no SQL). Passed where a SparkSession is expected (`spark.sparkContext`)."""

    sparkContext: Any


def get_task_session(master: str | None = None, app_name: str = "topicvault"):
    """The active Spark session if there is one, else a TaskSession over a started SparkContext
    (settings as get_spark's).

    For the CLI's backup and restore: starting Spark SQL's session on top of the context cost
    about 4 s of a 12 s run of an empty topic on 2 cores, for nothing these jobs use; the
    driver JVM starts with TASK_DRIVER_JVM_OPTIONS.
    """
    _prepare_environment()
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    conf = SparkConf().setAppName(app_name)
    if _master(master):
        conf.setMaster(_master(master))
    conf.setAll(SESSION_SETTINGS)
    conf.set("spark.driver.extraJavaOptions", f"{conf.get('spark.driver.extraJavaOptions')} {TASK_DRIVER_JVM_OPTIONS}")
    context = SparkContext.getOrCreate(conf)
    _started(context)
    return TaskSession(context)


def _prepare_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _master(master: str | None) -> str | None:
    """The master to set, if any. Under spark-submit the Python driver is started by the JVM
    (PYSPARK_GATEWAY_PORT set) and spark-submit's --master is already in the conf: only an
    explicit --master overrides it."""
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        return master or os.environ.get("TOPICVAULT_SPARK_MASTER", "local[*]")
    return None


def _started(context) -> None:
    # Task failures reach the user as one line (see run_tasks), not as JVM log tracebacks.
    context.setLogLevel("OFF")
    ship_wheels(context)


def ship_wheels(sc) -> list[str]:
    """Put wheels given to spark-submit --py-files on the executors' Python path; return their names.

    PySpark adds only .zip/.egg/.jar py-files to the workers' sys.path, although a pure-Python
    wheel is a zip that Python imports from just as well; spark-submit has already copied the
    files to every executor, so naming them as Python includes is all that is missing.
    """
    names = []
    for path in sc.getConf().get("spark.submit.pyFiles", "").split(","):
        name = os.path.basename(path)
        if name.lower().endswith(".whl") and name not in sc._python_includes:
            sc._python_includes.append(name)
            names.append(name)
    return names


def check_no_speculation(spark, job: str) -> None:
    """Refuse to run `job` in a session that runs speculative task attempts.

    Two attempts of one restore task would both produce the partition: records twice. Spark
    reads spark.speculation once, when the SparkContext starts, so it cannot be switched off
    for one job of a running session.
    """
    refuse_speculation(spark.sparkContext.getConf().get("spark.speculation"), job)


def refuse_speculation(setting: str | None, job: str) -> None:
    """check_no_speculation for a `spark.speculation` value already read (e.g. by a task, from its
    local properties, where Spark SQL passes the session's settings)."""
    if (setting or "false").strip().lower() == "true":
        raise TopicvaultError(
            f"the Spark session runs speculative task attempts (spark.speculation=true), which would make {job} "
            "write records twice: start the session with spark.speculation=false"
        )


_ERROR_MARK = "TOPICVAULT-ERROR: "


def _reporting_errors(function):
    """Wrap a task function so a TopicvaultError keeps its one-line message across the JVM."""

    def task(spec):
        from .errors import TopicvaultError

        try:
            return function(spec)
        except TopicvaultError as exc:
            raise RuntimeError(f"{_ERROR_MARK}{exc}") from None

    return task


def task_attempt() -> int:
    """The attempt number of the Spark task this runs in (0: its first attempt, or not in a task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def run_tasks(spark, function, specs: list) -> list:
    """Run `function(spec)` for every spec as one Spark task each; return the results in order.

    A task that failed with a TopicvaultError fails the job with that same one-line error.
    """
    if not specs:
        return []
    from .errors import TopicvaultError

    try:
        return spark.sparkContext.parallelize(specs, len(specs)).map(_reporting_errors(function)).collect()
    except Exception as exc:  # Py4JJavaError / PythonException carry the worker's message as text
        text = str(exc)
        start = text.find(_ERROR_MARK)
        if start < 0:
            raise
        raise TopicvaultError(text[start + len(_ERROR_MARK) :].splitlines()[0]) from None
