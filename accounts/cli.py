"""``flask users create EMAIL --permission P…``: the password comes from stdin or a prompt."""

from __future__ import annotations

import sys

import click
from flask.cli import with_appcontext

from accounts.permissions import PERMISSIONS
from accounts.services import AccountError, create_user, set_password


@click.group("users", help="Operator accounts.")
def users_cli() -> None:
    pass


def _read_password() -> str:
    if sys.stdin.isatty():
        return click.prompt("Password", hide_input=True, confirmation_prompt=True)
    return sys.stdin.readline().rstrip("\r\n")


@users_cli.command("create")
@click.argument("email")
@click.option(
    "--permission",
    "permissions",
    multiple=True,
    metavar="P",
    type=click.Choice(sorted(PERMISSIONS)),
    help="A permission to grant (repeatable).",
)
@with_appcontext
def create_command(email: str, permissions: tuple[str, ...]) -> None:
    """Create an operator; the password is read from stdin or asked for."""
    password = _read_password()
    try:
        user = create_user(email, password, permissions)
    except AccountError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    granted = ", ".join(sorted(user.permissions)) or "no permissions"
    click.echo(f"created {user.email} ({granted})")


@users_cli.command("set-password")
@click.argument("email")
@with_appcontext
def set_password_command(email: str) -> None:
    """Change an operator's password (from stdin or asked for); their sessions end."""
    password = _read_password()
    try:
        user = set_password(email, password)
    except AccountError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"password of {user.email} changed; every session of theirs has ended")
