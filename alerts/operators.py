"""What operators ask of the alerts (the CLI and the Alerts page alike): the rules and their
routes, open and recent episodes with their deliveries, a mute, a test send."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import func, select

from alerts import settings as alert_settings
from alerts.channels import ChannelError, configured, send_or_refuse
from alerts.content import test_body
from alerts.models import OPEN, RESOLVED, AlertDelivery, AlertEpisode, AlertMessage, AlertMute
from alerts.settings import RULES
from database import iso, utcnow
from extensions import db
from taskrunner.contract import operations, publishing

MUTE_HOURS = 1
RECENT = 50


@dataclass(frozen=True, slots=True)
class RuleState:
    name: str
    enabled: bool
    channels: tuple[str, ...]
    muted_until: datetime | None


@dataclass(frozen=True, slots=True)
class DeliveryView:
    seq: int
    kind: str
    channel: str
    delivered_at: datetime | None
    attempts: int
    answer: str | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class EpisodeView:
    uuid: str
    rule: str
    key: str
    state: str
    title: str
    first_seen_at: datetime
    opened_at: datetime | None
    resolved_at: datetime | None
    messages: int
    deliveries: list[DeliveryView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TestAnswer:
    channel: str
    ok: bool
    answer: str


class UnknownRule(ValueError):
    """A rule name that is not one of ``RULES``."""


def rules(now: datetime | None = None) -> list[RuleState]:
    """Every rule: on or off, the channels it goes to, muted until when."""
    now = now or utcnow()
    config = current_app.config
    read = alert_settings.read(config)
    available = set(configured(config))
    mutes = dict(
        db.session.execute(
            select(AlertMute.rule, AlertMute.until).where(AlertMute.until > now)
        ).all()
    )
    return [
        RuleState(
            name=rule,
            enabled=rule in read.enabled,
            channels=tuple(c for c in read.channels_of(rule) if c in available),
            muted_until=mutes.get(rule),
        )
        for rule in RULES
    ]


def episodes(limit: int = RECENT) -> tuple[list[EpisodeView], list[EpisodeView]]:
    """The open episodes, and the newest resolved ones, each with its deliveries."""
    open_rows = db.session.execute(
        select(AlertEpisode)
        .where(AlertEpisode.state == OPEN)
        .order_by(AlertEpisode.opened_at.desc(), AlertEpisode.id.desc())
    ).scalars()
    recent_rows = db.session.execute(
        select(AlertEpisode)
        .where(AlertEpisode.state == RESOLVED)
        .order_by(AlertEpisode.resolved_at.desc(), AlertEpisode.id.desc())
        .limit(limit)
    ).scalars()
    open_list, recent_list = list(open_rows), list(recent_rows)
    deliveries = _deliveries([e.id for e in open_list + recent_list])
    counts = _message_counts([e.id for e in open_list + recent_list])
    views = (
        [_view(e, deliveries, counts) for e in open_list],
        [_view(e, deliveries, counts) for e in recent_list],
    )
    db.session.rollback()
    return views


def _message_counts(ids: list[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    if ids:
        for episode_id in db.session.execute(
            select(AlertMessage.episode_id).where(AlertMessage.episode_id.in_(ids))
        ).scalars():
            counts[episode_id] = counts.get(episode_id, 0) + 1
    return counts


def _deliveries(ids: list[int]) -> dict[int, list[DeliveryView]]:
    found: dict[int, list[DeliveryView]] = {}
    if not ids:
        return found
    rows = db.session.execute(
        select(AlertMessage.episode_id, AlertMessage.seq, AlertMessage.kind, AlertDelivery)
        .join(AlertDelivery, AlertDelivery.message_id == AlertMessage.id)
        .where(AlertMessage.episode_id.in_(ids))
        .order_by(AlertMessage.seq, AlertDelivery.channel)
    ).all()
    for episode_id, seq, kind, d in rows:
        found.setdefault(episode_id, []).append(
            DeliveryView(seq, kind, d.channel, d.delivered_at, d.attempts, d.answer, d.last_error)
        )
    return found


def _view(
    episode: AlertEpisode, deliveries: dict[int, list[DeliveryView]], counts: dict[int, int]
) -> EpisodeView:
    return EpisodeView(
        uuid=episode.uuid,
        rule=episode.rule,
        key=episode.key,
        state=episode.state,
        title=(episode.summary or {}).get("title", episode.rule),
        first_seen_at=episode.first_seen_at,
        opened_at=episode.opened_at,
        resolved_at=episode.resolved_at,
        messages=counts.get(episode.id, 0),
        deliveries=deliveries.get(episode.id, []),
    )


def open_by_rule() -> dict[str, int]:
    """Open episodes per rule, every rule named (the metric ``taskledger_alert_episodes_open``)."""
    counts = dict.fromkeys(RULES, 0)
    rows = db.session.execute(
        select(AlertEpisode.rule, func.count())
        .where(AlertEpisode.state == OPEN)
        .group_by(AlertEpisode.rule)
    ).all()
    db.session.rollback()
    counts.update({rule: n for rule, n in rows})
    return counts


def mute(rule: str, actor: operations.Actor, now: datetime | None = None) -> datetime:
    """Mute ``rule`` for an hour (its episodes go on, unsent); audited. Returns the end."""
    if rule not in RULES:
        raise UnknownRule(f"unknown rule {rule!r}")
    until = (now or utcnow()) + timedelta(hours=MUTE_HOURS)
    with publishing() as publisher:
        row = db.session.get(AlertMute, rule)
        if row is None:
            db.session.add(AlertMute(rule=rule, until=until, muted_by=actor.name))
        else:
            row.until, row.muted_by = until, actor.name
        publisher.record_action("alerts.mute", actor, {"rule": rule, "until": iso(until)})
    return until


def send_test(names: Iterable[str] | None = None) -> list[TestAnswer]:
    """Send a test alert to each configured channel (or the named ones); each one's answer."""
    channels = configured(current_app.config)
    wanted = list(names) if names is not None else list(channels)
    body = test_body(utcnow())
    answers = []
    for name in wanted:
        try:
            answers.append(TestAnswer(name, True, send_or_refuse(channels[name], body)))
        except ChannelError as exc:
            answers.append(TestAnswer(name, False, str(exc)))
    return answers


def listing(now: datetime | None = None) -> dict[str, Any]:
    """``flask alerts list --json``: the rules and the open episodes."""
    open_list, _ = episodes(limit=0)
    return {
        "rules": [
            {
                "name": r.name,
                "enabled": r.enabled,
                "channels": list(r.channels),
                "muted_until": iso(r.muted_until),
            }
            for r in rules(now)
        ],
        "open_episodes": [
            {
                "uuid": e.uuid,
                "rule": e.rule,
                "key": e.key,
                "title": e.title,
                "opened_at": iso(e.opened_at),
                "messages": e.messages,
            }
            for e in open_list
        ],
    }
