"""The command line's refusal: exit 1 with one line on stderr starting ``error:``.

Every ``flask`` command refuses through ``refuse``, so the rule README states holds
whatever a message quotes: a run uuid, a path or a token typed with a newline or an
escape sequence in it is shown escaped, never as a second line or a terminal command.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from security.echo import error_line


def refuse(message: str) -> NoReturn:
    """Print ``error: message`` on one line of stderr and exit 1."""
    click.echo(error_line(message), err=True)
    sys.exit(1)


def read_text(path: str, missing: str | None = None) -> str:
    """The UTF-8 text of the file at ``path``; a refusal naming why it cannot be read (a
    directory, no such file unless ``missing`` stands in for it, not UTF-8)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError as exc:
        if missing is not None:
            return missing
        refuse(f"cannot read {path}: {exc.strerror}")
    except OSError as exc:
        refuse(f"cannot read {path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        refuse(f"cannot read {path}: not UTF-8 text (byte {exc.start})")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to the file at ``path`` as UTF-8; a refusal naming why it cannot."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        refuse(f"cannot write {path}: {exc.strerror or exc}")
