"""Where alerts go: a Slack-compatible webhook, a signed generic webhook, email over SMTP.

Each channel turns a message body (``content.compose``) into its receiver's format and
sends it within ``ALERT_TIMEOUT_SECONDS``; it returns the receiver's answer, or raises
``ChannelError`` with a reason an operator may read: a status and the start of the
answer, never the receiver's URL (a Slack webhook's URL is its credential) nor a
password. HTTP goes through ``security.outbound`` (no redirect is followed).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import smtplib
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import parseaddr
from typing import Any, Protocol

from alerts.content import absolute
from security.outbound import Deadline, open_without_redirects
from security.sanitise import sanitised
from security.scrub import scrub
from taskrunner.contract import TaskReportableError, plural

ANSWER_CHARS = 200
# Slack refuses a whole message (invalid_blocks) with a longer section's text or field.
SECTION_CHARS, FIELD_CHARS = 3000, 2000
SIGNATURE_HEADER = "Taskledger-Signature"
SECURITIES = ("none", "starttls", "ssl")

logger = logging.getLogger(__name__)


class ChannelError(TaskReportableError):
    """A receiver refused, failed or did not answer in time."""


class Channel(Protocol):
    name: str

    def send(self, body: Mapping[str, Any]) -> str: ...


def signature(secret: str, timestamp: int, payload: bytes) -> str:
    """The ``Taskledger-Signature`` value: HMAC-SHA256 of ``"<t>.<body>"`` with the secret."""
    digest = hmac.new(
        secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256
    ).hexdigest()
    return f"t={timestamp},v1={digest}"


def _links(body: Mapping[str, Any], base_url: str) -> list[tuple[str, str]]:
    return [(link["label"], absolute(link["path"], base_url)) for link in body.get("links", [])]


def plain_text(body: Mapping[str, Any], base_url: str) -> str:
    """The message as lines of text (the email, Slack's fallback ``text``)."""
    lines = [body["title"]]
    if body.get("text"):
        lines.append(body["text"])
    lines += [f"{label}: {value}" for label, value in body.get("facts", [])]
    groups = body.get("error_groups") or []
    if groups:
        lines.append("Top error groups:")
        lines += [f"  {g['count']} × [{g['kind']}] {g['reason']}" for g in groups]
    if body.get("tenants") is not None:
        lines.append(f"Tenants affected: {body['tenants']}")
    lines += [f"{label}: {url}" for label, url in _links(body, base_url)]
    return "\n".join(lines)


def _said(answer: bytes) -> str:
    """The start of a receiver's answer as a terminal, a page or a row may show it: without
    control characters (an escape sequence steered the operator's terminal) or a credential
    it may echo."""
    return scrub(sanitised(answer.decode(errors="replace")))


def _post_json(url: str, payload: bytes, headers: dict[str, str], timeout: float) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        request = urllib.request.Request(
            url,
            data=payload,
            method="POST",
            headers={"Content-Type": "application/json", **headers},
        )
    except ValueError:
        raise ChannelError("its URL cannot be read") from None
    # urllib would also open file: and ftp: URLs; a receiver is http(s), named by no error.
    if parts.scheme not in ("http", "https"):
        raise ChannelError("its URL is not an http or https URL")
    if "@" in parts.netloc:
        # urllib takes user:password@ for part of the host, and its error quotes the password.
        raise ChannelError("its URL carries a user or password (user:password@host)")
    try:
        with open_without_redirects(request, timeout=timeout) as response:
            return f"{response.status} {_said(response.read(ANSWER_CHARS))}"
    except urllib.error.HTTPError as exc:
        answer = _said(exc.read(ANSWER_CHARS)) if exc.fp else ""
        raise ChannelError(f"answered {exc.code} {answer}".strip()) from None
    except urllib.error.URLError as exc:
        raise ChannelError(f"unreachable ({type(exc.reason).__name__})") from None
    except TimeoutError:
        raise ChannelError(f"no answer within {timeout:g} s") from None
    except OSError as exc:
        raise ChannelError(f"connection failed ({type(exc).__name__})") from None
    except (http.client.HTTPException, ValueError) as exc:
        # A port that is not a number (InvalidURL quotes it), an answer that is not HTTP:
        # the type alone, as the text may hold part of the URL, a credential.
        raise ChannelError(f"could not be sent ({type(exc).__name__})") from None


def slack_text(text: Any) -> str:
    """``text`` as Slack shows it as written: its ``<...>`` would be a mention (``<!channel>``
    notifies everyone) or a link of its own choosing, so ``&``, ``<`` and ``>`` are escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class SlackChannel:
    url: str
    base_url: str
    timeout: float
    name: str = "slack"

    def payload(self, body: Mapping[str, Any]) -> dict[str, Any]:
        fields = [
            {"type": "mrkdwn", "text": f"*{slack_text(k)}*\n{slack_text(v)}"[:FIELD_CHARS]}
            for k, v in body.get("facts", [])
        ]
        if body.get("tenants") is not None:
            fields.append({"type": "mrkdwn", "text": f"*Tenants*\n{body['tenants']}"})
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": body["title"][:150]}},
        ]
        if body.get("text"):
            text = slack_text(body["text"])[:SECTION_CHARS]
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
        if fields:
            blocks.append({"type": "section", "fields": fields[:10]})
        groups = body.get("error_groups") or []
        if groups:
            listed = "\n".join(
                f"• {g['count']} × `{slack_text(g['kind'])}` {slack_text(g['reason'])}"
                for g in groups
            )[:SECTION_CHARS]
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": listed}})
        links = " · ".join(
            f"<{slack_text(url)}|{slack_text(label)}>" for label, url in _links(body, self.base_url)
        )
        if links:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": links}]})
        return {"text": slack_text(plain_text(body, self.base_url)), "blocks": blocks}

    def send(self, body: Mapping[str, Any]) -> str:
        payload = json.dumps(self.payload(body)).encode()
        return _post_json(self.url, payload, {}, self.timeout)


@dataclass(frozen=True)
class WebhookChannel:
    url: str
    secret: str
    base_url: str
    timeout: float
    name: str = "webhook"

    def send(self, body: Mapping[str, Any]) -> str:
        document = {
            **body,
            "links": [{"label": k, "url": v} for k, v in _links(body, self.base_url)],
        }
        payload = json.dumps(document, sort_keys=True).encode()
        headers = {"Idempotency-Key": f"{body['episode']}:{body['seq']}"}
        if self.secret:
            headers[SIGNATURE_HEADER] = signature(self.secret, int(time.time()), payload)
        return _post_json(self.url, payload, headers, self.timeout)


@dataclass(frozen=True)
class EmailChannel:
    host: str
    port: int
    security: str
    user: str
    password: str
    sender: str
    to: tuple[str, ...]
    base_url: str
    timeout: float
    name: str = "email"

    def message(self, body: Mapping[str, Any]) -> EmailMessage:
        message = EmailMessage()
        # One line: a line break (a name may hold one) would be refused in a header.
        message["Subject"] = " ".join(f"[Taskledger] {body['title']}".split())
        message["From"] = self.sender
        message["To"] = ", ".join(self.to)
        message["Message-ID"] = f"<{body['episode']}.{body['seq']}@taskledger>"
        message.set_content(plain_text(body, self.base_url))
        return message

    def send(self, body: Mapping[str, Any]) -> str:
        try:
            return self._send(self.message(body))
        except smtplib.SMTPResponseException as exc:
            raise ChannelError(f"answered {exc.smtp_code}") from None
        except smtplib.SMTPException as exc:
            raise ChannelError(f"refused ({type(exc).__name__})") from None
        except TimeoutError:
            raise ChannelError(f"no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise ChannelError(f"connection failed ({type(exc).__name__})") from None
        except ValueError as exc:  # an address or a host smtplib cannot encode
            raise ChannelError(f"could not be sent ({type(exc).__name__})") from None

    def _send(self, message: EmailMessage) -> str:
        context = ssl.create_default_context()
        sockets: list[socket.socket] = []
        # smtplib's timeout bounds each read: a server answering a byte at a time held the
        # send, and the channels and the outbox's pass after it, for as long as it liked.
        with Deadline(self.timeout, lambda: sockets) as deadline:
            try:
                if self.security == "ssl":
                    smtp: smtplib.SMTP = _WatchedSSL(
                        sockets, self.host, self.port, timeout=self.timeout, context=context
                    )
                else:
                    smtp = _Watched(sockets, self.host, self.port, timeout=self.timeout)
            except OSError:
                for sock in sockets:  # a greeting refused or cut: smtplib leaves it open
                    sock.close()
                if deadline.passed:
                    raise TimeoutError from None
                raise
            try:
                if self.security == "starttls":
                    smtp.starttls(context=context)
                    sockets.append(smtp.sock)
                if self.user:
                    smtp.login(self.user, self.password)
                refused = smtp.send_message(message)
            except BaseException:
                smtp.close()
                if deadline.passed:
                    raise TimeoutError from None
                raise
            # The server took the message: a retry would send it again to every recipient
            # who has it. A refused recipient is told in the answer, and a QUIT that fails
            # (a 421, the deadline) cannot take the message back.
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                smtp.close()
        if not refused:
            return f"accepted for {plural(len(self.to), 'recipient')}"
        names = ", ".join(f"{address} {code}" for address, (code, _) in sorted(refused.items()))
        logger.warning(
            "email alert refused for %d of %d recipients: %s", len(refused), len(self.to), names
        )
        accepted = len(self.to) - len(refused)
        return f"accepted for {accepted} of {len(self.to)} recipients; refused {names}"


class _Watching:
    """An SMTP connection that adds its socket to ``sockets`` once connected."""

    def __init__(self, sockets: list[socket.socket], *args: Any, **kwargs: Any) -> None:
        self._sockets = sockets
        super().__init__(*args, **kwargs)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        self._sockets.append(sock)
        return sock


class _Watched(_Watching, smtplib.SMTP):
    pass


class _WatchedSSL(_Watching, smtplib.SMTP_SSL):
    pass


@dataclass(frozen=True)
class UnusableChannel:
    """A channel the settings configure but cannot build: each send is refused with the
    reason, so its deliveries say what to fix and the other channels still send."""

    name: str
    reason: str

    def send(self, body: Mapping[str, Any]) -> str:
        raise ChannelError(self.reason)


def send_or_refuse(channel: Channel, body: Mapping[str, Any]) -> str:
    """``channel.send(body)``, every failure a ``ChannelError``: one channel that breaks
    in a way nobody foresaw stops neither a test send of the others nor the outbox."""
    try:
        return channel.send(body)
    except ChannelError:
        raise
    except Exception as exc:
        # Its type alone, here and in the log: its text may quote a URL or a password.
        logger.error("alert channel %s failed (%s)", channel.name, type(exc).__name__)
        raise ChannelError(f"could not be sent ({type(exc).__name__})") from None


def _one_address(text: str) -> bool:
    """Whether ``text`` is one address, bare or as ``Name <address>``: the mail header's
    parser reads the first of ``a@x; b@x`` and drops the rest, unsaid."""
    _, address = parseaddr(text)
    if not address or any(c in address for c in " \t<>,;"):
        return False
    return text == address or text.endswith(f"<{address}>")


def _email(config: Mapping[str, Any], base: str, timeout: float) -> Channel:
    security = config["SMTP_SECURITY"]
    if security not in SECURITIES:
        reason = f"SMTP_SECURITY: {security!r} is not one of {', '.join(SECURITIES)}"
        return UnusableChannel("email", reason)
    try:
        port = int(config["SMTP_PORT"])
    except ValueError:
        return UnusableChannel("email", f"SMTP_PORT: {config['SMTP_PORT']!r} is not a port")
    to = tuple(a.strip() for a in config["ALERT_EMAIL_TO"].split(",") if a.strip())
    if unread := next((part for part in to if not _one_address(part)), None):
        reason = f"ALERT_EMAIL_TO: {unread!r} is not an address (addresses are separated by commas)"
        return UnusableChannel("email", reason)
    sender = config["SMTP_FROM"].strip() or "taskledger@localhost"
    if not _one_address(sender):
        return UnusableChannel("email", f"SMTP_FROM: {sender!r} is not an address")
    return EmailChannel(
        host=config["SMTP_HOST"],
        port=port,
        security=security,
        user=config["SMTP_USER"],
        password=config["SMTP_PASSWORD"],
        sender=sender,
        to=to,
        base_url=base,
        timeout=timeout,
    )


def configured(config: Mapping[str, Any]) -> dict[str, Channel]:
    """The channels the settings configure, by name; one whose settings are unusable is
    there too, refusing every send (``UnusableChannel``), never in the others' way."""
    base, timeout = config["BACKOFFICE_URL"], float(config["ALERT_TIMEOUT_SECONDS"])
    found: dict[str, Channel] = {}
    if config["ALERT_SLACK_WEBHOOK_URL"]:
        found["slack"] = SlackChannel(config["ALERT_SLACK_WEBHOOK_URL"], base, timeout)
    if config["ALERT_WEBHOOK_URL"]:
        found["webhook"] = WebhookChannel(
            config["ALERT_WEBHOOK_URL"], config["ALERT_WEBHOOK_SECRET"], base, timeout
        )
    if config["ALERT_EMAIL_TO"] and config["SMTP_HOST"]:
        found["email"] = _email(config, base, timeout)
    elif config["ALERT_EMAIL_TO"]:
        # Left out, the recipients would wait for alerts that never come, and nothing says so.
        reason = "SMTP_HOST: not set, and ALERT_EMAIL_TO names recipients"
        found["email"] = UnusableChannel("email", reason)
    return found
