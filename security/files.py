"""Files of the instance folder are private to the account that runs the app.

The ledger database, the queue file, the log and the secret key hold tenants'
data and credentials: they are created 0600 (0700 for folders), whatever the
umask, and an existing one that others may read is tightened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


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


def _tighten(path: Path, mode: int) -> None:
    info = path.stat()
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        path.chmod(mode)
