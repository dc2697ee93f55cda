"""The tenant API: a tenant's own clients, authenticated by a bearer token only.

Nothing here reads the session cookie and the blueprint is exempt from CSRF: a
browser's ambient credentials (an operator's session) grant nothing, and a
tenant token grants nothing outside this blueprint. Whatever belongs to another
tenant is a 404, never a 403: a token never learns that it exists.
"""

from __future__ import annotations

from flask import Blueprint

from extensions import csrf

bp = Blueprint("tenant_api", __name__, url_prefix="/api/v1")
csrf.exempt(bp)

from blueprints.tenant_api import auth, views  # noqa: E402, F401 - routes and hooks
