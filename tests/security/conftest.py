"""Fixtures of the security tests: real gunicorn servers, shared by a module's tests."""

from __future__ import annotations

import pytest

from tests.security.support import Gunicorn


@pytest.fixture(scope="module")
def servers(base_config, tmp_path_factory):
    pool = Gunicorn(base_config, tmp_path_factory.mktemp("gunicorn"))
    yield pool
    pool.stop_all()


@pytest.fixture
def gunicorn(app, servers):
    """Gunicorn servers of this module; ``app`` empties the tables after each test."""
    return servers
