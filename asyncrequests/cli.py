"""``flask tenants token …`` (on ``tenancy.cli``'s group) and ``flask async-requests prune``."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from asyncrequests import retention, tokens
from asyncrequests.errors import AsyncRequestError
from security.echo import one_line
from security.refusal import refuse
from taskrunner.contract import plural
from tenancy.cli import TENANT_ID, tenants_cli

token_cli = AppGroup("token", help="Create, list and revoke tenant API tokens.")
tenants_cli.add_command(token_cli)
async_requests_cli = AppGroup("async-requests", help="Tenant-facing async requests.")
# A century, more than any retention: far beyond it the cut-off falls before year 1, which
# no datetime holds (an OverflowError, not a refusal).
MAX_RETENTION_DAYS = 36_500


def _when(value) -> str:
    return value.isoformat(timespec="seconds") + "Z" if value else "-"


@token_cli.command("create")
@click.argument("tenant_id", type=TENANT_ID)
@click.option("--name", default="", help="A label for the token, e.g. the client's name.")
def create_command(tenant_id: int, name: str) -> None:
    """Create an API token for a tenant; the token is printed once, on the last line."""
    try:
        issued = tokens.issue(tenant_id, name)
    except AsyncRequestError as exc:
        refuse(str(exc))
    click.echo(
        f"token {issued.public_id} for tenant {tenant_id}: store it now, it is not shown again",
        err=True,
    )
    click.echo(issued.token)


@token_cli.command("revoke")
@click.argument("token_id")
def revoke_command(token_id: str) -> None:
    """Revoke a token by its id (as listed) or by the token itself (its secret must match)."""
    try:
        public_id, revoked = tokens.revoke(token_id)
    except AsyncRequestError as exc:
        refuse(str(exc))
    click.echo(f"token {public_id} " + ("revoked" if revoked else "was already revoked"), err=True)


@token_cli.command("list")
@click.argument("tenant_id", type=TENANT_ID)
def list_command(tenant_id: int) -> None:
    """A tenant's tokens (never the secrets)."""
    try:
        listed = tokens.tokens_of(tenant_id)
    except AsyncRequestError as exc:
        refuse(str(exc))
    click.echo(f"{'id':12}  {'name':24} {'created':20}  {'last used':20}  revoked")
    for info in listed:
        click.echo(
            f"{info.public_id:12}  {one_line(info.name[:24]):24} {_when(info.created_at):20}  "
            f"{_when(info.last_used_at):20}  {_when(info.revoked_at)}"
        )


@async_requests_cli.command("prune")
@click.option(
    "--days",
    type=click.IntRange(0, MAX_RETENTION_DAYS),
    help="Keep this many days (default ASYNC_REQUESTS_RETENTION_DAYS).",
)
def prune_command(days: int | None) -> None:
    """Delete async requests older than the retention; the task-run ledger is not touched."""
    click.echo(f"pruned {plural(retention.prune(days), 'async request')}")
