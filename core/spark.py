"""The Spark session topicvault runs its jobs in, and registration of its data sources."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import TopicvaultError

LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


def get_spark(master: str | None = None, app_name: str = "topicvault"):
    """Return the active Spark session or start one (default master local[*]).

    Workers must run this interpreter (the one topicvault is installed in), so PYSPARK_PYTHON
    is set before the session starts unless the user already chose one.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the Python driver is started by the JVM (PYSPARK_GATEWAY_PORT set) and
    # spark-submit's --master is already in the conf: only an explicit --master overrides it.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not submitted:
        builder = builder.master(master or os.environ.get("TOPICVAULT_SPARK_MASTER", "local[*]"))
    builder = (
        builder
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.task.maxFailures", "4")
        # A speculative copy of a restore task is a second producer writing the same partition
        # (see check_no_speculation); this wins over spark-defaults.conf and --conf.
        .config("spark.speculation", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}")
    )
    spark = builder.getOrCreate()
    # Task failures reach the user as one line (see run_tasks), not as JVM log tracebacks.
    spark.sparkContext.setLogLevel("OFF")
    ship_wheels(spark.sparkContext)
    return spark


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
