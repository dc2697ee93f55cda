"""``flask users create``: the password from stdin, never an argument; hashed at rest."""

from __future__ import annotations

from sqlalchemy import select

from accounts.models import User
from extensions import db


def test_users_create_reads_the_password_from_stdin_and_hashes_it(app, cli):
    result = cli.invoke(
        args=[
            "users",
            "create",
            "Ops@Example.com",
            "--permission",
            "task-runner.runs.view",
            "--permission",
            "task-runner.runs.manage",
        ],
        input="a long enough password\n",
    )

    assert result.exit_code == 0, result.output
    assert "created ops@example.com" in result.output
    with app.app_context():
        user = db.session.execute(select(User)).scalar_one()
        assert user.email == "ops@example.com"
        assert user.permissions == {"task-runner.runs.view", "task-runner.runs.manage"}
        assert "a long enough password" not in user.password_hash
        assert user.password_hash.startswith(("scrypt:", "pbkdf2:"))


def test_users_create_has_no_password_option(cli):
    result = cli.invoke(args=["users", "create", "a@example.com", "--password", "x" * 12])
    assert result.exit_code == 2


def test_an_unknown_permission_is_a_usage_error(cli):
    result = cli.invoke(
        args=["users", "create", "a@example.com", "--permission", "root"],
        input="a long enough password\n",
    )
    assert result.exit_code == 2
    assert "root" in result.output


def test_a_short_password_or_a_taken_email_is_refused_on_one_line(cli):
    short = cli.invoke(args=["users", "create", "a@example.com"], input="short\n")
    first = cli.invoke(args=["users", "create", "b@example.com"], input="long enough pass\n")
    again = cli.invoke(args=["users", "create", "B@example.com"], input="long enough pass\n")

    assert short.exit_code == 1
    assert short.stderr.strip() == "error: the password needs at least 10 characters"
    assert first.exit_code == 0
    assert again.exit_code == 1
    assert again.stderr.strip() == "error: a user b@example.com already exists"
