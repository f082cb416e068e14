"""The pure-logic half of tests/integration/test_client_settings.py (its docstring covers both halves):
A Kafka client setting librdkafka rejects: one line naming it, as a real subprocess prints it, with no traceback and no secret, --debug included.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from clitools import CLI

SECRET = "pw-MARKER-9f3c1"


BAD_SETTINGS = [
    (["-X", "no.such.property=1"], ["no.such.property"]),
    (["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=NOT-A-MECHANISM", "-X", "sasl.username=u"],
     ["sasl.mechanism", "NOT-A-MECHANISM"]),
    (["-X", "isolation.level=sometimes"], ["isolation.level"]),
]


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("debug", [False, "before", "after"], ids=["plain", "debug", "debug-after-command"])
@pytest.mark.parametrize("command", ["backup", "restore"])
@pytest.mark.parametrize("settings,needles", BAD_SETTINGS, ids=["unknown", "sasl-mechanism", "bad-value"])
def test_a_rejected_client_setting_is_one_line_naming_it(tmp_path, command, settings, needles, debug):
    # Nothing listens on port 9: the setting must fail before any connection is tried.
    where = ["--to", str(tmp_path / "b"), "-t", "orders"] if command == "backup" else ["--from", str(tmp_path / "b")]
    args = (["--debug"] if debug == "before" else []) + [command, "-b", "127.0.0.1:9", *where, *settings,
                                                         "-X", f"sasl.password={SECRET}"]
    args += ["--debug"] if debug == "after" else []  # #40 item 9: accepted after the command too
    result = run(args)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert SECRET not in output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    for needle in needles:
        assert needle in errors[0], errors[0]
    if debug:
        assert "Traceback" in output  # --debug shows where, still without the secret
    else:
        assert result.stderr.strip() == errors[0], output
        assert "Traceback" not in output
    assert not (tmp_path / "b").exists(), "nothing may be written"


def test_librdkafka_notices_never_reach_stderr():
    """librdkafka writes its own log lines (notices such as "Purging 1 unserved events from background
    queue") straight to stderr unless the client has a Python logger; under spark-submit the driver's
    stderr is merged into stdout, so one such line broke `--json` output. Clients topicvault builds
    route them through `logging` (notices dropped, warnings shown)."""
    script = (
        "import logging, time\n"
        "from confluent_kafka.admin import AdminClient\n"
        "from topicvault.core.cluster.kafka import KafkaSettings, new_client\n"
        "settings = KafkaSettings.of('127.0.0.1:1')\n"
        "admin = new_client(AdminClient, settings, settings.client_config(debug='generic', log_level=7))\n"
        "time.sleep(1)\n"
        "admin.poll(0.5)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    # librdkafka's own format is "%LEVEL|time|FACILITY|client| message"; through logging only
    # warnings and errors remain (here: the refused connection), none of the debug lines.
    assert not re.search(r"^%\d\|", done.stderr, re.M), done.stderr[:2000]
    assert "Connection refused" in done.stderr and len(done.stderr.splitlines()) < 10, done.stderr[:2000]
