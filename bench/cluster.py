"""``make cluster``: web and consumers on separate network hosts, under the faults of a
real deployment, on PostgreSQL + Redis and on PostgreSQL + PostgresHuey.

The hosts (``bench.cluster_hosts``) are network namespaces on one machine: ``db``
(PostgreSQL and Redis), ``web-a`` and ``web-b`` (gunicorn), ``c1`` (consumers with the
periodic tasks), ``c2`` and ``c3`` (consumers). The driver works from an ``operator``
host, and everything an operator does goes through the web hosts
(``bench.operator_client``): signed in on A, watching and retrying from B's pages.

On each queue driver:

1. a 5,000-unit ``diagnostics.effects`` run across the three consumer hosts;
2. a deploy on c3: SIGTERM, its running units handed back, c3 back *with* periodic
   tasks, so two periodic hosts overlap for a while;
3. the periodic host c1 dies (SIGKILL); c3's scheduler carries on; c1's lost units are
   retried from the stale-units page; a replacement c1 joins without periodic tasks;
4. c2's link goes down for longer than three heartbeat intervals: its units are found
   ``worker lost``, retried, finished by c1 and c3; the link comes back, c2's late
   completions change nothing and its consumers carry on without a restart;
5. a course build with concurrency 4 runs across the three hosts while web host B's
   page streams it live.

Then it checks the run (completed once, every unit completed, one
``tasks.run.completed``), the side effects against the attempts, the periodic slots,
the web hosts' 5xx and the consumer processes, and prints a timeline.

Usage: ``python -m bench.cluster [--driver redis|postgres]… [--units N]``; writes
``bench/results/cluster.md`` (the timelines and the figures) and exits 1 when a
guarantee broke. Needs root, iproute2 and the PostgreSQL and Redis server binaries.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.cluster_hosts import Cluster, require_cluster_prerequisites
from bench.netns import exit_on_sigterm
from bench.operator_client import OperatorClient
from database import utcnow
from harness import ROOT, build_app
from tasks.routing import QUEUES

DRIVERS = {"redis": "PostgreSQL + Redis", "postgres": "PostgreSQL + PostgresHuey"}
RESULTS = ROOT / "bench" / "results" / "cluster.md"
OPERATOR = ("operator@cluster.test", "cluster operator password")
INTRUDER = "intruder@cluster.test"
PERIODIC = ("taskrunner.detect_stuck", "taskrunner.relay_events")
CRASH_MARKERS = ("died!", "died, restarting", "Error in consumer")
LATE = "completed under a superseded dispatch token"
LATE_UNIT = re.compile(r"Unit (\S+) of run (\S+) completed under a superseded dispatch token")
HANDED_BACK = re.compile(r"Unit (\d+) handed back on shutdown as a new job")
SLOT_HANDED_BACK = re.compile(r"Periodic \S+, slot \S+: handed back on shutdown")
ACCESS_STATUS = re.compile(r'" (\d{3}) ')
UNIT_DONE = re.compile(r"run_unit: .* executed in")
UNIT_JOB = re.compile(r"run_unit: (\S+)")


@dataclass
class ClusterPlan:
    units: int = 5000
    sleep_ms: int = 60  # long enough for every fault to land before the run ends on a busy machine
    deploy_at: float = 0.15  # progress of the run when c3 is stopped for a deploy
    kill_at: float = 0.35  # ... when the periodic host c1 dies
    partition_at: float = 0.6  # ... when c2's link goes down (a cut may be repeated)
    overlap_slots: int = 3  # sweep slots both periodic hosts enqueued before c1 may die
    followup_units: int = 300  # a small run after the heal, to see c2 take work again
    build: dict[str, Any] = field(
        default_factory=lambda: {"lessons": 8, "quizzes": 8, "concurrency": 4, "latency_ms": 250}
    )
    timeout: float = 900.0


class Timeline:
    """What happened, in seconds from the start of the round; printed as it goes."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.time()
        self.entries: list[tuple[float, str]] = []

    def mark(self, event: str) -> float:
        now = time.time()
        self.entries.append((now - self.started, event))
        print(f"  [{self.label}] {now - self.started:7.1f} s  {event}", flush=True)
        return now

    def at(self, prefix: str) -> float | None:
        return next((t for t, event in self.entries if event.startswith(prefix)), None)

    def text(self) -> str:
        return "\n".join(f"{t:7.1f} s  {event}" for t, event in self.entries)


