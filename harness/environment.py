"""The environment of a process that works on the same database and queues as an app."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Config keys passed on by their own name, and those whose environment name differs.
SHARED_PREFIXES = ("TASK_RUNNER_", "NETWORK_", "LLM_", "DOCUMENTS_PROVIDER_", "ALERT_", "SMTP_")
SHARED_KEYS = ("QUEUE_DRIVER", "QUEUE_SQLITE_PATH", "REDIS_URL", "SECRET_KEY", "BACKOFFICE_URL")
ENV_NAME = {"SQLALCHEMY_DATABASE_URI": "DATABASE_URL"}


def process_env(app: Any, **extra: str) -> dict[str, str]:
    """This process's environment (pytest's own variables left out), with the app's
    database, queues, secret key and runner settings, its instance folder, and
    ``extra``. ``app`` is a Flask app or anything with ``config`` and ``instance_path``."""
    config: Mapping[str, Any] = app.config
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    for key, value in config.items():
        shared = key in SHARED_KEYS or key in ENV_NAME or key.startswith(SHARED_PREFIXES)
        if shared and value not in (None, "") and not isinstance(value, dict | list | tuple):
            env[ENV_NAME.get(key, key)] = str(value)
    env["INSTANCE_PATH"] = str(app.instance_path)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env
