"""The Spark session topicvault runs its jobs in, and registration of its data sources."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pkgutil
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .errors import TopicvaultError
from .process import release_at_exit

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
    # Python workers dump their threads' Python stacks to stderr (the log) when they die of a
    # native crash (see _prepare_environment). Not Spark's spark.python.worker.faulthandler.enabled:
    # it sends the dump into the failed task's error instead, which the log never shows for a task
    # Spark retried, and which a failed follower reports by its one last line.
    ("spark.executorEnv.PYTHONFAULTHANDLER", "1"),
    ("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"),
)


def get_spark(master: str | None = None, app_name: str = "topicvault", retry_tasks: bool = False):
    """Return the active Spark session or start one (default master local[*]; with `retry_tasks`,
    as the followers start theirs, a local master retries tasks: see task_retries).

    Workers must run this interpreter (the one topicvault is installed in), so PYSPARK_PYTHON
    is set before the session starts unless the user already chose one.
    """
    _prepare_environment()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    chosen = _master(master)
    if chosen:
        builder = builder.master(task_retries(chosen) if retry_tasks else chosen)
    for name, value in SESSION_SETTINGS:
        builder = builder.config(name, value)
    _launch_quiet_jvm(builder._options)
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


@dataclass(frozen=True)
class InProcessContext:
    """What the fused jobs read of a SparkContext when their tasks run in this process: one task
    at a time (`defaultParallelism` 1, so a job's partitions form one task group) and no settings
    (`getConf().get(name, default)` gives the default: no speculation)."""

    defaultParallelism: int = 1
    master: str = "in-process"

    def getConf(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True)
class InProcessSession:
    """A session whose tasks run_tasks runs in this process, one after another, without a JVM
    (core.executor chooses it for a small plan). Passed where a SparkSession is expected."""

    sparkContext: InProcessContext = InProcessContext()


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
    _launch_quiet_jvm(dict(conf.getAll()))
    context = SparkContext.getOrCreate(conf)
    _started(context)
    return TaskSession(context)


# Spark's launcher starts every JVM with --add-modules=jdk.incubator.vector (JavaModuleOptions),
# so the JVM prints this line on every start, and no JVM flag silences it.
_JVM_NOISE = b"WARNING: Using incubator modules: jdk.incubator.vector"


def _launch_quiet_jvm(settings: dict[str, str]) -> None:
    """Start the driver JVM (as SparkContext would, with these settings) with its stderr passed on
    to ours line by line, without the incubator-modules warning. Not when a JVM already runs
    (an earlier session, or spark-submit's, which started this Python)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
            return
        # A pipe read from before the JVM starts: it can never fill and stall the JVM's start.
        readable, writable = os.pipe()
        threading.Thread(target=_pass_on_stderr, args=(readable,), name="jvm-stderr", daemon=True).start()
        try:
            with _ending_signals_held():
                gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(settings.items()),
                                         popen_kwargs={"stderr": writable})
                SparkContext._gateway, SparkContext._jvm = gateway, gateway.jvm
                release_at_exit(lambda: _release_jvm(gateway))  # before a held signal ends this process
        finally:
            os.close(writable)


def _release_jvm(gateway) -> None:
    """Make the driver JVM end (it exits when its stdin closes), quietly: this process is ending,
    its outcome already said, and what still talks to the JVM would print the JVM's end as
    tracebacks: py4j logs a call in flight on another thread ("Exception while sending command",
    seen in CI after a restore failed), such a thread's error reaches threading.excepthook, and the
    accumulator server of pyspark's context prints its connection's end."""
    import logging

    from pyspark import SparkContext

    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None
    context = SparkContext._active_spark_context
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda request, client_address: None
    gateway.proc.stdin.close()


# The signals that end a topicvault process: Ctrl-C, and a supervisor's SIGTERM.
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _ending_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM during the block, then act on them as if they had come just after it.

    For the launch of the driver JVM: pyspark waits for the JVM to write its port into a file of a
    temporary folder, and an exception there (KeyboardInterrupt, SystemExit) deletes the folder and
    leaves the JVM behind: it fails to write the file, its py4j server thread keeps it running,
    orphaned, and it holds this process's stdout, so a caller reading that to its end hangs (issue
    #50 item 17). Once launched, the JVM reads its stdin, a pipe from this process, and exits when
    it closes: whatever way this process ends. The launch takes seconds; a signal waits that long.
    Only the main thread sets signal handlers (elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum))
                for signum in ENDING_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)  # the handler it would have met: KeyboardInterrupt, SystemExit


