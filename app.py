"""The application factory."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import click
from flask import Flask
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from werkzeug.middleware.proxy_fix import ProxyFix

from config import Config, ConfigError, instance_path, read_secret_key
from database import bind_clock, configure_engine, engine_options, name_connections
from extensions import csrf, db, login_manager
from security.files import ForeignFile
from startup import EntryCommands, refuse_config


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Build the app: defaults from the environment, then ``config`` overrides.

    It reads config (the instance's key included) and writes nothing: logging and the
    key file are the entry points' (``startup``). Every piece of state is the app's own.
    """
    try:
        return _create_app(config)
    except ConfigError as exc:
        if click.get_current_context(silent=True) is None:
            raise
        # Flask's command line builds the app inside click. Looking a command up, it lets
        # this ClickException through (one line, exit 1); listing the commands (``flask
        # --app app``, ``--help``), it prints it as a traceback and exits 0.
        raise refuse_config(exc) from None


def _create_app(config: dict[str, Any] | None) -> Flask:
    instance = instance_path(config)
    app = Flask(__name__, instance_path=str(instance))
    app.cli = EntryCommands(app)
    app.config.from_mapping(Config(instance).as_dict())
    if config:
        app.config.update(config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = read_secret_key(instance)
    register_proxies(app)
    register_extensions(app)
    register_modules(app)
    register_blueprints(app)
    register_errorhandlers(app)
    register_commands(app)
    return app


def register_proxies(app: Flask) -> None:
    """Trust X-Forwarded-For / -Proto from exactly the configured number of proxies.

    Without it, behind a proxy every request has the proxy's address (one sign-in
    throttle and one rate limit for everyone); with too many hops, a client could
    choose its own address. Docs: deploy/README.md.
    """
    hops = app.config.get("TRUSTED_PROXY_HOPS", 0)
    if hops:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)  # type: ignore[method-assign]


def register_extensions(app: Flask) -> None:
    from tasks import queues

    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = engine_options(app.config)
    try:
        db.init_app(app)
    except (ArgumentError, NoSuchModuleError) as exc:
        # A URL that parses but names no installed dialect or driver ("foo://…"). Only
        # SQLAlchemy's first line: it names the dialect, never the URL's password.
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"DATABASE_URL cannot be used: {reason}") from None
    with app.app_context():
        try:
            configure_engine(db.engine)
        except ForeignFile as exc:
            raise ConfigError(f"DATABASE_URL: {db.engine.url.database!r} is {exc}") from None
        name_connections(db.engine, app.config["DATABASE_APPLICATION_NAME"])
    bind_clock(app)
    login_manager.init_app(app)
    csrf.init_app(app)
    queues.init_app(app)


def register_modules(app: Flask) -> None:
    """Import every model and job module, and let modules bind their seams and types.

    The modules' init functions register into the runner's state of this app through
    the runner's contract, which works on the app in context; a deployment's own
    modules (``TASKLEDGER_EXTRA_MODULES``) come after the project's, in every process
    that builds the app.
    """
    import asyncrequests.retention  # noqa: F401 - declares its daily prune
    import live.models  # noqa: F401 - the live topics and stream leases
    import security.models  # noqa: F401 - the rate-limit counters' table
    import taskrunner.jobs  # noqa: F401 - registers the unit wrapper job
    import taskrunner.periodic  # noqa: F401 - declares the runner's periodic tasks
    from accounts import setup as accounts
    from alerts import setup as alerts
    from coursebuilder import setup as coursebuilder
    from diagnostics import setup as diagnostics
    from dlp import setup as dlp
    from documents import setup as documents
    from live import streams
    from payments import setup as payments
    from taskrunner import appstate
    from tenancy import setup as tenancy

    appstate.init_app(app)
    streams.init_app(app)
    with app.app_context():
        for module in (
            tenancy,
            dlp,
            diagnostics,
            payments,
            accounts,
            coursebuilder,
            documents,
            alerts,
        ):
            module.init_app(app)
        for module in extra_modules(app.config.get("TASKLEDGER_EXTRA_MODULES") or ""):
            module.init_app(app)


def extra_modules(names: str) -> list[ModuleType]:
    """A deployment's own modules (``TASKLEDGER_EXTRA_MODULES``, comma-separated), imported."""
    found = []
    for name in filter(None, (part.strip() for part in names.split(","))):
        try:
            found.append(importlib.import_module(name))
        except ImportError as exc:
            raise ConfigError(f"TASKLEDGER_EXTRA_MODULES: cannot import {name!r} ({exc})") from None
    return found


def register_blueprints(app: Flask) -> None:
    from blueprints import host_header, ui
    from blueprints.api import bp as api
    from blueprints.auth import bp as auth
    from blueprints.backoffice import bp as backoffice
    from blueprints.builder import bp as builder
    from blueprints.health import bp as health
    from blueprints.metrics import bp as metrics
    from blueprints.params import AsciiIntegerConverter
    from blueprints.problems import refuse_long_request_target
    from blueprints.tenant_api import bp as tenant_api
    from blueprints.tenant_api.document import bp as tenant_api_document
    from blueprints.unit_keys import UnitKeyConverter

    # Before any route names them: a unit key is one path segment in every URL, an id
    # ASCII digits.
    app.url_map.converters["unit_key"] = UnitKeyConverter
    app.url_map.converters["int"] = AsciiIntegerConverter
    ui.init_app(app)
    app.before_request(refuse_long_request_target)  # before a token or a session is read
    host_header.init_app(app)
    for blueprint in (auth, backoffice, api):
        app.register_blueprint(blueprint)
    app.register_blueprint(health)
    app.register_blueprint(metrics)
    app.register_blueprint(tenant_api)
    app.register_blueprint(tenant_api_document)
    app.register_blueprint(builder)


def register_errorhandlers(app: Flask) -> None:
    @app.teardown_appcontext
    def _rollback_on_error(exc: BaseException | None) -> None:
        if exc is None:
            return
        try:
            db.session.rollback()
        except SQLAlchemyError:
            # A session stopped inside its own commit (a consumer's stop) refuses a
            # rollback: ``exc`` is what ended the context and what its caller must see.
            db.session.remove()


def register_commands(app: Flask) -> None:
    from accounts.cli import users_cli
    from alerts.cli import alerts_cli
    from asyncrequests.cli import async_requests_cli, tenants_cli
    from blueprints.openapi_cli import openapi_cli
    from coursebuilder.cli import builder_cli
    from demo.cli import demo_cli
    from payments.cli import payments_cli
    from taskrunner.cli import events_cli, tasks_cli
    from taskrunner.schedules_cli import schedules_cli
    from tasks.workers import workers_command

    for command in (
        tasks_cli,
        events_cli,
        schedules_cli,
        payments_cli,
        workers_command,
        users_cli,
        demo_cli,
        builder_cli,
    ):
        app.cli.add_command(command)
    for command in (tenants_cli, async_requests_cli, openapi_cli, alerts_cli):
        app.cli.add_command(command)
