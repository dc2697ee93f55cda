"""``flask builder …``: thin commands over the build's stages (``coursebuilder.stages``)."""

from __future__ import annotations

import json

import click
from flask.cli import AppGroup

from coursebuilder import reports, stages
from security.refusal import refuse
from tenancy.cli import TenantId

builder_cli = AppGroup("builder", help="Course builder: start and inspect generation runs.")


@builder_cli.command("start")
@click.option(
    "--tenant",
    "tenant_id",
    required=True,
    type=TenantId(1, stages.MAX_ID),
    help="Tenant id.",
)
@click.option("--title", required=True, help="Course title.")
@click.option("--quizzes", default=3, show_default=True, type=click.IntRange(0, stages.MAX_QUIZZES))
@click.option("--lessons", default=3, show_default=True, type=click.IntRange(1, stages.MAX_LESSONS))
@click.option(
    "--concurrency",
    default=2,
    show_default=True,
    type=click.IntRange(1, stages.MAX_CONCURRENCY),
    help="Steps running at once.",
)
def start_command(tenant_id: int, title: str, quizzes: int, lessons: int, concurrency: int) -> None:
    """Start a generation run; print its uuid on the last line."""
    try:
        run_uuid = stages.start(
            tenant_id,
            title,
            quizzes=quizzes,
            lessons=lessons,
            concurrency=concurrency,
            initiator="cli",
        )
    except stages.BuilderError as exc:
        refuse(str(exc))
    click.echo(f"started course build “{title.strip()}” for tenant {tenant_id}", err=True)
    click.echo(run_uuid)


@builder_cli.command("status")
@click.argument("run_uuid")
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape.")
def status_command(run_uuid: str, as_json: bool) -> None:
    """One run: its stages, their steps and the events."""
    try:
        run = stages.find_run(run_uuid)
    except stages.UnknownRun as exc:
        refuse(str(exc))
    status = reports.run_status(run)
    if as_json:
        click.echo(json.dumps(status, indent=2))
        return
    click.echo(f"{status['uuid']}  {status['title']}  tenant {status['tenant_id']}")
    click.echo(
        f"status {status['status']}, stage {status['stage']}, "
        f"concurrency {status['concurrency']}, {reports.progress(run, status)}% done"
    )
    if status["failure_reason"]:
        click.echo(f"failed: {status['failure_reason']}")
    for stage in status["stages"]:
        steps = stage["steps"]
        click.echo(
            f"  {stage['name']:8} {steps['completed']}/{steps['total']} done, "
            f"{steps['running']} running, {steps['failed']} failed"
            f"  opened {stage['opened_at'] or '-'}  closed {stage['closed_at'] or '-'}"
        )


@builder_cli.command("retry")
@click.argument("run_uuid")
def retry_command(run_uuid: str) -> None:
    """Resume a failed run from its failed stage; print its uuid on the last line."""
    try:
        stage, steps = stages.retry(run_uuid, actor="cli")
    except stages.BuilderError as exc:
        refuse(str(exc))
    click.echo(
        f"retrying stage {stage}: {steps} step{'' if steps == 1 else 's'} queued again", err=True
    )
    click.echo(stages.find_run(run_uuid).uuid)
