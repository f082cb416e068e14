"""The pure-logic half of test_harness (no broker, S3 server or Spark).

The harness itself: the broker, the stores and Spark are real and behave.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from topicvault.core.embedded_broker import EmbeddedBroker


def test_embedded_broker_starts_and_stops():
    with EmbeddedBroker() as broker:
        pid = broker.process.pid
        assert broker.bootstrap.startswith("127.0.0.1:")
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_a_killed_owner_takes_its_broker_and_s3_server_with_it(tmp_path):
    """SIGKILL leaves no chance to clean up: a broker or S3 server outliving a killed pytest (or
    demo) kept its port and, under CI, could keep CI's pipe open past its limit."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from pathlib import Path
        from harness_s3 import moto_server
        from topicvault.core.embedded_broker import EmbeddedBroker
        broker = EmbeddedBroker(log_dir={str(tmp_path)!r}).start()
        with moto_server(Path({str(tmp_path)!r})):
            print(broker.process.pid, flush=True)
            time.sleep(600)
    """))
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    broker_pid = int(owner.stdout.readline())
    servers = [int(p) for p in subprocess.run(["pgrep", "-P", str(owner.pid)], capture_output=True, text=True)
               .stdout.split()]
    assert broker_pid in servers and len(servers) == 2, servers
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(30)

    def running() -> list[int]:
        alive = []
        for pid in servers:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass
        return alive

    deadline = time.monotonic() + 20
    try:
        while running():
            assert time.monotonic() < deadline, f"still running after their owner was killed: {running()}"
            time.sleep(0.2)
    finally:
        for pid in running():  # never leave them behind, even when the test fails
            os.kill(pid, signal.SIGKILL)
