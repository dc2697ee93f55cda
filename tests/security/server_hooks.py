"""Gunicorn hooks of the security tests: what a test sees inside a real server.

``Gunicorn.start(**HOOKS)`` (``tests.security.support``) runs the server with
``GUNICORN_CMD_ARGS=--config python:tests.security.server_hooks``: the project's
gunicorn.conf.py, and after a worker loads ``wsgi:app`` (so the app is the one gunicorn
serves, logging included):

- each password check appends a line to ``PASSWORD_CHECKS_FILE``: a 429 and a
  refused 200 look the same whether or not the password was checked first, a count
  of real checks does not;
- ``FAILING_PATHS`` raise an error carrying a vendor key and a card number, the way a
  failing driver or vendor call does, so a test follows it to the log and the 500.
"""

from __future__ import annotations

import os
import runpy
from typing import Any

from harness import GUNICORN_CONFIG

# The project's gunicorn.conf.py, every setting and hook of it: these hooks come on top.
_PROJECT = runpy.run_path(str(GUNICORN_CONFIG))
globals().update({k: v for k, v in _PROJECT.items() if not k.startswith("__")})

# A page and a problem body (``/api/``): both 500s come from the same handler.
FAILING_PATHS = ("/security-test/fail", "/api/security-test/fail")
SECRET = "sk_live_PROBE_SECRET"
CARD = "4111 1111 1111 1111"


class VendorDown(RuntimeError):
    pass


def _fail() -> None:
    try:
        raise ConnectionError(f"card {CARD} declined by the vendor")
    except ConnectionError as cause:
        # A chained cause: its traceback is logged too, and must be scrubbed as well.
        raise VendorDown(f"POST https://vendor.test/charge?token={SECRET} failed") from cause


def _count_password_checks(path: str) -> None:
    import accounts.services as services

    check = services.check_password_hash

    def counted(pwhash: str, password: str) -> bool:
        # O_APPEND: the lines of two workers' threads never overwrite each other.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b"checked\n")
        finally:
            os.close(fd)
        return check(pwhash, password)

    services.check_password_hash = counted


def post_worker_init(worker: Any) -> None:
    _PROJECT["post_worker_init"](worker)
    app = worker.wsgi
    for path in FAILING_PATHS:
        app.add_url_rule(path, f"security_test_fail_{len(path)}", _fail)
    if os.environ.get("PASSWORD_CHECKS_FILE"):
        _count_password_checks(os.environ["PASSWORD_CHECKS_FILE"])
