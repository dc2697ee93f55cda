"""Real receivers for the alerts' channels, in the test process: an HTTP server for the
webhooks, an SMTP server (aiosmtpd) for email. Each records what it received."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from taskrunner import delivery
from tasks.queues import queues


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
                self.wfile.write(b"ok" if receiver.status < 300 else b"receiver down")

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
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.raw: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.raw.append(envelope.content)
        self.messages.append(message_from_bytes(envelope.content, policy=policy.default))
        return "250 Message accepted for delivery"


class SmtpReceiver:
    """A real SMTP server on a free port of the loopback."""

    def __init__(self) -> None:
        self.handler = MailHandler()
        self.port = free_port()
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()


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
            huey = queues().huey(name)
            while huey.pending_count():  # an empty dequeue would block on Redis
                busy = True
                huey.execute(huey.dequeue())
        if not busy:
            return


def relay_now() -> None:
    """The relay's pass, for everything undelivered and every refusal due."""
    delivery.relay(older_than_seconds=0)
