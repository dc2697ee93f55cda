"""Configuration, read from the environment in one place."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
INSTANCE_DIR = Path(os.environ.get("INSTANCE_PATH", BASE_DIR / "instance"))


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def instance_secret_key() -> str:
    """A key generated once into the instance folder, for when SECRET_KEY is not set."""
    path = INSTANCE_DIR / "secret_key"
    if not path.exists():
        INSTANCE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


class Config:
    """Settings of one deployment; every value can come from the environment."""

    def __init__(self) -> None:
        env = os.environ
        self.SQLALCHEMY_DATABASE_URI = env.get(
            "DATABASE_URL", f"sqlite:///{INSTANCE_DIR / 'taskledger.db'}"
        )
        self.QUEUE_DRIVER = env.get("QUEUE_DRIVER", "sqlite")
        self.REDIS_URL = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
        self.QUEUE_SQLITE_PATH = env.get("QUEUE_SQLITE_PATH", str(INSTANCE_DIR / "queue.sqlite3"))
        self.LOG_FILE = env.get("LOG_FILE", "")
        self.LOG_LEVEL = env.get("LOG_LEVEL", "INFO")
        self.QUEUE_IMMEDIATE = env.get("QUEUE_IMMEDIATE", "") == "1"
        if env.get("SECRET_KEY"):
            self.SECRET_KEY = env["SECRET_KEY"]
        self.TASK_RUNNER_RETRY_HORIZON_HOURS = _float("TASK_RUNNER_RETRY_HORIZON_HOURS", 6)
        # The throttle's fixed window: rate_per_minute units per window (60 s in production).
        self.TASK_RUNNER_RATE_WINDOW_SECONDS = _int("TASK_RUNNER_RATE_WINDOW_SECONDS", 60)
        self.TASK_RUNNER_STUCK_AFTER_MINUTES = _int("TASK_RUNNER_STUCK_AFTER_MINUTES", 60)
        self.TASK_RUNNER_HEARTBEAT_SECONDS = _int("TASK_RUNNER_HEARTBEAT_SECONDS", 30)
        self.TASK_RUNNER_NEVER_STARTED_SECONDS = _int("TASK_RUNNER_NEVER_STARTED_SECONDS", 0)
        self.TASK_RUNNER_RETENTION_DAYS = _int("TASK_RUNNER_RETENTION_DAYS", 30)
        self.TASK_RUNNER_INSERT_CHUNK = _int("TASK_RUNNER_INSERT_CHUNK", 5000)
        self.TASK_RUNNER_DISPATCH_CHUNK = _int("TASK_RUNNER_DISPATCH_CHUNK", 1000)
        self.ASYNC_REQUESTS_RETENTION_DAYS = _int("ASYNC_REQUESTS_RETENTION_DAYS", 7)
        self.LLM_DRIVER = env.get("LLM_DRIVER", "fake")
        self.LLM_BASE_URL = env.get("LLM_BASE_URL", "")
        self.LLM_API_KEY = env.get("LLM_API_KEY", "")
        self.LLM_MODEL = env.get("LLM_MODEL", "")
        self.LLM_TIMEOUT_SECONDS = _int("LLM_TIMEOUT_SECONDS", 120)
        self.BUILDER_STREAM_SECONDS = _int("BUILDER_STREAM_SECONDS", 60)
        self.DOCUMENTS_PROVIDER_URL = env.get("DOCUMENTS_PROVIDER_URL", "")
        self.DOCUMENTS_PROVIDER_TOKEN = env.get("DOCUMENTS_PROVIDER_TOKEN", "")
        self.DOCUMENTS_PROVIDER_TIMEOUT_SECONDS = _float("DOCUMENTS_PROVIDER_TIMEOUT_SECONDS", 10)
        self.SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
        self.SESSION_COOKIE_HTTPONLY = True
        self.SESSION_COOKIE_SAMESITE = "Lax"
        self.SESSION_COOKIE_SECURE = env.get("SESSION_COOKIE_SECURE", "") == "1"
        self.REMEMBER_COOKIE_HTTPONLY = True
        self.WTF_CSRF_TIME_LIMIT = None

    def as_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.isupper()}
