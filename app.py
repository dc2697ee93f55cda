"""The application factory."""

from __future__ import annotations

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
    register_extensions(app)
    register_modules(app)
    register_blueprints(app)
    register_errorhandlers(app)
    register_commands(app)
    return app


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
    from diagnostics import setup as diagnostics
    from dlp import masker
    from payments import setup as payments
    from tenancy import setup as tenancy

    for module in (tenancy, masker, diagnostics, payments):
        module.init_app(app)


def register_blueprints(app: Flask) -> None:
    from blueprints.health import bp as health

    app.register_blueprint(health)


def register_errorhandlers(app: Flask) -> None:
    @app.teardown_appcontext
    def _rollback_on_error(exc: BaseException | None) -> None:
        if exc is not None:
            db.session.rollback()


def register_commands(app: Flask) -> None:
    from payments.cli import payments_cli
    from tasks.workers import workers_command
    from taskrunner.cli import events_cli, tasks_cli

    for command in (tasks_cli, events_cli, payments_cli, workers_command):
        app.cli.add_command(command)
