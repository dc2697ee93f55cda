"""Alembic environment, run through Flask-Migrate (``flask db upgrade``)."""

import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app

config = context.config
if config.config_file_name and not logging.getLogger().handlers:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

db = current_app.extensions["migrate"].db
config.set_main_option(
    "sqlalchemy.url", db.engine.url.render_as_string(hide_password=False).replace("%", "%%")
)

# Tables owned by the queue backend (PostgresHuey creates its own), not by our models.
FOREIGN_TABLES = {"huey_kv", "huey_schedule", "huey_task", "huey_counter"}


def include_object(obj, name, type_, reflected, compare_to):
    return not (type_ == "table" and name in FOREIGN_TABLES)


def run_migrations_offline():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=db.metadata,
        literal_binds=True,
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    with db.engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=db.metadata,
            include_object=include_object,
            **{
                "compare_type": True,
                "render_as_batch": connection.dialect.name == "sqlite",
                **current_app.extensions["migrate"].configure_args,
            },
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
