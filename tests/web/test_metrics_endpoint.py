"""``GET /metrics``: Prometheus' key is the bearer token, the answer its text format, with
bounded labels only (never a tenant, a unit key or a run)."""

from __future__ import annotations

import hashlib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from blueprints.metrics import exposition
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from taskrunner.registry import registry
from tests.factories import ControlledTask
from tests.web.backoffice_support import browser, finished_run, sign_in

TOKEN = "scrape-token-3f9c0a1b"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
# SPEC §17: the families every deployment exports, at least.
REQUIRED = {
    "taskledger_units": {"type", "status"},
    "taskledger_runs": {"type", "status"},
    "taskledger_queue_oldest_pending_seconds": {"queue"},
    "taskledger_stale_units": {"reason"},
    "taskledger_consumers": {"state"},
    "taskledger_parked_deliveries": set(),
    "taskledger_schedule_last_success_timestamp_seconds": {"schedule"},
    "taskledger_alert_episodes_open": {"rule"},
}
BOUNDED_LABELS = {"type", "status", "queue", "reason", "schedule", "state", "rule", "le"}


@pytest.fixture
def metrics_app(make_app):
    return make_app(METRICS_TOKEN=TOKEN)


def families(body: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(body)}


def test_without_a_token_configured_the_endpoint_does_not_exist(app):
    client = app.test_client()
    unknown = client.get("/no-such-page")

    for headers in ({}, BEARER, {"Authorization": "Bearer "}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 404
        assert response.data == unknown.data  # as any unknown path: nothing to probe


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        f"Basic {TOKEN}",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        "Bearer " + TOKEN.upper(),
        "Bearer \xff\xfe\x00 not a token",
        "Bearer " + "A" * 8000,
    ],
)
def test_a_request_without_the_right_bearer_token_is_a_401(metrics_app, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}

    response = metrics_app.test_client().get("/metrics", headers=headers)

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "taskledger_" not in response.get_data(as_text=True)


def test_the_token_is_compared_in_constant_time_on_digests(metrics_app, monkeypatch):
    from blueprints import metrics as endpoint

    compared: list[tuple[bytes, bytes]] = []
    real = endpoint.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(endpoint.hmac, "compare_digest", spy)
    client = metrics_app.test_client()

    assert client.get("/metrics", headers={"Authorization": "Bearer short"}).status_code == 401
    assert client.get("/metrics", headers=BEARER).status_code == 200

    expected = hashlib.sha256(TOKEN.encode()).digest()
    assert compared == [(hashlib.sha256(b"short").digest(), expected), (expected, expected)]


def test_a_token_beyond_ascii_is_compared_on_its_utf8_bytes(make_app):
    app = make_app(METRICS_TOKEN="jeton-à-clé")
    client = app.test_client()
    # What a client sends on the wire is UTF-8; WSGI hands header bytes over as Latin-1.
    wire = "Bearer " + "jeton-à-clé".encode().decode("latin-1")

    assert client.get("/metrics", headers={"Authorization": wire}).status_code == 200
    assert (
        client.get("/metrics", headers={"Authorization": "Bearer jeton-a-cle"}).status_code == 401
    )


def test_a_signed_in_operator_still_needs_the_token(metrics_app, people):
    web = browser(metrics_app)
    sign_in(web, people["manager"])

    web.get("/metrics", status=401)
    assert web.get("/metrics", headers=BEARER, status=200).text.startswith("# HELP")


def test_the_scrape_is_text_exposition_with_every_required_family(metrics_app):
    response = metrics_app.test_client().get("/metrics", headers=BEARER)

    assert response.status_code == 200
    assert response.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert response.headers["Cache-Control"] == "no-store"
    assert "Set-Cookie" not in response.headers
    found = families(response.get_data(as_text=True))
    assert set(found) == set(exposition.FAMILIES)
    for name, labels in REQUIRED.items():
        assert found[name].type == "gauge"
        for sample in found[name].samples:
            assert set(sample.labels) == labels, (name, sample)
    assert found["taskledger_run_duration_seconds"].type == "histogram"


