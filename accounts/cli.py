"""``flask users create EMAIL --permission P…``: the password comes from stdin or a prompt."""

from __future__ import annotations

import sys
import unicodedata

import click
from flask.cli import with_appcontext

from accounts.permissions import PERMISSIONS
from accounts.services import AccountError, create_user, set_password
from security.refusal import refuse


@click.group("users", help="Operator accounts.")
def users_cli() -> None:
    pass


def _read_password() -> str:
    """The password from a prompt or stdin's first line; one that is not UTF-8 text, or
    that holds a control character, is refused (one line, exit 1) before anything is
    written."""
    try:
        if sys.stdin.isatty():
            password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        # Under a C locale undecodable bytes arrive as lone surrogates, which no hash
        # takes; under a UTF-8 one, reading them raised already.
        password.encode("utf-8")
    except UnicodeError:
        refuse("the password is not valid UTF-8 text")
    # A NUL, an escape or a backspace is a paste or a pipe gone wrong; no one can type it
    # again at the sign-in form.
    if any(unicodedata.category(char) == "Cc" for char in password):
        refuse("the password contains a control character")
    return password


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
        refuse(str(exc))
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
        refuse(str(exc))
    click.echo(f"password of {user.email} changed; every session of theirs has ended")