def _pass_on_stderr(readable: int) -> None:
    with os.fdopen(readable, "rb") as lines:
        for line in lines:
            if not line.startswith(_JVM_NOISE):
                os.write(2, line)


def _prepare_environment() -> None:
    _quiet_submitted_jvm()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers a local master forks inherit this environment: faulthandler prints every thread's
    # Python stack to stderr when a worker dies of SIGSEGV, SIGBUS, SIGFPE or SIGABRT.
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    if not faulthandler.is_enabled():  # the driver too (it runs Kafka and S3 clients)
        faulthandler.enable()


def _quiet_submitted_jvm() -> None:
    """Under spark-submit, configure the JVM's logging from LOG4J_CONFIG before a SparkContext starts.

    A JVM topicvault starts reads LOG4J_CONFIG from spark.driver.extraJavaOptions (SESSION_SETTINGS); the one
    spark-submit started (PYSPARK_GATEWAY_PORT set) was configured before topicvault ran, with Spark's default
    profile, and the context's start logged 40-90 INFO lines on stderr.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts no context
    jvm = SparkContext._jvm
    try:
        # spark-submit leaves Spark's logging uninitialised for the application: the context's first log line
        # would load Spark's default profile over any configuration set before. Initialise it now (silently),
        # then configure.
        jvm.org.apache.spark.SparkConf(False).initializeLogIfNecessary(False, True)
        with _log4j_config() as config:
            jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI(config.as_uri()))
    except Py4JError:  # another Spark or log4j than this was written for: its log lines, but the job runs
        pass


@contextlib.contextmanager
def _log4j_config() -> Iterator[Path]:
    """LOG4J_CONFIG as a file the JVM can read: a copy while in use when topicvault is imported
    from a wheel (spark-submit --py-files), where it is inside the zip. The copy gets a new name
    (mkstemp, O_EXCL): a fixed name in a shared /tmp could be a symlink another user planted."""
    if LOG4J_CONFIG.is_file():
        yield LOG4J_CONFIG
        return
    handle, name = tempfile.mkstemp(prefix="topicvault-", suffix=f"-{LOG4J_CONFIG.name}")
    try:
        with os.fdopen(handle, "wb") as copy:
            copy.write(pkgutil.get_data(__name__, LOG4J_CONFIG.name))
        yield Path(name)
    finally:
        os.unlink(name)


def _master(master: str | None) -> str | None:
    """The master to set, if any. Under spark-submit the Python driver is started by the JVM
    (PYSPARK_GATEWAY_PORT set) and spark-submit's --master is already in the conf: only an
    explicit --master overrides it."""
    if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
        return master or os.environ.get("TOPICVAULT_SPARK_MASTER", "local[*]")
    return None


# Attempts of a task in a local master (as spark.task.maxFailures, which local mode ignores).
LOCAL_TASK_ATTEMPTS = 4
_LOCAL_MASTER = re.compile(r"local\[(\*|\d+)\]")


def task_retries(master: str) -> str:
    """`master` with task retries: local mode ignores spark.task.maxFailures and runs every task
    once unless the master string says local[N,F], so local and local[N] become local[N,4].

    A follower's task is safe to run again: a micro-batch's objects have keys of its own run
    and only the commit publishes them (backup --follow), and a restore task counts what an
    earlier attempt produced (restore --follow). A worker that crashed then costs one attempt,
    not the micro-batch or the round. (One-shot runs keep local mode's single attempt: a task
    that failed with a TopicvaultError, such as a broker down for the idle timeout, would only
    fail three more times before the one line is shown.)
    """
    if master == "local":
        return f"local[1,{LOCAL_TASK_ATTEMPTS}]"
    match = _LOCAL_MASTER.fullmatch(master)
    return f"local[{match.group(1)},{LOCAL_TASK_ATTEMPTS}]" if match else master


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


def workers_python(sc) -> str:
    """The Python that the workers of topicvault's data sources are to run in session `sc`.

    Spark starts `sc.pythonExec` (PYSPARK_PYTHON, else the `python3` on PATH), which need not be
    the Python topicvault is installed in (a venv not activated). That one when it imports
    topicvault; else on a local master (workers on this machine) with PYSPARK_PYTHON unset, this
    interpreter, as the CLI sets it; else a one-line error saying how to fix it.
    """
    chosen = sc.pythonExec
    local = sc.master.startswith("local")
    problem = _local_import_problem(chosen) if local else _worker_import_problem(sc)
    if problem is None:
        return chosen
    if local and "PYSPARK_PYTHON" not in os.environ:
        return sys.executable
    fix = (f"set PYSPARK_PYTHON to a Python that has it before the session starts, e.g. "
           f"PYSPARK_PYTHON={sys.executable}" if local else
           "install topicvault in the executors' Python, or give spark-submit --py-files with topicvault's wheel "
           "(docs/operations.md: Running on a Spark cluster)")
    raise TopicvaultError(f"Spark's Python workers ({chosen}) cannot import topicvault ({problem}): {fix}")


def _local_import_problem(python: str) -> str | None:
    """Why `python` on this machine cannot import topicvault (None: it can)."""
    try:
        done = subprocess.run([python, "-c", "import topicvault"], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    lines = done.stderr.strip().splitlines()
    return None if done.returncode == 0 else (lines[-1] if lines else f"exit status {done.returncode}")


def _worker_import_problem(sc) -> str | None:
    """Why an executor's Python cannot import topicvault (None: it can), found by a one-task job."""
    try:
        sc.parallelize([0], 1).map(lambda _: __import__("topicvault") and 0).collect()
    except Exception as exc:  # Py4JJavaError / PythonException: the worker's error as text
        return failure_reason(str(exc))
    return None


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
    if "pyspark" not in sys.modules:  # a task run in process (InProcessSession): no pyspark to import
        return 0
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def run_tasks(spark, function, specs: list) -> list:
    """Run `function(spec)` for every spec as one Spark task each; return the results in order.

    A task that failed with a TopicvaultError fails the job with that same one-line error. In an
    InProcessSession the tasks run here, one after another, and their errors pass unchanged.
    """
    if not specs:
        return []
    if isinstance(spark, InProcessSession):
        return [function(spec) for spec in specs]
    from .errors import TopicvaultError

    try:
        return spark.sparkContext.parallelize(specs, len(specs)).map(_reporting_errors(function)).collect()
    except Exception as exc:  # Py4JJavaError / PythonException carry the worker's message as text
        text = str(exc)
        start = text.find(_ERROR_MARK)
        if start < 0:
            raise
        raise TopicvaultError(text[start + len(_ERROR_MARK) :].splitlines()[0]) from None


