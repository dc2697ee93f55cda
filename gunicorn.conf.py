"""gunicorn's settings for the web tier (SPEC §17, web tier settings).

gunicorn reads this file from its working directory by default: the README, the systemd
unit (``deploy/systemd/taskledger-web.service``), the tests' and the benchmarks' servers
(``harness.WebServer``, ``bench/cluster_hosts.py``) all start it from the project root.
A host changes the numbers through its environment (``WEB_BIND``, ``WEB_WORKERS``,
``WEB_THREADS``); an option given on gunicorn's command line wins over both.

Capacity (docs/deploy.md, "The web tier"): ``workers × threads`` requests are served at
once. An open live stream holds one thread for as long as it lasts, so at most
``LIVE_STREAMS_PER_PROCESS`` threads of a process ever stream and the others always serve
pages; one operator session holds at most ``LIVE_STREAMS_PER_SESSION`` streams on every
process and host together. A stream over either cap is answered 429 with Retry-After.
With the defaults a host serves 4 × 8 = 32 requests at once, of which at most 4 × 4 = 16
are streams, and always has 16 threads for pages.
"""

from __future__ import annotations

import os
import signal

from blueprints.problems import SERVER_REQUEST_LINE_LIMIT
from config import ConfigError, whole_number
from security.echo import error_line

try:
    workers = whole_number("WEB_WORKERS", 4, minimum=1)
    # Threads, not one request per process: a stream must never hold a whole worker.
    threads = whole_number("WEB_THREADS", 8, minimum=1)
except ConfigError as exc:  # one line and stop, as every entry point does
    raise SystemExit(error_line(exc.format_message())) from None
wsgi_app = "wsgi:app"
bind = [os.environ.get("WEB_BIND", "127.0.0.1:8000")]
worker_class = "gthread"
# The threaded worker's main loop reports to the arbiter while its threads stream, so a
# long stream never looks like a hung worker; a request stuck this long does.
timeout = 60
# A stopping worker ends its streams at their next poll (post_worker_init), then waits
# this long at most for the pages it is answering.
graceful_timeout = 30
keepalive = 5
# Above the app's own limit: an over-long URL under /api/ is the app's 414 problem body.
limit_request_line = SERVER_REQUEST_LINE_LIMIT
accesslog = "-"
# No runtime control socket (gunicornc): nothing here uses it, and every server of a host
# would share its one default path (the tests run several at once).
control_socket_disable = True


def on_starting(server) -> None:
    """Refuse settings under which streams could take every thread of a worker."""
    from gunicorn.workers.gthread import ThreadWorker

    from config import Config

    try:
        cap = Config().LIVE_STREAMS_PER_PROCESS
    except ConfigError as exc:
        # The master reads the settings first: one line and stop, as every entry point does.
        raise SystemExit(error_line(exc.format_message())) from None
    cfg = server.cfg
    if not issubclass(cfg.worker_class, ThreadWorker) or cfg.threads <= cap:
        raise RuntimeError(
            f"the web tier needs the gthread worker with more threads than "
            f"LIVE_STREAMS_PER_PROCESS ({cap}) so that pages keep a thread while streams "
            f"are open; got worker class {cfg.worker_class_str!r} with {cfg.threads} threads"
        )


def post_worker_init(worker) -> None:
    """On SIGTERM (a deploy, a restart) this worker's streams end at their next poll, and
    their pages reconnect to a worker that stays, instead of holding this one for the
    whole graceful timeout."""
    from live.streams import stop_streams

    app = worker.wsgi
    graceful_exit = worker.handle_exit

    def handle_exit(signum, frame) -> None:
        stop_streams(app)
        graceful_exit(signum, frame)

    signal.signal(signal.SIGTERM, handle_exit)
    signal.siginterrupt(signal.SIGTERM, False)
