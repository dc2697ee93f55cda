"""The tenant API: a tenant's own clients, authenticated by a bearer token only.

Nothing here reads the session cookie and the blueprint is exempt from CSRF: a
browser's ambient credentials (an operator's session) grant nothing, and a
tenant token grants nothing outside this blueprint. Whatever belongs to another
tenant is a 404, never a 403: a token never learns that it exists.
"""

from __future__ import annotations

from blueprints.tenant_api import auth, views  # noqa: F401 - routes and hooks
from blueprints.tenant_api.blueprint import bp

__all__ = ["bp"]
