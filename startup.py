"""What a process does once, at its entry point, before it serves or runs the app.

The app factory reads its config and writes nothing. The entry points do the rest:
an existing instance folder that others may enter is tightened to 0700 (a new one is
made so), the process logs through the scrubbing layer (``security.logs``), to
``LOG_FILE`` or the instance's ``taskledger.log``, and, where no ``SECRET_KEY`` is
set, the instance's key is made once. The entry points are the ``flask`` commands
(``EntryCommands``: ``make migrate`` runs one, so ``make run`` finds the key),
``wsgi`` (gunicorn, ``flask --app wsgi run``) and the consumers (``tasks.consumer``,
which log to stderr and need no key).
"""

from __future__ import annotations

import copy
import functools
import logging
import sys
from pathlib import Path

import click
from flask import Flask
from flask.cli import AppGroup

from config import ConfigError, ensure_secret_key
from database import database_outage
from security.echo import echo, error_line
from security.files import tighten_dir
from security.logs import configure_logging


def prepare_process(app: Flask) -> None:
    """Tighten the instance folder, route this process's logging through the scrubbing
    layer, give ``app`` its key."""
    # Its files are 0600, but a folder others may enter still shows them what is there
    # (and an older version made it 0755).
    tighten_dir(Path(app.instance_path))
    target = app.config.get("LOG_FILE") or str(Path(app.instance_path) / "taskledger.log")
    setting = "LOG_FILE" if app.config.get("LOG_FILE") else "INSTANCE_PATH"
    configure_process_logging(target, app.config.get("LOG_LEVEL", "INFO"), setting)
    if not app.config.get("SECRET_KEY"):
        try:
            app.config["SECRET_KEY"] = ensure_secret_key(app.instance_path)
        except OSError as exc:
            raise ConfigError(
                f"INSTANCE_PATH: cannot keep the secret key in {app.instance_path!r}"
                f" ({exc.strerror or exc}); set SECRET_KEY or a writable INSTANCE_PATH"
            ) from None


def configure_process_logging(target: str, level: str, setting: str = "LOG_FILE") -> None:
    """``configure_logging``, with a log file that cannot be opened (a folder, no
    permission) refused as ``setting``'s error rather than raised from deep in logging."""
    try:
        configure_logging(target, level, instance_log=setting == "INSTANCE_PATH")
    except OSError as exc:
        raise ConfigError(
            f"{setting}: cannot write the log file {target!r} ({exc.strerror or exc})"
        ) from None


def refuse_config(exc: ConfigError) -> BaseException:
    """What an entry module outside the CLI raises on ``exc``: its one ``error:`` line on
    stderr and a process that ends, never a traceback.

    Under gunicorn, the line as an app that failed to load: gunicorn prints only its
    message and stops; a worker that merely exited would be started again, forever.
    """
    line = error_line(exc.format_message())
    if "gunicorn.arbiter" in sys.modules:
        from gunicorn.errors import AppImportError

        return AppImportError(line)
    return SystemExit(line)


class EntryCommands(AppGroup):
    """The app's ``flask`` commands: running one is this process's entry point.

    Flask's command line builds the app with ``create_app()`` and then looks the
    command up here, so the process is prepared before any command runs (and the CLI
    keeps stderr for its one-line answers: it logs to the file). The command it gets
    back answers a database outage the CLI's way: one line naming the cause, exit 1.
    """

    def __init__(self, app: Flask) -> None:
        super().__init__(app.name)
        self.app = app

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), "db"})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "db":
            enable_migrations(self.app)  # it adds its ``db`` commands
            _say_migration_errors()
        command = super().get_command(ctx, cmd_name)
        if command is None:
            return None
        prepare_process(self.app)
        return outage_guarded(command)


def enable_migrations(app: Flask) -> None:
    """Flask-Migrate on ``app``, for ``flask db …`` and ``flask_migrate.upgrade``: imported
    only then, as importing Alembic was a fifth of every other process's start (a
    consumer, a command, a web worker)."""
    if "migrate" not in app.extensions:
        from flask_migrate import Migrate

        from extensions import db

        Migrate(app, db, directory=str(Path(app.root_path) / "migrations"))


class _ErrorLine(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(error_line(record.getMessage().removeprefix("Error: ")), err=True)


def _say_migration_errors() -> None:
    """Flask-Migrate logs why a ``flask db …`` failed (an unknown revision) and exits 1; the
    command line logs to its file, so that line was nowhere on screen: it is on stderr too."""
    logger = logging.getLogger("flask_migrate")
    if not any(isinstance(handler, _ErrorLine) for handler in logger.handlers):
        logger.addHandler(_ErrorLine(logging.ERROR))


def outage_guarded(command: click.Command) -> click.Command:
    """A copy of ``command`` (with its subcommands) whose database outage is one line on
    stderr and exit 1 instead of a traceback, and whose arguments are text; the command
    itself is left as it was."""
    guarded = copy.copy(command)
    guarded.__class__ = _guarded_class(type(command))
    return guarded


def _utf8(arg: str) -> bool:
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@functools.cache
def _guarded_class(base: type[click.Command]) -> type[click.Command]:
    class Guarded(base):  # type: ignore[valid-type, misc]
        def make_context(self, info_name, args, parent=None, **extra):
            # An argument that was not UTF-8 reaches a command with lone surrogates in it,
            # which no database, log line or terminal takes: a usage error, whatever its
            # place (a subcommand's too: they are all still here).
            for arg in args:
                if not _utf8(arg):
                    raise click.UsageError(f"argument {echo(arg)} is not UTF-8 text")
            return super().make_context(info_name, args, parent=parent, **extra)

        def invoke(self, ctx: click.Context):
            try:
                return super().invoke(ctx)
            except Exception as exc:
                outage = database_outage(exc)
                if outage is None:
                    raise
                logging.getLogger(__name__).warning("flask %s: %s", ctx.command_path, outage)
                click.echo(error_line(str(outage)), err=True)
                ctx.exit(1)

    Guarded.__name__ = f"OutageGuarded{base.__name__}"
    return Guarded
