"""The metric registry: every reported metric is registered here once.

A metric is one small function over one *unit* (a probe, a fact's writes, an
attempt, a pass, an extraction row or gold fact, a labelled pair), registered
with its name, unit, definition, direction (which way is better), whether it
is pooled (the function returns a (numerator, denominator) pair summed over
units, not a per-unit value to average) and its family (metrics plotted on one
axis). The headline, per-scope breakdown, compare and sweep lists are tags on
the registrations, so adding a metric is one `@register(...)` and nothing
else spells its name.

Modules that register metrics are listed in `METRIC_MODULES` and imported on
first use, so importing this module has no side effects. This module leaves
out computing anything: `evals.aggregate` turns run-file rows into units and
unit values, `evals.stats` turns those into intervals.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memkit.errors import ConfigError, did_you_mean

UNITS: tuple[str, ...] = (
    "probe",
    "write",
    "attempt",
    "pass",
    "row",
    "fact",
    "rollout",
    "pair",
    "ranking",
    "fold_group",
)
"""probe: a recall probe; write: a fact's store-mode writes; attempt: one model
call; pass: one consolidation pass (its attempts); row: a live row at the end
of a scope; fact: a live gold fact at the end of a scope; rollout: a staged
rollout at the end of a scope; pair: a labelled text pair; ranking: a probe's
full recorded ranking (LongMemEval retrieval, `evals.retrieval`); fold_group:
the writes of one labelled fold group (MSC)."""
DIRECTIONS: dict[str, str] = {"higher": "↑", "lower": "↓", "neutral": "·"}
"""Which way is better; `neutral` for descriptive numbers (op mix, changes per
proposal, share of empty recalls) where neither is."""
LISTS: tuple[str, ...] = ("headline", "breakdown", "compare", "sweep")
METRIC_MODULES: list[str] = [
    "evals.metrics.probe",
    "evals.metrics.fold",
    "evals.metrics.pipeline",
    "evals.retrieval",
    "evals.providers",
]
FAMILIES: dict[str, tuple[str, bool]] = {
    "ranking": ("score (0-1)", True),
    "block": ("share of probes", True),
    "waste": ("share of admitted entry bytes", True),
    "offtopic_bytes": ("bytes per off-topic probe", False),
    "per_probe_count": ("facts per probe", False),
    "fold": ("share of writes", True),
    "rows_per_fact": ("rows per fact", False),
    "dedup": ("share of entries", True),
    "dedup_bytes": ("bytes per probe", False),
    "validity": ("share of attempts", True),
    "errors": ("share of answered attempts", True),
    "op_mix": ("share of changes", True),
    "per_attempt_count": ("per attempt", False),
    "tokens": ("tokens", False),
    "usd": ("USD", False),
    "attempts": ("attempts per pass", False),
    "extraction": ("share", True),
    "seconds": ("seconds", False),
    "matcher": ("share of pairs", True),
    "repeats": ("share of passes", True),
    "rollouts": ("share of staged rollouts", True),
    "provider_limit": ("requests in flight, 429s or seconds, per model", False),
}
"""family -> (plot axis label, values are shares in [0, 1]). A family not listed
uses its name as label and counts as unbounded (the interval then never assumes
a share's bounds)."""


F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: str
    definition: str
    direction: str
    pooled: bool
    family: str
    """Metrics of one family share a plot axis (same scale and meaning)."""
    fn: Callable[[Any], Any] | None = None
    """unit -> value (NaN: undefined on this unit), or (num, den) when pooled;
    None for metrics computed elsewhere (latency, matcher accuracy)."""
    lists: frozenset[str] = field(default_factory=frozenset)

    @property
    def mark(self) -> str:
        """↑ (higher is better), ↓ (lower is better) or · (neither)."""
        return DIRECTIONS[self.direction]


REGISTRY: dict[str, Metric] = {}
_loaded = False


def _check(m: Metric) -> None:
    problems = []
    if not m.name or not m.name.replace("_", "").isalnum():
        problems.append(f"name {m.name!r} is not a plain identifier")
    if m.unit not in UNITS:
        problems.append(f"unit {m.unit!r} not in {', '.join(UNITS)}")
    if m.direction not in DIRECTIONS:
        problems.append(f"direction {m.direction!r} not in {', '.join(DIRECTIONS)}")
    if not m.definition.strip():
        problems.append("empty definition")
    if not m.family.strip():
        problems.append("empty family")
    if not isinstance(m.pooled, bool):
        problems.append(f"pooled must be a bool, got {m.pooled!r}")
    bad = set(m.lists) - set(LISTS)
    if bad:
        problems.append(f"unknown lists {sorted(bad)} (known: {', '.join(LISTS)})")
    if problems:
        raise ConfigError(f"metric {m.name!r}: " + "; ".join(problems))


def add(
    name: str,
    *,
    unit: str,
    definition: str,
    direction: str,
    family: str,
    pooled: bool = False,
    lists: Iterable[str] = (),
    fn: Callable[[Any], Any] | None = None,
) -> Metric:
    """Register one metric; a second registration of a name is an error."""
    m = Metric(name, unit, definition, direction, pooled, family, fn, frozenset(lists))
    _check(m)
    if name in REGISTRY:
        raise ConfigError(f"metric {name!r} is registered twice")
    REGISTRY[name] = m
    return m


def register(name: str, **kw: Any) -> Callable[[F], F]:
    """Decorator form of `add`: the decorated function is the metric's `fn`."""

    def deco(fn: F) -> F:
        add(name, fn=fn, **kw)
        return fn

    return deco


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for mod in METRIC_MODULES:
            importlib.import_module(mod)


def all_metrics() -> dict[str, Metric]:
    """Every registered metric by name, in registration order."""
    _load()
    return REGISTRY


USD_DIGITS = 12
"""Decimals a USD metric keeps in metrics.json/csv. A cheap model's cost per attempt
is ~1e-6 dollars: the 6 decimals of other metrics kept one significant figure of it
(gpt-4o-mini's $0.00000585 was shown as $0.00000600)."""


def digits(name: str, default: int) -> int:
    """Decimals to keep for metric `name`: `default`, or USD_DIGITS for a USD metric."""
    return USD_DIGITS if get(name).family == "usd" else default


def get(name: str) -> Metric:
    """The registered metric `name`; an unknown name lists the valid ones."""
    metrics = all_metrics()
    if name not in metrics:
        raise ConfigError(
            f"unknown metric {name!r}{did_you_mean(name, metrics)}; "
            f"registered metrics: {', '.join(metrics)}"
        )
    return metrics[name]


def names(*, unit: str | None = None, listed: str | None = None) -> tuple[str, ...]:
    """Registered names (registration order), optionally of one unit or list."""
    if listed is not None and listed not in LISTS:
        raise ConfigError(f"unknown metric list {listed!r} (known: {', '.join(LISTS)})")
    return tuple(
        m.name
        for m in all_metrics().values()
        if (unit is None or m.unit == unit) and (listed is None or listed in m.lists)
    )


def family(name: str) -> tuple[str, ...]:
    """Registered names of one family, in registration order."""
    return tuple(m.name for m in all_metrics().values() if m.family == name)


def axis(family_name: str) -> str:
    """The y-axis label of a family's plot."""
    return FAMILIES.get(family_name, (family_name, False))[0]


def bounded(name: str) -> bool:
    """Whether a metric's values are shares in [0, 1] (by its family)."""
    return FAMILIES.get(get(name).family, ("", False))[1]


def value_range(name: str, *, difference: bool = False) -> tuple[float, float]:
    """The range a metric's value and interval ends lie in: a share [0, 1], a
    count [0, inf); a difference of two systems' values [-1, 1] for shares,
    unbounded otherwise."""
    if bounded(name):
        return (-1.0, 1.0) if difference else (0.0, 1.0)
    return (-float("inf"), float("inf")) if difference else (0.0, float("inf"))


def definitions() -> dict[str, str]:
    """name -> printed definition, for every registered metric."""
    return {n: m.definition for n, m in all_metrics().items()}


def definition(name: str) -> str:
    return get(name).definition
