"""Alerts leave as subscribers of the outbox: one subscriber per channel.

Each channel subscribes to ``alerts.alert`` under its own name, so the outbox keeps its
delivery state apart: a channel that refuses is retried alone, with the outbox's
backoff, and parked after ``TASK_RUNNER_EVENT_MAX_ATTEMPTS`` (the parked events page
re-delivers it); the others are not held up beyond one send's timeout.

A channel handed message ``n`` of an episode first sends the episode's earlier messages
it has not delivered, in order, and records each delivery: a receiver that was down
for an hour gets the opened alert before the resolved one, and a message handed over
again (at least once) finds itself delivered and sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import current_app
from sqlalchemy import select

from alerts import settings as alert_settings
from alerts.channels import Channel, ChannelError, configured, send_or_refuse
from alerts.models import AlertDelivery, AlertEpisode, AlertMessage
from database import utcnow, write_transaction
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
            send(channel, message_id, body)


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
    now = utcnow()
    with write_transaction(db.session):
        row = db.session.execute(
            select(AlertDelivery).where(
                AlertDelivery.message_id == message_id, AlertDelivery.channel == channel
            )
        ).scalar_one_or_none()
        if row is None:
            row = AlertDelivery(message_id=message_id, channel=channel, attempts=0)
            db.session.add(row)
        row.attempts += 1
        row.updated_at = now
        if error is None:
            row.delivered_at = now
            row.answer = bounded(answer or "")
        else:
            row.last_error = bounded(error)
