"""The seam through which the tenancy module enters and leaves a tenant.

The runner knows no tenants: it only calls what was bound here, around each
unit whose ``tenant_id`` is set. Unbound, it does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_enter: Callable[[int], Any] | None = None
_leave: Callable[[], Any] | None = None


def bind(enter: Callable[[int], Any], leave: Callable[[], Any]) -> None:
    global _enter, _leave
    _enter, _leave = enter, leave


@contextmanager
def tenant(tenant_id: int | None) -> Iterator[None]:
    if tenant_id is None or _enter is None:
        yield
        return
    _enter(tenant_id)
    try:
        yield
    finally:
        if _leave is not None:
            _leave()
