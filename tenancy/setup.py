"""Bind the tenant context to the task runner's seam."""

from __future__ import annotations

from taskrunner.contract import bind_tenant_context, bind_tenant_names
from tenancy import context, services


def init_app(_app) -> None:
    bind_tenant_context(context.enter, context.leave)
    bind_tenant_names(services.names)
