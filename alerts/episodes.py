"""Episodes: one alert when a condition starts, reminders, one "resolved" when it ends.

A rule says, at a moment, whether its condition holds for a key (``raise_``) or not
(``clear``). A condition with a window (a stale-units episode) opens only once it was
first seen that long ago, and resolves only once it has been clear that long: a
condition that flaps inside its window is one episode, one alert and one resolved. An
open episode is reminded after ``ALERT_REMIND_MINUTES``; a muted rule's episodes go on
without messages, and one that opened during the mute and is still open is announced
at the first judgement after it; one announced before the mute and resolved during it
sends its "resolved" then. Every message is written with the episode, as a row
and an outbox event, in the caller's one transaction (``publishing``).
"""

from __future__ import annotations

import uuid as uuid_lib
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select

from alerts.content import compose
from alerts.events import AlertRaised
from alerts.models import OPEN, PENDING, RESOLVED, AlertEpisode, AlertMessage, AlertMute
from alerts.settings import AlertSettings
from database import write_transaction
from extensions import db
from taskrunner.contract import Publisher

SWITCHED_OFF = "rule switched off"
NOT_DECLARED = "schedule no longer declared"


class Episodes:
    """The episodes of one evaluation, at one moment, written through one publisher."""

    def __init__(
        self, publisher: Publisher, settings: AlertSettings, now: datetime, channels: bool = True
    ) -> None:
        self.publisher = publisher
        self.settings = settings
        self.now = now
        # No channel configured: messages are recorded (the Alerts page), none is published.
        self.channels = channels
        self.event_ids: list[str] = []

    def active(self, rule: str, key: str) -> AlertEpisode | None:
        return db.session.execute(
            select(AlertEpisode).where(
                AlertEpisode.rule == rule, AlertEpisode.key == key, AlertEpisode.state != RESOLVED
            )
        ).scalar_one_or_none()

    def latest(self, rule: str, key: str) -> AlertEpisode | None:
        """The newest episode of ``rule`` and ``key``, in any state."""
        return db.session.execute(
            select(AlertEpisode)
            .where(AlertEpisode.rule == rule, AlertEpisode.key == key)
            .order_by(AlertEpisode.id.desc())
            .limit(1)
        ).scalar_one_or_none()

    def raise_(
        self, rule: str, key: str, summary: dict[str, Any], hold_minutes: float = 0.0
    ) -> AlertEpisode:
        """The condition holds now: open (after ``hold_minutes``), remind, or go on."""
        episode = self.active(rule, key)
        if episode is None:
            episode = AlertEpisode(
                uuid=str(uuid_lib.uuid4()),
                rule=rule,
                key=key,
                state=PENDING,
                first_seen_at=self.now,
                last_true_at=self.now,
                summary={},
            )
            db.session.add(episode)
        episode.last_true_at = self.now
        episode.summary = summary
        if episode.state == PENDING:
            if self.now - episode.first_seen_at >= timedelta(minutes=hold_minutes):
                episode.state = OPEN
                episode.opened_at = self.now
                self._message(episode, "opened")
        else:
            self._follow_up(episode)
        db.session.flush()
        return episode

    def clear(self, rule: str, key: str, window_minutes: float = 0.0) -> None:
        """The condition does not hold now: resolve once it has been clear its window."""
        episode = self.active(rule, key)
        if episode is None:
            return
        if self.now - episode.last_true_at < timedelta(minutes=window_minutes):
            return  # a flap inside the window: the same episode goes on
        if episode.state == PENDING:
            db.session.delete(episode)  # never told anyone: nothing to resolve
            return
        episode.state = RESOLVED
        episode.resolved_at = self.now
        if self._sent(episode):
            self._message(episode, "resolved")

    def switch_off(self, rules: tuple[str, ...]) -> None:
        """End the episodes of rules no longer in ``ALERT_RULES``: nothing judges them any
        more. One that was announced is resolved with a message saying why, so a receiver
        that tracks incidents closes it too; a pending one is dropped."""
        self._end(AlertEpisode.rule.in_(rules), SWITCHED_OFF)

    def forget_keys(self, rule: str, kept: set[str], ended_by: str) -> None:
        """End, as ``switch_off`` does, the episodes of ``rule`` whose key is not ``kept``
        (a schedule no longer declared: nothing will ever end its episode)."""
        self._end((AlertEpisode.rule == rule) & AlertEpisode.key.not_in(kept), ended_by)

    def _end(self, which: Any, ended_by: str) -> None:
        for episode in db.session.execute(
            select(AlertEpisode).where(which, AlertEpisode.state != RESOLVED)
        ).scalars():
            if episode.state == PENDING:
                db.session.delete(episode)
                continue
            episode.state = RESOLVED
            episode.resolved_at = self.now
            if episode.last_sent_at is not None:
                self._message(episode, "resolved", ended_by=ended_by)

    def remind(self, rules: tuple[str, ...]) -> None:
        """Announce or remind the open episodes of event rules (nothing re-judges them)."""
        for episode in db.session.execute(
            select(AlertEpisode).where(AlertEpisode.rule.in_(rules), AlertEpisode.state == OPEN)
        ).scalars():
            self._follow_up(episode)

    def send_held_resolutions(self) -> None:
        """Send each "resolved" a mute held back, once its rule is no longer muted: an
        episode announced before the mute and resolved during it stayed open, for ever, at
        a receiver that tracks incidents. One announced, then resolved unsent, was last
        sent before it was resolved; one never announced sent nothing (and owes nothing)."""
        for episode in db.session.execute(
            select(AlertEpisode).where(
                AlertEpisode.state == RESOLVED,
                AlertEpisode.last_sent_at < AlertEpisode.resolved_at,
            )
        ).scalars():
            self._message(episode, "resolved", at=episode.resolved_at)

    def _follow_up(self, episode: AlertEpisode) -> None:
        """An open episode goes on: announced if it never was, else reminded when due."""
        if episode.last_sent_at is None:
            # It opened while its rule was muted: on-call has not heard of it yet, and a
            # reminder (none at all with ALERT_REMIND_MINUTES=0) would not tell it began.
            self._message(episode, "opened")
        elif self._reminder_due(episode):
            self._message(episode, "reminder")

    def _reminder_due(self, episode: AlertEpisode) -> bool:
        last = episode.last_sent_at
        remind = timedelta(minutes=self.settings.remind_minutes)
        return last is not None and self.settings.remind_minutes > 0 and self.now - last >= remind

    def _sent(self, episode: AlertEpisode) -> bool:
        return (
            db.session.execute(
                select(func.count()).where(AlertMessage.episode_id == episode.id)
            ).scalar_one()
            > 0
        )

    def _message(
        self, episode: AlertEpisode, kind: str, ended_by: str = "", at: datetime | None = None
    ) -> None:
        """Write one message of ``episode``, told as of ``at`` (now unless it was held)."""
        if muted(episode.rule, self.now):
            return
        db.session.flush()
        seq = (
            db.session.execute(
                select(func.coalesce(func.max(AlertMessage.seq), 0)).where(
                    AlertMessage.episode_id == episode.id
                )
            ).scalar_one()
            + 1
        )
        body = compose(episode, kind, seq, at or self.now, ended_by)
        db.session.add(
            AlertMessage(episode_id=episode.id, seq=seq, kind=kind, body=body, created_at=self.now)
        )
        episode.last_sent_at = self.now
        if not self.channels:
            return
        self.event_ids.append(
            self.publisher.emit(
                AlertRaised(
                    episode=episode.uuid,
                    seq=seq,
                    kind=kind,
                    rule=episode.rule,
                    key=episode.key,
                    title=body["title"],
                )
            )
        )


def active_episode(rule: str, key: str) -> bool:
    """Whether an episode of ``rule`` and ``key`` is pending or open (a read only)."""
    found = db.session.execute(
        select(AlertEpisode.id).where(
            AlertEpisode.rule == rule, AlertEpisode.key == key, AlertEpisode.state != RESOLVED
        )
    ).first()
    db.session.rollback()
    return found is not None


def muted(rule: str, now: datetime) -> bool:
    until = db.session.execute(
        select(AlertMute.until).where(AlertMute.rule == rule)
    ).scalar_one_or_none()
    return until is not None and until > now


def prune_resolved_before(cutoff: datetime) -> int:
    """Delete the episodes resolved before ``cutoff``; their rows cascade."""
    with write_transaction(db.session):
        deleted = db.session.execute(
            delete(AlertEpisode)
            .where(AlertEpisode.state == RESOLVED, AlertEpisode.resolved_at < cutoff)
            .execution_options(synchronize_session=False)
        ).rowcount
    return deleted
