"""``documents.forward_to_provider`` on a real consumer: Huey's scheduled retries, and a
consumer stopped with SIGTERM in the middle of an attempt."""

from __future__ import annotations

import signal

import pytest

from documents.forwarding import FORWARD, create_document, forward
from documents.models import Document
from extensions import db
from taskrunner.ledger import ledger
from tests.provider_stub import StubProvider
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers


@pytest.fixture
def provider():
    stub = StubProvider()
    yield stub
    stub.close()


@pytest.fixture
def pool(make_app, provider, tmp_path):
    app = make_app(
        DOCUMENTS_PROVIDER_URL=provider.url,
        DOCUMENTS_PROVIDER_TOKEN="t0k",
        TASK_RUNNER_HEARTBEAT_SECONDS=1,
    )
    consumers = Consumers(app, tmp_path)
    with app.app_context():
        yield consumers
    consumers.stop_all()


def forwarded(document: Document) -> bool:
    db.session.rollback()
    return db.session.get(Document, document.id).status == "forwarded"


def the_run(document: Document):
    db.session.rollback()
    [run] = ledger.single_jobs.single_runs(FORWARD, f"document-{document.uuid}")
    return run


def test_a_503_is_retried_by_the_consumer_after_its_delay_and_the_run_completes(pool, provider):
    provider.script = [(503, {}, 0), (200, {"reference": "R-77"}, 0)]
    pool.start("default", workers=1)
    document = create_document(tenant_id=4, title="Deed")
    forward(document.uuid)

    wait_for(lambda: forwarded(document), timeout=30, message="the document to be forwarded")
    wait_for(lambda: the_run(document).status == "completed", timeout=10, message="the run")
    [unit] = ledger.runs.run_units_page(the_run(document)).items
    assert (unit["status"], unit["attempts"], unit["last_error"]) == ("completed", 2, None)
    assert len(provider.requests) == 2


def test_sigterm_mid_attempt_enqueues_the_same_dispatch_again_and_it_completes(pool, provider):
    provider.script = [(200, {"reference": "too-late"}, 8.0), (200, {"reference": "R-1"}, 0)]
    first = pool.start("default", workers=1)
    document = create_document(tenant_id=5, title="Lease")
    forward(document.uuid)
    wait_for(lambda: len(provider.requests) == 1, timeout=30, message="the first attempt")

    first.send_signal(signal.SIGTERM)
    first.wait(timeout=30)
    run = the_run(document)
    [unit] = ledger.runs.run_units_page(run).items
    assert (run.status, unit["status"]) == ("running", "pending")

    pool.start("default", workers=1)
    wait_for(lambda: the_run(document).status == "completed", timeout=30, message="the run")
    run = the_run(document)  # the same run: the dispatch was re-found by its Huey id
    [unit] = ledger.runs.run_units_page(run).items
    assert (unit["status"], unit["attempts"]) == ("completed", 2)
    assert forwarded(document)
    assert "handed back on shutdown" in pool.logs()
