"""The task runner depends on nothing that depends on it.

Nothing here is a list kept by hand: the packages and their imports are read from the
tree, and an import inside a function counts as much as one at the top of a module
(deferring an import is how a cycle hides).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The runner itself, its Huey wiring, the app factory that composes them, and the
# harness and benchmarks that start its consumers as ``flask workers`` does.
RUNNER_SIDE = {"taskrunner", "tasks", "app", "harness", "bench"}
RUNNER = {"taskrunner", "tasks"}
NOT_THE_HOUSE = {"tests", "migrations"}


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports, anywhere in it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def top_level_packages(root: Path = ROOT) -> dict[str, list[Path]]:
    """Every package and top-level module of the house, with its files."""
    found: dict[str, list[Path]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if parts[0] in NOT_THE_HOUSE or parts[0].startswith("."):
            continue
        if len(parts) > 1 and not (root / parts[0] / "__init__.py").is_file():
            continue  # a folder of scripts or data, not a package (deploy/, docs/)
        name = parts[0].removesuffix(".py")
        if name.isidentifier():
            found.setdefault(name, []).append(path)
    return found


def consumers(root: Path = ROOT) -> set[str]:
    """The packages outside the runner that use it: any of their modules imports it."""
    return {
        name
        for name, paths in top_level_packages(root).items()
        if name not in RUNNER_SIDE and any(imported_packages(p) & RUNNER for p in paths)
    }


def test_the_consumers_are_read_from_the_tree():
    found = consumers()
    # Every package whose modules import the contract is one, whoever added it.
    assert {"payments", "coursebuilder", "blueprints", "demo", "diagnostics"} <= found
    assert not found & RUNNER_SIDE


def test_the_task_runner_and_its_huey_wiring_import_no_consumer_module():
    """Domain packages declare their own jobs and schedules through the contract: the
    runner names none of them, not even inside a function."""
    found = consumers()
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & found)
        for package in RUNNER
        for path in (ROOT / package).rglob("*.py")
        if imported_packages(path) & found
    }
    assert offenders == {}


def test_the_huey_wiring_imports_nothing_of_the_runner():
    """``tasks`` is the Huey wiring and nothing more: the runner uses it, never the reverse,
    at any depth."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tasks").rglob("*.py")
        if "taskrunner" in imported_packages(path)
    ]
    assert offenders == []


def test_no_domain_or_web_module_imports_huey():
    """Huey is the runner's business: its wiring (``tasks``) and the runner itself."""
    offenders = [
        str(path.relative_to(ROOT))
        for name, paths in top_level_packages().items()
        if name not in RUNNER_SIDE
        for path in paths
        if "huey" in imported_packages(path)
    ]
    assert offenders == []


def test_the_consumers_found_in_a_tree_are_its_packages_that_use_the_runner(tmp_path):
    (tmp_path / "invoices").mkdir()
    (tmp_path / "invoices" / "__init__.py").write_text("")
    (tmp_path / "invoices" / "sweep.py").write_text(
        "def start():\n    from taskrunner.contract import start_run\n"
    )
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "__init__.py").write_text("import json\n")
    (tmp_path / "taskrunner").mkdir()
    (tmp_path / "taskrunner" / "__init__.py").write_text("import shared\n")
    assert consumers(tmp_path) == {"invoices"}


def test_the_boundary_check_sees_a_forbidden_import(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text(
        "from payments.statements import TYPE\ndef f():\n    import tenancy.context\n"
    )
    assert imported_packages(module) & consumers() == {"payments", "tenancy"}


def project_modules() -> dict[str, Path]:
    """Every module of the house (tests and migrations are not part of it)."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if parts[0] in {"tests", "migrations"} or parts[0].startswith("."):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in it (a function-level import
    is an import too: deferring one is how a cycle hides)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else resolve(base))
        graph[name] = {target for target in targets if target and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_house_imports_itself_through_others():
    assert cycles(import_graph(project_modules())) == []


def test_the_cycle_check_sees_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_import_graph_follows_deferred_and_relative_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import views\n")
    (tmp_path / "pkg" / "views.py").write_text("def f():\n    from pkg import helpers\n")
    (tmp_path / "pkg" / "helpers.py").write_text("import pkg.views\n")
    modules = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        "pkg.views": tmp_path / "pkg" / "views.py",
        "pkg.helpers": tmp_path / "pkg" / "helpers.py",
    }
    assert cycles(import_graph(modules)) == [["pkg.helpers", "pkg.views"]]


def test_consumer_packages_import_only_the_runners_contract():
    """Outside the runner, ``taskrunner.contract`` is the one door: no internal module of
    the runner, and none of its Huey wiring (``tasks``)."""
    graph = import_graph(project_modules())
    internal = [
        f"{name}: {target}"
        for name, targets in graph.items()
        if name.split(".")[0] not in RUNNER_SIDE
        for target in sorted(targets)
        if target.split(".")[0] in {"taskrunner", "tasks"} and target != "taskrunner.contract"
    ]
    assert internal == []


def test_the_runner_itself_never_goes_through_its_own_door():
    """``taskrunner.contract`` imports the runner's internals; an internal importing it back
    would close a loop (the shared types are in ``taskrunner.types``)."""
    graph = import_graph(project_modules())
    inward = [
        name
        for name, targets in graph.items()
        if name.split(".")[0] in {"taskrunner", "tasks"}
        and name != "taskrunner.contract"
        and "taskrunner.contract" in targets
    ]
    assert inward == []


def test_alerts_are_a_consumer_of_the_runner_that_the_runner_never_imports():
    """The alerts read the ledger and publish through the runner's contract (the outbox
    included); neither the runner nor its wiring names them."""
    assert "alerts" in consumers()
    runner_side = [
        str(path.relative_to(ROOT))
        for package in RUNNER
        for path in (ROOT / package).rglob("*.py")
        if "alerts" in imported_packages(path)
    ]
    assert runner_side == []
    reached = {
        node.module
        for path in (ROOT / "alerts").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("taskrunner")
    }
    assert reached == {"taskrunner.contract"}


def test_no_module_of_the_runner_is_over_350_lines():
    # docs/architecture.md: the runner is read module by module; a module that grows past
    # this is split by responsibility, as the ledger's collaborators are.
    long = {
        str(path.relative_to(ROOT)): n
        for path in (ROOT / "taskrunner").rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 350
    }
    assert long == {}
