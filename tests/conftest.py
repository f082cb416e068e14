"""Shared fixtures. Each harness module owns one real service; all are stopped at session end.

Tests are tiered by folder: tests/unit/ (`make unit`) holds the pure-logic tier, tests that need
none of the real services (broker, S3 server, Spark) and so run in seconds; a test there that asks
for one stops the collection. tests/integration/ holds the rest of `make test`, tests/faults/ the
three-node cluster faults (`make test` runs them after the rest, `make faults` alone). `pytest
--unit` still keeps only the unit-tier tests of whatever it collects (the local-directory cases of
tests parametrized over both stores).
"""

import os

import pytest
from harness_broker import *  # noqa: F401,F403  (bootstrap, broker_kind)
from harness_registry import *  # noqa: F401,F403  (schema_registry: one Apicurio per test module)
from harness_s3 import *  # noqa: F401,F403  (s3_endpoint, s3_uri)
from harness_spark import *  # noqa: F401,F403  (spark)

# The pure-logic tier's folder (`make unit`); tests/integration/ holds those that start a service.
UNIT_FOLDER = "tests/unit/"
# A test that asks for any of these (directly or through another fixture) starts a real service.
SERVICE_FIXTURES = frozenset({"bootstrap", "spark", "s3_endpoint", "s3_uri", "proxied_broker", "schema_registry"})


@pytest.fixture
def store(store_uri: str):
    """The store at `store_uri` (harness_s3): a local directory, then a bucket on the S3 server."""
    from topicvault.core.stores.locations import open_store

    return open_store(store_uri)


@pytest.fixture(scope="session", autouse=True)
def restore_state_dir(tmp_path_factory):
    """Restores keep their state here, not in the user's ~/.local/state (CLI subprocesses inherit it)."""
    directory = tmp_path_factory.mktemp("restore-state")
    saved = os.environ.get("TOPICVAULT_STATE_DIR")
    os.environ["TOPICVAULT_STATE_DIR"] = str(directory)
    yield directory
    if saved is None:
        os.environ.pop("TOPICVAULT_STATE_DIR", None)
    else:
        os.environ["TOPICVAULT_STATE_DIR"] = saved


@pytest.fixture(scope="session", autouse=True)
def spark_executor():
    """The suite's one-shot backups and restores run their tasks on Spark, the path big jobs take,
    however small their plans (`--executor auto` would run them in process; CLI subprocesses
    inherit this). tests/integration/test_executor.py runs the in-process executor and `auto`."""
    saved = os.environ.get("TOPICVAULT_EXECUTOR")
    os.environ["TOPICVAULT_EXECUTOR"] = "spark"
    yield "spark"
    if saved is None:
        os.environ.pop("TOPICVAULT_EXECUTOR", None)
    else:
        os.environ["TOPICVAULT_EXECUTOR"] = saved


def pytest_configure(config):
    register_broker_kind_reporting(config)  # noqa: F405  (harness_broker)
    config.addinivalue_line("markers", "network: talks to sockets (e.g. waits on an unreachable broker): not unit tier")


def pytest_addoption(parser):
    parser.addoption("--unit", action="store_true", help="run only tests that need no broker, S3 server or Spark")


def pytest_collection_modifyitems(config, items):
    misplaced = [item.nodeid for item in items if item.nodeid.startswith(UNIT_FOLDER) and _needs_a_service(item)]
    if misplaced:
        raise pytest.UsageError(f"{misplaced[0]} needs a broker, S3 server or Spark: move it to tests/integration/"
                                f" ({len(misplaced)} such test(s) in {UNIT_FOLDER})")
    if not config.getoption("--unit"):
        return
    services = [item for item in items if _needs_a_service(item)]
    if services:
        config.hook.pytest_deselected(items=services)
        items[:] = [item for item in items if item not in services]


def _needs_a_service(item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (
        bool(SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())))
        or params.get("store_uri") == "s3"  # store_uri asks for the S3 server at run time
        or item.get_closest_marker("network") is not None
    )
