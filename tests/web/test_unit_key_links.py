"""Every link to a unit leads to that unit, whatever its key holds (second security
review, item 4).

Unit keys are opaque: a key such as ``../../<another run's uuid>`` used to render links
that a browser resolved to another run (or, for ``..``, to the run list), and a unit
keyed ``a/b`` or ``.`` could not be reached from the interface at all. A key is now one
path segment in every URL (``blueprints/unit_keys.py``). The test renders every page
that links to units -- the run page (its failed units, its events, its units list),
the unit page, the error groups, a key's history, the search, the stale units, and the
way back from a retry -- resolves each link
as a browser does (dot segments, ``%2e`` spelled ones included) and follows it: it must
land on that very unit's page, of the right run.
"""

from __future__ import annotations

import posixpath
import re
from datetime import timedelta
from urllib.parse import quote, unquote, urljoin, urlsplit

import pytest
from sqlalchemy import update

from blueprints.unit_keys import key_of, segment
from database import utcnow
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun, TaskRunUnit
from tests.web.backoffice_support import (
    MANAGE,
    VIEW,
    Operator,
    browser,
    finished_run,
    make_user,
    sign_in,
)

DECOY = "00000000-0000-4000-8000-00000000dec0"
KEYS = [
    f"../../{DECOY}",
    "a/b",
    "..",
    ".",
    "x/../../y",
    "/leading",
    "trailing/",
    "q?x=1#frag&more",
    "~2F tilde",
    "%2F..%2Fpercent",
    "ünï/ключ",
    "plain-7",
]
DOT_SEGMENT = {".", "%2e"}
DOUBLE_DOT_SEGMENT = {"..", ".%2e", "%2e.", "%2e%2e"}


def browser_resolves(base: str, href: str) -> str:
    """The path and query a browser requests for ``href`` on page ``base``.

    RFC 3986 resolution, then the URL Standard's rule that ``%2e`` spells a dot too.
    """
    joined = urlsplit(urljoin(base, href))
    segments: list[str] = []
    for part in joined.path.split("/")[1:]:
        if part.lower() in DOT_SEGMENT:
            continue
        if part.lower() in DOUBLE_DOT_SEGMENT:
            segments = segments[:-1]
            continue
        segments.append(part)
    path = "/" + "/".join(segments)
    return path + (f"?{joined.query}" if joined.query else "")


@pytest.fixture
def world(app):
    """A finished run (each key failed with a reason of its own), a running run whose units
    are stale, and the decoy run whose uuid one key names."""
    reasons = {key: f"refused {chr(ord('a') + i) * 3}" for i, key in enumerate(KEYS)}
    with app.app_context():
        decoy = finished_run("tests.decoy", ["d1"], {})
        db.session.execute(update(TaskRun).where(TaskRun.uuid == decoy).values(uuid=DECOY))
        db.session.commit()
        failed = finished_run("diagnostics.probe", KEYS, reasons)
        dispatch = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit(k) for k in KEYS], 100
        )
        for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, len(KEYS) + 1):
            ledger.transitions.claim(unit_id, dispatch.token)
        db.session.execute(
            update(TaskRunUnit)
            .where(TaskRunUnit.task_run_id == dispatch.run_id)
            .values(heartbeat_at=utcnow() - timedelta(hours=1))
        )
        db.session.commit()
        make_user("manager@example.com", VIEW, MANAGE)
        db.session.remove()
    return {"failed": failed, "stale": dispatch.run_uuid}


@pytest.fixture
def web(app, world):
    client = browser(app)
    sign_in(client, Operator("manager@example.com"))
    client.shown = {}  # unit pages already fetched: target -> what they showed
    return client


def unit_links(page, key: str) -> list[str]:
    """The hrefs of the links whose text is ``key`` (how every page links a unit)."""
    return [a["href"] for a in page.html.select("a[href]") if a.get_text(strip=True) == key]


def unit_page(web, target: str) -> tuple[int, str | None, str | None]:
    """(status, the unit key in its heading, its crumbs) of a unit page; pages link the same
    unit several times, and reading changes nothing: each target is fetched once per test."""
    if target not in web.shown:
        answer = web.get(target, expect_errors=True)
        if answer.status_int != 200:
            web.shown[target] = (answer.status_int, None, None)
        else:
            heading = answer.html.select_one("h1 .mono").get_text()
            crumbs = answer.html.select_one("nav.crumbs").get_text(" ", strip=True)
            web.shown[target] = (200, heading, crumbs)
    return web.shown[target]


