"""Real receivers for the alerts' channels, in the test process: an HTTP server for the
webhooks, an SMTP server (aiosmtpd) for email. Each records what it received."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from taskrunner import delivery
from tests.support import drain as drain_queue


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class HttpReceiver:
    """Answers ``status`` (after ``delay`` seconds) and records every request it got."""

    def __init__(self) -> None:
        self.status = 200
        self.delay = 0.0
        self.received: list[Received] = []
        self.refused = 0
        self.answer: bytes | None = None  # the body it answers with (else "ok" or "down")
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if receiver.delay:
                    time.sleep(receiver.delay)
                if receiver.status < 300:
                    receiver.received.append(Received(dict(self.headers.items()), body))
                else:
                    receiver.refused += 1
                self.send_response(receiver.status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                default = b"ok" if receiver.status < 300 else b"receiver down"
                self.wfile.write(default if receiver.answer is None else receiver.answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def kinds(self) -> list[str]:
        return [r.json["kind"] for r in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class MailHandler:
    """Accepts every message; refuses the recipients of ``refused`` (550) at RCPT, and
    answers QUIT with ``quit_answer`` when it is set, as a server shutting down does."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.raw: list[bytes] = []
        self.recipients: list[list[str]] = []
        self.refused: set[str] = set()
        self.quit_answer = ""

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if address in self.refused:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.raw.append(envelope.content)
        self.recipients.append(list(envelope.rcpt_tos))
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 Message accepted for delivery"

    async def handle_QUIT(self, server: Any, session: Any, envelope: Any) -> str:
        return self.quit_answer or "221 Bye"


class SmtpReceiver:
    """A real SMTP server on a free port of the loopback: plain, or with ``tls`` (an
    ``ssl.SSLContext``) required through STARTTLS, or TLS from the first byte (``ssl``);
    with ``login`` (user, password), authentication is required."""

    def __init__(
        self,
        tls: ssl.SSLContext | None = None,
        mode: str = "starttls",
        login: tuple[str, str] | None = None,
    ) -> None:
        self.handler = MailHandler()
        self.port = free_port()
        self.logins: list[str] = []
        options: dict[str, Any] = {}
        if tls is not None and mode == "ssl":
            # aiosmtpd sees TLS it began itself (STARTTLS) only: this one is TLS throughout.
            options |= {"ssl_context": tls, "auth_require_tls": False}
        elif tls is not None:
            options |= {"tls_context": tls, "require_starttls": True}
        if login is not None:
            options |= {"auth_required": True, "authenticator": self._authenticator(login)}
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port, **options)
        self.controller.start()

    def _authenticator(self, login: tuple[str, str]) -> Any:
        def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            given = (data.login.decode(), data.password.decode())
            if given == login:
                self.logins.append(given[0])
            # Not "handled": the server answers a refusal itself (535), as a real one does.
            return AuthResult(success=given == login, handled=False)

        return check

    def close(self) -> None:
        self.controller.stop()


def self_signed(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A certificate for 127.0.0.1 made with the openssl command: the server's context,
    and the file a client trusts it by."""
    cert, key = folder / "smtp.crt", folder / "smtp.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def verify_signature(secret: str, header: str, body: bytes, tolerance: int = 300) -> bool:
    """The receiver's side of ``Taskledger-Signature``, written from its definition."""
    parts = dict(part.split("=", 1) for part in header.split(","))
    timestamp = int(parts["t"])
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    fresh = abs(time.time() - timestamp) <= tolerance
    return fresh and hmac.compare_digest(expected.hexdigest(), parts["v1"])


def drain(*names: str) -> None:
    """Run every job waiting in the named queues, until none is left."""
    for _ in range(20):
        busy = False
        for name in names:
            busy = drain_queue(name) > 0 or busy
        if not busy:
            return


def relay_now() -> None:
    """The relay's pass, for everything undelivered and every refusal due."""
    delivery.relay(older_than_seconds=0)
