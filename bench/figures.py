"""What every benchmark module shares: the percentile of its samples and the printing of
its figures when it is run on its own (``python -m bench.bench_X``)."""

from __future__ import annotations

from typing import Any


def percentile(samples: list[float], q: float) -> float:
    """The sample at quantile ``q`` (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def print_figures(result: dict[str, Any]) -> None:
    """One module's figures and notes on stdout, for ``python -m bench.bench_X``."""
    width = max((len(item["name"]) for item in result["figures"]), default=0)
    for item in result["figures"]:
        mark = {True: "ok", False: "MISSED", None: ""}[item["ok"]]
        target = item["target"] or ""
        print(f"{item['name']:<{width}} {item['value']:>12} {item['unit']:<8} {target:<10} {mark}")
    print(result["notes"])
