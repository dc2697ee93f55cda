"""The async-requests module's one exception hierarchy."""

from __future__ import annotations

from taskrunner.contract import register_domain_error


@register_domain_error
class AsyncRequestError(Exception):
    """Base of this module's errors; messages are safe to show to whoever asked."""


class UnknownTenant(AsyncRequestError):
    pass


class UnknownToken(AsyncRequestError):
    pass


class ClosedTenant(AsyncRequestError):
    pass


class BadTokenName(AsyncRequestError):
    pass
