"""A unit key in a URL: always one path segment, whatever the key holds.

Unit keys are opaque: ``tenant-7:2026-11``, a document's uuid, but also ``a/b``, ``..``
or ``../../<another run's uuid>``. Werkzeug's converters leave ``/`` as it is, and a
browser resolves ``.`` and ``..`` segments (spelled ``%2e`` too) before it sends the
request: such a key's links led to another run, or to the sign-in page. A percent
escape cannot help, since the server decodes ``%2F`` back into ``/`` before routing; so
the key is escaped with ``~`` first: ``~`` is ``~7E``, ``/`` is ``~2F``, and a key made of
dots only has each dot as ``~2E``. Every other character is percent-encoded as Werkzeug
does it, so the usual keys (``probe-7``, ``tenant-7:2026-11``) keep the URLs they had.

Reading a URL undoes the escape; a literal ``/`` in a path is still read as part of the
key, so a link made before keys were escaped still leads to its unit.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from werkzeug.routing import BaseConverter

_ESCAPED = re.compile(r"~([0-9A-Fa-f]{2})")
# Werkzeug's own safe characters for a path, but "/".
_SAFE = "!$&'()*+,:;=@"


def segment(key: str) -> str:
    """``key`` as one path segment no browser or server will split or resolve."""
    escaped = key.replace("~", "~7E").replace("/", "~2F")
    if not escaped.strip("."):
        escaped = escaped.replace(".", "~2E")
    return quote(escaped, safe=_SAFE)


def key_of(segment_text: str) -> str:
    """The unit key of a path segment (already percent-decoded by the server)."""
    return _ESCAPED.sub(lambda match: chr(int(match[1], 16)), segment_text)


class UnitKeyConverter(BaseConverter):
    """``<unit_key:name>`` in a route: built with ``segment``, read with ``key_of``."""

    regex = "[^/].*?"  # a literal "/" too, as in links made before the escape
    part_isolating = False

    def to_url(self, value: str) -> str:
        return segment(value)

    def to_python(self, value: str) -> str:
        return key_of(value)
