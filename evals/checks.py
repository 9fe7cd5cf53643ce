"""Names and flag values checked before any work starts.

Names (tunables, metrics, adapters, systems, scopes) are checked against the
valid ones, and an error lists them with the closest match, so a typo never
becomes a run that scores 0.000 and exits 0; counts, shares, floors and
durations given as flags are checked against their range, naming the flag
and the range. Pure functions. Tunable values
(`--set`, `--grid`) are parsed and range-checked in `evals.tunables`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from memkit.errors import ConfigError, did_you_mean


def listing(names: Iterable[str], limit: int = 30) -> str:
    names = list(names)
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def unknown(what: str, name: str, valid: Iterable[str]) -> ConfigError:
    """The error for a name that is not one of `valid`: lists them, suggests the closest."""
    valid = sorted(valid)
    return ConfigError(
        f"unknown {what} {name!r}{did_you_mean(name, valid)}; valid: {listing(valid)}"
    )


def known_metrics() -> list[str]:
    """Every metric name the suite can score (the registry's names)."""
    from evals import registry

    return list(registry.all_metrics())


def check_metric(name: str, valid: Iterable[str] | None = None) -> str:
    valid = list(known_metrics() if valid is None else valid)
    if name not in valid:
        raise unknown("metric", name, valid)
    return name


def check_count(flag: str, value: int | None) -> None:
    """A count flag (`--concurrency`, `--replicates`, ...): unset, or an integer >= 1.

    Was: `--concurrency 0` ran with 4 and `--replicates 0` with 1 (a falsy 0 fell
    back to the default), and the manifest recorded the default as if asked for."""
    if value is not None and (isinstance(value, bool) or value < 1):
        raise ConfigError(f"{flag} must be an integer >= 1, got {value}")


def check_range(flag: str, value: float | None, lo: float, hi: float = math.inf) -> None:
    """A number flag, unset or finite and within [lo, hi] (hi infinite: >= lo)."""
    if value is None or (math.isfinite(value) and lo <= value <= hi):
        return
    allowed = f"in [{lo:g}, {hi:g}]" if math.isfinite(hi) else f">= {lo:g}"
    raise ConfigError(f"{flag} must be a number {allowed}, got {value:g}")


def check_positive(flag: str, value: float | None) -> None:
    """A duration flag (`--timeout`): unset, or a finite number > 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} must be a number > 0, got {value:g}")


def check_share(flag: str, value: float | None) -> None:
    """A share flag (`--max-failure-share`, `--margin`): in [0, 1]."""
    check_range(flag, value, 0.0, 1.0)


def check_floor(metric: str, value: float) -> None:
    """A `--fail-under METRIC=VALUE` floor within the metric's range: [0, 1] for a
    share, else >= 0 (counts, bytes, tokens, seconds, USD); an unknown metric is
    refused with the closest name."""
    from evals import registry

    check_metric(metric)
    check_range(f"--fail-under {metric}", value, 0.0, 1.0 if registry.bounded(metric) else math.inf)


def check_names(what: str, names: Iterable[str], valid: Iterable[str]) -> None:
    """Every one of `names` must be in `valid` (scopes, systems, ...)."""
    valid = list(valid)
    for n in names:
        if n not in valid:
            raise unknown(what, n, valid)
