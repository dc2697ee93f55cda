"""Sessions end on sign-out and on a password change; the CSRF secret does not survive them.

Items 2 and 9 of the security review, through the real sign-in and sign-out forms.
"""

from __future__ import annotations

import calendar
import time
from datetime import timedelta
from http.cookies import SimpleCookie

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from config import MAX_PERIOD_HOURS, Config, ConfigError
from tests.unit.test_cli_refusals import database_refusing_inserts_into
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in

RUNS = "/backoffice/task-runs"


@pytest.fixture
def viewer(app):
    with app.app_context():
        return make_user("viewer@example.com", VIEW)


def session_cookie(web) -> str:
    return web.cookies["session"]


def replay(app, cookie: str, address: str = "192.0.2.200"):
    """A client elsewhere holding a copy of the cookie."""
    thief = browser(app, address=address)
    thief.set_cookie("session", cookie)
    return thief


def sign_out(web) -> None:
    form = web.get(RUNS).forms[0]
    assert form.action == "/logout"
    form.submit(status=302)


def test_a_session_cookie_copied_before_sign_out_is_dead_after_it(app, viewer):
    web = browser(app)
    sign_in(web, viewer).follow()
    stolen = session_cookie(web)
    replay(app, stolen).get(RUNS, status=200)

    sign_out(web)

    replay(app, stolen).get(RUNS, status=302)
    replay(app, stolen, address=web.extra_environ["REMOTE_ADDR"]).get(RUNS, status=302)


def test_a_password_change_ends_every_session_of_that_operator(app, viewer, cli):
    laptop, phone = browser(app), browser(app, address="198.51.100.2")
    sign_in(laptop, viewer)
    sign_in(phone, viewer)

    result = cli.invoke(
        args=["users", "set-password", viewer.email], input="a brand new password\n"
    )

    assert result.exit_code == 0, result.output
    laptop.get(RUNS, status=302)
    phone.get(RUNS, status=302)
    again = browser(app)
    sign_in(again, type(viewer)(viewer.email, "a brand new password")).follow(status=200)


def test_a_password_change_whose_sessions_cannot_be_ended_changes_no_password(app, viewer, cli):
    # The password was committed first and the sessions ended in a second transaction: a
    # refusal there left a stolen session alive under a password its owner believed changed.
    laptop = browser(app)
    sign_in(laptop, viewer)

    with database_refusing_inserts_into(app, "operator_sessions", verb="DELETE"):
        result = cli.invoke(
            args=["users", "set-password", viewer.email], input="a brand new password\n"
        )

    assert result.exit_code == 1  # the refusal, one line through the CLI's excepthook
    laptop.get(RUNS, status=200)
    sign_in(browser(app), viewer).follow(status=200)  # the password it had


def test_signing_out_ends_only_that_session(app, viewer):
    laptop, phone = browser(app), browser(app, address="198.51.100.2")
    sign_in(laptop, viewer)
    sign_in(phone, viewer)

    sign_out(laptop)

    laptop.get(RUNS, status=302)
    phone.get(RUNS, status=200)


def test_sessions_last_hours_not_a_month(app, viewer, monkeypatch):
    web = browser(app)
    response = sign_in(web, viewer)
    [header] = [h for h in response.headers.getall("Set-Cookie") if h.startswith("session=")]
    expires = SimpleCookie(header)["session"]["expires"]
    lifetime = calendar.timegm(time.strptime(expires, "%a, %d %b %Y %H:%M:%S GMT")) - time.time()
    assert 11 * 3600 < lifetime <= 12 * 3600 + 60

    monkeypatch.setenv("SESSION_LIFETIME_HOURS", "2")
    assert Config().PERMANENT_SESSION_LIFETIME == timedelta(hours=2)


@pytest.mark.parametrize("hours", ["100000000", "1e12"])
def test_a_session_lifetime_no_date_can_hold_is_refused_at_start(monkeypatch, hours):
    # 1e8 hours ends a sign-in's session past year 9999 (every sign-in a 500); 1e12 is
    # beyond what a timedelta holds (a traceback at start).
    monkeypatch.setenv("SESSION_LIFETIME_HOURS", hours)

    with pytest.raises(ConfigError, match="^SESSION_LIFETIME_HOURS must be at most"):
        Config()


def test_the_longest_session_lifetime_still_signs_in(make_app):
    app = make_app(PERMANENT_SESSION_LIFETIME=timedelta(hours=MAX_PERIOD_HOURS))
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)

    assert sign_in(web, viewer).location == RUNS
    web.get(RUNS, status=200)


def test_a_session_past_its_lifetime_signs_nobody_in(make_app, base_config):
    app = make_app(PERMANENT_SESSION_LIFETIME=timedelta(seconds=1))
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    assert sign_in(web, viewer).location == RUNS
    # The server-side session expires, whatever the cookie's own timestamp says.
    deadline = time.monotonic() + 10
    while web.get(RUNS, expect_errors=True).status_int == 200:
        assert time.monotonic() < deadline, "the session outlived its lifetime"
        time.sleep(0.2)


def csrf_of(page) -> str:
    return page.forms[0]["csrf_token"].value


def test_a_csrf_token_from_before_sign_in_is_refused_after_it(app, viewer):
    web = browser(app)
    before = csrf_of(web.get("/login"))
    sign_in(web, viewer)

    web.post("/logout", {"csrf_token": before}, status=400)
    web.get(RUNS, status=200)


def test_a_csrf_token_from_before_sign_out_is_refused_after_it(app, viewer):
    web = browser(app)
    sign_in(web, viewer)
    signed_in = csrf_of(web.get(RUNS))
    sign_out(web)

    page = web.get("/login")
    form = page.forms["login"]
    form["email"], form["password"], form["csrf_token"] = viewer.email, viewer.password, signed_in
    form.submit(status=400)
    web.get(RUNS, status=302)


class TwoHoursAgo(TimestampSigner):
    def get_timestamp(self) -> int:
        return super().get_timestamp() - 7200


class SignedTwoHoursAgo(URLSafeTimedSerializer):
    default_signer = TwoHoursAgo


def test_csrf_tokens_expire(app, viewer, monkeypatch):
    web = browser(app)
    sign_in(web, viewer)
    # A page rendered two hours ago: its form's token was signed then.
    with monkeypatch.context() as patch:
        patch.setattr("flask_wtf.csrf.URLSafeTimedSerializer", SignedTwoHoursAgo)
        old_form = web.get(RUNS).forms[0]

    old_form.submit(status=400)
    web.get(RUNS).forms[0].submit(status=302)


def test_signing_in_again_from_the_same_browser_ends_the_session_before(app, viewer):
    web = browser(app)
    sign_in(web, viewer).follow()
    before = session_cookie(web)
    # The sign-in form posted again (a second tab, the back button): the page asked for it
    # is shown at once to a signed-in browser, so its token is any page's.
    token = csrf_of(web.get(RUNS))
    web.post(
        "/login",
        {"email": viewer.email, "password": viewer.password, "csrf_token": token},
        status=302,
    )
    web.get(RUNS, status=200)

    replay(app, before).get(RUNS, status=302)
