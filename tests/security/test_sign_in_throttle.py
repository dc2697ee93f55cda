"""Sign-in throttling against a real gunicorn: parallel guesses, proxies, lockout as a weapon.

Items 3 and 4 of the security review, and item 3 of the second (strangers spraying
from an operator's known address). The server runs 2 workers x 4 threads, so
sign-ins really race; ``TRUSTED_PROXY_HOPS=1`` makes it trust one proxy, whose
X-Forwarded-For the client sets (``HttpClient.forwarded_for``). The parallel test's
server counts its password checks (``server_hooks``): a throttled answer must have
had none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.security.support import HOOKS, HttpClient
from tests.web.backoffice_support import PASSWORD, VIEW, make_user

pytestmark = pytest.mark.workers

VICTIM = "victim@example.com"
WRONG = "not the password!"
# The documented policy: 5 free failures per account, then blocks of 2 s, 4 s, 8 s…
FREE = 5


def checks_allowed(seconds: float) -> int:
    """How many attempts the policy lets through in ``seconds`` from the first one."""
    allowed, elapsed, block = FREE + 1, 0.0, 2.0
    while elapsed + block <= seconds:
        elapsed += block
        block *= 2
        allowed += 1
    return allowed


@pytest.fixture
def victim(app):
    with app.app_context():
        make_user(VICTIM, VIEW)


def concurrent_sign_ins(port: int, attempts: list[tuple[str, str, str]]) -> tuple[list[int], float]:
    """Sign in with every (address, email, password) at once: the statuses, in order, and
    the moment (``time.monotonic``) the attempts were let go, once every form was fetched."""
    clients = [HttpClient(port, forwarded_for=address) for address, _, _ in attempts]
    tokens = [client.csrf_token() for client in clients]
    statuses: list[int] = [0] * len(attempts)
    released: list[float] = []
    barrier = threading.Barrier(len(attempts), action=lambda: released.append(time.monotonic()))

    def attempt(index: int) -> None:
        _, email, password = attempts[index]
        barrier.wait()
        statuses[index] = clients[index].sign_in(email, password, tokens[index]).status

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(attempts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return statuses, released[0]


def password_checks(path: Path) -> int:
    """How many passwords the server compared (``server_hooks`` writes a line for each)."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_thirty_parallel_wrong_passwords_get_six_checks_and_the_right_one_waits(
    gunicorn, victim, tmp_path
):
    checks = tmp_path / "password-checks"
    port = gunicorn.start(**HOOKS, TRUSTED_PROXY_HOPS="1", PASSWORD_CHECKS_FILE=str(checks))
    attempts = [(f"198.51.100.{i}", VICTIM, WRONG) for i in range(1, 31)]
    right = HttpClient(port, forwarded_for="198.51.100.99")
    token = right.csrf_token()

    statuses, started = concurrent_sign_ins(port, attempts)
    then = right.sign_in(VICTIM, PASSWORD, token).status
    seconds = time.monotonic() - started

    # A checked password answers 200 (refused) or 302 (signed in); a throttled one 429.
    assert statuses.count(200) + statuses.count(429) == 30, statuses
    checked = statuses.count(200) + (then == 302)
    # No 429 had its password compared, the right one's included: each attempt is
    # counted before its password is checked, so a correct password never gets past a
    # block (it signs in only if admitted, once the block ran out).
    assert password_checks(checks) == checked, (statuses, then)
    assert FREE + 1 <= checked <= checks_allowed(seconds), (statuses, then, seconds)


def until_throttled(attempt: Callable[[int], int], most: int = 30) -> list[int]:
    """Statuses of ``attempt(0)``, ``attempt(1)``… up to the first 429 (or ``most`` of them).

    Polling for the block, rather than expecting it at a fixed attempt, keeps a test
    true on a slow machine where a 2-second block may end between two attempts.
    """
    statuses: list[int] = []
    while len(statuses) < most and 429 not in statuses:
        statuses.append(attempt(len(statuses)))
    return statuses


