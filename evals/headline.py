"""The headline of a run as data: which metric each system has, which is best, and
which value is at its metric's worst end or undefined.

Shared by the HTML/markdown report, the summary a run prints at its end and
`memkit eval list`, so they never disagree. Pure functions over metric rows
(the dicts of `metrics.json`); formatting is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evals import registry

Row = Mapping[str, Any]


def defined(v: Any) -> bool:
    """A number that is neither missing nor NaN."""
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def headline(rows: Iterable[Row], systems: Sequence[str]) -> list[tuple[str, dict[str, Row]]]:
    """(metric, {system: row}) for every headline metric some system has, in the
    registry's order; a system without the metric is absent from its dict."""
    at = {(r["system"], r["metric"]): r for r in rows}
    out = []
    for m in registry.names(listed="headline"):
        have = {s: at[(s, m)] for s in systems if (s, m) in at}
        if have:
            out.append((m, have))
    return out


def best_in(metric: str, values: Mapping[str, Any]) -> set[str]:
    """`best` for one metric of the headline; a baseline marks no system best (it
    scores a full or random ranking, not the system)."""
    if is_baseline(metric, registry.all_metrics()):
        return set()
    return best(values, registry.get(metric).direction)


def best(values: Mapping[str, Any], direction: str) -> set[str]:
    """Systems holding the best value (ties all marked); none when fewer than two compete."""
    vals = {k: float(v) for k, v in values.items() if defined(v)}
    if len(vals) < 2 or direction not in ("higher", "lower"):
        return set()
    top = min(vals.values()) if direction == "lower" else max(vals.values())
    return {k for k, v in vals.items() if v == top}


def worst(metric: str) -> float | None:
    """The worst value a metric can take, when it has one: 0 for "higher is better"
    (every metric is non-negative), 1 for a share where lower is better; None for an
    unbounded "lower is better" count and for metrics with no better direction."""
    m = registry.get(metric)
    if m.direction == "higher":
        return 0.0
    if m.direction == "lower" and registry.bounded(metric):
        return 1.0
    return None


def is_baseline(metric: str, known: Iterable[str]) -> bool:
    """A ranking metric's baseline (`<metric>_full`, `<metric>_random`): what a full or a
    random ranking scores, never a failure of the system, so "What failed" skips it."""
    base, _, tag = metric.rpartition("_")
    return tag in ("full", "random") and base in set(known)


def flags(rows: Iterable[Row], system: str) -> list[tuple[str, Any]]:
    """(metric, value) of one system's metrics at their worst value, and (metric, None)
    for each headline metric it has whose value is undefined; in the registry's order."""
    heads = set(registry.names(listed="headline"))
    order = list(registry.all_metrics())
    out: list[tuple[str, float | None]] = []
    for r in rows:
        if r["system"] != system or is_baseline(r["metric"], order):
            continue
        m, v = r["metric"], r.get("value")
        if not defined(v):
            if m in heads:
                out.append((m, None))
        elif (w := worst(m)) is not None and v is not None and float(v) == w:
            out.append((m, w))
    return sorted(out, key=lambda x: order.index(x[0]))
