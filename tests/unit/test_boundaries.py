"""The task runner depends on nothing that depends on it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = {
    "payments",
    "documents",
    "coursebuilder",
    "asyncrequests",
    "tenancy",
    "dlp",
    "diagnostics",
    "accounts",
    "blueprints",
    "demo",
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_task_runner_imports_no_consumer_module():
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & CONSUMERS)
        for path in (ROOT / "taskrunner").rglob("*.py")
        if imported_packages(path) & CONSUMERS
    }
    assert offenders == {}


def test_the_boundary_check_sees_a_forbidden_import(tmp_path):
    module = tmp_path / "bad.py"
    module.write_text("from payments.statements import TYPE\nimport tenancy.context\n")
    assert imported_packages(module) & CONSUMERS == {"payments", "tenancy"}


def test_consumers_use_only_the_runners_public_contract():
    internal = []
    for package in ("payments", "diagnostics", "dlp", "tenancy"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("taskrunner.")
                    and node.module not in {"taskrunner.contract", "taskrunner.redaction"}
                ):
                    internal.append(f"{path.relative_to(ROOT)}: {node.module}")
    assert internal == []
