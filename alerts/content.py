"""What an alert says: the rule's summary as an operator reads it, and nothing more.

A summary holds what the backoffice pages show (a type, counts, a queue, the redacted
reasons of the top error groups with their kind and count, how many tenants), never a
unit's context or a tenant's name. Every text passes through the scrubber (``bounded``)
before it is stored or sent, so a secret that slipped into a reason still never leaves.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from alerts.models import AlertEpisode
from database import iso
from taskrunner.contract import bounded

KIND_PREFIX = {
    "opened": "Alert",
    "reminder": "Still firing",
    "resolved": "Resolved",
    "test": "Test",
}
ALERTS_PAGE = "/backoffice/alerts"


def scrubbed(value: Any) -> Any:
    """Every text of ``value`` through the scrubber, the structure kept."""
    if isinstance(value, str):
        return bounded(value)
    if isinstance(value, dict):
        return {str(k): scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrubbed(v) for v in value]
    return value


def duration_text(seconds: int) -> str:
    minutes, _ = divmod(max(seconds, 0), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def compose(
    episode: AlertEpisode, kind: str, seq: int, now: datetime, ended_by: str = ""
) -> dict[str, Any]:
    """The body of one message of ``episode``: what every channel renders; ``ended_by``
    says why a "resolved" that is not the condition's end was sent."""
    summary = episode.summary or {}
    since = episode.opened_at or episode.first_seen_at
    seconds = int((now - since).total_seconds())
    facts = list(summary.get("facts", []))
    if kind != "opened":
        facts.append(["Duration", duration_text(seconds)])
    title = f"{KIND_PREFIX.get(kind, kind)}: {summary.get('title', episode.rule)}"
    if ended_by:
        title = f"{title} ({ended_by})"
        facts.append(["Ended", ended_by])
    return scrubbed(
        {
            "episode": episode.uuid,
            "seq": seq,
            "kind": kind,
            "rule": episode.rule,
            "key": episode.key,
            "title": title,
            "text": summary.get("text", ""),
            "facts": facts,
            "error_groups": list(summary.get("error_groups", []))[:3],
            "tenants": summary.get("tenants"),
            "links": [*summary.get("links", []), {"label": "Alerts", "path": ALERTS_PAGE}],
            "opened_at": iso(since),
            "at": iso(now),
            "duration_seconds": seconds,
        }
    )


def test_body(now: datetime) -> dict[str, Any]:
    """The body ``flask alerts test`` sends: the shape of a real one. Its episode is new
    each time: a receiver that drops an ``Idempotency-Key`` or a ``Message-ID`` it has seen
    takes every test, not the first one only."""
    return {
        "episode": f"test-{uuid.uuid4()}",
        "seq": 1,
        "kind": "test",
        "rule": "test",
        "key": "test",
        "title": "Test: Taskledger alerts reach this channel",
        "text": "A test alert sent by an operator; nothing is wrong.",
        "facts": [],
        "error_groups": [],
        "tenants": None,
        "links": [{"label": "Alerts", "path": ALERTS_PAGE}],
        "opened_at": iso(now),
        "at": iso(now),
        "duration_seconds": 0,
    }


def absolute(path: str, base_url: str) -> str:
    return f"{base_url.rstrip('/')}{path}" if base_url else path