@dataclass
class ClusterReport:
    driver: str
    timeline: Timeline
    seconds: float = 0.0
    run_uuid: str = ""
    status: str = ""
    units: int = 0
    unit_rows: int = 0
    completed: int = 0  # unit rows completed
    snapshot_completed: int = 0  # the run's own count, written when it closed
    run_completed_events: int = 0
    run_failed_events: int = 0
    effect_rows: int = 0
    executions: int = 0
    attempts: int = 0
    units_over_attempts: int = 0  # units whose effect ran more often than they were attempted
    # Units whose effect ran more often than their completed attempts (the recorded one and
    # the late ones ignored) plus the attempts known lost (cut off by the SIGKILL, or
    # interrupted by the deploy and handed back): "key: effects > allowance (why)".
    units_over_allowance: list[str] = field(default_factory=list)
    extra_effects: dict[str, int] = field(default_factory=dict)  # by the reason allowing them
    run_stream_changes: int = 0  # distinct markers web host B's run page stream sent
    run_stream_finished: str = ""  # the status its finished event carried
    run_stream_error: str = ""
    main_run_hosts: dict[str, int] = field(default_factory=dict)  # units run per host
    throttled_across_hosts: bool = False
    session_across_hosts: bool = False
    handed_back: int = 0
    deploys: int = 0  # SIGTERMs to c3 until one caught it running units
    handed_back_retried: list[str] = field(default_factory=list)  # must stay empty
    stale_after_deploy: int = -1
    lost_after_kill: int = 0  # units found worker lost after c1's SIGKILL
    lost_jobs_redispatched: int = 0
    partitioned_stale: int = 0  # c2's units found worker lost during the partition
    partition_held: int = 0  # of those, held by c2's open transactions: left by the retry
    partition_seconds: float = 0.0
    lost_after_seconds: float = 0.0  # three heartbeat intervals
    partition_retried: int = 0  # units retried during the cut (the stale ones not held)
    partition_retried_hosts: dict[str, str] = field(default_factory=dict)  # key: who completed
    partition_retried_elsewhere: bool = False  # every one completed by c1 or c3
    # Every one completed in the ledger while c2 was still cut off: by c1 or c3.
    partition_retried_done_in_cut: bool = False
    # For a retried unit no log shows completed: its token and every line naming its jobs.
    partition_unattributed: list[str] = field(default_factory=list)
    late_completions: int = 0
    c2_same_processes: bool = False
    c2_units_after_heal: int = 0
    periodic: dict[str, dict[str, Any]] = field(default_factory=dict)
    build_status: str = ""
    build_changes: int = 0
    build_stages_seen: list[str] = field(default_factory=list)
    build_hosts: dict[str, int] = field(default_factory=dict)
    server_errors: dict[str, int] = field(default_factory=dict)
    peak_connections: int = 0  # to PostgreSQL, sampled while the run went on
    processes: list[str] = field(default_factory=list)
    unclean: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    failed_units: list[str] = field(default_factory=list)  # key, tries, error, its log lines

    def violations(self) -> list[str]:
        """Every promise the round broke (empty: none)."""
        found = []
        if self.status != "completed" or self.completed != self.units:
            found.append(f"run ended {self.status!r} with {self.completed}/{self.units} completed")
        if self.unit_rows != self.units or self.snapshot_completed != self.completed:
            found.append(
                f"{self.unit_rows} unit rows for {self.units} units; the run's snapshot "
                f"says {self.snapshot_completed} completed, the rows {self.completed}"
            )
        if (self.run_completed_events, self.run_failed_events) != (1, 0):
            found.append(
                f"tasks.run.completed ×{self.run_completed_events}, "
                f"tasks.run.failed ×{self.run_failed_events}"
            )
        if self.effect_rows != self.units:
            found.append(f"{self.effect_rows} side-effect rows for {self.units} units")
        if self.units_over_attempts:
            found.append(f"{self.units_over_attempts} units ran their effect more than attempted")
        found += [
            f"side effect beyond its attempts: {entry}" for entry in self.units_over_allowance
        ]
        if not (self.throttled_across_hosts and self.session_across_hosts):
            found.append("sign-in throttle or session not shared by the web hosts")
        if self.run_stream_finished != "completed" or self.run_stream_changes < 2:
            found.append(
                f"B's run stream: {self.run_stream_changes} changes, finished "
                f"{self.run_stream_finished!r} {self.run_stream_error}".rstrip()
            )
        if len([n for n in self.main_run_hosts.values() if n]) < 3:
            found.append(f"the run's units ran on {self.main_run_hosts} (want all three hosts)")
        if self.handed_back < 1:
            found.append(f"the deploy handed nothing back ({self.deploys} SIGTERMs)")
        if self.handed_back_retried:
            found.append(f"handed-back units needed a retry: {self.handed_back_retried}")
        if self.stale_after_deploy != 0:
            found.append(f"{self.stale_after_deploy} stale units after the deploy (want none)")
        if not self.partitioned_stale:
            found.append("the partition left no unit worker lost")
        if self.partition_seconds <= self.lost_after_seconds:
            found.append(
                f"the cut lasted {self.partition_seconds:.1f} s, not more than three "
                f"heartbeat intervals ({self.lost_after_seconds:g} s)"
            )
        if not (self.partition_retried and self.partition_retried_elsewhere):
            found.append(
                f"{self.partition_retried} units retried during the cut, completed by "
                f"{self.partition_retried_hosts} (want c1 or c3 for each)"
            )
            found += self.partition_unattributed
        if not (self.late_completions or self.partition_held):
            found.append("the partitioned host neither completed late nor held a unit")
        if not (self.c2_same_processes and self.c2_units_after_heal):
            found.append("c2's consumers did not take work again after the heal")
        for name, summary in self.periodic.items():
            if summary["repeated"]:
                found.append(f"{name}: {summary['repeated']} slots ran twice")
            if summary["outside_faults"]:
                found.append(
                    f"{name}: slots missed or claimed without a run away from the faults: "
                    f"{summary['outside_faults']}"
                )
            if not summary["skipped_in_overlap"] or not summary["after_kill"]:
                found.append(f"{name}: no overlap seen or no slot run after the takeover")
        for fault, slots in self.periodic_lost_per_fault().items():
            if len(slots) > QUEUES["default"].workers:
                found.append(f"more slots lost to {fault} than its default workers: {slots}")
        if self.build_status != "completed" or self.build_changes < 4:
            found.append(f"build {self.build_status!r}, {self.build_changes} live changes seen")
        if len([n for n in self.build_hosts.values() if n]) < 3:
            found.append(f"build steps ran on {self.build_hosts} (want all three hosts)")
        if any(self.server_errors.values()):
            found.append(f"5xx answers: {self.server_errors}")
        found += [f"not cleanly stopped: {entry}" for entry in self.unclean]
        found += [f"consumer crash: {entry}" for entry in self.crashes]
        found += [f"unit not completed: {entry}" for entry in self.failed_units]
        return found

    def periodic_lost_per_fault(self) -> dict[str, list[str]]:
        """Every periodic slot lost to each fault, all tasks together."""
        lost: dict[str, list[str]] = {}
        for name, summary in self.periodic.items():
            for fault, slots in summary.get("lost_to_faults", {}).items():
                lost.setdefault(fault, []).extend(f"{name} {slot}" for slot in slots)
        return lost

    def table(self) -> str:
        rows = [
            ("queue driver", DRIVERS[self.driver]),
            ("round", f"{self.seconds:.0f} s"),
            ("run", f"{self.run_uuid} {self.status}, {self.completed:,} of {self.units:,}"),
            ("tasks.run.completed / .failed", f"{self.run_completed_events} / "
             f"{self.run_failed_events}"),
            ("side effects", f"{self.executions:,} in {self.effect_rows:,} rows; "
             f"{self.attempts:,} attempts; beyond one per unit: {self.extra_effects}; units "
             f"beyond their completed and lost attempts: {len(self.units_over_allowance)}"),
            ("run page stream on B", f"{self.run_stream_changes} changes, finished "
             f"{self.run_stream_finished!r}"),
            ("units of the run per host", str(self.main_run_hosts)),
            ("deploy of c3 (SIGTERM)", f"{self.handed_back} units handed back "
             f"({self.deploys} SIGTERMs), retried afterwards: {len(self.handed_back_retried)}, "
             f"stale afterwards: {self.stale_after_deploy}"),
            ("c1 killed (SIGKILL)", f"{self.lost_after_kill} units worker lost, retried; "
             f"{self.lost_jobs_redispatched} lost jobs re-dispatched"),
            ("c2 partitioned", f"{self.partition_seconds:.1f} s (lost after "
             f"{self.lost_after_seconds:g} s), {self.partitioned_stale} units worker lost "
             f"({self.partition_held} held by c2, {self.partition_retried} retried, completed "
             f"by {sorted(set(self.partition_retried_hosts.values()))}); "
             f"{self.late_completions} late completions ignored"),
            ("c2 after the heal", f"same processes: {self.c2_same_processes}, "
             f"{self.c2_units_after_heal} units taken"),
            *[(name, f"{s['claims']} consecutive slots of {s['period']} s claimed, "
              f"{s['runs']} ran ({s['hosts']}); lost to faults: {s['lost_to_faults'] or 'none'}; "
              f"{s['skipped']} duplicate enqueues skipped ({s['skipped_in_overlap']} in the "
              f"overlap), {s['after_kill']} slots after c1 died")
              for name, s in self.periodic.items()],
            ("course build", f"{self.build_status}, {self.build_changes} live changes on B, "
             f"stages {', '.join(self.build_stages_seen)}; steps per host {self.build_hosts}"),
            ("sessions / throttles across hosts", f"{self.session_across_hosts} / "
             f"{self.throttled_across_hosts}"),
            ("5xx per web host", str(self.server_errors)),
            ("PostgreSQL connections, peak", str(self.peak_connections)),
            ("processes", "; ".join(self.processes)),
            *[("unit not completed", entry) for entry in self.failed_units],
            *[("retried unit no log shows run", e) for e in self.partition_unattributed],
        ]  # fmt: skip
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


