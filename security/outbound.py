"""Outbound HTTP to vendors: a client that carries credentials never follows a redirect,
and one exchange never outlasts its timeout.

urllib's default opener follows a 301/302/303/307/308 to whatever host the answer names,
with every header of the request, ``Authorization`` included, and turns the redirected
POST into a GET whose 200 looks like success. A vendor client opens its requests here
instead: a redirect comes back as the ``HTTPError`` of its 30x status, for the client to
report as a vendor error, and the credentials stay with the host they were meant for.

urllib's timeout bounds each read of the socket, not the exchange: a server that answers
a byte at a time held the sender (an alert's channel, the other channels after it, the
relay's job) for as long as it liked. Here the whole exchange, the caller's read of the
body included, has the timeout: at its end the socket is shut and ``TimeoutError`` raised.

An answer is read with ``read_answer``: at most ``MAX_ANSWER_BYTES`` (1 MiB, the size of the
largest request body the app itself takes). A vendor, a proxy or a misconfigured URL that
answers with gigabytes is ``AnswerTooLarge`` once the bound is passed (or at once, when its
``Content-Length`` says so), never a worker's memory filled.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

MAX_ANSWER_BYTES = 1 << 20


class AnswerTooLarge(http.client.HTTPException):
    """The answer's body is larger than the client reads (``MAX_ANSWER_BYTES``)."""


def read_answer(response: http.client.HTTPResponse, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body of ``response``, at most ``limit`` bytes; ``AnswerTooLarge`` beyond."""
    declared = response.getheader("Content-Length") or ""
    if declared.strip().isdigit() and int(declared) > limit:
        raise AnswerTooLarge(f"an answer of {int(declared)} bytes, over {limit}")
    # One byte more than the bound tells a body at the bound from a larger one, whatever the
    # headers claimed (a chunked body, or none, or a Content-Length that lies).
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = response.read(limit + 1 - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limit:
        raise AnswerTooLarge(f"an answer over {limit} bytes")
    body = b"".join(parts)
    if response.length:  # read(amt) returns a body cut short by the server as it is
        raise http.client.IncompleteRead(body, response.length)
    return body


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 30x as an HTTPError


class _Watching:
    """A connection that adds its socket to ``sockets`` once connected."""

    def __init__(self, sockets: list[socket.socket], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sockets = sockets

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self._sockets.append(self.sock)  # type: ignore[attr-defined]


class _Watched(_Watching, http.client.HTTPConnection):
    pass


class _WatchedTLS(_Watching, http.client.HTTPSConnection):
    pass


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, sockets: list[socket.socket]) -> None:
        super().__init__()
        self._sockets = sockets

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(partial(_Watched, self._sockets), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, sockets: list[socket.socket]) -> None:
        super().__init__()
        self._sockets = sockets

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(partial(_WatchedTLS, self._sockets), req, context=self._context)


class Deadline:
    """Shuts the exchange's sockets when its time is up: the read waiting on one ends.
    ``sockets`` is asked for them then (a connection may have replaced its socket)."""

    def __init__(self, seconds: float, sockets: Callable[[], Iterable[socket.socket]]) -> None:
        self.passed = False
        self._sockets = sockets
        self._timer = threading.Timer(seconds, self._shut)
        self._timer.daemon = True

    def _shut(self) -> None:
        self.passed = True
        for sock in self._sockets():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed already

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._timer.cancel()


@contextmanager
def open_without_redirects(
    request: urllib.request.Request, timeout: float
) -> Iterator[http.client.HTTPResponse]:
    """Open ``request`` as ``urlopen`` would, except that a redirect is an ``HTTPError``
    and the exchange, the body's read in the ``with`` block included, ends at ``timeout``
    (``TimeoutError``)."""
    sockets: list[socket.socket] = []
    # Built per request: the opener reads the proxy settings of the environment, like urlopen.
    # Only http and https: urlopen's file:, ftp: and data: handlers would pass a local file
    # (or one the URL itself holds) for a vendor's answer ("unknown url type" instead).
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        urllib.request.UnknownHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
        _RefuseRedirects(),
        _HTTP(sockets),
        _HTTPS(sockets),
    ):
        opener.add_handler(handler)
    with Deadline(timeout, lambda: sockets) as deadline:
        try:
            with opener.open(request, timeout=timeout) as response:
                yield response
        except Exception:
            if deadline.passed:
                raise TimeoutError(f"no answer within {timeout:g} s") from None
            raise
        if deadline.passed:  # a body cut short by the shutdown reads as a short body
            raise TimeoutError(f"no answer within {timeout:g} s")
