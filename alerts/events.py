"""The alerts' one event: a message of an episode, published through the runner's outbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from taskrunner.contract import Event, declare


@declare
@dataclass(frozen=True, slots=True)
class AlertRaised(Event):
    """An alert message (``opened``, ``reminder`` or ``resolved``) of an episode, for the
    channels; ``seq`` numbers the messages of one episode."""

    name: ClassVar[str] = "alerts.alert"
    episode: str
    seq: int
    kind: str
    rule: str
    key: str
    title: str
