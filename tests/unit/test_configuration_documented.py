"""Every setting ``config.py`` reads from the environment is in README's Configuration table."""

from __future__ import annotations

import ast
import re

from tests.support import ROOT

SETTING = re.compile(r"[A-Z][A-Z0-9_]+")


def settings_read(source: str) -> set[str]:
    """The names passed as the first argument of any call (``env.get``, ``_int``…)."""
    return {
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and SETTING.fullmatch(node.args[0].value)
    }


def configuration_section() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Configuration") : readme.index("## Command line")]


def test_the_reader_finds_each_way_a_setting_is_read():
    source = 'A = env.get("QUEUE_X", "")\nB = _int("SOME_SECONDS", 3)\nC = _flag("ON", True)\n'
    assert settings_read(source) == {"QUEUE_X", "SOME_SECONDS", "ON"}


def test_every_setting_read_from_the_environment_is_documented():
    read = settings_read((ROOT / "config.py").read_text())
    assert {"DATABASE_URL", "QUEUE_DRIVER", "TASK_RUNNER_UNIT_COMMIT"} <= read
    section = configuration_section()
    assert {name for name in read if f"`{name}`" not in section} == set()
