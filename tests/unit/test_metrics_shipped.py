"""What ships with ``GET /metrics`` holds: the Prometheus rules pass ``promtool``'s check
and their own unit tests, a real scrape passes ``promtool check metrics``, and the
rules and the Grafana dashboard name only families the endpoint exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from database import utcnow
from taskrunner import delivery, events, runner
from taskrunner.ledger import ledger
from tasks.presence import Board, Presence
from tests.conftest import IN_CI
from tests.web.backoffice_support import finished_run

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "taskledger.json"
TOKEN = "promtool-check"
# The ledger's alert rules (SPEC §17, "Alerts"), as Prometheus alerting rules.
LEDGER_RULES = {
    "TaskledgerRunFailed",
    "TaskledgerStaleUnits",
    "TaskledgerScheduleMissed",
    "TaskledgerDeliveriesParked",
    "TaskledgerQueueLongWait",
    "TaskledgerConsumerLost",
}
# What Prometheus itself knows of its targets, besides what the endpoint exports.
PROMETHEUS_OWN = {"up"}
FAMILY_NAME = re.compile(r"\b(taskledger_[a-z0-9_]+)")
HISTOGRAM_SERIES = re.compile(r"_(bucket|count|sum)$")


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool is missing (apt-get install prometheus)"
        if IN_CI:
            pytest.fail(reason + " (CI=true: the rules are checked)")
        pytest.skip(reason)
    return subprocess.run(
        [found, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def scraped(make_app, controlled) -> str:
    """A real scrape of a ledger in which every family has samples."""
    app = make_app(
        METRICS_TOKEN=TOKEN, TASK_RUNNER_EVENT_RETRY_SECONDS=0, TASK_RUNNER_EVENT_MAX_ATTEMPTS=2
    )
    with app.app_context():
        events.subscribe("tasks.run.failed", lambda event: 1 / 0)
        finished_run(controlled.type(), ["a", "b"], {"b": "unit b broke"})
        delivery.relay(older_than_seconds=0)  # the refusing subscriber's delivery parks
        runner.start(controlled.type(), {"units": 3}, "test")
        Presence(app, ["tasks"], "process", 2, Board(2)).beat()
        slot = utcnow().replace(microsecond=0) - timedelta(minutes=5)
        ledger.schedules.claim("taskrunner.detect_stuck", slot, "test:1")
        ledger.schedules.finish("taskrunner.detect_stuck", slot, None, None)
    response = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return response.get_data(as_text=True)


def exported(body: str) -> dict[str, str]:
    """Family name -> its type, of every family in a scrape that has samples."""
    return {f.name: f.type for f in text_string_to_metric_families(body) if f.samples}


def names_in(expression: str, families: dict[str, str]) -> set[str]:
    """The families an expression names (a histogram's series named by their family)."""
    found = set()
    for name in FAMILY_NAME.findall(expression):
        base = HISTOGRAM_SERIES.sub("", name)
        found.add(base if families.get(base) == "histogram" else name)
    return found


def test_a_real_scrape_passes_promtool_check_metrics(scraped):
    families = exported(scraped)
    assert len(families) >= 16  # every family has samples in this ledger

    checked = promtool("check", "metrics", stdin=scraped)

    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_the_alerting_rules_pass_promtool_check_rules():
    checked = promtool("check", "rules", str(RULES))

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_alerting_rules_pass_their_unit_tests():
    tested = promtool("test", "rules", str(RULE_TESTS))

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rule_unit_tests_cover_every_rule():
    rules = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert rules >= LEDGER_RULES
    assert tested == rules


def test_every_rule_names_only_exported_families_and_is_documented(scraped):
    families = exported(scraped)
    operations = (ROOT / "docs" / "operations.md").read_text()
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]

    for rule in rules:
        named = names_in(rule["expr"], families) | (
            PROMETHEUS_OWN & set(re.findall(r"\b[a-z_]+\b", rule["expr"]))
        )
        assert named, rule["alert"]
        assert named <= set(families) | PROMETHEUS_OWN, rule["alert"]
        assert f"`{rule['alert']}`" in operations, f"docs/operations.md says nothing of {rule}"


def dashboard_expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(where, expression) of every query of the dashboard: panels, rows, variables."""
    found = []

    def walk(panels: list[dict]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((panel["title"], target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"${variable['name']}", variable["definition"]))
    return found


def test_the_dashboard_loads_and_every_expression_names_an_exported_family(scraped):
    families = exported(scraped)
    dashboard = json.loads(DASHBOARD.read_text())

    assert dashboard["uid"] == "taskledger" and dashboard["title"] == "Taskledger"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    expressions = dashboard_expressions(dashboard)
    assert len(expressions) >= 15
    for where, expression in expressions:
        named = names_in(expression, families)
        assert named, f"{where}: {expression} names no family"
        assert named <= set(families), f"{where}: {named - set(families)} is not exported"
    # Every panel queries the data source the importer picks, never a fixed one.
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_the_family_checks_see_a_family_that_is_not_exported(scraped):
    families = exported(scraped)
    assert names_in("rate(taskledger_units_total[5m])", families) == {"taskledger_units_total"}
    assert names_in(
        "histogram_quantile(0.9, taskledger_run_duration_seconds_bucket)", families
    ) == {"taskledger_run_duration_seconds"}
    assert not names_in("up == 0", families)
