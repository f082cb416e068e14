"""The pure-logic half of tests/integration/test_bad_input.py (its docstring covers both halves):
Bad input: one line naming what is wrong, a non-zero exit, no traceback, nothing half-done.
"""

from __future__ import annotations

import pytest
from clitools import assert_one_line_error, run_cli


@pytest.mark.parametrize("command", ["backup", "compact"])
def test_time_partition_and_key_template_together_are_refused_before_anything_is_written(tmp_path, command):
    location = tmp_path / "backup"
    backup_only = ["-b", "127.0.0.1:1", "-t", "x", "--to", str(location)] if command == "backup" else [str(location)]
    out = run_cli(command, *backup_only, "--time-partition", "day", "--key-template", "{{topic}}/{{start_offset}}",
                  expect_exit=1)
    assert_one_line_error(out, "--time-partition and --key-template")
    assert not location.exists()


def test_a_request_the_cluster_never_answers_is_one_line_that_says_so(capsys):
    # An admin future waited on past its time raises concurrent.futures.TimeoutError, whose text is
    # empty: it used to print "error: unexpected TimeoutError: " (seen with two of three brokers down).
    import concurrent.futures

    import typer
    from topicvault.cli import reports_errors

    @reports_errors
    def command() -> None:
        raise concurrent.futures.TimeoutError()

    with pytest.raises(typer.Exit) as stopped:
        command()
    assert stopped.value.exit_code == 1
    assert_one_line_error(capsys.readouterr().err, "did not answer a request in time", "brokers are up")
