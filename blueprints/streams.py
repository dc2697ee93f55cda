"""A page's live stream: admitted within the caps or refused with 429, then followed
(``live.streams``) for as long as the operator's session lives and keeps the page's permission."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from flask import Response, current_app, request, session, stream_with_context
from flask_login import current_user

from accounts import sessions
from accounts.setup import SESSION_SECRET
from live import streams

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event_stream(
    probe: Callable[[], str],
    changes: Callable[[str], tuple[Iterable[str], bool]],
    seconds: float,
) -> Response:
    """The response of a stream that sends ``changes(marker)`` whenever ``probe()`` moves."""
    secret = session.get(SESSION_SECRET) or ""
    try:
        stream = streams.admit(sessions.digest(secret))
    except streams.StreamsBusy as busy:
        # Plain and small: a browser's EventSource reads nothing of it, and a burst of
        # refusals must cost the pages nothing.
        return Response(
            f"{busy}; try again in {busy.retry_after} s\n",
            status=429,
            mimetype="text/plain",
            headers={"Retry-After": str(busy.retry_after)},
        )
    # The permission the page's view checked: taken away, the stream ends at its next poll.
    view = current_app.view_functions.get(request.endpoint or "")
    needed = getattr(view, "required_permission", None)
    alive = partial(sessions.is_live, current_user.id, secret, needed)
    poll = float(current_app.config["LIVE_POLL_SECONDS"])
    body = streams.follow(stream, probe, changes, alive, seconds, poll)
    response = Response(stream_with_context(body), mimetype="text/event-stream", headers=HEADERS)
    # A response closed before its first chunk never runs the body's ``finally``.
    response.call_on_close(stream.close)
    return response
