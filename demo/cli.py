"""``flask demo seed``."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from demo.seed import seed

demo_cli = AppGroup("demo", help="Demo data for a first look at the backoffice.")


@demo_cli.command("seed")
def seed_command() -> None:
    """Fill the database with tenants, runs with failures, a course build and an operator."""
    result = seed()
    click.echo(f"tenants created: {result.tenants}")
    for run_uuid in result.runs:
        click.echo(f"run: /backoffice/task-runs/{run_uuid}")
    for build_uuid in result.builds:
        click.echo(f"course build: /builder/runs/{build_uuid}")
    if result.password:
        click.echo(f"operator: {result.operator}  password: {result.password}")
    else:
        click.echo(f"operator: {result.operator} already exists (password unchanged)")
