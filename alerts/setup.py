"""The alerts' wiring: the rules listen to the runner's events, each channel subscribes."""

from __future__ import annotations

from flask import Flask

from alerts import (
    models,  # noqa: F401 - the alerts' tables
    rules,  # noqa: F401 - the evaluation's schedule and the delivery job
)
from alerts.events import AlertRaised
from alerts.listeners import LISTENERS
from alerts.sending import ChannelSubscriber
from alerts.settings import CHANNELS
from taskrunner.contract import known_events, subscribe


def init_app(_app: Flask) -> None:
    known = known_events()
    for name, listener in LISTENERS.items():
        # The schedules' events exist once their module declares them; until then the
        # schedule-missed rule waits for them.
        if name in known:
            subscribe(name, listener)
    for channel in CHANNELS:
        subscribe(AlertRaised.name, ChannelSubscriber(channel))
