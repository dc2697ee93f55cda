"""``make bench``: every benchmark of the project, three times, into one report.

Each ``bench/bench_*.py`` module exposes ``run(quick: bool = False) -> dict`` returning
``{"figures": [{"name", "value", "unit", "target", "ok"}, ...], "notes": str}``. This
runs each module three times, keeps the median of every figure (and the verdict of
the run that measured it), and writes ``bench/results.json`` and ``bench/RESULTS.md``.
A module that is missing, fails to import or raises is recorded with its error and
the others still run.

Usage: ``python -m bench.run [--quick] [--repeat N] [--only NAME ...]``. With ``--only``
the other modules' sections of the last report are kept as they were.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results.json"
RESULTS_MD = HERE / "RESULTS.md"
# Benchmarks the project expects; a missing one is reported, not silently skipped.
EXPECTED = (
    "bench_runner",
    "bench_throughput",
    "bench_pages",
    "bench_builder",
    "bench_schedules",
    "bench_million",
)


def discover() -> list[str]:
    found = sorted(p.stem for p in HERE.glob("bench_*.py"))
    return list(dict.fromkeys([*EXPECTED, *found]))


def run_module(name: str, quick: bool, repeat: int) -> dict[str, Any]:
    """Run one module ``repeat`` times; the median of each figure, or the error."""
    entry: dict[str, Any] = {"module": f"bench.{name}", "runs": []}
    if not (HERE / f"{name}.py").exists():
        entry["error"] = f"bench/{name}.py is missing"
        return entry
    began = time.monotonic()
    try:
        module = importlib.import_module(f"bench.{name}")
        for attempt in range(repeat):
            print(f"[bench] {name}: run {attempt + 1} of {repeat}", file=sys.stderr, flush=True)
            entry["runs"].append(module.run(quick=quick))
    except (Exception, SystemExit) as exc:  # a broken benchmark must not hide the others
        entry["error"] = f"{type(exc).__name__}: {exc}"
        entry["traceback"] = traceback.format_exc()
    entry["seconds"] = round(time.monotonic() - began, 1)
    if entry["runs"]:
        entry["figures"] = median_figures(entry["runs"])
        entry["notes"] = entry["runs"][-1].get("notes", "")
    return entry


def median_figures(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per figure name, in first-seen order: the median value and the verdict measured with it."""
    samples: dict[str, list[dict[str, Any]]] = {}
    for result in runs:
        for item in result.get("figures", []):
            samples.setdefault(item["name"], []).append(item)
    figures = []
    for name, items in samples.items():
        values = [item["value"] for item in items]
        # The median of an odd count is one of the samples: keep that sample's verdict.
        ordered = sorted(items, key=lambda item: item["value"])
        middle = ordered[(len(ordered) - 1) // 2]
        median = statistics.median(values)
        figures.append(
            {
                "name": name,
                "value": median,
                "values": values,
                "unit": middle.get("unit", ""),
                "target": middle.get("target", ""),
                "ok": middle.get("ok") if len(items) % 2 else _all_same(items),
            }
        )
    return figures


def _all_same(items: list[dict[str, Any]]) -> bool | None:
    verdicts = {item.get("ok") for item in items}
    return verdicts.pop() if len(verdicts) == 1 else None


def kept_modules(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--only``: the modules just measured, in the report's order among the others kept
    from the last report (each keeps the date it was measured on)."""
    try:
        previous = json.loads(RESULTS_JSON.read_text())
    except (OSError, ValueError):
        return measured
    fresh = {entry["module"]: entry for entry in measured}
    merged = []
    for entry in previous.get("modules", []):
        entry.setdefault("date", previous.get("environment", {}).get("date", "-"))
        merged.append(fresh.pop(entry["module"], entry))
    return merged + list(fresh.values())


def environment() -> dict[str, Any]:
    def version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "-"

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "memory_gb": _memory_gb(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {
            "python": platform.python_version(),
            "postgresql": _server_version("postgres"),
            "redis server": _server_version("redis"),
            **{name: version(name) for name in ("huey", "Flask", "SQLAlchemy", "psycopg")},
            "redis-py": version("redis"),
        },
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "-"


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _server_version(server: str) -> str:
    try:
        if server == "postgres":
            from sqlalchemy import create_engine, text

            from bench.bench_runner import DATABASE_URL
            from harness import ensure_postgres_database

            ensure_postgres_database(DATABASE_URL)  # asked before any benchmark made it
            engine = create_engine(DATABASE_URL)
            with engine.connect() as conn:
                value = conn.execute(text("SHOW server_version")).scalar_one()
            engine.dispose()
            return str(value)
        import redis

        from bench.bench_runner import REDIS_URL

        return str(redis.Redis.from_url(REDIS_URL).info("server")["redis_version"])
    except Exception as exc:
        return f"unreachable ({type(exc).__name__})"


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    machine, versions = env["machine"], env["versions"]
    lines = [
        "# Benchmark results",
        "",
        f"Written by `make bench` ({'quick' if report['quick'] else 'full'} mode, "
        f"{report['repeat']} runs per module) on {env['date']}. Each figure is the median "
        "of the runs, with every run's value; its verdict is the one measured with the "
        "median. Regenerate with `make bench`.",
        "",
        "## Machine and versions",
        "",
        f"- machine: {machine['cpu']}, {machine['cores']} cores, "
        f"{machine['memory_gb']} GB, {machine['platform']}",
        f"- load average when it started: {', '.join(map(str, machine['load_average']))} "
        "(the machine is shared: absolute rates move with its load, ratios measured side "
        "by side much less)",
        "- versions: " + ", ".join(f"{name} {value}" for name, value in versions.items()),
        "",
    ]
    for entry in report["modules"]:
        lines += [f"## {entry['module']}", ""]
        if entry.get("date") and entry["date"] != env["date"]:
            lines += [f"(measured on {entry['date']}, by an earlier run)", ""]
        if "error" in entry:
            lines += [f"**Not measured**: {entry['error']}", ""]
        if entry.get("figures"):
            lines += ["| figure | median | runs | target | verdict |", "|---|---:|---|---|---|"]
            for item in entry["figures"]:
                runs = " / ".join(_value(v) for v in item["values"])
                verdict = {True: "met", False: "**missed**", None: ""}[item["ok"]]
                lines.append(
                    f"| {item['name']} | {_value(item['value'])} {item['unit']} | {runs} "
                    f"| {item['target'] or ''} | {verdict} |"
                )
            lines.append("")
        if entry.get("notes"):
            lines += [entry["notes"], ""]
        if "seconds" in entry:
            lines += [f"({entry['seconds']} s)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="module names, e.g. bench_runner")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "quick": args.quick,
        "repeat": args.repeat,
        "environment": environment(),
        "modules": [],
    }
    for name in args.only or discover():
        entry = run_module(name, args.quick, args.repeat)
        entry["date"] = report["environment"]["date"]
        report["modules"].append(entry)
    if args.only:
        report["modules"] = kept_modules(report["modules"])
    RESULTS_JSON.write_text(json.dumps(report, indent=2, default=str) + "\n")
    RESULTS_MD.write_text(markdown(report))
    print(markdown(report))
    missed = [
        item["name"]
        for entry in report["modules"]
        for item in entry.get("figures", [])
        if item["ok"] is False
    ]
    failed = [entry["module"] for entry in report["modules"] if "error" in entry]
    if missed:
        print("targets missed: " + "; ".join(missed), file=sys.stderr)
    if failed:
        print("benchmarks not measured: " + ", ".join(failed), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
