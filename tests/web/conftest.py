"""Fixtures of the web tests."""

from tests.web.backoffice_support import controlled, people, web  # noqa: F401
