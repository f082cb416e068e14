"""The pure-logic half of tests/integration/test_follow_metrics.py (its docstring covers both halves):
`backup --follow --metrics-port N` (issue #18 item 7): a follower serves Prometheus metrics that match what it backed up, and stops serving (its port free again) when it stops.
"""

from __future__ import annotations

import socket

from clitools import assert_one_line_error, run_cli


def test_a_metrics_port_in_use_is_a_one_line_error_before_anything_is_written(tmp_path):
    location = tmp_path / "loc"
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        output = run_cli("backup", "--follow", "-b", "127.0.0.1:1", "--to", str(location), "-t", "t",
                         "--metrics-port", str(port), expect_exit=1)
    assert_one_line_error(output, f"--metrics-port {port} is in use by another process", "pick a free port")
    assert not location.exists()
    output = run_cli("backup", "-b", "127.0.0.1:1", "--to", str(location), "-t", "t", "--metrics-port", "9999",
                     expect_exit=1)
    assert_one_line_error(output, "--metrics-port works with --follow")
    assert not location.exists()
