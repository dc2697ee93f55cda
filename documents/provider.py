"""The external document provider's HTTP client: timeouts, and errors mapped to ours.

The provider answers ``POST {DOCUMENTS_PROVIDER_URL}/documents`` with
``{"reference": "..."}``. What may go wrong is said in domain errors whose
messages an operator may read: they never carry the URL, the token or the body.
A 5xx, 408, 429, a timeout or a refused connection is transient (Huey retries);
any other 4xx is a rejection no retry can fix, and so is a redirect: the client never
follows one (``security.outbound``), so the token never reaches another host and a
redirected answer never passes for the provider's. An answer over 1 MiB is not read
(``security.outbound.read_answer``): transient, as an answer without a reference is.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from security.outbound import MAX_ANSWER_BYTES, AnswerTooLarge, open_without_redirects, read_answer
from security.sanitise import sanitised
from taskrunner.contract import PermanentError, TaskReportableError

TRANSIENT_STATUSES = frozenset({408, 425, 429})


class ProviderError(TaskReportableError):
    """Base of the provider client's errors."""


class ProviderUnavailable(ProviderError):
    """The provider could not take the document now; a later attempt may succeed."""


class ProviderRejected(ProviderError, PermanentError):
    """The provider refused the document; sending it again would be refused again."""


class ProviderNotConfigured(ProviderError, PermanentError):
    """DOCUMENTS_PROVIDER_URL is not set."""


@dataclass(frozen=True)
class ProviderClient:
    base_url: str
    token: str
    timeout: float = 10.0

    @classmethod
    def from_config(cls, config: Any) -> ProviderClient:
        return cls(
            config.get("DOCUMENTS_PROVIDER_URL") or "",
            config.get("DOCUMENTS_PROVIDER_TOKEN") or "",
            float(config.get("DOCUMENTS_PROVIDER_TIMEOUT_SECONDS") or 10),
        )

    def submit(self, document_uuid: str, title: str, body: str) -> str:
        """Send one document; return the provider's reference for it."""
        if not self.base_url:
            raise ProviderNotConfigured("document provider is not configured")
        if not self.base_url.lower().startswith(("http://", "https://")):
            # urllib opens file: and ftp: URLs too: a local file passed for the answer.
            raise ProviderNotConfigured("document provider URL is not an http or https URL")
        request = urllib.request.Request(
            self.base_url.rstrip("/") + "/documents",
            data=json.dumps({"uuid": document_uuid, "title": title, "body": body}).encode(),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Bearer {self.token}",
                "Idempotency-Key": document_uuid,
            },
            method="POST",
        )
        try:
            with open_without_redirects(request, self.timeout) as response:
                payload = read_answer(response)
        except urllib.error.HTTPError as exc:
            raise self._status_error(exc.code, _error_code(exc)) from None
        except AnswerTooLarge:
            # Transient as a garbled answer is: a later attempt may meet the provider mended.
            raise ProviderUnavailable(
                f"provider answered with more than {MAX_ANSWER_BYTES:,} bytes, not read"
            ) from None
        except TimeoutError:
            raise ProviderUnavailable(
                f"provider did not answer within {self.timeout:g} s"
            ) from None
        except (urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise ProviderUnavailable(
                    f"provider did not answer within {self.timeout:g} s"
                ) from None
            raise ProviderUnavailable(f"provider unreachable ({type(reason).__name__})") from None
        except (http.client.HTTPException, OSError) as exc:
            raise ProviderUnavailable(
                f"provider broke off the exchange ({type(exc).__name__})"
            ) from None
        try:
            reference = _reference(json.loads(payload)["reference"])
        except (ValueError, KeyError, TypeError):
            raise ProviderUnavailable("provider answered without a document reference") from None
        return reference

    @staticmethod
    def _status_error(status: int, code: str | None) -> ProviderError:
        detail = f" ({code})" if code else ""
        if 300 <= status < 400:
            return ProviderRejected(f"provider redirected the request, not followed: HTTP {status}")
        if status >= 500 or status in TRANSIENT_STATUSES:
            return ProviderUnavailable(f"provider unavailable: HTTP {status}{detail}")
        return ProviderRejected(f"provider rejected the document: HTTP {status}{detail}")


def _reference(value: Any) -> str:
    """The provider's reference as its column takes it: a null, an object or an empty text
    is no reference (``str()`` made "None" of a null, and the document counted as sent)."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError("not a reference")
    # A NUL is refused by PostgreSQL: the write after the provider took the document failed.
    reference = sanitised(str(value)).strip()[:120]
    if not reference:
        raise ValueError("an empty reference")
    return reference


def _error_code(exc: urllib.error.HTTPError) -> str | None:
    """The provider's short error code, if it sent one; never free text."""
    try:
        code = json.loads(exc.read(2048)).get("error")
    except (ValueError, AttributeError, OSError):
        return None
    if isinstance(code, str) and code.replace("_", "").replace("-", "").isalnum():
        return code[:40]
    return None
