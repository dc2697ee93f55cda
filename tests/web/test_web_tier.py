"""The web tier under live streams (SPEC §17, web tier settings; issue 23 item 3).

Against a real gunicorn started with the project's gunicorn.conf.py: one operator's
twenty open streams leave the health check and the run list answering; a stream ends
within seconds of its client leaving, of a sign-out and of a password change, and when
its worker is stopped. In process: the caps per process and per session (a session's
streams counted across web hosts), lapsed leases, admissions racing each other.

The "within 2 s" and "within seconds" bounds are client timeouts of functional checks
(a starved server never answers at all), not measurements.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from contextlib import ExitStack
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import update

from accounts import sessions
from accounts.services import set_password
from database import utcnow
from extensions import db
from harness import process_tree
from live import streams
from live.models import LiveStream
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.live_server import LiveServer
from tests.support import wait_for
from tests.web.backoffice_support import PASSWORD, VIEW, make_user

pytestmark = pytest.mark.workers

EMAIL = "viewer@example.com"
CSRF = re.compile(r'name="csrf_token"[^>]*value="([^"]+)"')
# Streams as in production: long, so only the tier's own rules end them.
LONG_STREAMS = {"LIVE_STREAM_SECONDS": "300", "LIVE_POLL_SECONDS": "0.5"}


@pytest.fixture
def running_run(app) -> str:
    """A viewer, and a run that stays running (nothing consumes its units)."""
    with app.app_context():
        make_user(EMAIL, VIEW)
        run = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit("a")], 100
        ).run_uuid
        db.session.remove()
    return run


@pytest.fixture
def servers(app, tmp_path):
    started: list[LiveServer] = []

    def start(workers: int = 2, **settings: str) -> LiveServer:
        server = LiveServer(app, tmp_path, workers, **{**LONG_STREAMS, **settings})
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def client(server: LiveServer, cookie: str) -> httpx.Client:
    """A client of this session; the cookie is the server's own, so the server's answers
    (a session that gained a CSRF secret) replace it rather than sit beside it."""
    jar = httpx.Cookies()
    jar.set(server.cookie_name, cookie, domain="127.0.0.1", path="/")
    return httpx.Client(base_url=server.url, cookies=jar, timeout=10)


class Opened:
    """A stream held open by its client: its answer, and the one reader of its text (a
    reader let go closes the connection, which is a client leaving)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.status_code = response.status_code
        self.headers = response.headers
        self.text = response.iter_text() if self.status_code == 200 else iter(())

    def until(self, last: str) -> str:
        """What the stream sends up to and including the event ``last`` (or its end)."""
        seen = ""
        for chunk in self.text:
            seen += chunk
            if f"event: {last}\n" in seen:
                break
        return seen


def open_stream(stack: ExitStack, web: httpx.Client, path: str) -> Opened:
    """A stream opened and kept open until ``stack`` closes; its first bytes read if admitted."""
    opened = Opened(stack.enter_context(web.stream("GET", path)))
    if opened.status_code == 200:
        assert next(opened.text).startswith("retry: 2000")
    return opened


def test_twenty_open_streams_of_one_operator_leave_the_health_check_and_run_list_answering(
    servers, running_run
):
    server = servers()
    cookie = server.sign_in(EMAIL, PASSWORD)
    path = f"/backoffice/task-runs/{running_run}/stream"
    with ExitStack() as stack:
        web = stack.enter_context(client(server, cookie))
        opened = [open_stream(stack, web, path) for _ in range(20)]

        # Twenty streams open (or refused): pages and health checks are still answered.
        for _ in range(5):
            assert httpx.get(server.url + "/healthz", timeout=2).status_code == 200
            page = httpx.get(
                server.url + "/backoffice/task-runs",
                cookies={server.cookie_name: cookie},
                timeout=2,
            )
            assert page.status_code == 200 and "Task runs" in page.text
        statuses = [response.status_code for response in opened]
        assert set(statuses) == {200, 429}, statuses
        # At most a session's share of streams; the rest told when to come back.
        assert 1 <= statuses.count(200) <= 6, statuses
        for refused in (r for r in opened if r.status_code == 429):
            assert int(refused.headers["Retry-After"]) >= 1


