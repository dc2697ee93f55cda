"""Redaction holds in any install layout: ``pip install .`` puts vendor packages next to ours,
and a virtualenv inside the project may have any name.

Each layout runs in a fresh interpreter whose imports resolve to that layout only: the
project's modules from it, and a vendor package (redis, a real dependency) copied next
to them, where such an install puts it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.conftest import ROOT
from tests.support import see_logs

SECRET = "sk_live_PROBE_SECRET"
PROBE = f"""
import json, sys
import redis, sqlalchemy.exc, taskrunner.redaction as redaction
from app import create_app
from taskrunner.contract import PermanentError, TaskReportableError
from tenancy.context import NoTenant

class Declined(TaskReportableError):
    pass

app = create_app({{"SQLALCHEMY_DATABASE_URI": "sqlite://", "SECRET_KEY": "x", "TESTING": True}})
errors = [
    redis.exceptions.ConnectionError("redis://:{SECRET}@cache:6379/0"),
    sqlalchemy.exc.OperationalError("SELECT 1 WHERE token = %(t)s", {{"t": "{SECRET}"}}, None),
]
domain = [
    PermanentError("invoice 7 refused card 4111 1111 1111 1111"),
    NoTenant("no tenant for unit 7"),
    Declined("declined: unit 7 by postgresql://u:hunter2@h/db"),
]
with app.app_context():  # the app's scrubber, as in a worker
    print(json.dumps({{
        "project": redaction.__file__,
        "vendor": redis.__file__,
        "reasons": [redaction.redact(e) for e in errors],
        "domain": [redaction.redact(e) for e in domain],
    }}))
"""
# A domain error keeps its message, scrubbed of values and credentials: the project's own,
# registered, or a module's.
DOMAIN = [
    "invoice 7 refused card [card ····1111]",
    "no tenant for unit 7",
    "declined: unit 7 by postgresql://u:[redacted]@h/db",
]
EXPECTED = [
    see_logs(r"redis\.exceptions\.ConnectionError"),
    see_logs(r"sqlalchemy\.exc\.OperationalError"),
]
VENDOR = Path(redis.__file__).parent


def assert_redacted(found: dict) -> None:
    """Vendor errors lose their message; domain errors keep theirs, scrubbed."""
    assert_vendor_reasons(found["reasons"])
    assert found["domain"] == DOMAIN


def assert_vendor_reasons(reasons: list[str]) -> None:
    assert len(reasons) == len(EXPECTED), reasons
    for pattern, reason in zip(EXPECTED, reasons, strict=True):
        assert pattern.fullmatch(reason), reason


SITE = Path(sysconfig.get_paths()["purelib"])


def probe(path: list[Path], cwd: Path) -> dict:
    """Run the probe with ``path`` first, then the dependencies of this interpreter.

    ``-S`` skips the ``.pth`` files, so the development checkout's editable finder cannot
    hand out a module the layout lacks.
    """
    paths = [str(p) for p in path]
    code = f"import sys; sys.path[:0] = {paths!r}; sys.path.append({str(SITE)!r})\n" + PROBE
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The project's tracked files, copied once (a build must not write into the worktree)."""
    target = tmp_path_factory.mktemp("project")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in listed:
        source = ROOT / name
        if source.is_file() and source.suffix != ".png":
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_a_regular_pip_install_imports_the_app_hides_vendor_errors_keeps_domain_ones(
    project, tmp_path
):
    site = tmp_path / "venv" / "lib" / "site-packages"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    shutil.copytree(VENDOR, site / "redis")  # a dependency installed next to the project

    found = probe([site], cwd=tmp_path)

    assert Path(found["project"]).is_relative_to(site)
    assert Path(found["vendor"]).is_relative_to(site)
    assert_redacted(found)


@pytest.mark.parametrize("venv", ["env", ".venv-prod"])
def test_a_virtualenv_inside_the_project_with_any_name_hides_vendor_errors_only(project, venv):
    site = project / venv / SITE.relative_to(Path(sys.prefix))
    shutil.copytree(VENDOR, site / "redis")

    found = probe([project, site], cwd=project)

    assert Path(found["project"]).is_relative_to(project)
    assert Path(found["vendor"]).is_relative_to(site)
    assert_redacted(found)


