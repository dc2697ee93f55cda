"""An operator's browser in front of several web hosts, as behind a load balancer.

One cookie jar serves every host, the way a browser sends its cookies to whichever
host the balancer picks: a session opened on one host, a CSRF token rendered by
another and a flash message shown by a third must all hold. Every answer is
recorded, so a scenario can say how many 5xx each host gave. All the HTTP of the
cluster scenario goes through this class, so changes to sign-in, sessions or
throttles touch one place.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
FLASH = re.compile(r'<p class="flash flash-\w+" role="status">([^<]*)</p>')


@dataclass(frozen=True)
class Answer:
    host: str
    status: int
    headers: Mapping[str, str]
    body: str

    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def flashes(self) -> list[str]:
        return [html.unescape(text) for text in FLASH.findall(self.body)]


class OperatorClient:
    """Requests to named web hosts (``{"A": "10.0.0.11:8000", …}``) with shared cookies."""

    def __init__(self, hosts: Mapping[str, str], timeout: float = 30.0) -> None:
        self.hosts = dict(hosts)
        self.timeout = timeout
        self.cookies: dict[str, str] = {}
        self.statuses: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()

    # -- plain requests ------------------------------------------------------------------

    def request(
        self, host: str, method: str, path: str, form: Mapping[str, str] | None = None
    ) -> Answer:
        conn = http.client.HTTPConnection(self.hosts[host], timeout=self.timeout)
        headers = {"Cookie": self._cookie_header(), "Accept": "text/html,application/json"}
        body = None
        if form is not None:
            body = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            answer = Answer(
                host,
                response.status,
                {k.lower(): v for k, v in response.getheaders()},
                response.read().decode("utf-8", "replace"),
            )
            self._keep_cookies(response.msg.get_all("Set-Cookie") or [])
        finally:
            conn.close()
        self._count(host, answer.status)
        return answer

    def _count(self, host: str, status: int) -> None:
        with self._lock:  # a page's stream is followed in a thread of its own
            self.statuses[(host, status)] += 1

    def get(self, host: str, path: str) -> Answer:
        return self.request(host, "GET", path)

    def post(self, host: str, path: str, form: Mapping[str, str]) -> Answer:
        return self.request(host, "POST", path, form)

    def server_errors(self) -> dict[str, int]:
        """5xx answers per host."""
        errors: Counter[str] = Counter()
        for (host, status), count in self.statuses.items():
            if status >= 500:
                errors[host] += count
        return {host: errors.get(host, 0) for host in self.hosts}

    def _cookie_header(self) -> str:
        return "; ".join(f"{name}={value}" for name, value in self.cookies.items())

    def _keep_cookies(self, headers: list[str]) -> None:
        # The Secure flag is not honoured: the cluster speaks plain HTTP on a private network.
        for header in headers:
            name, _, rest = header.partition("=")
            value = rest.split(";", 1)[0]
            if "expires=thu, 01 jan 1970" in header.lower() or not value:
                self.cookies.pop(name.strip(), None)
            else:
                self.cookies[name.strip()] = value

    @staticmethod
    def csrf_token(page: Answer) -> str:
        match = CSRF.search(page.body)
        if not match:
            raise AssertionError(f"no CSRF token on {page.host}'s page ({page.status})")
        return html.unescape(match.group(1))

    # -- what an operator does -----------------------------------------------------------

    def sign_in(self, host: str, email: str, password: str) -> Answer:
        """Fill and submit the sign-in form of ``host``; a success is a 302 away from it."""
        token = self.csrf_token(self.get(host, "/login"))
        form = {"csrf_token": token, "email": email, "password": password}
        return self.post(host, "/login", form)

    def run(self, host: str, run_uuid: str) -> dict:
        """The run as the JSON API of ``host`` shows it (counts, stale and failed units)."""
        answer = self.get(host, f"/api/v1/backoffice/task-runs/{run_uuid}")
        if answer.status != 200:
            raise AssertionError(f"{host}: run {run_uuid} answered {answer.status}")
        return answer.json()

    def stale_units(self, host: str) -> list[dict]:
        answer = self.get(host, "/api/v1/backoffice/stale-units")
        if answer.status != 200:
            raise AssertionError(f"{host}: stale units answered {answer.status}")
        return answer.json()["units"]

    def retry_stale(self, page_host: str, action_host: str) -> str:
        """The stale-units page of one host, its retry form posted (and confirmed) to another,
        the flash message read back from the first; returns that message."""
        token = self.csrf_token(self.get(page_host, "/backoffice/stale-units"))
        confirm = self.post(action_host, "/backoffice/stale-units/retry", {"csrf_token": token})
        if confirm.status != 200:
            raise AssertionError(f"{action_host}: retry confirmation answered {confirm.status}")
        done = self.post(
            action_host,
            "/backoffice/stale-units/retry",
            {"csrf_token": self.csrf_token(confirm), "confirm": "yes"},
        )
        if done.status != 302:
            raise AssertionError(f"{action_host}: retry answered {done.status}")
        return " ".join(self.get(page_host, done.location).flashes())

    def retry_run(self, page_host: str, action_host: str, run_uuid: str) -> str:
        """Retry every unfinished unit of a run: the run page of one host, the form posted
        and confirmed on another; returns the flash message shown back on the first."""
        path = f"/backoffice/task-runs/{run_uuid}"
        token = self.csrf_token(self.get(page_host, path))
        form = {"csrf_token": token, "failed_only": "0"}
        confirm = self.post(action_host, f"{path}/retry", form)
        done = self.post(
            action_host,
            f"{path}/retry",
            form | {"csrf_token": self.csrf_token(confirm), "confirm": "yes"},
        )
        if done.status != 302:
            raise AssertionError(f"{action_host}: run retry answered {done.status}")
        return " ".join(self.get(page_host, done.location).flashes())

    def builder_stream(self, host: str, run_uuid: str, timeout: float) -> Iterator[dict]:
        """The server-sent events of a course build's page on ``host``."""
        return self.stream(host, f"/builder/runs/{run_uuid}/stream", timeout)

    def run_stream(self, host: str, run_uuid: str, timeout: float) -> Iterator[dict]:
        """The server-sent events of a task run's page on ``host``."""
        return self.stream(host, f"/backoffice/task-runs/{run_uuid}/stream", timeout)

    def stream(
        self, host: str, path: str, timeout: float, quiet_seconds: float = 30.0
    ) -> Iterator[dict]:
        """A page's ``changed`` and ``finished`` events as ``{"event", "data", "at"}``,
        reconnecting like the page (the server ends each stream after a while with
        ``rest``; a stream quiet for ``quiet_seconds``, keep-alives and all, is dropped and
        opened again) until ``finished``. A stream that says its session ended fails."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(self.hosts[host], timeout=quiet_seconds)
            try:
                conn.request(
                    "GET",
                    path,
                    headers={"Cookie": self._cookie_header(), "Accept": "text/event-stream"},
                )
                response = conn.getresponse()
                self._count(host, response.status)
                if response.status != 200:
                    raise AssertionError(f"{host}: {path} answered {response.status}")
                for event in _events(response):
                    if event["event"] == "ended":
                        raise AssertionError(f"{host}: {path}: the session ended")
                    if event["event"] in ("changed", "finished"):
                        yield event
                    if event["event"] == "finished":
                        return
            except TimeoutError:
                continue
            finally:
                conn.close()
        raise AssertionError(f"{host}: {path} sent no finished event within {timeout:g} s")


def _events(response: http.client.HTTPResponse) -> Iterator[dict]:
    event, data = None, []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line:
            if event:
                yield {"event": event, "data": json.loads("".join(data)), "at": time.time()}
            event, data = None, []