def test_a_stream_ends_within_seconds_of_its_client_leaving(app, servers, running_run):
    # One stream per session: the next one is admitted only once the first has ended.
    server = servers(LIVE_STREAMS_PER_SESSION="1")
    cookie = server.sign_in(EMAIL, PASSWORD)
    path = f"/backoffice/task-runs/{running_run}/stream"
    with ExitStack() as stack:
        first = open_stream(stack, stack.enter_context(client(server, cookie)), path)
        assert first.status_code == 200
        with client(server, cookie) as web:
            assert web.get(path, timeout=2).status_code == 429
    # The first client has gone, its connection closed: the stream's next keep-alive
    # fails and it ends (without them it would hold its thread for its 300 s).

    def admitted() -> bool:
        with client(server, cookie) as web, web.stream("GET", path) as response:
            return response.status_code == 200

    wait_for(admitted, timeout=20, message="the stream of a client that left to end")
    with app.app_context():
        wait_for(lambda: streams.open_streams() == 0, timeout=20, message="every lease back")


@pytest.mark.parametrize("ending", ["sign-out", "password change"])
def test_a_stream_ends_when_its_session_ends(app, servers, running_run, ending):
    server = servers()
    cookie = server.sign_in(EMAIL, PASSWORD)
    with ExitStack() as stack:
        web = stack.enter_context(client(server, cookie))
        stream = open_stream(stack, web, f"/backoffice/task-runs/{running_run}/stream")
        assert "event: changed" in stream.until("changed")
        if ending == "sign-out":
            token = CSRF.search(web.get("/backoffice/task-runs").text)[1]
            assert web.post("/logout", data={"csrf_token": token}).status_code == 302
        else:
            with app.app_context():
                set_password(EMAIL, "another good password")
                db.session.remove()
        # Read with the client's timeout: a stream that went on would time out here.
        told = stream.until("ended")
    assert told.rstrip().endswith('event: ended\ndata: {"reason": "session"}')


def test_the_course_builders_stream_counts_and_ends_like_the_run_pages(app, servers, running_run):
    from coursebuilder import stages as builder
    from tenancy import services as tenants

    with app.app_context():
        build = builder.start(tenants.create("Acme").id, "Tides", lessons=1, quizzes=0)
        db.session.remove()
    server = servers(LIVE_STREAMS_PER_SESSION="1")
    cookie = server.sign_in(EMAIL, PASSWORD)
    with app.app_context():
        make_user("builder@example.com", "course-builder.runs.view")
    builder_cookie = server.sign_in("builder@example.com", PASSWORD)
    with ExitStack() as stack:
        viewer = stack.enter_context(client(server, cookie))
        run_page = open_stream(stack, viewer, f"/backoffice/task-runs/{running_run}/stream")
        assert run_page.status_code == 200  # another session's share: no bearing on this one
        builds = stack.enter_context(client(server, builder_cookie))
        build_page = open_stream(stack, builds, f"/builder/runs/{build}/stream")
        assert build_page.status_code == 200
        # The builder's one stream is this session's share: a second is refused.
        assert builds.get(f"/builder/runs/{build}/stream", timeout=2).status_code == 429
        token = CSRF.search(builds.get("/builder/runs").text)[1]
        builds.post("/logout", data={"csrf_token": token})
        assert build_page.until("ended").rstrip().endswith('{"reason": "session"}')


def test_a_killed_workers_streams_are_given_back_at_once_to_its_hosts_next_process(
    app, servers, running_run
):
    # An out-of-memory kill or gunicorn's worker timeout: the worker never deletes its
    # leases. Were they left to lapse (30 s), this session, at its one stream, would be
    # refused by the worker that replaces it.
    server = servers(LIVE_STREAMS_PER_SESSION="1", workers=1)
    cookie = server.sign_in(EMAIL, PASSWORD)
    path = f"/backoffice/task-runs/{running_run}/stream"
    (worker,) = process_tree(server.process.pid)[1:]
    with ExitStack() as stack:
        web = stack.enter_context(client(server, cookie))
        assert open_stream(stack, web, path).status_code == 200
        os.kill(worker, signal.SIGKILL)
        wait_for(
            lambda: process_tree(server.process.pid)[1:] not in ([], [worker]),
            timeout=30,
            message="gunicorn's next worker",
        )
        with client(server, cookie) as again:
            opened = open_stream(stack, again, path)
            assert opened.status_code == 200, opened.headers
    with app.app_context():
        wait_for(lambda: streams.open_streams() == 0, timeout=20, message="every lease back")


def test_a_stopping_worker_ends_its_streams_at_once_and_the_server_stops(servers, running_run):
    server = servers()
    cookie = server.sign_in(EMAIL, PASSWORD)
    with ExitStack() as stack:
        stream = open_stream(
            stack,
            stack.enter_context(client(server, cookie)),
            f"/backoffice/task-runs/{running_run}/stream",
        )
        stream.until("changed")
        # A deploy: gunicorn passes SIGTERM on to its workers, gracefully.
        server.process.send_signal(signal.SIGTERM)
        assert stream.until("rest").rstrip().endswith("event: rest\ndata: {}")
    # Its graceful timeout is 30 s: a worker that waited for its streams would take that.
    server.process.wait(timeout=15)
    assert server.process.returncode == 0


