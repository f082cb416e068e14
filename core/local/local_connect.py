"""A local Kafka Connect worker (standalone mode) on loopback, for the peer-sink tests and benchmarks.

The worker's jars and plugin folder come from `ci/connect-jars.sh` (run by the set-up), found
through `TOPICVAULT_CONNECT_CACHE` or the default cache folder. It logs to a file in its own
folder, dies with the thread that started it, and takes connectors through its REST API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TopicvaultError
from . import jvm
from .embedded_broker import free_port

CONNECT_VERSION = "4.4.0"
DEFAULT_CACHE = Path.home() / ".cache" / "topicvault"

# Quick commits: a sink writes its objects when the worker commits its offsets.
BASE_CONFIG = {
    "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "offset.flush.interval.ms": "1000",
    # Plugins found through their ServiceLoader manifests (Kafka's own and the harness jar have
    # them): a worker starts in ~5 s instead of ~25 s of scanning every class of the plugin path.
    "plugin.discovery": "service_load",
    "task.shutdown.graceful.timeout.ms": "5000",
}


def connect_folders() -> tuple[Path, Path]:
    """The Connect jars folder and the plugin.path folder, or a one-line error saying how to get them."""
    cache = Path(os.environ.get("TOPICVAULT_CONNECT_CACHE") or DEFAULT_CACHE)
    jars, plugins = cache / f"connect-{CONNECT_VERSION}" / "jars", cache / "connect-plugins"
    if not any(jars.glob("connect-runtime-*.jar")) or not plugins.is_dir():
        raise TopicvaultError(f"no Kafka Connect jars in {cache}: run `bash ci/connect-jars.sh`")
    return jars, plugins


@dataclass
class LocalConnect:
    """`with LocalConnect(bootstrap) as connect: connect.put(name, config)` — a standalone worker
    started on enter and stopped (its folder removed) on exit. `config` adds to or overrides the
    worker's properties."""

    bootstrap: str
    config: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    folder: Path | None = None
    process: subprocess.Popen | None = None
    port: int = 0
    _own_folder: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.folder is not None
        return self.folder / "connect.log"

    def __enter__(self) -> "LocalConnect":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout_s: float = 90.0) -> "LocalConnect":
        """Write the worker's properties, start it, wait until its REST API answers."""
        jars, plugins = connect_folders()
        if self.folder is None:
            self.folder, self._own_folder = Path(tempfile.mkdtemp(prefix="topicvault-connect-")), True
        self.port = free_port()
        properties = {
            **BASE_CONFIG,
            "bootstrap.servers": self.bootstrap,
            "listeners": self.url,
            "offset.storage.file.filename": str(self.folder / "offsets"),
            "plugin.path": str(plugins),
            **self.config,
        }
        worker = self.folder / "worker.properties"
        worker.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        log_config = jvm.write_log_config(self.folder / "log4j2.properties", self.log_path,
                                          {"org.reflections": "ERROR", "org.apache.kafka.clients": "WARN"})
        command = jvm.java_command(f"{jars}/*", "org.apache.kafka.connect.cli.ConnectStandalone", str(worker),
                                   heap=self.heap, log_config=log_config)
        self.process = jvm.launch(command, self.folder / "stdout.log")
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise TopicvaultError(f"the Kafka Connect worker exited ({self.process.returncode}); see {self.log_path}")
            try:
                self.request("GET", "/connector-plugins")
                return
            except (OSError, TopicvaultError):
                pass
            if time.monotonic() > deadline:
                raise TopicvaultError(f"the Kafka Connect worker did not answer within {timeout_s:.0f} s; "
                                      f"see {self.log_path}")
            time.sleep(0.3)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One REST call; its JSON answer (None when empty). An error status is a TopicvaultError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise TopicvaultError(f"Kafka Connect {method} {path}: {exc.code} {exc.read()[:500]!r}") from None
        return json.loads(text) if text else None

    def put(self, name: str, config: dict[str, str]) -> None:
        """Create or reconfigure a connector."""
        self.request("PUT", f"/connectors/{name}/config", {"name": name, **config})

    def delete(self, name: str) -> None:
        """Remove a connector (its tasks stop; its consumer group stays)."""
        self.request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict:
        """The connector's and its tasks' states."""
        return self.request("GET", f"/connectors/{name}/status")

    def kill(self) -> None:
        """SIGKILL the worker (a crash: no task is stopped, no offset committed); its folder stays,
        so `start()` brings a new worker up on it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def stop(self) -> None:
        """Stop the worker and remove the folder if it made one."""
        if self.process is not None:
            jvm.stop([self.process])
        if self._own_folder and self.folder is not None and os.environ.get("TOPICVAULT_KEEP_KAFKA_LOGS") != "1":
            shutil.rmtree(self.folder, ignore_errors=True)
