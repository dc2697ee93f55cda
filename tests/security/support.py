"""Real servers and a small HTTP client for the security tests.

A ``Gunicorn`` serves the tests' app (same database, queue and secret key) from
a real process on a free port, with its access and error logs in files; an
``HttpClient`` keeps its own cookies and can pose as a client behind a proxy.
"""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

from harness import WebServer, process_env

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
# The environment of a server with the tests' hooks inside (``tests.security.server_hooks``).
HOOKS = {"GUNICORN_CMD_ARGS": "--config python:tests.security.server_hooks"}


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


@dataclass
class HttpClient:
    """One browser (its own cookie jar) talking to a real server."""

    port: int
    forwarded_for: str | None = None
    cookies: dict[str, str] = field(default_factory=dict)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if self.forwarded_for:
            sent["X-Forwarded-For"] = self.forwarded_for
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=sent)
            raw = conn.getresponse()
            response = Response(raw.status, raw.headers, raw.read())
        finally:
            conn.close()
        for header in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return response

    def get(self, path: str, **headers: str) -> Response:
        return self.request("GET", path, headers=headers)

    def post_form(self, path: str, fields: dict[str, str]) -> Response:
        return self.request(
            "POST",
            path,
            urlencode(fields).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )

    def csrf_token(self, path: str = "/login") -> str:
        return CSRF.search(self.get(path).text)[1]

    def sign_in(self, email: str, password: str, token: str | None = None) -> Response:
        """Submit the sign-in form (``token``: a CSRF token fetched before)."""
        fields = {"email": email, "password": password, "next": ""}
        fields["csrf_token"] = token or self.csrf_token()
        return self.post_form("/login", fields)


class Gunicorn:
    """Real web servers of the tests' app, one per set of settings, stopped at teardown.
    A server outlives the tests that use it; their tables are emptied between them as
    usual, and it holds no state of its own."""

    def __init__(self, base_config: dict, log_dir: Path) -> None:
        self.app = SimpleNamespace(config=base_config, instance_path=base_config["INSTANCE_PATH"])
        self.log_dir = log_dir
        self.servers: dict[tuple, WebServer] = {}

    def start(self, **env: str) -> int:
        """The port of a server with these settings (started unless one is running)."""
        key = tuple(sorted(env.items()))
        if key not in self.servers or not self.servers[key].alive():
            app_log = self.log_dir / f"app-{len(self.servers)}.log"
            settings = {"SESSION_COOKIE_SECURE": "0", "LOG_FILE": str(app_log), **env}
            server = WebServer(process_env(self.app, **settings), self.log_dir)
            server.app_log = app_log  # type: ignore[attr-defined]
            self.servers[key] = server
        return self.servers[key].port

    def logs(self, port: int) -> str:
        """Everything the server on ``port`` logged: its access and error log, and the app's."""
        [server] = [server for server in self.servers.values() if server.port == port]
        paths = (server.log_path, server.app_log)  # type: ignore[attr-defined]
        return "".join(path.read_text() for path in paths if path.exists())

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()
