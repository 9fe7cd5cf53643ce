"""Command-line values checked before any work starts.

A tunable given on the command line (`--set recall.floor=0.3`,
`--grid floor=0.1,0.2`) is parsed to its field's type and range-checked
here, so a typo never becomes a run that scores 0.000 and exits 0. Names
(tunables, metrics, adapters, systems, scopes) are checked against the valid
ones, and an error lists them with the closest match. Pure functions; the
ranges are the ones that make sense for the SPEC's tunables, not SPEC bounds.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from memkit.errors import ConfigError, did_you_mean

UNIT_INTERVAL: frozenset[str] = frozenset(
    {
        "recall.floor",
        "recall.recency_share",
        "recall.confidence_min",
        "recall.confidence_max",
        "fold.threshold",
        "assembly.dedup_threshold",
    }
)
"""Floors, shares, thresholds and confidences: in [0, 1]. Every other number is > 0."""


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


def _field(group_cls: type, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(group_cls) if f.name == name)


def parse_tunable(name: str, text: str) -> tuple[str, str, Any]:
    """`(group, field, value)` for one command-line tunable value, typed and range-checked."""
    from evals.sweep import GROUPS, resolve

    group, fld = resolve(name)
    full = f"{group}.{fld}"
    hints = typing.get_type_hints(GROUPS[group])
    hint = hints[fld]
    text = text.strip()
    where = f"{name}={text!r}" if name == full else f"{name} ({full})={text!r}"
    if text == "":
        raise ConfigError(f"{where}: empty value")
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        if text not in args:
            raise ConfigError(f"{where}: want one of {', '.join(map(str, args))}")
        return group, fld, text
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if optional and text.lower() in ("none", "null"):
        return group, fld, None
    if base is bool:
        if text.lower() not in ("true", "false", "1", "0"):
            raise ConfigError(f"{where}: want true or false")
        return group, fld, text.lower() in ("true", "1")
    try:
        value = int(text) if base is int else float(text)
    except ValueError:
        kind = "an integer" if base is int else "a number"
        raise ConfigError(f"{where}: want {kind}{' or none' if optional else ''}") from None
    if base is not int and not math.isfinite(value):
        raise ConfigError(f"{where}: want a finite number")
    if full in UNIT_INTERVAL:
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{where}: must be in [0, 1]")
    elif base is int and value < 1:
        raise ConfigError(f"{where}: must be a positive integer")
    elif value <= 0:
        raise ConfigError(f"{where}: must be > 0")
    return group, fld, value


def parse_set(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`--set` items (`<tunable>=<value>`) as overrides by group."""
    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        name, sep, val = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set wants <tunable>=<value>, got {item!r}")
        group, fld, value = parse_tunable(name.strip(), val)
        out.setdefault(group, {})[fld] = value
    return out


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--grid` items (`<tunable>=<v1>,<v2>,...`): every value typed, none empty or repeated."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, sep, vals = item.partition("=")
        name = name.strip()
        if not sep or not name or not vals.strip():
            raise ConfigError(f"--grid wants <tunable>=<v1>,<v2>,..., got {item!r}")
        if name in grid:
            raise ConfigError(f"--grid names {name!r} twice")
        values = []
        for i, v in enumerate(vals.split(",")):
            if not v.strip():
                raise ConfigError(f"--grid {name}: value {i + 1} of {vals!r} is empty")
            values.append(parse_tunable(name, v)[2])
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"--grid {name}: a value is repeated in {vals!r}")
        grid[name] = values
    return grid


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
