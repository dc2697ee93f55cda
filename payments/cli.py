"""``flask payments …``"""

from __future__ import annotations

import click
from flask.cli import AppGroup

from database import database_outage
from payments.statements import StatementError, start_monthly_statements
from security.refusal import refuse
from taskrunner.contract import TaskRunnerError, plural, redact

payments_cli = AppGroup("payments", help="Payments: monthly statements.")


@payments_cli.command("generate-monthly-statements")
@click.option("--period", required=True, help="YYYY-MM")
def generate_monthly_statements(period: str) -> None:
    """Start the monthly statements sweep for one period; print the run's uuid."""
    try:
        handle = start_monthly_statements(period, "cli")
    except StatementError as exc:
        raise click.BadParameter(str(exc), param_hint="--period") from None
    except TaskRunnerError as exc:  # refused, or not recorded: nothing was started
        refuse(str(exc))
    except Exception as exc:
        if database_outage(exc):
            raise  # the command line names the outage (startup)
        # The run was recorded and then failed by the wedge guard, its reason logged.
        refuse(f"dispatch failed: {redact(exc)}")
    click.echo(
        f"started payments.monthly_statements for {period}: {plural(handle.units_total, 'unit')}",
        err=True,
    )
    click.echo(handle.uuid)
