"""Wiring of the documents module into the app."""

from __future__ import annotations

from flask import Flask


def init_app(app: Flask) -> None:
    from documents import forwarding, models  # noqa: F401 - the model and the tracked job
