"""Configuration, read from the environment in one place."""

from __future__ import annotations

import logging
import math
import os
import secrets
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import click
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from alerts import settings as alert_settings
from security.echo import error_line

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY_FILE = "secret_key"
# A century, as ``--days`` of the prune commands: far beyond it the cut-off is before year 1.
MAX_RETENTION_DAYS = 36_500
# A consumer silent for this many of its heartbeats is lost (tasks.presence).
CONSUMER_LOST_AFTER_BEATS = 3
# The shortest consumer heartbeat (seconds): each beat writes the consumer's row.
MIN_CONSUMER_HEARTBEAT_SECONDS = 0.1
# A live stream renews its lease (``live.streams``: due every 10 s, lapsing after 30 s) and
# sees a client gone or a session ended only at a poll: a longer poll lets its lease lapse.
LIVE_POLL_MAX_SECONDS = 10


class ConfigError(click.ClickException, ValueError):
    """A setting this deployment cannot run with; its message names the setting.

    A ``ClickException``: met while a ``flask`` command is prepared (``startup``), click
    answers it as the README's command line says: one line on stderr, exit 1, no
    traceback. The app factory (under Flask's command line), the web and consumer entry
    points answer it themselves (``startup.refuse_config``).
    """

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(error_line(self.format_message()), file=file, err=file is None)


# A century again for the runner's and the consumers' periods: a consumer forgotten, a
# unit or a consumer silent for three beats, a unit stuck or never started, is found by a
# cut-off (now - the period) that must fall after year 1; a session's end (sign-in's now +
# its lifetime) past year 9999 fails every sign-in.
MAX_PERIOD_MINUTES = 24 * 60 * MAX_RETENTION_DAYS
MAX_PERIOD_SECONDS = 24 * 3600 * MAX_RETENTION_DAYS
MAX_PERIOD_HOURS = 24 * MAX_RETENTION_DAYS
MAX_ALERT_TIMEOUT_SECONDS = 60
# A vendor's wait beyond its job's hard timeout is cut by that timeout anyway, and one of
# ten billion seconds is no socket timeout at all (OverflowError at each call): the
# builder step's timeout (coursebuilder.steps.STEP_TIMEOUT) and the document forward's.
MAX_LLM_TIMEOUT_SECONDS = 1800
MAX_PROVIDER_TIMEOUT_SECONDS = 60


