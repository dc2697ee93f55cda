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
    r"password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|private[_-]?key"
    r"|secret[_-]?access[_-]?key"
)
# A secret's name may carry a prefix joined by "_", "-" or ".": SMTP_PASSWORD, db.password,
# client_secret, x-auth-token, aws_secret_access_key, LLM_API_KEY; in a URL-encoded query
# it follows "%3F" or "%26".
_NAMED = rf"(?:(?<![\w-])|(?<=%3f)|(?<=%26))(?:[a-z0-9]+[_.-])*(?:{_SECRET_NAMES})"
_NAME_TRIGGERS = ("pass", "pwd", "secret", "token", "key")
# A quoted value runs to its closing quote, or to the end of its line when a client cut
# the text before the quote closed.
_QUOTED = r"(['\"])(?:\\.|(?!\2).)*(?:\2|$)"
_SCHEMES = (
    r"bearer|basic|token|digest|negotiate|ntlm|apikey|api-key|key|ssws|oauth|dpop|hawk"
    r"|aws4-hmac-sha256|splunk"
)

# (triggers, pattern, replacement): a pattern runs only on text that contains one of its
# lower-case triggers, so the usual log line, which has none, costs a few substring
# searches rather than a dozen regular expressions.
_PATTERNS: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    # "password": "…" in JSON and Python reprs (a bound-parameters dict, a headers dict).
    (
        (*_NAME_TRIGGERS, "authorization"),
        re.compile(rf"(?im)(['\"](?:{_NAMED}|(?:proxy-)?authorization)['\"]\s*:\s*){_QUOTED}"),
        rf"\1\2{REDACTED}\2",
    ),
    # password=… in query strings (URL-encoded too), DSNs and prose; not a "%(token)s"
    # placeholder, nor a value scrubbed already. An unquoted value ends at a space, a
    # quote, "&" or ";": a password may hold any other punctuation.
    (
        _NAME_TRIGGERS,
        re.compile(
            rf"(?im)({_NAMED}(?:\s*[=:]\s*|%3d))"
            rf"(?:{_QUOTED}|(?!%\(|\[redacted\])(?:(?!%26)[^\s'\"&;])+)"
        ),
        rf"\1\2{REDACTED}\2",
    ),
    # Authorization: <scheme> <credentials>; a scheme named is kept. Without one, the
    # first word is the credential.
    (
        ("authorization",),
        re.compile(
            rf"(?im)\b((?:proxy-)?authorization\s*[:=]\s*+)"
            rf"(?!(?:(?:{_SCHEMES})[ \t]+)?\[redacted\])((?:{_SCHEMES})[ \t]+)?[^\s,;'\"]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (
        ("private key",),
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
            r".*?(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|$)",
            re.S,
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
    # Bearer and basic credentials wherever they appear.
    (
        ("bearer", "basic"),
        re.compile(r"(?i)\b(bearer|basic)(\s+)[\w.~+/=-]{6,}"),
        rf"\1\2{REDACTED}",
    ),
    (("cookie",), re.compile(r"(?im)\b((?:set-)?cookie:\s*)[^\r\n]+"), rf"\1{REDACTED}"),
    # scheme://user:password@host. A password may hold "/" or "@" unescaped (DSNs are
    # written by hand): it ends at the "@" a host name follows; host:port/ is no password.
    (
        ("://",),
        re.compile(
            r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)(?!\[redacted\]@|\d{1,5}/)[^\s?#]*?"
            r"@(?=[\w.-]+(?:[:/?#\s'\"]|$))"
        ),
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
