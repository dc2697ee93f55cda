"""The seam through which the tenancy module enters and leaves a tenant.

The runner knows no tenants: it only calls what was bound here, around each
unit whose ``tenant_id`` is set. Each app holds its own binding; unbound, it
does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

EXTENSION = "taskrunner.tenant_hooks"
NAMES = "taskrunner.tenant_names"


@dataclass(frozen=True)
class TenantHooks:
    enter: Callable[[int], Any] | None = None
    leave: Callable[[], Any] | None = None


def _no_names(_ids: Iterable[int]) -> dict[int, str]:
    return {}


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = TenantHooks()
    app.extensions[NAMES] = _no_names


def bind_names(names: Callable[[Iterable[int]], dict[int, str]]) -> None:
    """Let the tenancy module name tenants in what the runner exports (a CSV of units)."""
    current_app.extensions[NAMES] = names


def names_of(ids: Iterable[int | None]) -> dict[int, str]:
    """Tenant names by id, through the bound seam; unbound, none."""
    wanted = {int(i) for i in ids if i is not None}
    if not wanted:
        return {}
    return current_app.extensions.get(NAMES, _no_names)(wanted)


def bind(enter: Callable[[int], Any], leave: Callable[[], Any]) -> None:
    """Let the tenancy module say how the app enters and leaves a tenant around a unit."""
    current_app.extensions[EXTENSION] = TenantHooks(enter, leave)


@contextmanager
def tenant(tenant_id: int | None) -> Iterator[None]:
    hooks: TenantHooks = current_app.extensions[EXTENSION]
    if tenant_id is None or hooks.enter is None:
        yield
        return
    hooks.enter(tenant_id)
    try:
        yield
    finally:
        if hooks.leave is not None:
            hooks.leave()
