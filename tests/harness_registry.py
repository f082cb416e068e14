"""A real schema registry for the tests: Apicurio Registry 3.3.3 (Apache 2.0), in memory, on loopback.

`ci/apicurio.sh` (run by the set-up) resolves it from Maven Central into the cache folder once;
`TOPICVAULT_APICURIO` names another folder. It needs Java 21 or newer: the newest JDK under
/usr/lib/jvm (`TOPICVAULT_JAVA21_HOME` names another). Both its ports are loopback ones (its
management port defaults to 0.0.0.0), it logs to a file, and it is stopped when its `with` ends.
Ready when its Confluent-compatible API (`/apis/ccompat/v7`) answers. One per test module at
most: it takes 10-40 s to start and about 300 MiB of memory.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from topicvault.core.local import jvm
from topicvault.core.local.embedded_broker import free_port

__all__ = ["schema_registry"]  # conftest star-imports this module: the fixture only

APICURIO_VERSION = "3.3.3"
DEFAULT_FOLDER = Path.home() / ".cache" / "topicvault" / f"apicurio-registry-{APICURIO_VERSION}"
CCOMPAT = "/apis/ccompat/v7"
START_TIMEOUT_S = 300.0  # a bound for a loaded machine; 13-40 s when it is not


def apicurio_folder() -> Path:
    """The unpacked Apicurio folder (holds quarkus-run.jar); skips the test when it is absent."""
    folder = Path(os.environ.get("TOPICVAULT_APICURIO") or DEFAULT_FOLDER)
    if not (folder / "quarkus-run.jar").is_file():
        pytest.fail(f"no Apicurio Registry in {folder}: run `bash ci/apicurio.sh` (or set TOPICVAULT_APICURIO)")
    return folder


def java21() -> str:
    """The `java` of a JDK 21 or newer: TOPICVAULT_JAVA21_HOME, else the newest under /usr/lib/jvm."""
    if os.environ.get("TOPICVAULT_JAVA21_HOME"):
        return str(Path(os.environ["TOPICVAULT_JAVA21_HOME"]) / "bin" / "java")
    found = []
    for home in Path("/usr/lib/jvm").glob("*"):
        match = re.search(r"(\d+)", home.name)  # java-17-openjdk-amd64, temurin-25-jdk-amd64
        if match and int(match.group(1)) >= 21 and (home / "bin" / "java").is_file():
            found.append((int(match.group(1)), home))
    if not found:
        pytest.fail("no Java 21 or newer under /usr/lib/jvm (Apicurio needs one): run `bash ci/setup.sh`")
    return str(max(found)[1] / "bin" / "java")


@contextmanager
def apicurio(log_folder: Path) -> Iterator[str]:
    """Start an in-memory Apicurio Registry on loopback; yield its Confluent-compatible API's URL
    (…/apis/ccompat/v7); stop it at the end. Its output goes to `log_folder`/apicurio.log."""
    port, management_port = free_port(), free_port()
    properties = {
        "quarkus.http.host": "127.0.0.1", "quarkus.http.port": port,
        "quarkus.management.host": "127.0.0.1", "quarkus.management.port": management_port,
        # The ccompat API accepts PUT /mode IMPORT and a register with an explicit id only when
        # the registry lets it; deleting subjects and versions is how a soft delete is made.
        "apicurio.rest.deletion.artifact.enabled": "true",
        "apicurio.rest.deletion.artifact-version.enabled": "true",
        "apicurio.rest.deletion.group.enabled": "true",
        "quarkus.log.console.enable": "true",
    }
    command = [java21(), "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               *(f"-D{name}={value}" for name, value in properties.items()),
               "-jar", str(apicurio_folder() / "quarkus-run.jar")]
    log_folder.mkdir(parents=True, exist_ok=True)
    process = jvm.launch(command, log_folder / "apicurio.log")
    url = f"http://127.0.0.1:{port}{CCOMPAT}"
    try:
        _wait_ready(process, url, log_folder / "apicurio.log")
        yield url
    finally:
        jvm.stop([process])


def _wait_ready(process: subprocess.Popen, url: str, log: Path) -> None:
    """Poll GET /subjects until it answers 200; raise naming the log when the JVM ends or never answers."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Apicurio Registry exited with {process.returncode} while starting: see {log}")
        try:
            if requests.get(f"{url}/subjects", timeout=10).status_code == 200:
                return
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or busy starting
            pass
        time.sleep(0.5)
    raise TimeoutError(f"Apicurio Registry did not answer at {url} within {START_TIMEOUT_S:.0f} s: see {log}")


@pytest.fixture(scope="module")
def schema_registry(tmp_path_factory) -> Iterator[str]:
    """One Apicurio Registry for the test module: its ccompat URL (…/apis/ccompat/v7)."""
    with apicurio(tmp_path_factory.mktemp("apicurio")) as url:
        yield url
