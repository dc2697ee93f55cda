"""Binds the one scrubber to the task runner's seam: every text the ledger stores and
every event payload pass through it (``security.scrub``: credentials, then the values
of ``dlp.masker``)."""

from __future__ import annotations

from flask import Flask

from security.scrub import scrub
from taskrunner.contract import bind_scrubber


def init_app(_app: Flask) -> None:
    bind_scrubber(scrub)
