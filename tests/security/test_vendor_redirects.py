"""Vendor clients never follow a redirect, so their token never reaches another host.

Item 2 of the second security review. The vendor is a real local server that answers
every request with a redirect to a second real server (another host name, another
port), which answers anything with a 200 and a body that would pass for success. The
document provider's client and the language model's HTTP driver must report each 30x
as a vendor error with its status, and the second server must see nothing: before,
urllib's default opener sent it the ``Authorization`` header, and the redirected GET's
200 counted as a document forwarded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select

from coursebuilder.llm import HttpDriver, LLMRejected, Prompt
from documents.forwarding import FORWARDED, create_document, forward
from documents.models import Document
from documents.provider import ProviderClient, ProviderRejected
from extensions import db
from taskrunner.ledger import ledger
from tasks.queues import queues

TOKEN = "sk_live_VENDOR_TOKEN_0123456789"
REDIRECTS = (301, 302, 303, 307, 308)


class Recorder(ThreadingHTTPServer):
    """A server that answers with ``status`` (and ``location``) and keeps what it was sent."""

    def __init__(self, status: int, location: str | None = None) -> None:
        self.status, self.location = status, location
        self.seen: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append({"method": self.command, "path": self.path, **self.headers})
        body = json.dumps(
            {"reference": "never-sent", "choices": [{"message": {"content": "a lesson"}}]}
        ).encode()
        self.send_response(self.server.status)
        if self.server.location:
            self.send_header("Location", self.server.location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 - the http.server API

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serving(server: Recorder) -> Iterator[Recorder]:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[Recorder]:
    """The host a redirect names: it answers 200 to anything."""
    with serving(Recorder(200)) as server:
        yield server


@pytest.fixture(params=REDIRECTS)
def vendor(request, elsewhere) -> Iterator[Recorder]:
    """The vendor: every answer is a redirect (of the parameter's status) to ``elsewhere``."""
    target = f"http://localhost:{elsewhere.port}/stolen"
    with serving(Recorder(request.param, target)) as server:
        yield server


def test_the_document_provider_client_reports_a_redirect_and_follows_none(vendor, elsewhere):
    client = ProviderClient(f"http://127.0.0.1:{vendor.port}/v1", TOKEN, timeout=5)

    with pytest.raises(ProviderRejected) as refused:
        client.submit("00000000-0000-4000-8000-000000000001", "Contract", "text")

    assert str(refused.value) == (
        f"provider redirected the request, not followed: HTTP {vendor.status}"
    )
    assert [seen["Authorization"] for seen in vendor.seen] == [f"Bearer {TOKEN}"]
    assert elsewhere.seen == []


def test_the_language_model_driver_reports_a_redirect_and_follows_none(vendor, elsewhere):
    driver = HttpDriver(f"http://127.0.0.1:{vendor.port}/v1", TOKEN, "model-x", timeout=5)

    with pytest.raises(LLMRejected) as refused:
        driver.complete(
            Prompt(stage="outline", step="outline-1", system="You write courses.", text="Tides")
        )

    assert f"HTTP {vendor.status}" in str(refused.value)
    assert len(vendor.seen) == 1 and elsewhere.seen == []


def test_a_redirected_forward_fails_its_document_instead_of_reporting_it_forwarded(
    make_app, elsewhere
):
    with serving(Recorder(302, f"http://localhost:{elsewhere.port}/stolen")) as vendor:
        app = make_app(
            DOCUMENTS_PROVIDER_URL=f"http://127.0.0.1:{vendor.port}/v1",
            DOCUMENTS_PROVIDER_TOKEN=TOKEN,
        )
        with app.app_context():
            document = create_document(tenant_id=1, title="Contract")
            forward(document.uuid)
            huey = queues().huey("default")
            huey.execute(huey.dequeue())

            db.session.rollback()
            stored = db.session.execute(
                select(Document).where(Document.uuid == document.uuid)
            ).scalar_one()
            [run] = ledger.single_jobs.single_runs(
                "documents.forward_to_provider", f"document-{document.uuid}"
            )
            [unit] = ledger.runs.run_units_page(run).items

    assert stored.status != FORWARDED and stored.provider_reference is None
    assert (run.status, unit["status"]) == ("failed", "failed")
    assert unit["last_error"] == "provider redirected the request, not followed: HTTP 302"
    assert elsewhere.seen == []
