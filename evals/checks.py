"""Names checked before any work starts.

Names (tunables, metrics, adapters, systems, scopes) are checked against the
valid ones, and an error lists them with the closest match, so a typo never
becomes a run that scores 0.000 and exits 0. Pure functions. Tunable values
(`--set`, `--grid`) are parsed and range-checked in `evals.tunables`.
"""

from __future__ import annotations

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


def check_names(what: str, names: Iterable[str], valid: Iterable[str]) -> None:
    """Every one of `names` must be in `valid` (scopes, systems, ...)."""
    valid = list(valid)
    for n in names:
        if n not in valid:
            raise unknown(what, n, valid)
