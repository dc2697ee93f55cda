"""Requests are answered without trusting the Host header.

Werkzeug's router answers a path it normalises (a doubled slash merged: ``/static//app.js``;
a missing trailing slash added) with a 308 to an absolute URL built from the request's
``Host`` header, which the client chooses: a cache, or a proxy that passes any Host on,
would hand other clients a redirect to the host an attacker named. The redirect is made
here instead, before any view, to the normalised path and query alone: a browser
resolves it against the host it asked.

With ``TRUSTED_HOSTS`` set (``docs/security.md``), any other Host header is a plain 400,
answered here too, as is a Host header that is no host name at all (an empty label, a
label over 63 characters: Werkzeug cannot encode it), trusted hosts or
not: Flask leaves such a request without a URL adapter, so an error page that builds a
link would fail with a 500 instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Flask, abort, redirect, request
from werkzeug.exceptions import BadHost, SecurityError
from werkzeug.routing import RequestRedirect
from werkzeug.wrappers import Response


def init_app(app: Flask) -> None:
    app.before_request(answer_without_the_host)


def answer_without_the_host() -> Response | None:
    """A 400 for an untrusted host, the router's redirect to a path on this host; None for
    every other request."""
    routed = request.routing_exception
    if isinstance(routed, SecurityError | BadHost):
        which = "untrusted" if isinstance(routed, SecurityError) else "invalid"
        return Response(f"400 Bad Request: {which} Host header\n", 400, mimetype="text/plain")
    if not isinstance(routed, RequestRedirect):
        return None
    target = urlsplit(routed.new_url)
    # A path only: "//host/…" or "/\\host" would be read as another host by a browser.
    if not target.path.startswith("/") or target.path[1:2] in ("/", "\\"):
        abort(404)
    return redirect(target.path + (f"?{target.query}" if target.query else ""), routed.code)
