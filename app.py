"""The application factory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flask import Flask

from config import INSTANCE_DIR, Config, instance_secret_key
from database import configure_engine
from extensions import csrf, db, login_manager, migrate


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Build the app: defaults from the environment, then ``config`` overrides. No I/O."""
    app = Flask(__name__, instance_path=str(INSTANCE_DIR))
    app.config.from_mapping(Config().as_dict())
    if config:
        app.config.update(config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = instance_secret_key()
    register_logging(app)
    register_extensions(app)
    register_modules(app)
    register_blueprints(app)
    register_errorhandlers(app)
    register_commands(app)
    return app


def register_logging(app: Flask) -> None:
    """Send logs (full exceptions included) to LOG_FILE unless a host process configured them.

    The CLI then keeps stderr for its one-line answers; ``LOG_FILE=-`` logs to stderr.
    """
    root = logging.getLogger()
    if root.handlers:
        return
    target = app.config.get("LOG_FILE") or str(Path(app.instance_path) / "taskledger.log")
    if target == "-":
        handler: logging.Handler = logging.StreamHandler()
    else:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(target)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(app.config.get("LOG_LEVEL", "INFO"))


def register_extensions(app: Flask) -> None:
    from tasks import queues

    db.init_app(app)
    with app.app_context():
        configure_engine(db.engine)
    migrate.init_app(app, db, directory=str(app.root_path + "/migrations"))
    login_manager.init_app(app)
    csrf.init_app(app)
    queues.init_app(app)


def register_modules(app: Flask) -> None:
    """Import every model and job module, and let modules bind their seams and types."""
    import taskrunner.jobs  # noqa: F401 - registers the unit wrapper job
    import tasks.periodic  # noqa: F401 - registers the periodic jobs
    from accounts import setup as accounts
    from coursebuilder import setup as coursebuilder
    from diagnostics import setup as diagnostics
    from dlp import masker
    from documents import setup as documents
    from payments import setup as payments
    from tenancy import setup as tenancy

    for module in (tenancy, masker, diagnostics, payments, accounts, coursebuilder, documents):
        module.init_app(app)


def register_blueprints(app: Flask) -> None:
    from blueprints import ui
    from blueprints.api import bp as api
    from blueprints.auth import bp as auth
    from blueprints.backoffice import bp as backoffice
    from blueprints.builder import bp as builder
    from blueprints.health import bp as health
    from blueprints.tenant_api import bp as tenant_api

    ui.init_app(app)
    for blueprint in (auth, backoffice, api):
        app.register_blueprint(blueprint)
    app.register_blueprint(health)
    app.register_blueprint(tenant_api)
    app.register_blueprint(builder)


def register_errorhandlers(app: Flask) -> None:
    @app.teardown_appcontext
    def _rollback_on_error(exc: BaseException | None) -> None:
        if exc is not None:
            db.session.rollback()


def register_commands(app: Flask) -> None:
    from accounts.cli import users_cli
    from asyncrequests.cli import async_requests_cli, tenants_cli
    from coursebuilder.cli import builder_cli
    from demo.cli import demo_cli
    from payments.cli import payments_cli
    from taskrunner.cli import events_cli, tasks_cli
    from tasks.workers import workers_command

    for command in (
        tasks_cli,
        events_cli,
        payments_cli,
        workers_command,
        users_cli,
        demo_cli,
        builder_cli,
    ):
        app.cli.add_command(command)
    for command in (tenants_cli, async_requests_cli):
        app.cli.add_command(command)
