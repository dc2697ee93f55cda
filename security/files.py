"""Files of the instance folder are private to the account that runs the app.

The ledger database, the queue file, the log and the secret key hold tenants'
data and credentials: they are created 0600 (0700 for folders), whatever the
umask, and an existing one that others may read is tightened -- unless it has another
hard link (the same file under another name is not only ours).

A setting may name some other program's file by mistake (as root, ``LOG_FILE=/etc/passwd``
was made 0600 and appended to): an existing file that is plainly not a database
(``private_database``) or not a log (``private_log``) is refused before anything about
it changes.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
SQLITE_HEADER = b"SQLite format 3\x00"
# How every line this app logs begins (``security.logs.FORMAT``: its time first).
LOG_LINE_START = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
HEAD_BYTES = 32
# Files whose first bytes were read by this process: never again (``private_database``).
_read: set[tuple[int, int]] = set()


class ForeignFile(OSError):
    """A setting names an existing file that is plainly another program's."""


def private_dir(path: Path) -> Path:
    """``path`` as a folder only its owner may enter, created if missing."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _tighten(path, DIR_MODE)
    return path


def tighten_dir(path: Path) -> None:
    """An existing folder others may enter made ``DIR_MODE``; a missing one is left to
    the first private file made in it (a host that writes no instance file needs none)."""
    if path.is_dir():
        _tighten(path, DIR_MODE)


def private_file(path: Path) -> Path:
    """``path`` as a file only its owner may read, created empty if missing; a path that
    names something other than a regular file is left as it is.

    An existing file is never opened here: closing any descriptor of a file drops the
    POSIX locks this process holds on it, which is how SQLite locks its databases.
    """
    if not path.exists():
        if not path.parent.exists():
            private_dir(path.parent)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        except FileExistsError:  # another process made it first
            pass
    if path.is_file():
        # Not a device or a pipe named as the file (``LOG_FILE=/dev/null``): /dev/null
        # made 0600 breaks every other account of the machine.
        _tighten(path, FILE_MODE)
    return path


def private_database(path: Path) -> Path:
    """``private_file`` for an SQLite database: an existing file that is not empty and
    does not begin with SQLite's header is refused (``ForeignFile``), left as it is.

    Its header is read once a process, before any connection of it opens the file (see
    ``private_file`` on POSIX locks): a file this process has seen is not read again.
    """
    refuse_foreign_database(path)
    private_file(path)
    info = path.stat()
    _read.add((info.st_dev, info.st_ino))  # made or found here: SQLite opens it next
    return path


def refuse_foreign_database(path: Path) -> None:
    """``ForeignFile`` when ``path`` is an existing file, not empty, without SQLite's header
    (read as ``private_database`` reads it)."""
    _refuse_unless(path, lambda head: head.startswith(SQLITE_HEADER), "not an SQLite database")


def private_log(path: Path) -> Path:
    """``private_file`` for a log: an existing file that is not empty and does not begin
    as every line of ours does (its date and time) is refused (``ForeignFile``), left
    as it is: it would be tightened and appended to."""
    _refuse_unless(path, LOG_LINE_START.match, "not a log: its first line is not a log line")
    return private_file(path)


def _refuse_unless(path: Path, looks_ours: Callable[[bytes], object], said: str) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    identity = (info.st_dev, info.st_ino)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0 or identity in _read:
        return
    with path.open("rb") as file:
        head = file.read(HEAD_BYTES)
    if not looks_ours(head):
        raise ForeignFile(f"{said}; left as it is")
    _read.add(identity)


def _tighten(path: Path, mode: int) -> None:
    info = path.stat()
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return  # another name for the same file: whoever made it chose its mode
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(mode)
