"""The one scrubber: credential shapes, then the DLP masker's values.

Every log record passes through it (``security.logs``), and so does every text the
task runner stores and every event payload it writes (``dlp.setup`` binds it to the
runner's scrubber seam; ``taskrunner.redaction.bounded`` applies it). Scrubbing is
idempotent: a scrubbed text goes through again unchanged, so a reason stored, read
back and stored again with a prefix stays as it was.

The patterns cover what drivers, HTTP clients and access logs put in their
messages: ``password=…``-style pairs, vendor API keys (``sk_live_…``), our
tenant tokens (their public id survives, so an operator still knows which token
it was), bearer and basic credentials, cookies, passwords in URLs and private
keys. The DLP masker then masks card numbers, IBANs and SSNs.
"""

from __future__ import annotations

import re

from dlp.masker import mask

REDACTED = "[redacted]"
_SECRET_NAMES = (
    r"password|passwd|pwd|secret|client[_-]?secret|token|access[_-]?token|refresh[_-]?token"
    r"|api[_-]?key|apikey|auth[_-]?token|private[_-]?key|csrf[_-]?token"
)
_NAME_TRIGGERS = ("pass", "pwd", "secret", "token", "key")

# (triggers, pattern, replacement): a pattern runs only on text that contains one of its
# lower-case triggers, so the usual log line, which has none, costs a few substring
# searches rather than a dozen regular expressions.
_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # "password": "…" in JSON and Python reprs (a bound-parameters dict).
    (
        _NAME_TRIGGERS,
        re.compile(rf"(?i)(['\"](?:{_SECRET_NAMES})['\"]\s*:\s*)(['\"])(?:\\.|(?!\2).)*\2"),
        rf"\1\2{REDACTED}\2",
    ),
    # password=… in query strings, DSNs and prose; not a "%(token)s" placeholder, nor a
    # value scrubbed already.
    (
        _NAME_TRIGGERS,
        re.compile(
            rf"(?i)\b((?:{_SECRET_NAMES})\s*[=:]\s*)(['\"]?)(?!%\(|\[redacted\])[^\s'\"&,;)}}\]]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (
        ("private key",),
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        f"[private key {REDACTED}]",
    ),
    # Vendor keys: Stripe-style sk_live_…, rk_test_…, whsec_…; GitHub, Slack, AWS key ids.
    (("_live_", "_test_"), re.compile(r"\b((?:sk|rk|pk)_(?:live|test)_)\w+"), rf"\1{REDACTED}"),
    (("whsec_",), re.compile(r"\bwhsec_\w+"), f"whsec_{REDACTED}"),
    (
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        re.compile(r"\b(gh[pousr]_)\w{16,}"),
        rf"\1{REDACTED}",
    ),
    (("xox",), re.compile(r"\b(xox[abposr]-)[\w-]{8,}"), rf"\1{REDACTED}"),
    (("akia",), re.compile(r"\bAKIA[0-9A-Z]{16}\b"), f"AKIA{REDACTED}"),
    # Tenant API tokens (asyncrequests.tokens): tlk_<public id>_<secret>.
    (("tlk_",), re.compile(r"\b(tlk_[0-9a-f]{12}_)[\w-]+"), rf"\1{REDACTED}"),
    # JSON web tokens, and signed cookies of the same shape.
    (("eyj",), re.compile(r"\beyJ[\w-]{4,}\.[\w-]{4,}\.[\w-]*"), REDACTED),
    # Credentials in headers: Authorization: Bearer …, Basic …; Cookie: ….
    (
        ("bearer", "basic"),
        re.compile(r"(?i)\b(bearer|basic)(\s+)[\w.~+/=-]{6,}"),
        rf"\1\2{REDACTED}",
    ),
    (("cookie",), re.compile(r"(?im)\b((?:set-)?cookie:\s*)[^\r\n]+"), rf"\1{REDACTED}"),
    # scheme://user:password@host
    (
        ("://",),
        re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"),
        rf"\1{REDACTED}@",
    ),
)


def scrub_secrets(text: str) -> str:
    """``text`` without credential-shaped values."""
    lowered = text.lower()
    for triggers, pattern, replacement in _PATTERNS:
        if any(trigger in lowered for trigger in triggers):
            text = pattern.sub(replacement, text)
    return text


def scrub(text: str) -> str:
    """``text`` fit for a log: no credentials, no card numbers, IBANs or SSNs."""
    return mask(scrub_secrets(text))
