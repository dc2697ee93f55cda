"""The live key of a run: a marker bumped after each commit that changed the run.

The run page's event stream reads it (one cheap read, no database query) and
reloads the run only when it moved. It lives in Redis when the deployment has
Redis (every host sees it), else in a small file in the instance folder (the
embedded, one-machine setup). Losing a bump only delays a page refresh.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from flask import current_app

logger = logging.getLogger(__name__)

TTL_SECONDS = 24 * 3600


def _redis():
    app = current_app._get_current_object()
    client = app.extensions.get("builder_live_redis")
    if client is None:
        import redis

        client = redis.Redis.from_url(app.config["REDIS_URL"], socket_timeout=2)
        app.extensions["builder_live_redis"] = client
    return client


def _uses_redis() -> bool:
    return current_app.config.get("QUEUE_DRIVER") == "redis"


def _path(run_uuid: str) -> Path:
    return Path(current_app.instance_path) / "builder-live" / run_uuid


def bump(run_uuid: str) -> None:
    """Say that the run changed; never raises (the page falls back to its slow refresh)."""
    try:
        if _uses_redis():
            key = f"taskledger:builder:live:{run_uuid}"
            _redis().pipeline().incr(key).expire(key, TTL_SECONDS).execute()
            return
        path = _path(run_uuid)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_text(str(time.time_ns()))
        os.replace(scratch, path)
    except Exception:
        logger.warning("Could not bump the live key of builder run %s", run_uuid, exc_info=True)


def marker(run_uuid: str) -> str:
    """The current value of the key; it changes whenever the run changed."""
    try:
        if _uses_redis():
            value = _redis().get(f"taskledger:builder:live:{run_uuid}")
            return value.decode() if value else "0"
        return _path(run_uuid).read_text()
    except FileNotFoundError:
        return "0"
    except Exception:
        logger.warning("Could not read the live key of builder run %s", run_uuid, exc_info=True)
        return "?"
