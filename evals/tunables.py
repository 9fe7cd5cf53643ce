"""The tunables table: which of memkit's params a name on the command line, in a
sweep grid or in an experiment file means, and its value parsed and range-checked.

A tunable is `<group>.<field>` of one of memkit's params (`recall.floor`,
`fold.window_days`, `consolidation.snapshot_policy`, ...) or one of the short
aliases in `ALIASES`. `--set recall.floor=0.3` and `--grid floor=0.1,0.2` are
typed by the field's annotation and range-checked here, so a typo never becomes
a run that scores 0.000 and exits 0. The ranges are the ones that make sense
for the SPEC's tunables, not SPEC bounds. Pure functions; its own module so
that the sweep, the command-line checks and replay import it without importing
each other.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Sequence
from typing import Any

from evals.checks import unknown
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, ConsolidationParams, FoldParams, RecallParams

GROUPS: dict[str, type] = {
    "recall": RecallParams,
    "assembly": AssemblyParams,
    "fold": FoldParams,
    "consolidation": ConsolidationParams,
}
"""The params a tunable's group names."""
ALIASES: dict[str, str] = {
    "floor": "recall.floor",
    "hybrid": "recall.hybrid",
    "half_life": "recall.half_life_days",
    "recency_share": "recall.recency_share",
    "confidence_min": "recall.confidence_min",
    "confidence_max": "recall.confidence_max",
    "candidate_cap": "recall.candidate_cap",
    "fold_threshold": "fold.threshold",
    "fold_window": "fold.window_days",
    "dedup_threshold": "assembly.dedup_threshold",
    "entry_bytes": "assembly.entry_bytes",
    "block_bytes": "assembly.block_bytes",
    "overflow": "assembly.overflow",
    "limit": "assembly.limit",
    "snapshot_policy": "consolidation.snapshot_policy",
    "snapshot_size": "consolidation.snapshot_size",
    "max_rollouts": "consolidation.max_rollouts",
}
"""Short names for the tunables researchers reach for most."""

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


def resolve(name: str) -> tuple[str, str]:
    """A tunable name as (group, field); unknown names are errors naming them."""
    full = ALIASES.get(name, name)
    group, _, fld = full.partition(".")
    cls = GROUPS.get(group)
    if cls is None or fld not in {f.name for f in dataclasses.fields(cls)}:
        full_names = [f"{g}.{f.name}" for g, c in GROUPS.items() for f in dataclasses.fields(c)]
        raise unknown("tunable", name, [*ALIASES, *full_names])
    return group, fld


def parse_tunable(name: str, text: str) -> tuple[str, str, Any]:
    """`(group, field, value)` for one command-line tunable value, typed and range-checked."""
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


EMBEDDER_AXIS = "embedder"
"""A sweep axis that is not a tunable: its values are embedder specs (`evals.sweep`)."""


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """`--grid` items (`<tunable>=<v1>,<v2>,...`): every value typed, none empty or repeated;
    `embedder=<spec>,<spec>` is the embedder axis (specs are checked when loaded)."""
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
            values.append(v.strip() if name == EMBEDDER_AXIS else parse_tunable(name, v)[2])
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"--grid {name}: a value is repeated in {vals!r}")
        grid[name] = values
    return grid
