"""The wheel holds every package of the tree (a new sub-package missing from pyproject breaks
spark-submit with the wheel, while the editable install used by the tests still imports it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_SHIPPED = {"tests", "benchmarks", ".venv", ".git", "ci", ".ci", ".tv-run"}


def test_every_package_of_the_tree_is_in_the_wheel():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"topicvault"}
    for init in ROOT.rglob("__init__.py"):
        relative = init.parent.relative_to(ROOT)
        if relative.parts and relative.parts[0] not in NOT_SHIPPED:
            found.add(".".join(("topicvault", *relative.parts)))
    assert found == declared


def test_pyspark_pin_admits_no_version_without_the_streaming_apis_used():
    # sink/stream.py uses pyspark.sql.streaming.datasource (ReadLimit, admission control),
    # which older 4.x releases do not have: an install that picks one fails only at run time.
    import re

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in dependencies if d.startswith("pyspark")]
    lower = re.search(r">=\s*(\d+)\.(\d+)", pin)
    assert lower and (int(lower[1]), int(lower[2])) >= (4, 2), pin
