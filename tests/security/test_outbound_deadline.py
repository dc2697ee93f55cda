"""One outbound exchange ends at its timeout, however the server paces its answer.

urllib's timeout bounds each read of the socket: a receiver that answers a byte at a time
never lets one read wait that long, and held the sender for as long as it dripped (an
alert channel with a 0.3 s timeout answered "200 ok" after several seconds, and the other
channels and the relay's job waited behind it). Real local servers drip the status line
and headers, or the body, a byte at a time.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from alerts import content
from alerts.channels import ChannelError, EmailChannel, SlackChannel, WebhookChannel
from coursebuilder.llm import HttpDriver, LLMTimeout, Prompt
from security.outbound import open_without_redirects

STEP = 0.02  # seconds between two bytes: each read waits far less than any timeout here
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 150 + b"\r\n"
BODY = b'{"choices": [{"message": {"content": "' + b"x" * 150 + b'"}}]}'


def dripping(part: str) -> Iterator[str]:
    """A server whose answer comes a byte at a time from its ``head`` or its ``body`` on
    (anything else: at once); its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # the test closed the listener
            with conn:
                try:
                    conn.recv(65536)
                    head = HEAD + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
                    answer = head + BODY
                    at_once = {"head": 0, "body": len(head)}.get(part, len(answer))
                    conn.sendall(answer[:at_once])
                    for byte in answer[at_once:]:
                        conn.sendall(bytes([byte]))
                        time.sleep(STEP)
                except OSError:
                    pass  # the client shut its side: what the test wants

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        listener.close()


@pytest.fixture(params=["head", "body"])
def drip(request) -> Iterator[str]:
    yield from dripping(request.param)


def test_an_answer_dripped_a_byte_at_a_time_ends_at_the_timeout(drip):
    request = urllib.request.Request(drip, data=b"{}", method="POST")
    with pytest.raises(TimeoutError, match="no answer within 0.3 s"):
        with open_without_redirects(request, 0.3) as response:
            response.read()


def test_an_answer_within_the_timeout_is_read_whole():
    for url in dripping("none"):  # the whole answer at once
        request = urllib.request.Request(url, data=b"{}", method="POST")
        with open_without_redirects(request, 5) as response:
            assert response.read() == BODY


@pytest.mark.parametrize("kind", ["slack", "webhook"])
def test_an_alert_channel_gives_up_on_a_dripping_receiver_at_its_timeout(drip, kind):
    base = "https://ops.example.test"
    channel = (
        SlackChannel(drip, base, timeout=0.3)
        if kind == "slack"
        else WebhookChannel(drip, "s3cret", base, timeout=0.3)
    )
    with pytest.raises(ChannelError, match="no answer within 0.3 s"):
        channel.send({"episode": "e1", "seq": 1, "title": "t", "text": "", "facts": []})


def test_the_language_model_driver_gives_up_on_a_dripping_endpoint(drip):
    driver = HttpDriver(drip, "", "m", timeout=0.3)
    with pytest.raises(LLMTimeout):
        driver.complete(Prompt(stage="outline", step="outline-1", text="Tides"))


def dripping_smtp() -> Iterator[int]:
    """An SMTP server that answers every command, a byte at a time; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn, conn.makefile("rb") as lines:

            def drip(reply: bytes) -> None:
                for byte in reply:
                    conn.sendall(bytes([byte]))
                    time.sleep(STEP)

            try:
                drip(b"220 slow.example.test ESMTP\r\n")
                while line := lines.readline():
                    if line.upper().startswith(b"DATA"):
                        drip(b"354 go on\r\n")
                        while lines.readline() not in (b".\r\n", b""):
                            pass
                    drip(b"221 bye\r\n" if line.upper().startswith(b"QUIT") else b"250 ok\r\n")
            except OSError:
                pass  # the client shut its side: what the test wants

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def test_an_email_alert_gives_up_on_a_dripping_smtp_server_at_its_timeout():
    # Each SMTP reply came within the socket's timeout: the send took seconds, unbounded.
    for port in dripping_smtp():
        channel = EmailChannel(
            "127.0.0.1", port, "none", "", "", "a@example.test", ("b@example.test",), "", 0.3
        )
        started = time.monotonic()
        with pytest.raises(ChannelError, match="no answer within 0.3 s"):
            channel.send(content.test_body(datetime.now(UTC)))
        assert time.monotonic() - started < 1.0
