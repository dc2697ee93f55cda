"""Outbound HTTP to vendors: a client that carries credentials never follows a redirect.

urllib's default opener follows a 301/302/303/307/308 to whatever host the answer names,
with every header of the request, ``Authorization`` included, and turns the redirected
POST into a GET whose 200 looks like success. A vendor client opens its requests here
instead: a redirect comes back as the ``HTTPError`` of its 30x status, for the client to
report as a vendor error, and the credentials stay with the host they were meant for.
"""

from __future__ import annotations

import urllib.request
from http.client import HTTPResponse
from typing import Any


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 30x as an HTTPError


def open_without_redirects(request: urllib.request.Request, timeout: float) -> HTTPResponse:
    """Open ``request`` as ``urlopen`` would, except that a redirect is an ``HTTPError``."""
    # Built per request: the opener reads the proxy settings of the environment, like urlopen.
    opener = urllib.request.build_opener(_RefuseRedirects())
    return opener.open(request, timeout=timeout)
