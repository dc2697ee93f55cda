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
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.cluster_hosts import Cluster, require_cluster_prerequisites
from bench.netns import exit_on_sigterm
from bench.operator_client import OperatorClient
from database import utcnow
from harness import ROOT, build_app

DRIVERS = {"redis": "PostgreSQL + Redis", "postgres": "PostgreSQL + PostgresHuey"}
RESULTS = ROOT / "bench" / "results" / "cluster.md"
OPERATOR = ("operator@cluster.test", "cluster operator password")
INTRUDER = "intruder@cluster.test"
PERIODIC = ("taskrunner.detect_stuck", "taskrunner.relay_events")
CRASH_MARKERS = ("died!", "died, restarting", "Error in consumer")
LATE = "completed under a superseded dispatch token"
ACCESS_STATUS = re.compile(r'" (\d{3}) ')
UNIT_DONE = re.compile(r"run_unit: .* executed in")


@dataclass
class ClusterPlan:
    units: int = 5000
    sleep_ms: int = 30
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
    throttled_across_hosts: bool = False
    session_across_hosts: bool = False
    handed_back: int = 0
    stale_after_deploy: int = -1
    lost_after_kill: int = 0  # units found worker lost after c1's SIGKILL
    lost_jobs_redispatched: int = 0
    partitioned_stale: int = 0  # c2's units found worker lost during the partition
    partition_held: int = 0  # of those, held by c2's open transactions: left by the retry
    partition_seconds: float = 0.0
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
        extra = self.executions - self.units - self.late_completions
        if not 0 <= extra <= self.lost_after_kill:
            found.append(
                f"{self.executions} side effects for {self.units} completions and "
                f"{self.late_completions} late ones ({self.lost_after_kill} units lost to the kill)"
            )
        if not (self.throttled_across_hosts and self.session_across_hosts):
            found.append("sign-in throttle or session not shared by the web hosts")
        if self.stale_after_deploy != 0:
            found.append(f"{self.stale_after_deploy} stale units after the deploy (want none)")
        if not self.partitioned_stale:
            found.append("the partition left no unit worker lost")
        if not (self.late_completions or self.partition_held):
            found.append("the partitioned host neither completed late nor held a unit")
        if not (self.c2_same_processes and self.c2_units_after_heal):
            found.append("c2's consumers did not take work again after the heal")
        for name, summary in self.periodic.items():
            if summary["runs"] != summary["claims"] or summary["repeated"]:
                found.append(f"{name}: {summary['runs']} runs for {summary['claims']} slots")
            if not summary["skipped_in_overlap"] or not summary["after_kill"]:
                found.append(f"{name}: no overlap seen or no slot run after the takeover")
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

    def table(self) -> str:
        rows = [
            ("queue driver", DRIVERS[self.driver]),
            ("round", f"{self.seconds:.0f} s"),
            ("run", f"{self.run_uuid} {self.status}, {self.completed:,} of {self.units:,}"),
            ("tasks.run.completed / .failed", f"{self.run_completed_events} / "
             f"{self.run_failed_events}"),
            ("side effects", f"{self.executions:,} in {self.effect_rows:,} rows; "
             f"{self.attempts:,} attempts; units with more effects than attempts: "
             f"{self.units_over_attempts}"),
            ("deploy of c3 (SIGTERM)", f"{self.handed_back} units handed back, "
             f"stale afterwards: {self.stale_after_deploy}"),
            ("c1 killed (SIGKILL)", f"{self.lost_after_kill} units worker lost, retried; "
             f"{self.lost_jobs_redispatched} lost jobs re-dispatched"),
            ("c2 partitioned", f"{self.partition_seconds:.1f} s, {self.partitioned_stale} units "
             f"worker lost ({self.partition_held} held by c2, the others retried); "
             f"{self.late_completions} late completions ignored"),
            ("c2 after the heal", f"same processes: {self.c2_same_processes}, "
             f"{self.c2_units_after_heal} units taken"),
            *[(name, f"{s['claims']} slots run once each ({s['hosts']}), "
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
        self.killed_at = 0.0
        self.retried_keys: list[str] = []
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
            self.drive(run_uuid)
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
                report.lost_after_kill = self.retry_stale("c1's units worker lost")
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

    def watch_run(self, run_uuid: str) -> dict:
        """The operator's view of the run, from web host B: the JSON API, and the run page.

        The run page does not follow its run live yet (the builder's page does, through
        ``live``); when it does, its event stream is the one to assert here.
        """
        page = self.client.get("B", f"/backoffice/task-runs/{run_uuid}")
        if page.status != 200:
            raise AssertionError(f"B: run page answered {page.status}")
        return self.client.run("B", run_uuid)

    def deploy_c3(self) -> None:
        cluster = self.cluster
        c3 = cluster.live(cluster.consumers["c3"])
        self.timeline.mark("deploy: SIGTERM to c3's consumers")
        code = cluster.terminate(c3)
        log = c3.log_text()
        interrupted = log.count("Received exit signal")
        self.report.handed_back = log.count("handed back on shutdown")
        self.timeline.mark(
            f"c3 stopped (exit {code}): {interrupted} jobs interrupted, "
            f"{self.report.handed_back} units handed back (the others had settled)"
        )
        self.overlap_marks = self._log_marks()
        cluster.start_consumers("c3", periodic=True)
        self._wait(lambda: self._consumers_started(len(cluster.processes) - 1) >= 4, 180, "c3")
        self.timeline.mark("c3 back with periodic tasks: c1 and c3 both schedule them")

    def _overlap_seen(self) -> bool:
        """c3's scheduler enqueues the sweeps too, and some slots were enqueued twice."""
        c3 = self.cluster.live(self.cluster.consumers["c3"]).log_text()
        scheduling = c3.count("Enqueueing periodic task tasks.periodic.taskrunner.detect_stuck")
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

    def retry_stale(self, what: str) -> int:
        stale = self.client.stale_units("B")
        reasons = Counter(unit["stale_reason"] for unit in stale)
        self.timeline.mark(f"stale detected on B: {what} ({dict(reasons)})")
        message = self.client.retry_stale(page_host="B", action_host="A")
        self.timeline.mark(f"retried from B's page, posted to A: “{message}”")
        self.retried_keys = [unit["unit_key"] for unit in stale]
        return len(stale)

    def partition_c2(self, attempts: int = 12) -> None:
        """Cut c2 off until its units are found lost, retried and finished elsewhere.

        A cut that catches c2 between units (in the queue read or the gate, where a unit
        is still pending) leaves nothing worker lost. A unit of c2's is one still running
        a moment after the cut, when the other hosts' 30 ms units have moved on; when there
        is none, the link comes back at once and c2 is cut again once it has completed a
        unit since (its connections caught up), at most ``attempts`` times. A unit whose
        row c2's open transaction holds (cut between its statement and its commit) is left
        by the retry; it finishes when c2 is back.
        """
        cluster, report = self.cluster, self.report
        c2 = cluster.consumers["c2"]
        self.c2_pid = cluster.live(c2).process.pid
        healed_at = None
        for attempt in range(1, attempts + 1):
            if healed_at is not None:
                self._within(lambda at=healed_at: UNIT_DONE.search(self._log_after("c2", at)), 30)
            # A unit another host is slow to heartbeat for (a starved worker) is not c2's.
            seen_before = self._lost_units()
            cut = self.timeline.mark("partition: c2's link down")
            cluster.net.partition(c2)
            self.partitioned = c2
            found = bool(self._still_running(1.5)) and self._within(
                lambda seen=seen_before: self._lost_units() - seen, self._lost_after() + 4
            )
            if found or attempt == attempts:
                break
            healed_at = self._log_size("c2")
            cluster.net.heal(c2)
            self.partitioned = None
            self.timeline.mark("no unit of c2 was running at the cut: link up, cut again")
        if found:
            report.partitioned_stale = self.retry_stale("c2's units worker lost")
            held = self._lost_units() & set(self.retried_keys)
            retried = [key for key in self.retried_keys if key not in held]
            report.partition_held = len(held)
            if held:
                self.timeline.mark(f"{len(held)} units held by c2's open transactions: left")
            if self._within(lambda: self._all_completed(retried), 60):
                self.timeline.mark(f"the {len(retried)} retried units finished on c1 and c3")
            else:
                self.timeline.mark("retried units wait for rows c2's transactions hold")
        self.heal_offset = cluster.live(c2).log.stat().st_size
        cluster.net.heal(c2)
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
        message = self.client.retry_run("B", "A", run_uuid)
        self.timeline.mark(f"queue empty, {units['pending']} units pending: retried: “{message}”")
        return None

    # -- after the run: c2 takes work again, and a course build streams live on B ---------

    def after_the_heal_and_the_build(self) -> None:
        from coursebuilder import service
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
        offsets = {name: self._log_size(name) for name in cluster.consumers}
        build = self.plan.build
        with self.app.app_context():
            followup = runner.start(
                TYPE,
                {"units": self.plan.followup_units, "batch": uuid.uuid4().hex, "sleep_ms": 20},
                "cluster",
            ).uuid
            build_uuid = service.start(
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
        from tasks import slots

        report = self.report
        with self.app.app_context():
            run = ledger.get_run(run_uuid)
            report.status = run.status
            report.snapshot_completed = run.units_completed
            report.run_completed_events = ledger.count_events("tasks.run.completed", run)
            report.run_failed_events = ledger.count_events("tasks.run.failed", run)
            rows = db.session.execute(
                db.select(
                    TaskRunUnit.unit_key,
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
            claims = {name: slots.claims(name) for name in PERIODIC}
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
            ran = re.findall(rf"Periodic {name}, slot (\S+): runs here", logs)
            report.periodic.setdefault(name, {"skipped_in_overlap": 0})
            report.periodic[name] |= {
                "claims": len(claimed),
                "runs": len(ran),
                "repeated": len(ran) - len(set(ran)),
                "skipped": logs.count(f"Periodic {name}, slot") - len(ran),
                "after_kill": sum(1 for row in claimed if row.slot > (self.kill_time or row.slot)),
                "hosts": ", ".join(sorted({row.claimed_by.split(":")[0] for row in claimed})),
            }
        self.timeline.mark("evidence collected")

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