def lands_on_the_unit(web, page_url: str, href: str, run_uuid: str, key: str) -> str | None:
    """Follow ``href`` as a browser would; None if it shows ``key`` of ``run_uuid``, else
    what went wrong."""
    target = browser_resolves(f"http://localhost{page_url}", href)
    if not target.startswith(f"/backoffice/task-runs/{run_uuid}/units/"):
        return f"{href} resolves to {target}"
    status, heading, crumbs = unit_page(web, target)
    if status != 200:
        return f"{href} → {target}: {status}"
    if heading != key or run_uuid[:8] not in crumbs:
        return f"{href} → {target} shows {heading!r} ({crumbs})"
    return None


def test_every_link_to_a_unit_lands_on_that_unit_whatever_its_key(web, world):
    failed, stale = world["failed"], world["stale"]
    pages = {
        f"/backoffice/task-runs/{failed}": failed,
        f"/backoffice/task-runs/{failed}?unit_status=failed": failed,
        f"/backoffice/task-runs/{failed}/errors": failed,
        f"/backoffice/task-runs/{stale}": stale,
        "/backoffice/stale-units": stale,
    }
    wrong, followed = [], 0
    for url, run_uuid in pages.items():
        page = web.get(url)
        for key in KEYS:
            hrefs = unit_links(page, key)
            assert hrefs, f"{url} has no link to {key!r}"
            for href in hrefs:
                followed += 1
                if (problem := lands_on_the_unit(web, url, href, run_uuid, key)) is not None:
                    wrong.append(f"{url}: {problem}")

    assert wrong == []
    assert followed >= len(pages) * len(KEYS)


def test_a_keys_history_search_and_unit_page_link_back_to_it(web, world):
    runs = (world["failed"], world["stale"])
    wrong = []
    for key in KEYS:
        history_url = f"/backoffice/units?key={quote(key, safe='')}"
        search_url = f"/backoffice/search?q={quote(key, safe='')}"
        history, search = web.get(history_url), web.get(search_url)
        landed = []
        for url, page in ((history_url, history), (search_url, search)):
            for href in unit_links(page, key):
                # Each link leads to the unit of one of the two runs that have the key.
                reached = [r for r in runs if lands_on_the_unit(web, url, href, r, key) is None]
                if not reached:
                    wrong.append(f"{url}: {href} leads to no unit {key!r}")
                landed += reached
        if set(landed) != set(runs):
            wrong.append(f"{key!r}: the history and the search reach {landed}")

        # The unit page's "across runs" link is the same history: both runs' units again.
        unit_url = browser_resolves("http://localhost/", unit_links(history, key)[0])
        [history_link] = [
            a["href"]
            for a in web.get(unit_url).html.select("a[href]")
            if "/backoffice/units?" in a["href"]
        ]
        back = web.get(browser_resolves(f"http://localhost{unit_url}", history_link))
        if len(unit_links(back, key)) != 2:
            wrong.append(f"{key!r}: the unit page's history link shows {back.request.url}")

    assert wrong == []


@pytest.mark.parametrize("key", [f"../../{DECOY}", "..", "a/b"])
def test_retrying_one_unit_from_its_page_comes_back_to_that_unit(web, world, key):
    failed = world["failed"]
    page = web.get(f"/backoffice/task-runs/{failed}")
    unit_url = browser_resolves(
        f"http://localhost/backoffice/task-runs/{failed}", unit_links(page, key)[0]
    )
    unit_page = web.get(unit_url)

    [form] = [f for f in unit_page.forms.values() if "retry-unit" in f.fields]
    confirm = form.submit("retry-unit")
    back = confirm.forms["confirm"].submit()

    assert back.status_int == 302
    target = browser_resolves(f"http://localhost{unit_url}", back.headers["Location"])
    assert target == unit_url
    assert web.get(target).html.select_one("h1 .mono").get_text() == key


def test_the_json_api_has_no_link_that_carries_a_unit_key(web, world):
    # The JSON API names units by key in its bodies (and takes a key as a query
    # parameter), never in a path: there is no unit link of its to follow.
    paths = web.get("/api/v1/backoffice/openapi.json").json["paths"]
    assert {param for path in paths for param in re.findall(r"{(\w+)}", path)} <= {
        "run_uuid",
        "name",
    }
    body = web.get(f"/api/v1/backoffice/task-runs/{world['failed']}").json
    assert not re.search(r"/units/", str(body))


def test_a_key_made_of_dots_or_slashes_has_a_segment_of_its_own():
    for key in KEYS:
        built = segment(key)
        assert "/" not in built and posixpath.basename(built) == built
        assert built.lower() not in DOT_SEGMENT | DOUBLE_DOT_SEGMENT
        assert key_of(unquote(built)) == key
