"""A consumer's worker deaths on the workers page, and the unit a dead worker was running
linked to the consumer and pid that ran it (issue 24, item 6). Real consumer processes:
one of its process workers is SIGKILLed mid-unit; Huey's consumer restarts it."""

from __future__ import annotations

import os
import signal

import pytest

from extensions import db
from taskrunner import console, operations, runner
from tests.support import wait_for
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in

pytestmark = pytest.mark.workers

BEAT = {"CONSUMER_HEARTBEAT_SECONDS": "0.3"}


def consumers_now() -> list[dict]:
    db.session.rollback()
    return console.consumers()["consumers"]


def test_a_killed_worker_is_counted_with_the_unit_it_was_running(ctx, consumers):
    ctx.config["CONSUMER_HEARTBEAT_SECONDS"] = 0.3
    consumers.start("tasks", workers=2, **BEAT)
    handle = runner.start("diagnostics.probe", {"units": 2, "sleep_ms": 8000}, "test")
    running = wait_for(
        lambda: [r for c in consumers_now() for r in c["running"] if r["unit"]], timeout=30
    )
    victim = running[0]

    os.kill(victim["pid"], signal.SIGKILL)

    [me] = wait_for(
        lambda: [c for c in consumers_now() if c["worker_deaths"]], timeout=20, interval=0.2
    )
    assert me["worker_deaths"] == 1 and me["state"] == "live"
    [death] = me["deaths"]
    assert death["pid"] == victim["pid"]
    assert death["unit"]["unit_key"] == victim["unit"]["unit_key"]
    assert death["unit"]["run_uuid"] == handle.uuid
    # The consumer restarted the worker: two workers again, neither the dead one.
    wait_for(lambda: consumers_now()[0]["workers"] == 2, timeout=10)

    run = operations.find_run(handle.uuid)
    detail = operations.unit_detail(run, victim["unit"]["unit_key"])
    assert detail.ran_by == {
        "consumer": me["id"],
        "host": me["host"],
        "pid": victim["pid"],
        "at": death["at"],
        "died": True,
    }

    viewer = make_user("viewer@example.com", VIEW)
    web = browser(ctx)
    sign_in(web, viewer)
    workers = web.get("/backoffice/workers")
    deaths = workers.html.select_one(f"[id='consumer-{me['id']}'] details.deaths")
    assert f"worker pid {victim['pid']} died running" in deaths.get_text(" ", strip=True)
    assert deaths.select_one("a")["href"].endswith(f"/units/{victim['unit']['unit_key']}")
    unit_page = web.get(deaths.select_one("a")["href"])
    ran_by = unit_page.html.select_one(".ran-by")
    assert f"worker pid {victim['pid']} of consumer {me['id']}" in ran_by.get_text(" ", strip=True)
    assert ran_by.select_one("a")["href"] == f"/backoffice/workers#consumer-{me['id']}"
    assert "worker died" in ran_by.get_text()