def _int(name: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
    """No setting means anything below zero; a period, a chunk or a window (``minimum``
    1) means nothing at zero either: a consumer would spin or divide by it. ``maximum``:
    what a clock can reach back (a retention of a million days is a date before year 1)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {raw!r}")
    return value


def _float(
    name: str,
    default: float,
    positive: bool = False,
    maximum: float | None = None,
    minimum: float = 0,
) -> float:
    """A number of zero or more; a period or a timeout (``positive``) is more than zero: a
    loop would spin on it, or a socket give up before it began. ``minimum``: a period whose
    loop writes each time (a microsecond spins as surely as zero). ``maximum``: a span
    added to now that would pass year 9999, which no date holds."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # nan and inf parse, but no period, share or timeout is one (timedelta refuses them).
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a number, got {raw!r}")
    if value < 0:
        raise ConfigError(f"{name} must not be negative, got {raw!r}")
    if positive and value == 0:
        raise ConfigError(f"{name} must be more than 0, got {raw!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum:g}, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum:g}, got {raw!r}")
    return value


# gunicorn.conf.py reads its numbers before the app exists, with the same rules.
whole_number = _int


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw not in ("0", "1"):
        # Ignoring "true" or "off" would leave the default on, whichever was meant.
        raise ConfigError(f"{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _log_level(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip().upper() or default
    if raw not in logging.getLevelNamesMapping():
        raise ConfigError(
            f"{name} must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {raw!r}"
        )
    return raw


def _one_of(name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name, default)
    if raw not in allowed:
        # Found only when a run is dispatched, it would be one written and failed.
        raise ConfigError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {raw!r}")
    return raw


def _database_url(name: str, default: str) -> str:
    # Set but empty is refused, never read as unset: that would be a fresh SQLite ledger.
    raw = os.environ.get(name, default)
    try:
        make_url(raw)
    except ArgumentError:
        # The value is not repeated: a URL carries its password.
        raise ConfigError(
            f"{name} is not a database URL (e.g. postgresql+psycopg://user:password@host/db)"
        ) from None
    return raw


def _endpoint_url(name: str) -> str:
    raw = os.environ.get(name, "")
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - a port that is not a number raises here, not at a send
    except ValueError:
        # The value is not repeated: a URL may be, or hold, its credential.
        raise ConfigError(f"{name} is not a URL with a host and a numeric port") from None
    if "@" in parts.netloc:
        # urllib takes user:password@ for part of the host, and its error quotes the password.
        raise ConfigError(f"{name} must not carry a user or password (user:password@host)")
    if raw and (parts.scheme not in ("http", "https") or not parts.hostname):
        # urllib would also open file:, ftp: and data: URLs: a local file's contents passed
        # for the provider's answer (a document "forwarded"), and its token went with it.
        raise ConfigError(f"{name} must be an http or https URL with a host")
    return raw


def _check_alert_settings(config: Mapping[str, Any]) -> None:
    # The rules read their lists when they judge: a malformed one found there would stop
    # every rule, unsaid, until an operator looked at the Alerts page.
    try:
        alert_settings.read(config)
    except alert_settings.SettingError as exc:
        raise ConfigError(str(exc)) from None


def instance_path(overrides: Mapping[str, Any] | None = None) -> Path:
    """The instance folder: ``INSTANCE_PATH`` of ``overrides``, else of the environment,
    else ``instance/`` next to this file. Read when an app is made, never at import."""
    chosen = (overrides or {}).get("INSTANCE_PATH") or os.environ.get("INSTANCE_PATH")
    return Path(chosen) if chosen else BASE_DIR / "instance"


def read_secret_key(instance: str | Path) -> str | None:
    """The key ``ensure_secret_key`` wrote into the instance folder, if it did."""
    path = Path(instance) / SECRET_KEY_FILE
    key = path.read_text().strip() if path.is_file() else ""
    return key or None


def ensure_secret_key(instance: str | Path) -> str:
    """The instance folder's key, generated once (0600) when there is none yet.

    For when SECRET_KEY is not set; an entry point calls it, never the app factory.
    """
    from security.files import private_file

    key = read_secret_key(instance)
    if key is not None:
        return key
    # Written aside, then linked into place: two processes starting at once agree on the
    # first one's key, and none ever reads a half-written file.
    path = Path(instance) / SECRET_KEY_FILE
    candidate = private_file(path.with_name(f".{SECRET_KEY_FILE}.{os.getpid()}"))
    candidate.write_text(secrets.token_hex(32))
    try:
        os.link(candidate, path)
    except FileExistsError:
        if read_secret_key(instance) is None:  # an empty file, left by an older version
            os.replace(candidate, path)
    finally:
        candidate.unlink(missing_ok=True)
    return read_secret_key(instance) or ""


class Config:
    """Settings of one deployment; every value can come from the environment."""

    def __init__(self, instance: Path | None = None) -> None:
        env = os.environ
        instance = instance or instance_path()
        self.INSTANCE_PATH = str(instance)
        self.SQLALCHEMY_DATABASE_URI = _database_url(
            "DATABASE_URL", f"sqlite:///{instance / 'taskledger.db'}"
        )
        self.QUEUE_DRIVER = _one_of("QUEUE_DRIVER", ("sqlite", "redis", "postgres"), "sqlite")
        self.REDIS_URL = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
        self.QUEUE_SQLITE_PATH = env.get("QUEUE_SQLITE_PATH", str(instance / "queue.sqlite3"))
        self.LOG_FILE = env.get("LOG_FILE", "")
        self.LOG_LEVEL = _log_level("LOG_LEVEL", "INFO")
        self.QUEUE_IMMEDIATE = env.get("QUEUE_IMMEDIATE", "") == "1"
        if env.get("SECRET_KEY"):
            self.SECRET_KEY = env["SECRET_KEY"]
        self.TASK_RUNNER_RETRY_HORIZON_HOURS = _float(
            "TASK_RUNNER_RETRY_HORIZON_HOURS", 6, positive=True, maximum=MAX_PERIOD_HOURS
        )
        # The throttle's fixed window: rate_per_minute units per window (60 s in production).
        self.TASK_RUNNER_RATE_WINDOW_SECONDS = _int(
            "TASK_RUNNER_RATE_WINDOW_SECONDS", 60, minimum=1
        )
        self.TASK_RUNNER_STUCK_AFTER_MINUTES = _int(
            "TASK_RUNNER_STUCK_AFTER_MINUTES", 60, minimum=1, maximum=MAX_PERIOD_MINUTES
        )
        self.TASK_RUNNER_HEARTBEAT_SECONDS = _int(
            "TASK_RUNNER_HEARTBEAT_SECONDS", 30, minimum=1, maximum=MAX_PERIOD_SECONDS
        )
        self.TASK_RUNNER_NEVER_STARTED_SECONDS = _int(
            "TASK_RUNNER_NEVER_STARTED_SECONDS", 0, maximum=MAX_PERIOD_SECONDS
        )
        # Periods of the two sweeps that run every few minutes (taskrunner/periodic.py).
        self.TASK_RUNNER_RELAY_SECONDS = _int("TASK_RUNNER_RELAY_SECONDS", 60, minimum=1)
        self.TASK_RUNNER_SWEEP_SECONDS = _int("TASK_RUNNER_SWEEP_SECONDS", 300, minimum=1)
        # The roll-up of units settled per minute (the queues page's last minute and hour).
        self.TASK_RUNNER_THROUGHPUT_SECONDS = _int("TASK_RUNNER_THROUGHPUT_SECONDS", 60, minimum=1)
        self.TASK_RUNNER_RETENTION_DAYS = _int(
            "TASK_RUNNER_RETENTION_DAYS", 30, maximum=MAX_RETENTION_DAYS
        )
        # A subscriber that refuses an event retries after this many seconds, doubling
        # (at most an hour), and is parked after this many refusals.
        self.TASK_RUNNER_EVENT_RETRY_SECONDS = _float(
            "TASK_RUNNER_EVENT_RETRY_SECONDS", 60, positive=True
        )
        self.TASK_RUNNER_EVENT_MAX_ATTEMPTS = _int("TASK_RUNNER_EVENT_MAX_ATTEMPTS", 8, minimum=1)
        self.TASK_RUNNER_INSERT_CHUNK = _int("TASK_RUNNER_INSERT_CHUNK", 5000, minimum=1)
        self.TASK_RUNNER_DISPATCH_CHUNK = _int("TASK_RUNNER_DISPATCH_CHUNK", 1000, minimum=1)
        # More task types for another queue than their definition names ("type=queue,...";
        # the routing table, tasks/routing.py TYPE_ROUTES, has the project's own).
        self.TASK_RUNNER_TYPE_ROUTES = env.get("TASK_RUNNER_TYPE_ROUTES", "")
        # A deployment's own modules (comma-separated): the app factory imports each and
        # calls its init_app(app), so web, CLI and consumers know the same task types.
        self.TASKLEDGER_EXTRA_MODULES = env.get("TASKLEDGER_EXTRA_MODULES", "")
        # "fast": a unit's gate and completion do not wait for PostgreSQL's WAL flush
        # (taskrunner/ledger/hot.py says what a server crash can cost); "durable": they do.
        self.TASK_RUNNER_UNIT_COMMIT = env.get("TASK_RUNNER_UNIT_COMMIT", "fast")
        # Consumers register themselves and heartbeat every CONSUMER_HEARTBEAT_SECONDS; one
        # silent for three beats is shown as lost, and forgotten after the retention. Each
        # beat is an upsert: a beat shorter than a tenth of a second is a loop of writes.
        self.CONSUMER_HEARTBEAT_SECONDS = _float(
            "CONSUMER_HEARTBEAT_SECONDS",
            10,
            positive=True,
            maximum=MAX_PERIOD_SECONDS,
            minimum=MIN_CONSUMER_HEARTBEAT_SECONDS,
        )
        self.CONSUMER_RETENTION_MINUTES = _int(
            "CONSUMER_RETENTION_MINUTES", 60, maximum=MAX_PERIOD_MINUTES
        )
        lost_after = CONSUMER_LOST_AFTER_BEATS * self.CONSUMER_HEARTBEAT_SECONDS
        if self.CONSUMER_RETENTION_MINUTES * 60 <= lost_after:
            # Each beat deletes the rows older than the retention: shorter, a dead consumer
            # is forgotten before it is shown lost (at 0, live consumers' rows go too).
            raise ConfigError(
                f"CONSUMER_RETENTION_MINUTES must be longer than {CONSUMER_LOST_AFTER_BEATS} "
                f"beats of CONSUMER_HEARTBEAT_SECONDS ({lost_after:g} s), "
                f"got {self.CONSUMER_RETENTION_MINUTES}"
            )
        self.ASYNC_REQUESTS_RETENTION_DAYS = _int(
            "ASYNC_REQUESTS_RETENTION_DAYS", 7, maximum=MAX_RETENTION_DAYS
        )
        self.LLM_DRIVER = _one_of("LLM_DRIVER", ("fake", "http"), "fake")
        self.LLM_BASE_URL = _endpoint_url("LLM_BASE_URL")
        self.LLM_API_KEY = env.get("LLM_API_KEY", "")
        self.LLM_MODEL = env.get("LLM_MODEL", "")
        for name in ("LLM_BASE_URL", "LLM_MODEL"):
            if self.LLM_DRIVER == "http" and not getattr(self, name):
                # Found by the first step, each build would be started and failed.
                raise ConfigError(f"{name} must be set when LLM_DRIVER is http")
        self.LLM_TIMEOUT_SECONDS = _int(
            "LLM_TIMEOUT_SECONDS", 120, minimum=1, maximum=MAX_LLM_TIMEOUT_SECONDS
        )
        self.BUILDER_STREAM_SECONDS = _int("BUILDER_STREAM_SECONDS", 60, minimum=1)
        # The run pages' live streams: how long one stream lasts (the browser reconnects)
        # and how often it probes the runs it follows.
        self.LIVE_STREAM_SECONDS = _int("LIVE_STREAM_SECONDS", 60, minimum=1)
        self.LIVE_POLL_SECONDS = _float("LIVE_POLL_SECONDS", 1.0, positive=True)
        if self.LIVE_POLL_SECONDS > LIVE_POLL_MAX_SECONDS:
            raise ConfigError(
                f"LIVE_POLL_SECONDS must be at most {LIVE_POLL_MAX_SECONDS}, "
                f"got {os.environ['LIVE_POLL_SECONDS'].strip()!r}"
            )
        # Open streams hold a request thread each: at most this many in one web process
        # (gunicorn.conf.py keeps the rest of its threads for pages), and at most this many
        # of one operator session on every process and host together. More: 429.
        self.LIVE_STREAMS_PER_PROCESS = _int("LIVE_STREAMS_PER_PROCESS", 4, minimum=1)
        self.LIVE_STREAMS_PER_SESSION = _int("LIVE_STREAMS_PER_SESSION", 6, minimum=1)
        # How long a process reuses the overview strip it read (its numbers move by the minute).
        self.OVERVIEW_CACHE_SECONDS = _float("OVERVIEW_CACHE_SECONDS", 5.0)
        self.DOCUMENTS_PROVIDER_URL = _endpoint_url("DOCUMENTS_PROVIDER_URL")
        self.DOCUMENTS_PROVIDER_TOKEN = env.get("DOCUMENTS_PROVIDER_TOKEN", "")
        self.DOCUMENTS_PROVIDER_TIMEOUT_SECONDS = _float(
            "DOCUMENTS_PROVIDER_TIMEOUT_SECONDS",
            10,
            positive=True,
            maximum=MAX_PROVIDER_TIMEOUT_SECONDS,
        )
        # A host cut off from PostgreSQL or Redis must not hang on a dead socket: connecting
        # gives up after the first, a connection whose peer went silent breaks after about
        # the second (database.postgres_connect_args, tasks.queues).
        self.NETWORK_CONNECT_TIMEOUT_SECONDS = _int(
            "NETWORK_CONNECT_TIMEOUT_SECONDS", 10, minimum=1
        )
        self.NETWORK_DEAD_PEER_SECONDS = _int("NETWORK_DEAD_PEER_SECONDS", 60, minimum=1)
        # database.engine_options adds hide_parameters: bound values never reach a message.
        self.SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
        # How this process names its PostgreSQL connections (with its pid, and "ledger" or
        # "queue"): pg_stat_activity's application_name. Consumers call themselves
        # "taskledger-consumer" (tasks.budget).
        self.DATABASE_APPLICATION_NAME = env.get("DATABASE_APPLICATION_NAME", "taskledger")
        # Development serves plain http on 127.0.0.1 (``make run`` sets it); everywhere
        # else cookies are Secure and HSTS is sent.
        self.DEVELOPMENT = env.get("TASKLEDGER_ENV", "production") == "development"
        self.SESSION_COOKIE_HTTPONLY = True
        self.SESSION_COOKIE_SAMESITE = "Lax"
        self.SESSION_COOKIE_SECURE = _flag("SESSION_COOKIE_SECURE", not self.DEVELOPMENT)
        self.REMEMBER_COOKIE_HTTPONLY = True
        self.REMEMBER_COOKIE_SECURE = self.SESSION_COOKIE_SECURE
        self.HSTS_SECONDS = 0 if self.DEVELOPMENT else _int("HSTS_SECONDS", 31536000)
        self.PERMANENT_SESSION_LIFETIME = timedelta(
            hours=_float("SESSION_LIFETIME_HOURS", 12, positive=True, maximum=MAX_PERIOD_HOURS)
        )
        self.WTF_CSRF_TIME_LIMIT = _int("CSRF_TOKEN_LIFETIME_SECONDS", 3600, minimum=1)
        # Requests whose bodies are bigger are refused with a 413 before they are read.
        self.MAX_CONTENT_LENGTH = _int("MAX_CONTENT_LENGTH", 1024 * 1024, minimum=1)
        # Proxies in front of the app that append to X-Forwarded-For / -Proto (0: none;
        # a client's own X-Forwarded-* headers are then ignored).
        self.TRUSTED_PROXY_HOPS = _int("TRUSTED_PROXY_HOPS", 0)
        # Host headers the app answers (comma-separated; ".example.com" takes subdomains);
        # any other is a 400. Unset: every host, as Flask does.
        self.TRUSTED_HOSTS = [
            host.strip() for host in env.get("TRUSTED_HOSTS", "").split(",") if host.strip()
        ] or None
        # The bearer token Prometheus sends to GET /metrics; unset, the endpoint is a 404.
        self.METRICS_TOKEN = env.get("METRICS_TOKEN", "")
        # Alerts (README "Alerts and metrics"; docs/operations.md "Alerts"). The rules on,
        # comma-separated; a run alerts when at least MIN_UNITS failed and their share is
        # at least MIN_SHARE ("type=units:share,..." per type); a stale-units episode opens
        # when STALE_UNITS are stale for STALE_MINUTES, and every condition rule resolves
        # once clear for its window (STALE_MINUTES, else CLEAR_MINUTES); an open episode
        # is reminded every REMIND_MINUTES; "queue=minutes,*=minutes", 0 = off.
        self.ALERT_RULES = env.get(
            "ALERT_RULES",
            "run_failed,stale_units,schedule_missed,deliveries_parked,queue_long_wait,"
            "consumer_lost",
        )
        self.ALERT_RUN_FAILED_MIN_UNITS = _int("ALERT_RUN_FAILED_MIN_UNITS", 1)
        self.ALERT_RUN_FAILED_MIN_SHARE = _float("ALERT_RUN_FAILED_MIN_SHARE", 0.0)
        if self.ALERT_RUN_FAILED_MIN_SHARE > 1:  # no run reaches it: the alerts would be off
            share = self.ALERT_RUN_FAILED_MIN_SHARE
            raise ConfigError(
                f"ALERT_RUN_FAILED_MIN_SHARE must be a share from 0 to 1, got {share:g}"
            )
        self.ALERT_RUN_FAILED_TYPES = env.get("ALERT_RUN_FAILED_TYPES", "")
        self.ALERT_STALE_UNITS = _int("ALERT_STALE_UNITS", 1)
        self.ALERT_STALE_MINUTES = _float("ALERT_STALE_MINUTES", 10)
        self.ALERT_CLEAR_MINUTES = _float("ALERT_CLEAR_MINUTES", 5)
        self.ALERT_REMIND_MINUTES = _float("ALERT_REMIND_MINUTES", 240)
        self.ALERT_QUEUE_WAIT_MINUTES = env.get("ALERT_QUEUE_WAIT_MINUTES", "*=30,long-job=0")
        self.ALERT_PARKED_DELIVERIES = _int("ALERT_PARKED_DELIVERIES", 1)
        self.ALERT_EVALUATE_SECONDS = _int("ALERT_EVALUATE_SECONDS", 60, minimum=1)
        # Which channels each rule goes to ("rule=slack+email,*=webhook"); unset: all.
        self.ALERT_ROUTES = env.get("ALERT_ROUTES", "")
        # One job (``alerts.deliver``, 300 s) sends an alert to each channel in turn: a minute
        # each is already long, and a huge one overflowed each send's deadline.
        self.ALERT_TIMEOUT_SECONDS = _float(
            "ALERT_TIMEOUT_SECONDS", 5, positive=True, maximum=MAX_ALERT_TIMEOUT_SECONDS
        )
        self.ALERT_SLACK_WEBHOOK_URL = _endpoint_url("ALERT_SLACK_WEBHOOK_URL")
        self.ALERT_WEBHOOK_URL = _endpoint_url("ALERT_WEBHOOK_URL")
        self.ALERT_WEBHOOK_SECRET = env.get("ALERT_WEBHOOK_SECRET", "")
        self.ALERT_EMAIL_TO = env.get("ALERT_EMAIL_TO", "")
        self.SMTP_HOST = env.get("SMTP_HOST", "")
        self.SMTP_PORT = _int("SMTP_PORT", 587, minimum=1, maximum=65535)
        self.SMTP_USER = env.get("SMTP_USER", "")
        self.SMTP_PASSWORD = env.get("SMTP_PASSWORD", "")
        self.SMTP_FROM = env.get("SMTP_FROM", "")
        self.SMTP_SECURITY = _one_of("SMTP_SECURITY", ("none", "starttls", "ssl"), "starttls")
        # Absolute links in alerts ("https://backoffice.example.com"); unset: paths only.
        self.BACKOFFICE_URL = env.get("BACKOFFICE_URL", "")
        self.TENANT_API_RATE_WINDOW_SECONDS = _int("TENANT_API_RATE_WINDOW_SECONDS", 60, minimum=1)
        self.TENANT_API_RATE_PER_TOKEN = _int("TENANT_API_RATE_PER_TOKEN", 600)
        self.TENANT_API_RATE_PER_ADDRESS = _int("TENANT_API_RATE_PER_ADDRESS", 1200)
        _check_alert_settings(self.as_dict())

    def as_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if k.isupper()}