# -- the caps, in process ---------------------------------------------------------------


def test_a_process_serves_at_most_its_share_of_streams(make_app):
    app = make_app(LIVE_STREAMS_PER_PROCESS=2, LIVE_STREAMS_PER_SESSION=10)
    with app.test_request_context():
        held = [streams.admit(f"session-{i}") for i in range(2)]
        with pytest.raises(streams.StreamsBusy) as busy:
            streams.admit("session-3")
        assert busy.value.retry_after >= 1
        assert streams.open_streams() == 2  # the refusal took no lease
        held[0].close()
        held[0].close()  # twice is once
        held.append(streams.admit("session-3"))
        for stream in held:
            stream.close()
        assert streams.open_streams() == 0
        assert streams.process_streams(app).open == 0


def test_a_sessions_streams_are_counted_across_web_hosts(make_app):
    host_a = make_app(LIVE_STREAMS_PER_SESSION=3)
    host_b = make_app(LIVE_STREAMS_PER_SESSION=3)
    holder = sessions.digest("one operator's session")
    with host_a.test_request_context():
        on_a = [streams.admit(holder) for _ in range(2)]
    with host_b.test_request_context():
        on_b = streams.admit(holder)
        with pytest.raises(streams.StreamsBusy):
            streams.admit(holder)
        other = streams.admit(sessions.digest("another session"))
        on_a[0].close()
        again = streams.admit(holder)
    for stream in (*on_a, on_b, other, again):
        stream.close()


def test_a_stream_gives_its_slot_back_before_it_says_rest(make_app):
    # A page opens its next stream the moment it reads "rest": were the lease still held,
    # a session at its cap would be refused and the page would say "Reconnecting…".
    app = make_app(LIVE_STREAMS_PER_SESSION=1, LIVE_STREAMS_PER_PROCESS=1)
    with app.test_request_context():
        stream = streams.admit("a session")
        text = streams.follow(
            stream, lambda: "same", lambda _: ([], False), lambda: True, seconds=0, poll=0
        )
        said = next(chunk for chunk in text if "event: rest" in chunk)
        assert said.startswith("event: rest")
        streams.admit("a session").close()  # the page's next stream, before this one ends
        assert list(text) == []
        assert streams.open_streams() == 0
        assert streams.process_streams(app).open == 0


def test_a_lease_whose_process_died_lapses(make_app):
    app = make_app(LIVE_STREAMS_PER_SESSION=1)
    with app.test_request_context():
        streams.admit("a session", now=utcnow())  # its process dies: never closed
        with pytest.raises(streams.StreamsBusy):
            streams.admit("a session")
        later = utcnow() + timedelta(seconds=streams.LEASE_SECONDS + 1)
        streams.admit("a session", now=later).close()


def test_a_lease_is_dropped_at_once_only_when_its_own_host_finds_its_process_gone(make_app):
    app = make_app(LIVE_STREAMS_PER_SESSION=1)
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    with app.test_request_context():
        for host, pid, dropped in [
            ("another host", gone.pid, False),  # its pids are not this host's to judge
            (streams.this_host(), os.getppid(), False),  # alive
            (None, gone.pid, False),  # written before leases named their process
            (streams.this_host(), 0, False),  # no process's id: only the lapse judges it
            (streams.this_host(), gone.pid, True),
        ]:
            held = streams.admit("a session")
            db.session.execute(update(LiveStream).values(host=host, pid=pid))
            db.session.commit()
            if dropped:
                streams.admit("a session").close()
            else:
                with pytest.raises(streams.StreamsBusy):
                    streams.admit("a session")
            held.close()
        assert streams.open_streams() == 0
        assert streams.process_streams(app).open == 0


def test_admissions_racing_for_one_session_never_exceed_its_cap(make_app):
    app = make_app(LIVE_STREAMS_PER_SESSION=3, LIVE_STREAMS_PER_PROCESS=20)
    admitted, refused, failed = [], [], []
    start = threading.Barrier(8)

    def open_one() -> None:
        with app.test_request_context():
            start.wait()
            try:
                admitted.append(streams.admit("racing session"))
            except streams.StreamsBusy:
                refused.append(1)
            except Exception as exc:  # the assertion below names it
                failed.append(exc)
            finally:
                db.session.remove()

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failed == []
    assert (len(admitted), len(refused)) == (3, 5)
    with app.app_context():
        assert streams.open_streams("racing session") == 3
        for stream in admitted:
            stream.close()
        assert streams.open_streams() == 0
