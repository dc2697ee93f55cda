"""``documents.forward_to_provider``: a single tracked job against a local stub provider.

Jobs run through Huey's own ``execute`` on the test's real queue backend; a retry Huey
scheduled is taken from the schedule at once instead of waiting for its delay (its
delay is asserted, not slept).
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, delete, select, update

from database import utcnow
from documents.forwarding import FORWARD, create_document, forward
from documents.models import Document
from documents.provider import (
    ProviderClient,
    ProviderNotConfigured,
    ProviderRejected,
    ProviderUnavailable,
)
from extensions import db
from taskrunner.ledger import ledger
from tasks.queues import queues
from tests.provider_stub import StubProvider
from tests.support import wait_for

TOKEN = "tok_SECRET_provider_token"


@pytest.fixture
def provider():
    stub = StubProvider()
    yield stub
    stub.close()


@pytest.fixture
def docs(make_app, provider):
    app = make_app(
        DOCUMENTS_PROVIDER_URL=provider.url,
        DOCUMENTS_PROVIDER_TOKEN=TOKEN,
        DOCUMENTS_PROVIDER_TIMEOUT_SECONDS=0.5,
    )
    with app.app_context():
        yield app


def step() -> dict | None:
    """Run the next forward job (queued, else the next scheduled retry); describe it.

    ``retry_in`` is the delay Huey gave the retry this attempt scheduled, if any: its eta
    minus the attempt's start and end bound the delay from both sides.
    """
    huey = queues().huey("default")
    task = huey.dequeue() if huey.pending_count() else None  # an empty one waits on Redis
    if task is None:
        scheduled = huey.scheduled()
        if not scheduled:
            return None
        task = min(scheduled, key=lambda t: t.eta)
        for ready in huey.read_schedule(utcnow() + timedelta(days=1)):
            if ready.id != task.id:
                huey.enqueue(ready)
        task.eta = None  # due now: the test does not wait out the delay
    assert task.name == FORWARD
    started = utcnow()
    huey.execute(task)
    ended = utcnow()
    retry_in = None
    for later in huey.scheduled():
        if later.id == task.id:
            retry_in = ((later.eta - ended).total_seconds(), (later.eta - started).total_seconds())
    return {"id": task.id, "retry_in": retry_in}


def delay_was(retry_in: tuple[float, float] | None, seconds: float) -> bool:
    return retry_in is not None and retry_in[0] <= seconds <= retry_in[1]


def runs_of(document: Document | str):
    uuid = document if isinstance(document, str) else document.uuid
    db.session.rollback()
    return ledger.single_jobs.single_runs(FORWARD, f"document-{uuid}")


def the_unit(run) -> dict:
    [unit] = ledger.runs.run_units_page(run).items
    return unit


def test_a_transient_503_is_retried_with_backoff_and_succeeds_on_the_third_attempt(docs, provider):
    provider.script = [(503, {"error": "busy"}, 0), (503, {}, 0), (200, {"reference": "R-1"}, 0)]
    document = create_document(tenant_id=7, title="Invoice 12", body="lines")
    forward(document.uuid)

    first = step()
    assert delay_was(first["retry_in"], 5)  # retry_delay 5 s
    [run] = runs_of(document)
    assert run.status == "running"
    assert run.context == {"dispatch_uuid": first["id"]}
    unit = the_unit(run)
    assert (unit["status"], unit["attempts"]) == ("pending", 1)
    assert unit["last_error"] == "provider unavailable: HTTP 503 (busy)"
    assert unit["tenant_id"] == 7

    second = step()
    assert second["id"] == first["id"]
    assert delay_was(second["retry_in"], 10)  # backoff 2: the delay doubled
    assert the_unit(runs_of(document)[0])["attempts"] == 2
    third = step()
    assert third["retry_in"] is None
    assert step() is None

    [run] = runs_of(document)
    assert (run.status, run.units_total, run.units_completed) == ("completed", 1, 1)
    unit = the_unit(run)
    assert (unit["status"], unit["attempts"], unit["last_error"]) == ("completed", 3, None)
    db.session.refresh(document)
    assert (document.status, document.provider_reference) == ("forwarded", "R-1")
    assert [r["auth"] for r in provider.requests] == [f"Bearer {TOKEN}"] * 3
    assert ledger.runs.count_events("tasks.run.completed", run) == 1
    assert ledger.runs.count_events("tasks.unit.failed", run) == 0


def step_while_the_provider_answers(provider: StubProvider, statement) -> None:
    """One attempt, while another connection commits ``statement`` once the provider was
    asked (and before it answers)."""
    writer = create_engine(db.engine.url.render_as_string(hide_password=False))

    def meanwhile() -> None:
        wait_for(lambda: provider.requests, timeout=30, message="the provider asked")
        with writer.begin() as conn:
            conn.execute(statement)

    other = threading.Thread(target=meanwhile)
    other.start()
    step()
    other.join()
    writer.dispose()


def test_a_write_committed_while_the_provider_answers_leaves_the_attempt_whole(make_app, provider):
    # Another connection commits while the provider takes its time (a heartbeat does, every
    # second). A read transaction held across the call could not become the write after it
    # on SQLite ("database is locked"): the attempt failed although the provider had the
    # document, and the next attempt sent it again.
    app = make_app(DOCUMENTS_PROVIDER_URL=provider.url, DOCUMENTS_PROVIDER_TOKEN=TOKEN)
    provider.script = [(200, {"reference": "R-9"}, 1.0)]
    with app.app_context():
        document = create_document(tenant_id=2, title="Contract")
        other = create_document(tenant_id=2, title="Other").id
        forward(document.uuid)
        step_while_the_provider_answers(
            provider, update(Document).where(Document.id == other).values(body="x")
        )

        assert step() is None  # no retry was scheduled
        [run] = runs_of(document)
        assert (run.status, the_unit(run)["attempts"]) == ("completed", 1)
        db.session.refresh(document)
        assert (document.status, document.provider_reference) == ("forwarded", "R-9")
        assert len(provider.requests) == 1


def test_a_document_deleted_while_the_provider_answers_fails_its_unit_with_the_reference(
    make_app, provider
):
    # The provider took the document; the row was gone when the answer came: a permanent
    # failure that says so and keeps the provider's reference (never an AttributeError,
    # never a retry that sends it again).
    app = make_app(DOCUMENTS_PROVIDER_URL=provider.url, DOCUMENTS_PROVIDER_TOKEN=TOKEN)
    provider.script = [(200, {"reference": "R-7"}, 1.0)]
    with app.app_context():
        document = create_document(tenant_id=2, title="Contract")
        uuid = document.uuid
        forward(uuid)
        step_while_the_provider_answers(provider, delete(Document).where(Document.uuid == uuid))

        assert step() is None  # no retry was scheduled
        [run] = runs_of(uuid)
        unit = the_unit(run)
        assert (run.status, unit["attempts"]) == ("failed", 1)
        assert unit["last_error"] == (
            f"document {uuid} was deleted while the provider took it (its reference: R-7)"
        )
        assert len(provider.requests) == 1


def test_a_4xx_fails_at_once_with_a_domain_message_and_tasks_retry_refuses_the_run(docs, provider):
    provider.script = [(422, {"error": "invalid_document"}, 0)]
    document = create_document(tenant_id=3, title="Scan")
    forward(document.uuid)

    step()
    assert step() is None  # no retry was scheduled: the retries stay unspent

    [run] = runs_of(document)
    assert (run.status, run.units_failed) == ("failed", 1)
    unit = the_unit(run)
    assert unit["attempts"] == 1
    assert unit["last_error"] == "provider rejected the document: HTTP 422 (invalid_document)"
    assert len(provider.requests) == 1
    db.session.refresh(document)
    assert document.status == "rejected"
    assert ledger.runs.count_events("tasks.unit.failed", run) == 1

    result = docs.test_cli_runner().invoke(args=["tasks", "retry", run.uuid])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: run {run.uuid} is a single tracked job ({FORWARD}); its retries belong "
        "to its own queue, not to tasks retry"
    )


def test_only_the_final_failure_fails_the_unit_and_every_attempt_is_recorded(docs, provider):
    # The first answer comes too late (timeout), then the provider keeps failing.
    provider.script = [(200, {"reference": "late"}, 2.0)] + [(500, {}, 0)] * 4
    document = create_document(tenant_id=1, title="Contract")
    forward(document.uuid)

    step()
    unit = the_unit(runs_of(document)[0])
    assert (unit["status"], unit["attempts"]) == ("pending", 1)
    assert unit["last_error"] == "provider did not answer within 0.5 s"
    attempts = 1
    while step() is not None:
        attempts += 1
        run = runs_of(document)[0]
        unit = the_unit(run)
        assert unit["attempts"] == attempts
        if attempts < 5:
            assert (run.status, unit["status"]) == ("running", "pending")

    assert attempts == 5  # the first try and Huey's 4 retries
    assert (run.status, unit["status"]) == ("failed", "failed")
    assert unit["last_error"] == "provider unavailable: HTTP 500"
    assert ledger.runs.count_events("tasks.unit.failed", run) == 1
    everything = json.dumps([the_unit(run), run.context])
    assert TOKEN not in everything and "127.0.0.1" not in everything


def test_two_overlapping_dispatches_of_one_document_make_two_runs(docs, provider):
    provider.script = [(200, {"reference": "R-9"}, 0)]
    document = create_document(tenant_id=2, title="Report")
    forward(document.uuid)
    forward(document.uuid)

    step()
    step()

    runs = runs_of(document)
    assert len(runs) == 2
    assert runs[0].context["dispatch_uuid"] != runs[1].context["dispatch_uuid"]
    assert [r.status for r in runs] == ["completed", "completed"]
    assert [the_unit(r)["attempts"] for r in runs] == [1, 1]
    # The provider got the document once: the second dispatch found it forwarded.
    assert len(provider.requests) == 1
    assert db.session.execute(select(Document.status)).scalar_one() == "forwarded"


@pytest.mark.parametrize(
    ("status", "payload", "error", "message"),
    [
        (
            429,
            {"error": "slow_down"},
            ProviderUnavailable,
            "provider unavailable: HTTP 429 (slow_down)",
        ),
        (
            502,
            {"error": "see http://x/?token=1"},
            ProviderUnavailable,
            "provider unavailable: HTTP 502",
        ),
        (404, {}, ProviderRejected, "provider rejected the document: HTTP 404"),
        (
            200,
            {"no": "reference"},
            ProviderUnavailable,
            "provider answered without a document reference",
        ),
    ],
)
def test_the_client_maps_provider_answers_to_domain_errors(
    provider, status, payload, error, message
):
    provider.script = [(status, payload, 0)]
    client = ProviderClient(provider.url, TOKEN, timeout=2)
    with pytest.raises(error) as raised:
        client.submit("d-1", "t", "b")
    assert str(raised.value) == message


@pytest.mark.parametrize("reference", [None, "", "   ", {}, [], True, {"id": "R-1"}])
def test_an_answer_whose_reference_is_no_reference_is_not_taken_for_one(provider, reference):
    # {"reference": null} was taken as the reference "None", and the document counted
    # as forwarded under it.
    provider.script = [(200, {"reference": reference}, 0)]
    client = ProviderClient(provider.url, TOKEN, timeout=2)
    with pytest.raises(ProviderUnavailable) as raised:
        client.submit("d-1", "t", "b")
    assert str(raised.value) == "provider answered without a document reference"


def test_a_reference_is_kept_as_text_fit_for_its_column(provider):
    provider.script = [(200, {"reference": 12345}, 0), (200, {"reference": " R-\x001\n"}, 0)]
    client = ProviderClient(provider.url, TOKEN, timeout=2)
    assert client.submit("d-1", "t", "b") == "12345"
    assert client.submit("d-2", "t", "b") == "R-1"


def test_the_client_says_when_the_provider_is_unreachable_or_not_configured():
    with pytest.raises(
        ProviderUnavailable, match=r"^provider unreachable \(ConnectionRefusedError\)$"
    ):
        ProviderClient("http://127.0.0.1:9", TOKEN, timeout=2).submit("d-1", "t", "b")
    with pytest.raises(ProviderNotConfigured, match="not configured"):
        ProviderClient("", TOKEN).submit("d-1", "t", "b")


def test_a_cancelled_dispatch_pruned_before_its_retry_is_never_resurrected(docs, provider):
    # The first attempt fails and Huey schedules a retry; the operator cancels the run and
    # prunes it before the retry fires. The retry found no run under its dispatch key and
    # opened a new one: the cancelled job ran again and the provider got the document.
    provider.script = [(503, {}, 0), (200, {"reference": "R-2"}, 0)]
    document = create_document(tenant_id=4, title="Claim")
    forward(document.uuid)
    first = step()
    assert first["retry_in"] is not None
    [run] = runs_of(document)
    cli = docs.test_cli_runner()
    assert cli.invoke(args=["tasks", "cancel", run.uuid]).exit_code == 0
    pruned = cli.invoke(args=["tasks", "prune", "--days", "0"])
    assert pruned.output.startswith("pruned 1 run ")
    assert runs_of(document) == []

    retried = step()  # the retry Huey scheduled arrives

    assert retried["id"] == first["id"]
    assert retried["retry_in"] is None
    assert step() is None
    assert runs_of(document) == []
    assert len(provider.requests) == 1
    db.session.refresh(document)
    assert document.status == "received"
