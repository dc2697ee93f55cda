"""The language-model drivers behind one interface.

``FakeDriver`` is deterministic (the same prompt gives the same text) and takes
its latency and failures from the run's options, for tests and the demo.
``HttpDriver`` talks to an OpenAI-compatible chat-completions endpoint. Both
raise only ``LLMError`` subclasses, whose messages never carry the key, the
prompt or the endpoint's body, so a step's redacted reason is readable. The HTTP
driver never follows a redirect (``security.outbound``): a 30x is a refusal with its
status, and the key never goes to the host a redirect names. An answer over 1 MiB is not
read (``security.outbound.read_answer``): a bad response.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from security.outbound import MAX_ANSWER_BYTES, AnswerTooLarge, open_without_redirects, read_answer
from security.sanitise import sanitised
from taskrunner.contract import register_domain_error


@register_domain_error
class LLMError(Exception):
    """A language-model call failed; the message is safe to show an operator."""


class LLMTimeout(LLMError):
    pass


class LLMRateLimited(LLMError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMUnavailable(LLMError):
    pass


class LLMRejected(LLMError):
    """The endpoint refused the request itself (bad key, bad model, bad input)."""


class LLMBadResponse(LLMError):
    pass


class LLMConfigError(LLMError):
    pass


@dataclass(frozen=True, slots=True)
class Prompt:
    stage: str
    step: str
    text: str
    system: str = "You write clear, accurate course material."


class LLMDriver(Protocol):
    def complete(self, prompt: Prompt) -> str: ...


class FakeDriver:
    """Deterministic text after ``latency_ms``; fails the steps named in ``fail_steps``."""

    def __init__(self, latency_ms: int = 0, fail_steps: Iterable[str] = ()) -> None:
        self.latency_ms = max(0, int(latency_ms))
        self.fail_steps = frozenset(fail_steps)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> FakeDriver:
        fake = options.get("fake") or {}
        return cls(latency_ms=fake.get("latency_ms", 0), fail_steps=fake.get("fail_steps", ()))

    def complete(self, prompt: Prompt) -> str:
        if self.latency_ms:
            time.sleep(self.latency_ms / 1000)
        if prompt.step in self.fail_steps:
            raise LLMUnavailable(f"fake driver failure injected for step {prompt.step}")
        digest = hashlib.sha256(prompt.text.encode()).hexdigest()[:12]
        return f"[{prompt.stage}/{prompt.step} {digest}] {prompt.text}"


class HttpDriver:
    """An OpenAI-compatible ``POST {base_url}/chat/completions``."""

    def __init__(self, base_url: str, api_key: str, model: str, timeout: float) -> None:
        if not base_url:
            raise LLMConfigError("LLM_BASE_URL is not set")
        if not model:
            raise LLMConfigError("LLM_MODEL is not set")
        try:
            parts = urllib.parse.urlsplit(base_url)
        except ValueError:
            raise LLMConfigError("LLM_BASE_URL is not a URL") from None
        if parts.scheme not in ("http", "https"):
            # urllib opens file: and ftp: URLs too: a local file passed for the model's answer.
            raise LLMConfigError("LLM_BASE_URL must be an http or https URL")
        if "@" in parts.netloc:
            # urllib takes user:password@ for part of the host; its error quotes the password.
            raise LLMConfigError("LLM_BASE_URL must not carry a user or password")
        if api_key and not (api_key.isascii() and api_key.isprintable() and " " not in api_key):
            # http.client refuses it in a header at every call, and the reason named the URL.
            raise LLMConfigError("LLM_API_KEY must be printable ASCII without spaces")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.model = model
        self.timeout = timeout

    def complete(self, prompt: Prompt) -> str:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [
                    {"role": "system", "content": prompt.system},
                    {"role": "user", "content": prompt.text},
                ],
            }
        ).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            with open_without_redirects(request, self.timeout) as response:
                raw = read_answer(response)
        except urllib.error.HTTPError as exc:
            raise _http_error(exc) from None
        except AnswerTooLarge:
            raise LLMBadResponse(
                f"language model answered with more than {MAX_ANSWER_BYTES:,} bytes, not read"
            ) from None
        except TimeoutError:
            raise LLMTimeout(f"language model did not answer within {self.timeout:g} s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                raise LLMTimeout(
                    f"language model did not answer within {self.timeout:g} s"
                ) from None
            raise LLMUnavailable("language model endpoint unreachable") from None
        except (http.client.InvalidURL, ValueError) as exc:
            # A port that is not a number, a scheme urllib does not know: the type alone, as
            # the error's text quotes part of the URL (with user info, the password).
            raise LLMConfigError(f"LLM_BASE_URL cannot be used ({type(exc).__name__})") from None
        except (http.client.HTTPException, OSError) as exc:
            # A connection closed or reset mid-answer, an answer that is not HTTP: the
            # endpoint's trouble, which a later try may not meet.
            raise LLMUnavailable(
                f"language model endpoint broke off ({type(exc).__name__})"
            ) from None
        return _content(raw)


def _http_error(exc: urllib.error.HTTPError) -> LLMError:
    status = exc.code
    exc.close()
    if status == 429:
        retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
        return LLMRateLimited("language model rate limit reached (HTTP 429)", retry_after)
    if 300 <= status < 400:
        return LLMRejected(
            f"language model endpoint redirected the request, not followed (HTTP {status})"
        )
    if status >= 500:
        return LLMUnavailable(f"language model endpoint failed (HTTP {status})")
    return LLMRejected(f"language model endpoint refused the request (HTTP {status})")


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _content(raw: bytes) -> str:
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        # RecursionError: JSON nested deeper than the parser goes, a few kilobytes of "[".
        raise LLMBadResponse("language model answer is not a chat completion") from None
    if not isinstance(content, str):
        raise LLMBadResponse("language model answer is empty")
    # The answer is stored as the step's output: a NUL (refused by PostgreSQL) or a lone
    # surrogate (encoded by no driver) failed that write, the step stayed running, and its
    # recovery paid for the same answer again, for ever.
    content = sanitised(content)
    if not content.strip():
        raise LLMBadResponse("language model answer is empty")
    return content


def driver_for(config: Mapping[str, Any], options: Mapping[str, Any]) -> LLMDriver:
    """The driver of a deployment (``LLM_DRIVER``); the fake one reads the run's options."""
    kind = config.get("LLM_DRIVER", "fake")
    if kind == "fake":
        return FakeDriver.from_options(options)
    if kind == "http":
        return HttpDriver(
            config.get("LLM_BASE_URL", ""),
            config.get("LLM_API_KEY", ""),
            config.get("LLM_MODEL", ""),
            float(config["LLM_TIMEOUT_SECONDS"]),
        )
    raise LLMConfigError(f"LLM_DRIVER must be fake or http, not {kind!r}")
