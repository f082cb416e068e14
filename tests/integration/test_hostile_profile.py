"""Issue #39 items 3 and 7: a profile someone else could write must not run code or leak the environment.

`./topicvault.toml` is read without being named: whoever can write the working directory (a shared
checkout, a CI workspace, /tmp) chose it. It is read only when the user owns it and nobody else
may write it; librdkafka properties that run a command or load a library are taken from the
command line only; `${VAR}` is expanded only into secret settings, which are never printed.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from clitools import assert_one_line_error, run_cli
from profiletools import profile_in_cwd

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
    const char *marker = getenv("TOPICVAULT_TEST_MARKER");
    FILE *f = marker ? fopen(marker, "w") : NULL;
    if (f) { fputs("loaded\n", f); fclose(f); }
}
"""


@pytest.fixture
def evil_library(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """A shared library whose constructor writes a marker file: (library, marker)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the test's shared library")
    source, library, marker = tmp_path / "evil.c", tmp_path / "evil.so", tmp_path / "marker"
    source.write_text(EVIL_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    monkeypatch.setenv("TOPICVAULT_TEST_MARKER", str(marker))
    return library, marker


def test_a_profile_in_the_working_directory_cannot_load_a_library(bootstrap, topic_factory, evil_library,
                                                                  tmp_path, monkeypatch):
    library, marker = evil_library
    topic = topic_factory(1, prefix="plugin")
    profile_in_cwd(tmp_path / "work", monkeypatch, f"""
[clusters.prod]
bootstrap_servers = "{bootstrap}"
[clusters.prod.properties]
"plugin.library.paths" = "{library}"
""")
    out = run_cli("backup", "--cluster", "prod", "--to", str(tmp_path / "b"), "-t", topic, "--dry-run",
                  expect_exit=1)
    assert_one_line_error(out, "plugin.library.paths", "-X")
    assert not marker.exists(), "the profile's library was loaded"