def test_behind_a_proxy_guesses_from_one_address_lock_out_no_other_address(gunicorn, app):
    with app.app_context():
        make_user("ops@example.com", VIEW)
    port = gunicorn.start(TRUSTED_PROXY_HOPS="1")
    # The attacker puts a forged address first; the proxy appends the real one.
    attacker = HttpClient(port, forwarded_for="192.0.2.55, 203.0.113.66")

    statuses = until_throttled(lambda i: attacker.sign_in(f"guess{i}@example.com", WRONG).status)

    assert statuses[:21] == [200] * 21 and statuses[-1] == 429, statuses
    operator = HttpClient(port, forwarded_for="192.0.2.55, 203.0.113.10")
    assert operator.sign_in("ops@example.com", PASSWORD).status == 302
    assert operator.get("/backoffice/task-runs").status == 200


def test_without_a_trusted_proxy_a_clients_forwarded_for_is_ignored(gunicorn, app):
    port = gunicorn.start()  # TRUSTED_PROXY_HOPS=0, the default

    statuses = until_throttled(
        lambda i: (
            HttpClient(port, forwarded_for=f"192.0.2.{i}")
            .sign_in(f"guess{i}@example.com", WRONG)
            .status
        )
    )

    # Every email is new: only the address could block, and every request came from
    # 127.0.0.1, whatever the header claimed.
    assert statuses[:21] == [200] * 21 and statuses[-1] == 429, statuses


def test_guessing_an_operators_password_does_not_lock_them_out_where_they_signed_in_before(
    gunicorn, victim
):
    port = gunicorn.start(TRUSTED_PROXY_HOPS="1")
    office = HttpClient(port, forwarded_for="203.0.113.10")
    assert office.sign_in(VICTIM, PASSWORD).status == 302
    office.post_form("/logout", {"csrf_token": office.csrf_token("/backoffice/task-runs")})

    guesses = until_throttled(
        lambda i: HttpClient(port, forwarded_for=f"198.51.100.{i}").sign_in(VICTIM, WRONG).status
    )

    # Elsewhere the account got blocked...
    assert guesses[: FREE + 1] == [200] * (FREE + 1) and guesses[-1] == 429, guesses
    # ...but not where its operator signs in.
    assert HttpClient(port, forwarded_for="203.0.113.10").sign_in(VICTIM, PASSWORD).status == 302


def test_strangers_spraying_from_a_known_address_never_lock_its_operator_out_there(
    gunicorn, victim
):
    port = gunicorn.start(TRUSTED_PROXY_HOPS="1")
    office = HttpClient(port, forwarded_for="203.0.113.10")
    assert office.sign_in(VICTIM, PASSWORD).status == 302
    office.post_form("/logout", {"csrf_token": office.csrf_token("/backoffice/task-runs")})

    # Someone behind the same office address guesses random accounts until the address
    # key blocks: 20 free failures, then 429.
    sprayed = until_throttled(
        lambda i: (
            HttpClient(port, forwarded_for="203.0.113.10")
            .sign_in(f"guess{i}@example.com", WRONG)
            .status
        )
    )
    assert sprayed[:21] == [200] * 21 and sprayed[-1] == 429, sprayed

    # The address key still slows strangers down there...
    stranger = HttpClient(port, forwarded_for="203.0.113.10")
    assert stranger.sign_in("another-guess@example.com", WRONG).status == 429
    # ...but the operator, known there, counts on their own key only, and signs in.
    assert HttpClient(port, forwarded_for="203.0.113.10").sign_in(VICTIM, PASSWORD).status == 302


def test_failures_from_a_known_address_slow_that_address_down(gunicorn, victim):
    port = gunicorn.start(TRUSTED_PROXY_HOPS="1")
    office = HttpClient(port, forwarded_for="203.0.113.10")
    assert office.sign_in(VICTIM, PASSWORD).status == 302

    statuses = until_throttled(
        lambda _: HttpClient(port, forwarded_for="203.0.113.10").sign_in(VICTIM, WRONG).status
    )

    assert statuses[: FREE + 1] == [200] * (FREE + 1) and statuses[-1] == 429, statuses
