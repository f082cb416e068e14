"""The pure-logic half of tests/integration/test_follow.py (its docstring covers both halves):
`backup --follow`: continuous backup survives SIGKILL, stops cleanly on SIGTERM, restores exactly.
"""

from __future__ import annotations


def test_a_stream_starting_after_retention_moved_the_log_start_fails_instead_of_skipping_offsets():
    """A follow plans (and commits the offsets retention deleted before it), then its stream
    starts reading the watermarks again. Retention that moved a log start in between (real Kafka:
    every 5 minutes by default) must not be stepped over in silence: the micro-batch's commit
    would cover the deleted offsets as a gap, never reported as lost."""
    from topicvault.core.errors import TopicvaultError
    from topicvault.sink.stream import stream_start_offsets

    watermarks = {"t:0": (10, 50), "t:1": (0, 7), "u:0": (3, 9)}
    # Committed ends at or after the log start, and partitions the archive never had: start there.
    assert stream_start_offsets({"t:0": 10, "t:1": 7}, watermarks) == {"t:0": 10, "t:1": 7, "u:0": 3}
    assert stream_start_offsets({"t:0": 30}, watermarks)["t:0"] == 30
    try:
        stream_start_offsets({"t:0": 4, "t:1": 7}, watermarks)
    except TopicvaultError as exc:
        assert "t[0]" in str(exc) and "4..9" in str(exc) and "run again" in str(exc)
    else:
        raise AssertionError("offsets 4..9, deleted after the plan, were stepped over")


def test_a_failed_query_is_reported_by_its_cause_not_by_spark_s_header():
    """Spark's text of a failed stream starts with "[STREAM_FAILED] Query [...] terminated with
    exception:" and the cause follows on later lines: the one-line report printed nothing of it."""
    from topicvault.core.spark import failure_reason as _reason

    spark_text = ("[STREAM_FAILED] Query [id = 6af6, runId = 5106] terminated with exception: \n"
                  "Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times, most recent failure: "
                  "Lost task 0.3 in stage 3.0 (TID 9) (host executor driver): org.apache.spark.api.python."
                  "PythonException: Traceback (most recent call last):\n"
                  '  File "/x/worker.py", line 1, in main\n'
                  "OSError: [Errno 28] No space left on device\n"
                  "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n"
                  "Driver stacktrace:\n"
                  "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n")
    assert _reason(spark_text) == "OSError: [Errno 28] No space left on device"
    ours = spark_text.replace("OSError: [Errno 28] No space left on device",
                              "topicvault.core.errors.TopicvaultError: t[0] ended at offset 10 SQLSTATE: 39000")
    assert _reason(ours) == "t[0] ended at offset 10"
    assert _reason("something odd happened") == "something odd happened"


def test_backup_options_that_do_not_apply_are_one_line_errors_before_anything_runs(tmp_path):
    """Issue #50 item 13: `backup --follow --dry-run` ran a real continuous backup (the --follow
    branch returned before --dry-run was looked at), and --full, --records-per-task, --json and
    --quiet were silently ignored with --follow; --flush-interval and --max-records-per-trigger
    without --follow too. Each is refused in one line naming it, before any connection or write."""
    from clitools import assert_one_line_error, run_cli

    location = tmp_path / "none"
    for extra, needle in ((["--follow", "--dry-run"], "--dry-run"), (["--follow", "--full"], "--full"),
                          (["--follow", "--records-per-task", "10"], "--records-per-task"),
                          (["--follow", "--json"], "--json"), (["--follow", "--quiet"], "--quiet"),
                          (["--follow", "-q"], "--quiet"),
                          (["--flush-interval", "5"], "--flush-interval"),
                          (["--max-records-per-trigger", "10"], "--max-records-per-trigger"),
                          (["--metrics-port", "9400"], "--metrics-port")):
        out = run_cli("backup", "--to", str(location), "-b", "127.0.0.1:1", "-t", "t", *extra, expect_exit=1)
        assert_one_line_error(out, needle)
    assert not location.exists()