class ClusterScenario:
    """One round of the scenario on one queue driver, on an up cluster."""

    def __init__(self, cluster: Cluster, plan: ClusterPlan, driver: str) -> None:
        self.cluster = cluster
        self.plan = plan
        self.driver = driver
        self.timeline = Timeline(driver)
        self.report = ClusterReport(driver, self.timeline, units=plan.units)
        self.client = OperatorClient(cluster.web_addresses())
        self.app: Any = None
        self.first_process = len(cluster.processes)
        self.batch = ""
        self.overlap_marks: dict[int, int] = {}
        self.kill_time: datetime | None = None
        self.cuts: list[tuple[datetime, datetime]] = []  # c2's cuts, link down to link up
        self.killed_at = 0.0
        # Kept apart: each retry allows its own units a different extra effect.
        self.kill_retried_keys: list[str] = []
        self.partition_retried_keys: list[str] = []
        self.redispatched_keys: list[str] = []
        self.handed_back_ids: list[int] = []
        self.follower: threading.Thread | None = None
        self.c2_pid = 0
        self.heal_offset = 0
        self.partitioned: Any = None

    # -- the round -----------------------------------------------------------------------

    def execute(self) -> ClusterReport:
        started = time.monotonic()
        try:
            self.boot()
            self.operator_signs_in()
            run_uuid = self.start_run()
            self.follow_run_live(run_uuid)
            self.drive(run_uuid)
            self.follower.join(timeout=60)
            self.after_the_heal_and_the_build()
            self.collect(run_uuid)
        finally:
            self.stop()
            self.report.seconds = time.monotonic() - started
        return self.report

    def boot(self) -> None:
        cluster = self.cluster
        cluster.use_driver(self.driver)
        folder = cluster.folder / "operator" / self.driver
        self.app = build_app(
            cluster.config() | {"INSTANCE_PATH": str(folder), "LOG_FILE": str(folder / "log")}
        )
        with self.app.app_context():
            from accounts.permissions import PERMISSIONS
            from accounts.services import create_user
            from extensions import db
            from tenancy.models import Tenant

            for huey in self.app.extensions["queues"].all().values():
                huey.flush()  # Redis is shared by the rounds
            create_user(OPERATOR[0], OPERATOR[1], list(PERMISSIONS))
            db.session.add(Tenant(id=1, name="Cluster tenant"))
            db.session.commit()
            db.session.remove()
        for name in cluster.web:
            cluster.start_web(name)
        cluster.start_consumers("c1", periodic=True)
        cluster.start_consumers("c2", periodic=False)
        cluster.start_consumers("c3", periodic=False)
        self._wait(self._web_up, 120, "both web hosts to answer")
        self._wait(lambda: self._consumers_started(self.first_process) >= 12, 180, "consumers")
        self.timeline.mark("hosts up: db, web-a, web-b, c1 (periodic tasks), c2, c3")

    def operator_signs_in(self) -> None:
        client = self.client
        for host in ("A", "A", "A", "B", "B", "B"):
            client.sign_in(host, INTRUDER, "a wrong password")
        # Six failures across two hosts: the next attempt is throttled, on either host.
        self.report.throttled_across_hosts = client.sign_in("A", INTRUDER, "x").status == 429
        answer = client.sign_in("A", *OPERATOR)
        runs_on_b = client.get("B", "/backoffice/task-runs")
        self.report.session_across_hosts = answer.status == 302 and runs_on_b.status == 200
        self.timeline.mark("operator signed in on A; B shows the run list; throttle shared")

    def start_run(self) -> str:
        from diagnostics.effects import TYPE
        from taskrunner import runner

        context = {"units": self.plan.units, "batch": uuid.uuid4().hex}
        context["sleep_ms"] = self.plan.sleep_ms
        with self.app.app_context():
            handle = runner.start(TYPE, context, "cluster")
        self.batch = context["batch"]
        self.report.run_uuid = handle.uuid
        self.timeline.mark(f"run {handle.uuid[:8]} of {self.plan.units:,} units dispatched")
        return handle.uuid

    # -- the faults, driven by what the operator sees on web host B -----------------------

    def drive(self, run_uuid: str) -> None:
        plan, report = self.plan, self.report
        phase = "deploy"
        deadline = time.monotonic() + plan.timeout
        idle_since: float | None = None
        while time.monotonic() < deadline:
            view = self.watch_run(run_uuid)
            units = view["units"]
            report.peak_connections = max(report.peak_connections, self._connections())
            if view["status"] != "running":
                self.timeline.mark(f"run {view['status']}")
                return
            progress = (units["completed"] + units["failed"] + units["skipped"]) / units["total"]
            if phase == "deploy" and progress >= plan.deploy_at:
                self.deploy_c3()
                phase = "overlap"
            elif phase == "overlap" and self._overlap_seen() and progress >= plan.kill_at:
                report.stale_after_deploy = units["stale"]
                self.kill_c1()
                phase = "lost"
            elif phase == "lost" and units["stale"]:
                self.kill_retried_keys = self.retry_stale("c1's units worker lost")
                report.lost_after_kill = len(self.kill_retried_keys)
                phase = "partition"
            elif phase == "lost" and time.monotonic() - self.killed_at > self._lost_after() + 5:
                self.timeline.mark("no unit of c1 was running when it died")
                phase = "partition"
            elif phase == "partition" and progress >= plan.partition_at:
                self.partition_c2()
                phase = "finish"
            elif phase == "finish":
                idle_since = self._redispatch_lost_jobs(run_uuid, units, idle_since)
            time.sleep(0.5)
        raise TimeoutError(f"run {run_uuid} not completed after {plan.timeout:g} s")

    def follow_run_live(self, run_uuid: str) -> None:
        """Web host B's run page, followed live for the whole run (signed in on A): its
        stream's change events and its finished event, in a thread of the operator's."""
        report = self.report

        def follow() -> None:
            markers = set()
            try:
                for event in self.client.run_stream("B", run_uuid, timeout=self.plan.timeout):
                    if event["event"] == "changed":
                        markers.add(event["data"]["marker"])
                        report.run_stream_changes = len(markers)
                    elif event["event"] == "finished":
                        report.run_stream_finished = event["data"]["status"]
            except Exception as exc:  # the finding, reported with the round
                report.run_stream_error = repr(exc)

        # A new thread starts in this thread's network namespace (the operator's).
        self.follower = threading.Thread(target=follow, name="run-stream-B", daemon=True)
        self.follower.start()

    def watch_run(self, run_uuid: str) -> dict:
        """The operator's view of the run, from web host B: the JSON API, and the run page
        (whose live stream ``follow_run_live`` follows meanwhile)."""
        page = self.client.get("B", f"/backoffice/task-runs/{run_uuid}")
        if page.status != 200:
            raise AssertionError(f"B: run page answered {page.status}")
        return self.client.run("B", run_uuid)

    def deploy_c3(self, attempts: int = 6) -> None:
        """SIGTERM to c3 while it runs units, until one stop hands units back.

        The SIGTERM goes when c3's log shows a unit job started and not finished; a 60 ms
        unit may still settle before the signal lands (nothing to hand back), and then c3
        comes back without periodic tasks and is stopped again, at most ``attempts`` times.
        """
        cluster, report = self.cluster, self.report
        for attempt in range(1, attempts + 1):
            c3 = cluster.live(cluster.consumers["c3"])
            self._wait(lambda entry=c3: self._units_in_flight(entry), 60, "c3 to run a unit")
            self.timeline.mark("deploy: SIGTERM to c3's consumers, a unit job in flight")
            code = cluster.terminate(c3)
            report.deploys += 1
            log = c3.log_text()
            handed = [int(unit_id) for unit_id in HANDED_BACK.findall(log)]
            self.handed_back_ids += handed
            report.handed_back += len(handed)
            slots = len(SLOT_HANDED_BACK.findall(log))
            self.timeline.mark(
                f"c3 stopped (exit {code}): {log.count('Received exit signal')} jobs "
                f"interrupted, {len(handed)} units handed back (the others had settled), "
                f"{slots} periodic slots handed back"
            )
            last = bool(handed) or attempt == attempts
            if last:
                self.overlap_marks = self._log_marks()
            cluster.start_consumers("c3", periodic=last)
            if last:
                break  # the overlap phase waits for c3's scheduler; the run goes on meanwhile
            self._wait(lambda: self._consumers_started(len(cluster.processes) - 1) >= 4, 180, "c3")
            self.timeline.mark("nothing handed back: c3 back without periodic tasks, again")
        self.timeline.mark("c3 restarts with periodic tasks: c1 and c3 both schedule them")

    def _units_in_flight(self, entry: Any) -> bool:
        """Whether the last unit jobs ``entry`` logged include one started, not finished."""
        started: set[str] = set()
        for line in entry.log_text().splitlines()[-200:]:
            match = UNIT_JOB.search(line)
            if match is None:
                continue
            if "Executing " in line:
                started.add(match.group(1))
            else:  # "executed in", "did not finish", an exception: it is over
                started.discard(match.group(1))
        return bool(started)

    def _overlap_seen(self) -> bool:
        """c3's scheduler enqueues the sweeps too, and some slots were enqueued twice."""
        c3 = self.cluster.live(self.cluster.consumers["c3"]).log_text()
        scheduling = c3.count(
            "Enqueueing periodic task taskrunner.periodic.taskrunner.detect_stuck"
        )
        skipped = re.findall(
            r"Periodic taskrunner.detect_stuck, slot \S+: skipped",
            self._logs_since(self.overlap_marks),
        )
        return min(scheduling, len(skipped)) >= self.plan.overlap_slots

    def kill_c1(self) -> None:
        cluster = self.cluster
        overlap = self._logs_since(self.overlap_marks)
        for name in PERIODIC:
            skipped = re.findall(rf"Periodic {name}, slot \S+: skipped", overlap)
            self.report.periodic[name] = {"skipped_in_overlap": len(skipped)}
        self.kill_time = utcnow()
        cluster.kill(cluster.live(cluster.consumers["c1"]))
        self.killed_at = time.monotonic()
        self.timeline.mark("periodic host c1 killed (SIGKILL); c3's scheduler goes on alone")
        cluster.start_consumers("c1", periodic=False)
        self.timeline.mark("a replacement c1 starts, without periodic tasks")

    def retry_stale(self, what: str) -> list[str]:
        """Retry the stale units B shows, from its page through A; their keys."""
        stale = self.client.stale_units("B")
        reasons = Counter(unit["stale_reason"] for unit in stale)
        self.timeline.mark(f"stale detected on B: {what} ({dict(reasons)})")
        message = self.client.retry_stale(page_host="B", action_host="A")
        self.timeline.mark(f"retried from B's page, posted to A: “{message}”")
        return [unit["unit_key"] for unit in stale]

    def partition_c2(self, attempts: int = 12) -> None:
        """Cut c2 off until its units are found lost, retried and finished elsewhere.

        A cut that catches c2 between units (in the queue read or the gate, where a unit
        is still pending) leaves nothing worker lost. A unit of c2's is one still running
        a moment after the cut, when the other hosts' 60 ms units have moved on. A unit
        whose row c2's open transaction holds (cut between its statement and its commit)
        is left by the retry; it finishes when c2 is back. When a cut found no unit, or
        only held ones, the link comes back and c2 is cut again once it has completed a
        unit since (its connections caught up), at most ``attempts`` times.
        """
        cluster, report = self.cluster, self.report
        c2 = cluster.consumers["c2"]
        self.c2_pid = cluster.live(c2).process.pid
        report.lost_after_seconds = self._lost_after()
        healed_at = None
        for attempt in range(1, attempts + 1):
            if healed_at is not None:
                self._within(lambda at=healed_at: UNIT_DONE.search(self._log_after("c2", at)), 30)
            # A unit another host is slow to heartbeat for (a starved worker) is not c2's.
            seen_before = self._lost_units()
            cut = self.timeline.mark("partition: c2's link down")
            cut_at = utcnow()
            cluster.net.partition(c2)
            self.partitioned = c2
            found = bool(self._still_running(1.5)) and self._within(
                lambda seen=seen_before: self._lost_units() - seen, self._lost_after() + 4
            )
            if found:
                keys = self.retry_stale("c2's units worker lost")
                held = self._lost_units() & set(keys)
                report.partitioned_stale += len(keys)
                report.partition_held += len(held)
                self.partition_retried_keys += [key for key in keys if key not in held]
                if held:
                    self.timeline.mark(f"{len(held)} units held by c2's open transactions: left")
            if self.partition_retried_keys or attempt == attempts:
                break
            healed_at = self._log_size("c2")
            cluster.net.heal(c2)
            self.cuts.append((cut_at, utcnow()))
            self.partitioned = None
            self.timeline.mark("no unit of c2's retried at this cut: link up, cut again")
        retried = self.partition_retried_keys
        report.partition_retried = len(retried)
        # The retried jobs queue behind the rest of the run; c2 stays cut off while they
        # wait (within its dead-peer time), and who completed them is read from the logs.
        if retried and self._within(lambda: self._all_completed(retried), 60):
            report.partition_retried_done_in_cut = True
            self.timeline.mark(f"the {len(retried)} retried units finished on c1 and c3")
        else:
            self.timeline.mark("the retried units still queue: c2 comes back meanwhile")
        self.heal_offset = cluster.live(c2).log.stat().st_size
        cluster.net.heal(c2)
        self.cuts.append((cut_at, utcnow()))
        self.partitioned = None
        report.partition_seconds = self.timeline.mark("healed: c2's link up") - cut

    def _lost_units(self) -> set[str]:
        """Keys of the units B shows ``worker lost``."""
        stale = self.client.stale_units("B")
        return {unit["unit_key"] for unit in stale if unit["stale_reason"] == "worker lost"}

    def _redispatch_lost_jobs(
        self, run_uuid: str, units: dict[str, int], idle_since: float | None
    ) -> float | None:
        """Jobs a killed worker took from the queue and never started are lost (Huey is at
        most once): when nothing runs and the queue is empty, the operator retries them."""
        if units["running"] or not units["pending"] or self._queued():
            return None
        if idle_since is None:
            return time.monotonic()
        if time.monotonic() - idle_since < 3:
            return idle_since
        self.report.lost_jobs_redispatched += units["pending"]
        self.redispatched_keys += self._unit_keys("pending")
        message = self.client.retry_run("B", "A", run_uuid)
        self.timeline.mark(f"queue empty, {units['pending']} units pending: retried: “{message}”")
        return None

    # -- after the run: c2 takes work again, and a course build streams live on B ---------

    def after_the_heal_and_the_build(self) -> None:
        from coursebuilder import stages
        from diagnostics.effects import TYPE
        from taskrunner import runner

        cluster, report = self.cluster, self.report
        c2, db_host = cluster.consumers["c2"], cluster.db
        self._wait(lambda: not cluster.net.unacknowledged(c2, db_host), 180, "c2 to catch up")
        self._within(lambda: LATE in self._c2_log_after_heal(), 5)  # the answer, then the log
        report.late_completions = self._c2_log_after_heal().count(LATE)
        self.timeline.mark(
            "c2's connections caught up (nothing unacknowledged between c2 and db); "
            f"its late completions: {report.late_completions}, ignored"
        )
        # Only the main run's units have run so far: who ran them.
        report.main_run_hosts = {
            name: len(UNIT_DONE.findall(cluster.consumer_logs(host, self.first_process)))
            for name, host in cluster.consumers.items()
        }
        offsets = {name: self._log_size(name) for name in cluster.consumers}
        build = self.plan.build
        with self.app.app_context():
            followup = runner.start(
                TYPE,
                {"units": self.plan.followup_units, "batch": uuid.uuid4().hex, "sleep_ms": 20},
                "cluster",
            ).uuid
            build_uuid = stages.start(
                1,
                "Cluster course",
                lessons=build["lessons"],
                quizzes=build["quizzes"],
                concurrency=build["concurrency"],
                fake={"latency_ms": build["latency_ms"]},
                initiator="cluster",
            )
        self.timeline.mark("course build (concurrency 4) and a follow-up run started")
        markers, stages = set(), []
        for event in self.client.builder_stream("B", build_uuid, timeout=300):
            markers.add(event["data"]["marker"])
            if event["data"]["stage"] not in stages:
                stages.append(event["data"]["stage"])
            report.build_status = event["data"]["status"]
        report.build_changes = len(markers)
        report.build_stages_seen = stages
        self.timeline.mark(
            f"course build {report.build_status}, followed live on B ({len(markers)} changes)"
        )
        self._wait(lambda: self.watch_run(followup)["status"] == "completed", 300, "follow-up")
        for name in cluster.consumers:
            text = self._log_after(name, offsets[name])
            # Huey logs "Executing <module>.<job name>: <id>" for every job it starts.
            report.build_hosts[name] = len(
                re.findall(r"Executing \S+\.coursebuilder\.run_step:", text)
            )
            if name == "c2":
                report.c2_units_after_heal = text.count("Executing taskrunner.jobs.taskrunner")
        c2 = cluster.live(cluster.consumers["c2"])
        report.c2_same_processes = c2.process.pid == self.c2_pid and c2.process.poll() is None
        self.timeline.mark(f"follow-up run completed; c2 took {report.c2_units_after_heal} units")

    # -- the evidence ------------------------------------------------------------------------

    def collect(self, run_uuid: str) -> None:
        from diagnostics.effects import DiagnosticEffect
        from extensions import db
        from taskrunner.ledger import ledger
        from taskrunner.models import TaskRunUnit

        report = self.report
        collected = utcnow()
        with self.app.app_context():
            run = ledger.runs.get_run(run_uuid)
            report.status = run.status
            report.snapshot_completed = run.units_completed
            report.run_completed_events = ledger.runs.count_events("tasks.run.completed", run)
            report.run_failed_events = ledger.runs.count_events("tasks.run.failed", run)
            rows = db.session.execute(
                db.select(
                    TaskRunUnit.id,
                    TaskRunUnit.unit_key,
                    TaskRunUnit.dispatch_token,
                    TaskRunUnit.attempts,
                    TaskRunUnit.status,
                    TaskRunUnit.last_error,
                ).where(TaskRunUnit.task_run_id == run.id)
            ).all()
            effects = dict(
                db.session.execute(
                    db.select(DiagnosticEffect.unit_key, DiagnosticEffect.executions).where(
                        DiagnosticEffect.batch == self.batch
                    )
                ).all()
            )
            claims = {name: ledger.schedules.claimed(name) for name in PERIODIC}
            db.session.remove()
        report.unit_rows = len(rows)
        report.completed = sum(1 for row in rows if row.status == "completed")
        report.attempts = sum(row.attempts for row in rows)
        report.effect_rows = len(effects)
        report.executions = sum(effects.values())
        report.units_over_attempts = sum(
            1 for row in rows if effects.get(row.unit_key, 0) > row.attempts
        )
        logs = self._consumer_logs(self.first_process)
        self._check_effects_per_unit(rows, effects, logs, run_uuid)
        self._who_completed_the_partition_retries(rows)
        for row in rows:
            if row.status != "completed":
                # Everything the hosts logged about it, so a failed round explains itself.
                lines = logs.splitlines()
                hits = [i for i, line in enumerate(lines) if f"{row.unit_key} " in line]
                logged = "\n".join("\n".join(lines[i : i + 30]) for i in hits[-3:])
                report.failed_units.append(
                    f"{row.unit_key} {row.status} after {row.attempts} tries: "
                    f"{row.last_error!r}; logged:\n{logged}"
                )
        for name, claimed in claims.items():
            report.periodic.setdefault(name, {"skipped_in_overlap": 0})
            report.periodic[name] |= self._periodic_summary(name, claimed, logs, collected)
        self.timeline.mark("evidence collected")

    def _who_completed_the_partition_retries(self, rows: list[Any]) -> None:
        """The host that ran each partition-retried unit's last job (its id carries the
        unit's final dispatch token, so c2's superseded attempt is not it)."""
        from taskrunner.dispatch import task_id

        report = self.report
        finished = {
            name: set(re.findall(r"run_unit: (\S+) .*executed in", self._host_logs(host)))
            for name, host in self.cluster.consumers.items()
        }
        by_key = {row.unit_key: row for row in rows}
        for key in self.partition_retried_keys:
            job = task_id(by_key[key].id, by_key[key].dispatch_token or "")
            hosts = [name for name, jobs in finished.items() if job in jobs]
            report.partition_retried_hosts[key] = ", ".join(hosts) or "nobody"
            if not hosts:
                report.partition_unattributed.append(self._lines_of_unit(by_key[key]))
        # A unit the ledger saw completed while c2 had no link was completed by c1 or c3,
        # whatever the logs show (a line they lack is reported with the unit's evidence).
        report.partition_retried_elsewhere = bool(report.partition_retried_hosts) and all(
            hosts in ("c1", "c3") or (hosts == "nobody" and report.partition_retried_done_in_cut)
            for hosts in report.partition_retried_hosts.values()
        )

    def _lines_of_unit(self, row: Any) -> str:
        """A unit's token in the ledger and every consumer log line naming one of its jobs."""
        job = f"u{row.id}."
        lines = [
            f"{name}: {line}"
            for name, host in self.cluster.consumers.items()
            for line in self._host_logs(host).splitlines()
            if job in line or f"Unit {row.unit_key} " in line
        ]
        return f"{row.unit_key} (u{row.id}, token {row.dispatch_token}):\n" + "\n".join(lines)

    def _host_logs(self, host: Any) -> str:
        return self.cluster.consumer_logs(host, self.first_process)

    def _check_effects_per_unit(
        self, rows: list[Any], effects: dict[str, int], logs: str, run_uuid: str
    ) -> None:
        """Each unit's effects against its own attempts: one per completed attempt (the
        recorded completion, and each late one the ledger ignored) plus one per attempt
        known lost after it may have written its effect (cut off by the SIGKILL, or
        interrupted by the deploy and handed back). The partition's retried units get no
        allowance of their own: c2's attempt either completed late (counted) or not at all."""
        report = self.report
        late = Counter(key for key, run in LATE_UNIT.findall(logs) if run == run_uuid)
        handed = Counter(HANDED_BACK.findall(logs))
        killed = set(self.kill_retried_keys)
        handed_keys = {row.unit_key for row in rows if handed[str(row.id)]}
        retried = killed | set(self.partition_retried_keys) | set(self.redispatched_keys)
        report.handed_back_retried = sorted(handed_keys & retried)
        extra: Counter[str] = Counter()
        for row in rows:
            allowed = {
                "completed": int(row.status == "completed"),
                "late completion": late[row.unit_key],
                "lost to the SIGKILL": int(row.unit_key in killed),
                "handed back": handed[str(row.id)],
            }
            ran = effects.get(row.unit_key, 0)
            if ran > sum(allowed.values()):
                reasons = ", ".join(f"{n} {why}" for why, n in allowed.items() if n)
                report.units_over_allowance.append(f"{row.unit_key}: {ran} effects ({reasons})")
            # Which allowances the effects beyond the first one used, in this order.
            beyond = ran - allowed["completed"]
            for why in ("late completion", "lost to the SIGKILL", "handed back"):
                used = min(beyond, allowed[why])
                extra[why] += used
                beyond -= used
        report.extra_effects = {why: n for why, n in extra.items() if n}

    def _periodic_summary(
        self, name: str, claimed: list[Any], logs: str, collected: datetime
    ) -> dict[str, Any]:
        """The slots of ``name``: claimed consecutively at its period from the first to the
        last, each once, and each claim followed by a run (logged after the job's body).

        The design lets a slot go only where a ``default`` consumer lost a job it held:
        one its worker had taken from the queue and not run (Huey is at most once), or
        whose slot it had claimed and not finished (a claimed slot is not run again). That
        is the SIGKILL of c1 (slots due within the two periods before it) and c2's cuts
        (slots due from two periods before the cut to one after the link came back); at
        most one slot per worker of the lost consumer. The next slot's sweep catches up.
        c3's deploys are no such fault: a body its SIGTERM interrupts is handed back.
        """
        from tasks.routing import routes

        period = timedelta(seconds=routes.periodic[name].schedule.period(self.app.config))
        ran = [datetime.fromisoformat(slot) for slot in re.findall(
            rf"Periodic {re.escape(name)}, slot (\S+): ran", logs
        )]  # fmt: skip
        taken, done = {row.slot for row in claimed}, set(ran)
        expected = set()
        if claimed:
            slot = claimed[0].slot
            while slot <= claimed[-1].slot:
                expected.add(slot)
                slot += period
        # A claim of the last seconds may still be running its body.
        unrun = {
            row.slot
            for row in claimed
            if row.slot not in done and row.claimed_at < collected - timedelta(seconds=10)
        }
        faults = [(f"c2's cut {i}", cut - 2 * period, heal + period)
                  for i, (cut, heal) in enumerate(self.cuts, 1)]  # fmt: skip
        if self.kill_time is not None:
            faults.insert(0, ("c1's SIGKILL", self.kill_time - 2 * period, self.kill_time))
        lost: dict[str, list[str]] = {}
        outside = []
        for slot in sorted((expected - taken) | unrun):
            fault = next((f for f, start, end in faults if start <= slot <= end), None)
            if fault is None:
                outside.append(slot.isoformat())
            else:
                lost.setdefault(fault, []).append(slot.isoformat())
        kill = self.kill_time
        return {
            "period": int(period.total_seconds()),
            "claims": len(claimed),
            "runs": len(ran),
            "repeated": len(ran) - len(set(ran)),
            "lost_to_faults": lost,
            "outside_faults": outside,
            "skipped": len(re.findall(rf"Periodic {re.escape(name)}, slot \S+: skipped", logs)),
            "after_kill": sum(1 for row in claimed if row.slot > (kill or row.slot)),
            "hosts": ", ".join(sorted({row.claimed_by.split(":")[0] for row in claimed})),
        }

    def stop(self) -> None:
        cluster, report = self.cluster, self.report
        if self.partitioned is not None:  # a round that failed mid-partition
            cluster.net.heal(self.partitioned)
        mine = cluster.processes[self.first_process :]
        for entry in mine:
            if entry.stopped_by is None and entry.process.poll() is not None:
                report.unclean.append(f"{entry.host.name} {entry.role} died ({entry.log.name})")
        for entry in cluster.stop_round():
            report.unclean.append(f"{entry.host.name} {entry.role} ignored SIGTERM for 30 s")
        for entry in mine:
            state = f"{entry.host.name} {entry.role}: {entry.stopped_by or 'SIGTERM at the end'}"
            code = entry.process.returncode
            report.processes.append(f"{state}, exit {code}")
            if entry.stopped_by != "SIGKILL" and code != 0:
                report.unclean.append(f"{state} exited {code}")
            text = entry.log_text()
            if entry.role.startswith("consumers"):
                report.crashes += [
                    f"{entry.log.name}: {marker!r}" for marker in CRASH_MARKERS if marker in text
                ]
            elif entry.role == "web":
                errors = [s for s in ACCESS_STATUS.findall(text) if s.startswith("5")]
                name = next(n for n, h in cluster.web.items() if h == entry.host)
                report.server_errors[name] = report.server_errors.get(name, 0) + len(errors)
        for host, count in self.client.server_errors().items():
            report.server_errors[host] = max(report.server_errors.get(host, 0), count)
        if self.app is not None:
            with self.app.app_context():
                from extensions import db

                db.engine.dispose()
        self.timeline.mark("every host stopped")

    # -- small helpers -----------------------------------------------------------------------

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.driver}: {timeout:g} s passed waiting for {what}")
            time.sleep(0.3)

    @staticmethod
    def _within(predicate, timeout: float) -> bool:
        """Whether ``predicate`` came true within ``timeout`` seconds (its absence is a finding)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.3)
        return True

    def _lost_after(self) -> float:
        """Seconds after which a silent worker's units are ``worker lost``."""
        return 3 * float(self.app.config["TASK_RUNNER_HEARTBEAT_SECONDS"])

    def _log_marks(self) -> dict[int, int]:
        """Where every consumer log of the round ends now."""
        return {
            index: entry.log.stat().st_size
            for index, entry in enumerate(self.cluster.processes)
            if index >= self.first_process and entry.role.startswith("consumers")
        }

    def _logs_since(self, marks: dict[int, int]) -> str:
        """What the consumers logged after ``marks`` (all of a log started since)."""
        texts = []
        for index, entry in enumerate(self.cluster.processes):
            if index < self.first_process or not entry.role.startswith("consumers"):
                continue
            with open(entry.log, "rb") as log:
                log.seek(marks.get(index, 0))
                texts.append(log.read().decode(errors="replace"))
        return "\n".join(texts)

    def _web_up(self) -> bool:
        try:
            return all(self.client.get(name, "/healthz").status == 200 for name in ("A", "B"))
        except OSError:
            return False

    def _consumers_started(self, since: int) -> int:
        entries = self.cluster.processes[since:]
        return sum(e.log_text().count("Huey consumer started") for e in entries if e.role != "web")

    def _consumer_logs(self, since: int) -> str:
        entries = self.cluster.processes[since:]
        return "\n".join(e.log_text() for e in entries if e.role.startswith("consumers"))

    def _log_size(self, host: str) -> int:
        return self.cluster.live(self.cluster.consumers[host]).log.stat().st_size

    def _log_after(self, host: str, offset: int) -> str:
        with open(self.cluster.live(self.cluster.consumers[host]).log, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _c2_log_after_heal(self) -> str:
        return self._log_after("c2", self.heal_offset)

    def _connections(self) -> int:
        from extensions import db

        with self.app.app_context():
            count = db.session.execute(text("SELECT count(*) FROM pg_stat_activity")).scalar_one()
            db.session.remove()
        return int(count)

    def _queued(self) -> int:
        with self.app.app_context():
            return self.app.extensions["queues"].huey("tasks").pending_count()

    def _still_running(self, pause: float) -> set[int]:
        """Units of the round's run that are running now and still ``pause`` seconds later."""
        from extensions import db
        from taskrunner.models import TaskRun, TaskRunUnit

        def running() -> set[int]:
            with self.app.app_context():
                ids = db.session.execute(
                    db.select(TaskRunUnit.id)
                    .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
                    .where(TaskRun.uuid == self.report.run_uuid, TaskRunUnit.status == "running")
                ).scalars()
                found = set(ids)
                db.session.remove()
            return found

        first = running()
        time.sleep(pause)
        return first & running()

    def _unit_keys(self, status: str) -> list[str]:
        from extensions import db
        from taskrunner.models import TaskRun, TaskRunUnit

        with self.app.app_context():
            keys = list(
                db.session.execute(
                    db.select(TaskRunUnit.unit_key)
                    .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
                    .where(TaskRun.uuid == self.report.run_uuid, TaskRunUnit.status == status)
                ).scalars()
            )
            db.session.remove()
        return keys

    def _all_completed(self, keys: list[str]) -> bool:
        from extensions import db
        from taskrunner.models import TaskRun, TaskRunUnit

        with self.app.app_context():
            statuses = db.session.execute(
                db.select(TaskRunUnit.status)
                .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
                .where(TaskRun.uuid == self.report.run_uuid, TaskRunUnit.unit_key.in_(keys))
            ).scalars()
            done = all(status == "completed" for status in statuses)
            db.session.remove()
        return done


def run_cluster(drivers: list[str], plan: ClusterPlan, folder: Path) -> list[ClusterReport]:
    """Build the cluster, run a round per driver, tear everything down (also on errors)."""
    cluster = Cluster(folder)
    reports = []
    with exit_on_sigterm():
        try:
            cluster.up()
            with cluster.net.enter(cluster.operator):
                for driver in drivers:
                    print(f"== {DRIVERS[driver]} ==", flush=True)
                    reports.append(ClusterScenario(cluster, plan, driver).execute())
        finally:
            cluster.down()
    return reports


def markdown(reports: list[ClusterReport], plan: ClusterPlan) -> str:
    lines = [
        "# Cluster scenario (`make cluster`)",
        "",
        "Written by `python -m bench.cluster`: six hosts in network namespaces on one "
        "machine (db, web-a, web-b, c1, c2, c3), heartbeats every 2 s, the stuck sweep "
        f"and the relay every 2 s, a {plan.units:,}-unit `diagnostics.effects` run. See "
        "docs/deploy.md for the topology and what each step proves.",
    ]
    for report in reports:
        lines += [
            "",
            f"## {DRIVERS[report.driver]}",
            "",
            "```",
            report.timeline.text(),
            "```",
            "",
            "```",
            report.table(),
            "```",
        ]
        broken = report.violations()
        lines += ["", "Violations: " + ("; ".join(broken) if broken else "none.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cluster", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--driver", action="append", choices=list(DRIVERS))
    parser.add_argument("--units", type=int, default=ClusterPlan.units)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    missing = require_cluster_prerequisites()
    if missing:
        print("error: cannot build the cluster here: needs " + ", ".join(missing), file=sys.stderr)
        return 1
    plan = ClusterPlan(units=args.units)
    folder = Path(tempfile.mkdtemp(prefix="cluster-"))
    reports = run_cluster(args.driver or list(DRIVERS), plan, folder)
    for report in reports:
        print(f"\n{DRIVERS[report.driver]}\n{report.timeline.text()}\n{report.table()}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(markdown(reports, plan))
    broken = [f"{r.driver}: {v}" for r in reports for v in r.violations()]
    for violation in broken:
        print(f"VIOLATION: {violation}", file=sys.stderr)
    print(f"written to {args.output}")
    if broken:
        print(f"the hosts' logs are in {folder}", file=sys.stderr)
        return 1
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