# A Python exception's last line in a traceback Spark wraps: "OSError: [Errno 28] ..."
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt): \S.*$")


def failure_reason(text: str) -> str:
    """The one-line reason of a failed Spark job or query: a TopicvaultError's own message where Spark wrapped
    one, else the last exception line of the traceback inside (Spark's first line,
    "[STREAM_FAILED] Query [...] terminated with exception:", names no cause)."""
    mark = "TopicvaultError: "
    at = text.rfind(mark)
    if at >= 0:
        line = text[at + len(mark):].splitlines()[0]
    else:
        causes = [line.strip() for line in text.splitlines()
                  if _EXCEPTION_LINE.match(line.strip()) and not line.rstrip().endswith("(most recent call last):")]
        line = causes[-1] if causes else _cause_inside(text)
    return line.split(" SQLSTATE:")[0]


# "... most recent failure: Lost task 0.3 in stage 0.0 (TID 3) (localhost executor driver):
# org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting ..."
_CAUSE_INSIDE = re.compile(r"^(?:.*[\s:])?(?:[a-z_]\w*\.)*([A-Z]\w*(?:Error|Exception)): (.+?)(?:\. Consider setting .*)?$")


def _cause_inside(text: str) -> str:
    """The last exception named in the first line of `text` that names one (Spark's one-line
    failure of a job, such as a crashed worker's), else the first line."""
    lines = text.splitlines() or [""]
    for line in lines:
        found = _CAUSE_INSIDE.match(line)
        if found:
            return f"{found.group(1)}: {found.group(2)}"
    return lines[0]