def test_prometheus_asking_for_openmetrics_gets_it(metrics_app):
    accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    response = metrics_app.test_client().get("/metrics", headers={**BEARER, "Accept": accept})

    assert response.status_code == 200
    assert response.content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert response.get_data(as_text=True).endswith("# EOF\n")


@pytest.mark.parametrize(
    "accept",
    [
        "application/openmetrics-text;version=garbage",
        "text/plain;version=garbage",
        "text/plain; version=1.x",
    ],
)
def test_an_accept_header_the_client_library_cannot_read_gets_the_text_format(metrics_app, accept):
    response = metrics_app.test_client().get("/metrics", headers={**BEARER, "Accept": accept})

    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    assert set(families(response.get_data(as_text=True))) == set(exposition.FAMILIES)


def test_labels_are_bounded_and_name_no_tenant_unit_or_run(metrics_app, controlled):
    with metrics_app.app_context():
        run_uuid = finished_run(
            controlled.type(),
            ["unit-key-SECRET-1", "unit-key-SECRET-2"],
            {"unit-key-SECRET-2": "tenant 424242 broke with card 4111 1111 1111 1111"},
            tenants={"unit-key-SECRET-1": 424242, "unit-key-SECRET-2": 515151},
        )

    body = metrics_app.test_client().get("/metrics", headers=BEARER).get_data(as_text=True)

    for leak in ("SECRET", "424242", "515151", "4111", run_uuid, run_uuid[:8], "broke"):
        assert leak not in body
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            assert set(sample.labels) <= BOUNDED_LABELS, sample
    found = families(body)
    units = {
        (s.labels["type"], s.labels["status"]): s.value for s in found["taskledger_units"].samples
    }
    assert units[(controlled.type(), "completed")] == 1
    assert units[(controlled.type(), "failed")] == 1


def test_only_get_is_answered(metrics_app):
    client = metrics_app.test_client()
    assert client.post("/metrics", headers=BEARER).status_code == 405
    assert client.head("/metrics", headers=BEARER).status_code == 200


def test_two_web_hosts_answer_a_scrape_alike(make_app, controlled):
    """Nothing is counted in a process: a host that did nothing reads what another did."""
    busy, idle = make_app(METRICS_TOKEN=TOKEN), make_app(METRICS_TOKEN=TOKEN)
    with busy.app_context():
        finished_run(controlled.type(), ["a", "b", "c"], {"c": "unit c broke"})

    bodies = [
        app.test_client().get("/metrics", headers=BEARER).get_data(as_text=True)
        for app in (busy, idle)
    ]

    # The queues' oldest pending ages are read off each host's clock: none waits here.
    assert bodies[0] == bodies[1]
    assert f'taskledger_units{{status="failed",type="{controlled.type()}"}} 1.0' in bodies[1]


def test_a_type_routed_to_no_queue_does_not_say_the_queue_backend_is_down(make_app, caplog):
    """A type naming a queue that does not exist ("io" written "i0"; such a route or
    definition is refused at start, this one is let in past the check) leaves its units
    pending on a queue no backend holds: its jobs waiting there are none, and the backend
    that answered for every real queue is up (its critical alert would say Redis is down)."""
    app = make_app(METRICS_TOKEN=TOKEN)
    with app.app_context():
        registry.register(ControlledTask("tests.typo", queue="i0"))
    with app.app_context():
        ledger.transitions.create_run("tests.typo", {}, "test", [TaskUnit("a")], 10)
        db.session.remove()

    found = families(app.test_client().get("/metrics", headers=BEARER).get_data(as_text=True))

    def by_queue(name: str) -> dict[str, float]:
        return {s.labels["queue"]: s.value for s in found[name].samples}

    assert found["taskledger_queue_backend_up"].samples[0].value == 1
    assert by_queue("taskledger_queue_pending_units")["i0"] == 1
    assert by_queue("taskledger_queue_waiting_jobs")["i0"] == 0
    assert not [r for r in caplog.records if "could not be counted" in r.message]
