"""A local S3 endpoint: moto's HTTP S3 server on a free loopback port.

Used by the tests and by `topicvault sandbox`. moto comes with the `test` and `sandbox` extras;
`moto_server` is looked for next to the running Python (the venv's bin folder).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import TopicvaultError
from .embedded_broker import DIE_WITH_PARENT, free_port


def moto_executable() -> Path:
    """The `moto_server` of this Python, or a one-line error saying how to install it."""
    executable = Path(sys.executable).with_name("moto_server")
    if not executable.exists():
        raise TopicvaultError(f"no moto_server next to {sys.executable}: install it with "
                              f"`{sys.executable} -m pip install 'moto[server]'` (the set-up, ci/setup.sh, does)")
    return executable


@contextmanager
def moto_server(log_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run `moto_server` on a free port; yield its URL; stop it (SIGKILL after 10 s) on exit."""
    executable = moto_executable()
    port = free_port()
    log = log_dir / f"moto-{port}.log"
    with open(log, "wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [str(executable), "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, **(env or {})}, preexec_fn=DIE_WITH_PARENT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(endpoint, process, log)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_up(endpoint: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise TopicvaultError(f"moto_server exited with {process.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            if time.monotonic() > deadline:
                raise TopicvaultError(f"moto_server did not answer on {endpoint} in 60 s; see {log}") from None
            time.sleep(0.1)
