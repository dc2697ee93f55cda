"""A real web server (gunicorn) on a free port, on the test app's database and queue."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from harness import WebServer, process_env

CSRF_FIELD = re.compile(r'name="csrf_token"[^>]*value="([^"]+)"')


class LiveServer(WebServer):
    """gunicorn with the project's gunicorn.conf.py and two workers on the test app's
    database and queue (``settings``: more of its environment), stopped by ``stop``."""

    def __init__(
        self, app, log_dir: Path, workers: int = 2, port: int | None = None, **settings: str
    ) -> None:
        # Plain http on 127.0.0.1: the cookie cannot be Secure here.
        env = process_env(
            app, SESSION_COOKIE_SECURE="0", LOG_FILE=str(log_dir / "app.log"), **settings
        )
        self.cookie_name = app.config["SESSION_COOKIE_NAME"]
        super().__init__(env, log_dir, workers=workers, port=port)

    def sign_in(self, email: str, password: str) -> str:
        """Sign in through the real login form; return the session cookie's value."""
        with httpx.Client(base_url=self.url) as browser:
            token = CSRF_FIELD.search(browser.get("/login").text)[1]
            answer = browser.post(
                "/login", data={"email": email, "password": password, "csrf_token": token}
            )
            assert answer.status_code == 302, answer.text[:500]
            return browser.cookies[self.cookie_name]
