"""The package's shape (issue #21): no import cycles, keys/ and formats/ pure, few root modules.

Every module is parsed with `ast`; every import (function-level ones included) is resolved to a
topicvault module. Pure logic: no broker, Spark or S3 server.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# The entry points, and what the CLI prints (report: beside the commands, above the types it prints).
ROOT_MODULES_ALLOWED = {"__init__", "__main__", "cli", "datasources", "report"}
# keys/ and formats/ turn bytes and names into records and back; they know nothing of these.
PURE_PACKAGES = ("keys", "formats")
FORBIDDEN_IN_PURE = ("topicvault.sink", "topicvault.source", "topicvault.core.spark", "topicvault.core.cluster",
                     "topicvault.core.local", "pyspark", "confluent_kafka")


def _module_files() -> dict[str, Path]:
    """Module name (topicvault.x.y) -> file, for every .py file of the package (tests and tools excluded)."""
    found = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        parts = path.relative_to(PACKAGE_ROOT).with_suffix("").parts
        if parts[0] in {"tests", "benchmarks", "ci", ".venv"} or any(p.startswith(".") for p in parts):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("topicvault", *parts))] = path
    return found


def _is_package(name: str, files: dict[str, Path]) -> bool:
    return files[name].name == "__init__.py"


def imports_of(name: str, files: dict[str, Path]) -> set[str]:
    """Every module name `name` imports anywhere in its file (absolute, as written or resolved)."""
    tree = ast.parse(files[name].read_text(), str(files[name]))
    package = name if _is_package(name, files) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            # `from . import x` / `from .pkg import mod` import submodules too.
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def internal_graph() -> dict[str, set[str]]:
    """topicvault module -> the topicvault modules it imports (packages' __init__ count as modules)."""
    files = _module_files()
    graph = {}
    for name in files:
        targets = set()
        for imported in imports_of(name, files):
            if imported in files and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_sees_a_function_level_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_between_modules():
    graph = internal_graph()
    assert len(graph) > 40  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_keys_and_formats_know_nothing_of_spark_kafka_sink_or_source():
    files = _module_files()
    offenders = []
    for name in files:
        if name.split(".")[1:2] and name.split(".")[1] in PURE_PACKAGES:
            for imported in imports_of(name, files):
                if any(imported == f or imported.startswith(f + ".") for f in FORBIDDEN_IN_PURE):
                    offenders.append(f"{name} imports {imported}")
    assert offenders == []


def test_no_modules_at_the_root_besides_the_entry_points():
    root = {p.stem for p in PACKAGE_ROOT.glob("*.py")}
    assert root - ROOT_MODULES_ALLOWED == set()


# Rooms by concept (issue #49, item 1): a newcomer finds a concept from `ls` of the tree when no
# folder is a long flat list and no two modules share a name.
MAX_MODULES_SIDE_BY_SIDE = 15


def test_no_package_directory_holds_more_than_15_modules_side_by_side():
    crowded = {}
    for folder in {path.parent for path in _module_files().values()}:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES_SIDE_BY_SIDE:
            crowded[str(folder.relative_to(PACKAGE_ROOT))] = len(modules)
    assert crowded == {}


def test_no_module_name_is_used_twice_in_the_package():
    by_name: dict[str, list[str]] = {}
    for name, path in _module_files().items():
        if path.name != "__init__.py":
            by_name.setdefault(path.stem, []).append(name)
    assert {stem: names for stem, names in by_name.items() if len(names) > 1} == {}


# The local parts a user or a test starts (core/local/: Kafka nodes, Connect, the S3 server, the
# embedded broker, the sandbox) stay apart from what a backup or restore runs in production. Only
# the crash hooks (env-triggered, inert otherwise) sit in production code paths; the entry points
# and `topicvault demo` start local parts for the user.
LOCAL_ROOM = "topicvault.core.local"
PRODUCTION_MAY_IMPORT_FROM_LOCAL = "topicvault.core.local.faults"
STARTS_LOCAL_PARTS = {"topicvault.report", "topicvault.cli", "topicvault.source.demo"}


def test_production_code_imports_nothing_of_the_local_room_but_the_crash_hooks():
    files = _module_files()
    offenders = []
    for name in files:
        if name == LOCAL_ROOM or name.startswith(LOCAL_ROOM + ".") or name in STARTS_LOCAL_PARTS:
            continue
        for imported in imports_of(name, files):
            hooks = imported == PRODUCTION_MAY_IMPORT_FROM_LOCAL or imported.startswith(PRODUCTION_MAY_IMPORT_FROM_LOCAL + ".")
            if imported.startswith(LOCAL_ROOM + ".") and not hooks:
                offenders.append(f"{name} imports {imported}")
    assert offenders == []


# Data flows one way: a package imports only packages ranked below it (or itself). The root
# modules (cli, datasources) compose everything; restore (source/) may read Kafka ranges and
# run a backup (verify, demo); the backup side (sink/) knows nothing of restore; maintenance
# (source/maintenance/: compact, expire, garbage collection) writes objects like sink/ and
# reads them like source/, so it sits in the top-ranked package (the card fixes the top level).
PACKAGE_RANK = {"core": 0, "keys": 1, "formats": 2, "sink": 3, "source": 4}
ROOT_RANK = 5


def _rank(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in PACKAGE_RANK:
        return parts[1], PACKAGE_RANK[parts[1]]
    return "root", ROOT_RANK


def test_packages_import_only_downward():
    upward = []
    for module, targets in internal_graph().items():
        package, rank = _rank(module)
        for target in targets:
            target_package, target_rank = _rank(target)
            if target_rank > rank:
                upward.append(f"{module} ({package}) imports {target} ({target_package})")
    assert sorted(upward) == []


# Tests share helpers through tests/*tools.py (and the harness), never by importing another test
# module: a test module imported elsewhere runs its module-level code and fixtures twice, and ties
# a tier's test to another tier's (issue #49, item 5).
TESTS_ROOT = PACKAGE_ROOT / "tests"


def imports_of_test_modules(root: Path) -> list[str]:
    """`file: module` for every import (function-level ones included) of a test module (test_*.py,
    conftest.py) by a Python file under `root`."""
    files = sorted(p for p in root.rglob("*.py") if ".venv" not in p.parts)
    test_modules = {p.stem for p in files if p.stem.startswith("test_") or p.stem == "conftest"}
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            else:
                continue
            found.extend(f"{path.relative_to(root)}: {name}" for name in names
                         if name.rpartition(".")[2] in test_modules)
    return found


def test_module_imports_sees_top_and_function_level_imports(tmp_path):
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_a.py").write_text("def helper():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_b():\n    from test_a import helper\n")
    (tmp_path / "test_c.py").write_text("import test_b\nimport json\n")
    (tmp_path / "sometools.py").write_text("import json\n")
    assert imports_of_test_modules(tmp_path) == ["test_b.py: test_a", "test_c.py: test_b"]


def test_no_test_module_imports_another():
    assert len(list(TESTS_ROOT.rglob("test_*.py"))) > 50  # the walk found the suite
    assert imports_of_test_modules(TESTS_ROOT) == []


# Compact, expire and garbage collection: one reading step, one pure planner returning a plan that
# carries what execution needs, one execute; the CLI calls those (issue #49, item 4).
MAINTENANCE_STEPS = {
    "compact": ("read_compact", "plan_compact", "execute_compact"),
    "expire": ("read_expire", "plan_expire", "execute_expire"),
    "garbage": ("read_collection", "plan_collection", "execute_collection"),
}
STEP_LIKE = re.compile(r"^(read|gather|plan|execute)_|^(compact|expire|collect_garbage)$|_(plan|compaction|expiry)$")


def test_each_maintenance_step_has_one_name_and_the_cli_calls_those():
    files = _module_files()
    for module, steps in MAINTENANCE_STEPS.items():
        tree = ast.parse(files[f"topicvault.source.maintenance.{module}"].read_text())
        public = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
        assert {name for name in public if STEP_LIKE.search(name)} == set(steps), module
    cli = ast.parse(files["topicvault.cli"].read_text())
    called = {alias.name for node in ast.walk(cli) if isinstance(node, ast.ImportFrom)
              and (node.module or "").startswith("source.maintenance") for alias in node.names}
    assert {name for name in called if STEP_LIKE.search(name)} == {s for module in ("compact", "expire")
                                                                   for s in MAINTENANCE_STEPS[module]}


def test_run_leases_and_commit_turns_are_one_renew_and_remove_mechanism():
    from topicvault.core.archive.conditional_writes import CommitTurn
    from topicvault.core.archive.leases import RenewedObject, RunLease

    for holder in (RunLease, CommitTurn):
        assert issubclass(holder, RenewedObject)
        assert not {"_renew", "put", "remove", "delete", "start_renewing"} & set(vars(holder)), holder


# cli.py maps options to requests, calls the library and prints the report (issue #49, item 2):
# starting Spark, progress, signals, metrics servers and stores are the library's.
CLI_MAX_LINES = 550
NOT_IN_THE_CLI = ("signal", "threading", "os", "topicvault.core.spark", "topicvault.core.progress",
                  "topicvault.sink.metrics")


def test_the_cli_is_thin_and_runs_nothing_itself():
    files = _module_files()
    assert len(files["topicvault.cli"].read_text().splitlines()) < CLI_MAX_LINES
    imported = imports_of("topicvault.cli", files)
    assert sorted(m for m in imported if m in NOT_IN_THE_CLI) == []


def test_no_function_is_over_80_lines_not_counting_its_signature_and_docstring():
    long = []
    for name, path in _module_files().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                code = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
                body = node.end_lineno - code[0].lineno + 1  # typer's option declarations are the signature
                if body > 80:
                    long.append(f"{name}.{node.name}: {body} lines")
    assert long == []
