"""Run the topicvault CLI in-process (sharing the test session's Spark) and check its exit."""

from __future__ import annotations

from topicvault.cli import app
from typer.testing import CliRunner


def run_cli(*args: str, expect_exit: int = 0) -> str:
    """Run `topicvault ARGS`; assert the exit code; return stdout+stderr."""
    result = CliRunner().invoke(app, list(args))
    output = result.output  # click >= 8.2: stdout and stderr interleaved
    assert result.exit_code == expect_exit, f"exit {result.exit_code} for {args}:\n{output}\n{result.exception!r}"
    return output
