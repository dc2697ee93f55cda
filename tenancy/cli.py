"""``flask tenants create|list|import|close``: thin commands over the tenant services."""

from __future__ import annotations

import json

import click
from flask.cli import AppGroup

from security.echo import echo, one_line
from security.refusal import refuse
from taskrunner.contract import plural
from tenancy import services as tenants
from tenancy.services import TenantError

tenants_cli = AppGroup("tenants", help="Tenants: create, list, import, close; their API tokens.")


class TenantId(click.IntRange):
    """A tenant id as typed: ASCII digits (within bounds, if given). Python's ``int`` also
    reads ``4_7`` and other scripts' digits as 47: a slip could name another tenant."""

    name = "tenant_id"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not (value.isascii() and value.isdigit()):
            self.fail(f"{echo(value)} is not a tenant id (the digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


TENANT_ID = TenantId()


@tenants_cli.command("create")
@click.argument("name")
def create_command(name: str) -> None:
    """Create an active tenant; print its id on the last line."""
    try:
        tenant = tenants.create(name)
    except TenantError as exc:
        refuse(str(exc))
    click.echo(f"created tenant {tenant.name!r}", err=True)
    click.echo(tenant.id)


@tenants_cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_command(as_json: bool) -> None:
    """Every tenant: id, name, status."""
    rows = [tenants.tenant_dict(t) for t in tenants.listing()]
    if as_json:
        click.echo(json.dumps({"tenants": rows}, indent=2))
        return
    click.echo(f"{'id':>8}  {'status':10}  name")
    for row in rows:
        # A name stored before names were checked may hold what steers a terminal.
        click.echo(f"{row['id']:>8}  {row['status']:10}  {one_line(row['name'])}")


@tenants_cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
def import_command(path: str) -> None:
    """Create tenants from a CSV file with a 'name' column; names already taken are skipped."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            report = tenants.import_csv(handle)
    except OSError as exc:
        refuse(f"cannot read {path}: {exc.strerror or exc}")
    except TenantError as exc:
        refuse(str(exc))
    click.echo(f"imported {plural(report.created, 'tenant')} ({report.skipped:,} already there)")


@tenants_cli.command("close")
@click.argument("tenant_id", type=TENANT_ID)
def close_command(tenant_id: int) -> None:
    """Close a tenant: its API tokens stop working at once."""
    try:
        closed = tenants.close(tenant_id)
    except TenantError as exc:
        refuse(str(exc))
    click.echo(
        f"tenant {tenant_id} "
        + ("closed: its API tokens no longer work" if closed else "was already closed")
    )
