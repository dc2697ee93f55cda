"""The current tenant of this thread, entered and left explicitly around a unit."""

from __future__ import annotations

import threading

from taskrunner.contract import register_domain_error

_state = threading.local()


@register_domain_error
class NoTenant(Exception):
    """Code that needs a tenant ran in the central context."""


def enter(tenant_id: int) -> None:
    _state.tenant_id = tenant_id


def leave() -> None:
    _state.tenant_id = None


def current_tenant_id() -> int | None:
    return getattr(_state, "tenant_id", None)


def require_tenant() -> int:
    tenant_id = current_tenant_id()
    if tenant_id is None:
        raise NoTenant("no tenant context")
    return tenant_id
