"""The seam through which the tenancy module enters and leaves a tenant.

The runner knows no tenants: it only calls what was bound here, around each
unit whose ``tenant_id`` is set. Each app holds its own binding; unbound, it
does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask, current_app

EXTENSION = "taskrunner.tenant_hooks"


@dataclass(frozen=True)
class TenantHooks:
    enter: Callable[[int], Any] | None = None
    leave: Callable[[], Any] | None = None


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = TenantHooks()


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
