"""Whether a pid still names a process of this host, for whoever must judge a process it
did not start: a consumer's board (a worker that died) and the live streams' leases (a
web process killed outright). Neutral ground: the Huey wiring and ``live`` both ask it,
and neither may import the other."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process of this host (and pid namespace) has this pid; another user's
    counts as alive. Not a process's id (0 or below): alive, left for the caller's lapse
    rule to judge (``os.kill`` would signal a process group)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
