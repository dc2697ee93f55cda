"""A vendor's answer is read up to 1 MiB, never whole whatever its size.

The document provider's client and the language model's HTTP driver read the whole body
of a 200: a vendor, a proxy or a misconfigured URL answering with gigabytes filled the
worker's memory before the JSON was even looked at. A real local server sends 64 MiB
(with its length declared, without one, or chunked) and counts what it managed to send
before the client closed the connection.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from coursebuilder.llm import HttpDriver, LLMBadResponse, Prompt
from documents.provider import ProviderClient, ProviderUnavailable
from security.outbound import MAX_ANSWER_BYTES
from taskrunner.contract import PermanentError

TOTAL = 64 * 1024 * 1024
PIECE = b'{"reference": "' + b"x" * (64 * 1024 - 15)


@dataclass
class Flood:
    url: str
    sent: int = 0
    done: threading.Event = field(default_factory=threading.Event)


def _head(framing: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", "Content-Type: application/json", "Connection: close"]
    if framing == "length":
        lines.append(f"Content-Length: {TOTAL}")
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture(params=["length", "no length", "chunked"])
def flood(request) -> Iterator[Flood]:
    """A server answering one request with a 64 MiB body; ``sent`` counts the body's bytes
    the client's side took before it closed the connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    served = Flood(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            served.done.set()
            return
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(_head(request.param))
                while served.sent < TOTAL:
                    if request.param == "chunked":
                        conn.sendall(f"{len(PIECE):x}\r\n".encode() + PIECE + b"\r\n")
                    else:
                        conn.sendall(PIECE)
                    served.sent += len(PIECE)
                if request.param == "chunked":
                    conn.sendall(b"0\r\n\r\n")
            except OSError:
                pass  # the client closed its side: what the test wants
        served.done.set()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield served
    finally:
        listener.close()


def _client_closed_before_the_end(flood: Flood) -> None:
    assert flood.done.wait(60), "the server is still sending"
    # What the kernel's buffers took is all that left the server: far less than the body.
    assert flood.sent < TOTAL // 4


def test_the_providers_answer_over_the_bound_is_a_transient_error_and_not_read(flood):
    client = ProviderClient(flood.url, "sk_live_VENDOR_TOKEN_0123456789", timeout=30)

    with pytest.raises(ProviderUnavailable) as caught:
        client.submit("0b8f2c1e-1111-4222-8333-444455556666", "title", "body")

    assert str(caught.value) == (
        f"provider answered with more than {MAX_ANSWER_BYTES:,} bytes, not read"
    )
    assert not isinstance(caught.value, PermanentError)  # retried, as a garbled answer is
    _client_closed_before_the_end(flood)


def test_the_language_models_answer_over_the_bound_is_a_bad_response_and_not_read(flood):
    driver = HttpDriver(flood.url, "sk_live_VENDOR_TOKEN_0123456789", "m", timeout=30)

    with pytest.raises(LLMBadResponse, match=f"more than {MAX_ANSWER_BYTES:,} bytes, not read"):
        driver.complete(Prompt(stage="outline", step="outline-1", text="Tides"))

    _client_closed_before_the_end(flood)
