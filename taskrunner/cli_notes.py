"""What ``flask tasks …`` says beside its output: jobs that will not run yet, a dispatch
that failed."""

from __future__ import annotations

from typing import NoReturn

import click

from database import database_outage
from security.refusal import refuse
from taskrunner import dispatch
from taskrunner.ledger import ledger
from taskrunner.redaction import redact


def warn_if_waiting(type_: str) -> None:
    """Jobs just sent that nothing will run yet: a paused type's, or those in a SQLite queue
    file no consumer reads (stderr)."""
    if ledger.actions.is_paused(type_):
        click.echo(
            f"warning: {type_} is paused: its units wait until it is resumed"
            f" (flask tasks resume {type_})",
            err=True,
        )
    unread = dispatch.unread_queue_file(type_)
    if unread is not None:
        click.echo(
            f"warning: no consumer has read the queue file {unread} lately: the jobs wait"
            " there until one does (start or restart the consumers: flask workers)",
            err=True,
        )


def dispatch_failed(exc: Exception) -> NoReturn:
    """A recorded run's jobs could not be enqueued (the wedge guard settled and logged them)."""
    if database_outage(exc):
        raise exc  # the command line names the outage (startup)
    refuse(f"dispatch failed: {redact(exc)}")
