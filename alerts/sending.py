"""Alerts leave as subscribers of the outbox: one subscriber per channel.

Each channel subscribes to ``alerts.alert`` under its own name, so the outbox keeps its
delivery state apart: a channel that refuses is retried alone, with the outbox's
backoff, and parked after ``TASK_RUNNER_EVENT_MAX_ATTEMPTS`` (the parked events page
re-delivers it); the others are not held up beyond one send's timeout.

A channel handed message ``n`` of an episode first sends the episode's earlier messages
it has not delivered, in order, and records each delivery: a receiver that was down
for an hour gets the opened alert before the resolved one, and a message handed over
again (at least once) finds itself delivered and sends nothing. A process takes the
sending of a message before it sends (``take``): one that another process is sending
now is not sent twice; it is tried again later, and found delivered.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from flask import current_app
from sqlalchemy import or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from alerts import settings as alert_settings
from alerts.channels import Channel, ChannelError, configured, send_or_refuse
from alerts.models import AlertDelivery, AlertEpisode, AlertMessage
from database import is_sqlite, utcnow, write_transaction
from extensions import db
from taskrunner.contract import bounded


class ChannelSubscriber:
    """The subscriber of one channel; its name keys its deliveries in every process."""

    __module__ = __name__

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.__qualname__ = f"channel.{channel}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChannelSubscriber) and other.channel == self.channel

    def __hash__(self) -> int:
        return hash(self.channel)

    def __call__(self, event: Mapping[str, Any]) -> None:
        payload = event["payload"]
        config = current_app.config
        if self.channel not in alert_settings.read(config).channels_of(payload["rule"]):
            return
        channel = configured(config).get(self.channel)
        if channel is None:
            return  # no longer configured: nothing to send it to
        for message_id, body in undelivered(self.channel, payload["episode"], payload["seq"]):
            taken = take(message_id, self.channel, sending_lease(config))
            if taken is DELIVERED:
                continue  # another process sent it since it was read undelivered
            if taken is BUSY:
                # Its next messages wait for it; the outbox tries this event again later.
                raise ChannelError(f"{self.channel} is sending it from another process")
            send(channel, message_id, body)


DELIVERED, BUSY, TAKEN = "delivered", "busy", "taken"


def sending_lease(config: Mapping[str, Any]) -> timedelta:
    """How long a process's sending holds a message: past it, the process is judged gone
    and another sends the message again."""
    return timedelta(seconds=max(60.0, 4 * float(config["ALERT_TIMEOUT_SECONDS"])))


def take(message_id: int, channel: str, lease: timedelta) -> str:
    """Take the sending of one message by one channel (``TAKEN``), unless it is delivered
    (``DELIVERED``) or another process has been sending it for less than ``lease``
    (``BUSY``). One conditional update decides between processes on either database."""
    now = utcnow()
    insert = sqlite_insert if is_sqlite(db.session) else pg_insert
    with write_transaction(db.session):
        db.session.execute(
            insert(AlertDelivery)
            .values(message_id=message_id, channel=channel, attempts=0, updated_at=now)
            .on_conflict_do_nothing(index_elements=["message_id", "channel"])
        )
        row = AlertDelivery.message_id == message_id, AlertDelivery.channel == channel
        taken = db.session.execute(
            update(AlertDelivery)
            .where(
                *row,
                AlertDelivery.delivered_at.is_(None),
                or_(
                    AlertDelivery.sending_since.is_(None),
                    AlertDelivery.sending_since < now - lease,
                ),
            )
            .values(sending_since=now)
            .execution_options(synchronize_session=False)
        ).rowcount
        if taken:
            return TAKEN
        delivered = db.session.scalar(select(AlertDelivery.delivered_at).where(*row))
    return DELIVERED if delivered is not None else BUSY


def undelivered(channel: str, episode: str, seq: int) -> list[tuple[int, dict[str, Any]]]:
    """The episode's messages up to ``seq`` that ``channel`` has not delivered, in order."""
    delivered = (
        select(AlertDelivery.message_id)
        .where(AlertDelivery.channel == channel, AlertDelivery.delivered_at.is_not(None))
        .scalar_subquery()
    )
    rows = db.session.execute(
        select(AlertMessage.id, AlertMessage.body)
        .join(AlertEpisode, AlertEpisode.id == AlertMessage.episode_id)
        .where(
            AlertEpisode.uuid == episode,
            AlertMessage.seq <= seq,
            AlertMessage.id.not_in(delivered),
        )
        .order_by(AlertMessage.seq)
    ).all()
    db.session.rollback()
    return [(message_id, body) for message_id, body in rows]


def send(channel: Channel, message_id: int, body: Mapping[str, Any]) -> str:
    """Send one message and record the answer; a failure is recorded, then raised."""
    try:
        answer = send_or_refuse(channel, body)
    except ChannelError as exc:
        reason = f"{channel.name} {exc}"  # the outbox's refusal names the channel too
        record(message_id, channel.name, error=reason)
        raise ChannelError(reason) from None
    record(message_id, channel.name, answer=answer)
    return answer


def record(
    message_id: int, channel: str, answer: str | None = None, error: str | None = None
) -> None:
    """The outcome of a send ``take`` allowed (its row exists): the sending ends."""
    now = utcnow()
    outcome = (
        {"delivered_at": now, "answer": bounded(answer or "")}
        if error is None
        else {"last_error": bounded(error)}
    )
    with write_transaction(db.session):
        db.session.execute(
            update(AlertDelivery)
            .where(AlertDelivery.message_id == message_id, AlertDelivery.channel == channel)
            .values(
                attempts=AlertDelivery.attempts + 1, updated_at=now, sending_since=None, **outcome
            )
            .execution_options(synchronize_session=False)
        )