WHEEL_CHECK = """
import sys, app
from app import create_app

client = create_app().test_client()
login, css = client.get("/login"), client.get("/static/app.css")
print(app.__file__, login.status_code, "csrf_token" in login.text, css.status_code)
"""


@pytest.fixture(scope="module")
def wheel(project, tmp_path_factory) -> Path:
    """The project's wheel, built once from the copy of its tracked files."""
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, "."],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    [built] = dist.glob("taskledger-*.whl")
    return built


@dataclass(frozen=True)
class Installed:
    """The wheel installed alone in a fresh virtualenv, run from a folder of its own."""

    python: str
    site: Path
    work: Path
    env: dict[str, str]

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [self.python, *args],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Installed:
    tmp_path = tmp_path_factory.mktemp("installed")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    # The dependencies: this interpreter's, as a plain path (its .pth files, the development
    # checkout's editable finder among them, are not read from there).
    (site / "dependencies.pth").write_text(f"{SITE}\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    drop = ("PYTEST", "PYTHONPATH", "DATABASE_", "QUEUE_", "REDIS_", "LOG_", "SECRET_", "INSTANCE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["INSTANCE_PATH"] = str(tmp_path / "instance")
    return Installed(python, site, work, env)


def test_the_wheel_in_a_fresh_venv_migrates_starts_a_run_and_serves_pages(installed):
    """``pip install .`` yields a working ``flask --app app``, from any working directory:
    the modules, the templates, the static files and the migrations are all installed."""
    installed.run("-m", "flask", "--app", "app", "db", "upgrade")
    started = installed.run("-m", "flask", "--app", "app", "tasks", "start", "diagnostics.probe")
    assert len(started.strip().splitlines()[-1]) == 36  # the run's uuid
    module, login, form, css = installed.run("-c", WHEEL_CHECK).split()

    assert Path(module).is_relative_to(installed.site)
    assert (login, form, css) == ("200", "True", "200")
    assert list(installed.work.iterdir()) == []


# The repository's own tools: they run from a checkout, never from an install.
NOT_SHIPPED = {"tests", "harness", "bench"}
FROM_THE_INSTALL = """
import importlib, importlib.util, json, pathlib, sys

site, names = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
missing = []
for name, package in names:
    try:
        # A package is imported; a module only found (its parents imported): an entry module
        # (``wsgi``, ``tasks.consumer``) would build an app.
        found = importlib.import_module(name) if package else importlib.util.find_spec(name)
        origin = pathlib.Path(found.__file__ if package else found.origin)
    except Exception:
        origin = None
    if origin is None or not origin.is_relative_to(site):
        missing.append(name)
print(json.dumps(missing))
"""


def tree_modules(root: Path = ROOT) -> list[tuple[str, bool]]:
    """Every module of the app's tree (dotted name, whether it is a package): the top-level
    modules, and every module of every package, however deep."""
    found = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if parts[0] in NOT_SHIPPED or parts[0].startswith(".") or not path.stem.isidentifier():
            continue
        if not all(
            (root.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))
        ):
            continue  # a folder of scripts or data, not a package (migrations/, deploy/)
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found.append((name.removesuffix(".__init__"), path.name == "__init__.py"))
    return sorted(found)


def missing_from(installed: Installed, site: Path) -> list[str]:
    names = json.dumps(tree_modules())
    return json.loads(installed.run("-c", FROM_THE_INSTALL, str(site), names))


def test_the_wheel_installs_every_package_and_module_of_the_tree(installed, tmp_path):
    """No list of packages is trusted: a package added to the tree but not to the install
    (``pyproject.toml``) fails here, rather than in an installed app that cannot import it."""
    assert len(tree_modules()) > 100
    assert missing_from(installed, installed.site) == []

    # The check itself: a site without one of the packages is caught.
    partial = tmp_path / "site"
    shutil.copytree(installed.site, partial, ignore=shutil.ignore_patterns("live"))
    (partial / "dependencies.pth").write_text(f"{SITE}\n")
    env = dict(installed.env, PYTHONPATH=str(partial), PYTHONNOUSERSITE="1")
    without = Installed(installed.python, partial, installed.work, env)
    assert "live" in missing_from(without, partial)
