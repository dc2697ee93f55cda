"""``flask users create`` / ``set-password``: a password that is not UTF-8 text, or that
holds a control character, is refused on one line and nothing is written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import select

from accounts.models import User
from accounts.services import create_user
from extensions import db
from harness import ROOT, process_env

UNREADABLE = b"\xff\xfe\xfdabcdefghijkl\n"


@pytest.fixture
def operator(app):
    with app.app_context():
        user = create_user("ops@example.com", "the first long password", [])
        db.session.commit()
        return user.email, user.password_hash


def stored_hash(app, email: str) -> str | None:
    with app.app_context():
        user = db.session.execute(select(User).filter_by(email=email)).scalar_one_or_none()
        return user.password_hash if user else None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (UNREADABLE, "the password is not valid UTF-8 text"),
        (b"abc\x00defghijkl\n", "the password contains a control character"),
        (b"abc\x1b[2Jdefghijkl\n", "the password contains a control character"),
        (b"abcdefghijkl\x7f\n", "the password contains a control character"),
    ],
)
def test_an_unusable_password_is_refused_on_one_line_and_nothing_is_written(
    app, cli, operator, line, reason
):
    email, first_hash = operator

    changed = cli.invoke(args=["users", "set-password", email], input=line)
    created = cli.invoke(args=["users", "create", "new@example.com"], input=line)

    for result in (changed, created):
        assert result.exit_code == 1, (result.output, result.exception)
        assert result.stdout == ""
        assert result.stderr.splitlines() == [f"error: {reason}"]
    assert stored_hash(app, email) == first_hash
    assert stored_hash(app, "new@example.com") is None


def test_undecodable_bytes_on_a_real_stdin_are_refused_without_a_traceback(app, operator):
    # In UTF-8 mode (a C locale) stdin hands undecodable bytes on as lone surrogates.
    email, first_hash = operator
    env = process_env(app, PYTHONUTF8="1")

    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "users", "set-password", email],
        cwd=ROOT,
        env=env,
        input=UNREADABLE,
        capture_output=True,
        timeout=120,
    )

    assert done.returncode == 1, done.stderr
    assert done.stderr.decode().splitlines() == ["error: the password is not valid UTF-8 text"]
    assert stored_hash(app, email) == first_hash
