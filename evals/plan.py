"""The execution plan: system x setting x replicate x scope, as a list of units.

`eval run`, `eval sweep` and experiment files all describe their work as a
`Plan`, and `evals.execute` is the one place that runs one. Building a plan
is pure (no data read, no store opened, no model called), so what a command
will do is testable on its own:

- a run (`run_plan`): one setting (the run's tunables); store systems (`store`,
  or `store@<embedder>` per embedder) once per scope, pipeline systems
  (`pipeline:<consolidator>`) once per replicate and scope;
- a sweep (`sweep_plan`): one setting per grid point in pipeline mode (a
  consolidation tunable changes what is consolidated), else one setting per
  distinct fold point, holding every grid point with that fold as a probe
  variant (recall and assembly never change what is written, so they share a
  replay).

A `Setting` is what a unit writes and probes with; `Setting.points` names the
sweep grid points its variants score (a run's one setting scores point 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.replay import Variant
from evals.tunables import GROUPS, resolve
from memkit.errors import ConfigError
from memkit.params import ConsolidationParams, FoldParams

STORE, PIPELINE = "store", "pipeline"


@dataclass(frozen=True)
class System:
    """A column of the results: its name in the run files, its mode, and the spec it
    is built from (the consolidator's for pipeline mode; the embedder's for a store
    system of a run with several embedders, else "")."""

    name: str
    mode: str
    spec: str = ""


@dataclass(frozen=True)
class Setting:
    """The params a unit replays with: what is written (fold; consolidation in pipeline
    mode) and the (recall, assembly) variants probed on it."""

    fold: FoldParams
    consolidation: ConsolidationParams
    variants: tuple[Variant, ...]
    points: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Unit:
    """One replay of one scope: resumable, and independent of every other unit."""

    system: System
    setting: int
    """Index into `Plan.settings`."""
    replicate: int
    scope: str


@dataclass(frozen=True)
class Plan:
    settings: tuple[Setting, ...]
    units: tuple[Unit, ...]

    @property
    def systems(self) -> tuple[System, ...]:
        """Every system, in the order of its first unit."""
        return tuple(dict.fromkeys(u.system for u in self.units))

    def setting(self, unit: Unit) -> Setting:
        return self.settings[unit.setting]


def store_names(embedders: Sequence[str]) -> tuple[System, ...]:
    """`store`, or `store@<spec>` per embedder when a run compares several."""
    if not embedders:
        return (System(STORE, STORE),)
    return tuple(System(f"store@{spec}", STORE, spec) for spec in embedders)


def run_plan(config: Any, scope_ids: Sequence[str]) -> Plan:
    """The plan of a `RunConfig` over the dataset's scopes `scope_ids`: store systems
    first (replicate 0 only: store mode is model-free and deterministic), then each
    consolidator's replicates."""
    recall, assembly, fold, cparams = config.params()
    setting = Setting(fold, cparams, (Variant("default", recall, assembly),))
    units: list[Unit] = []
    if config.store_mode:
        for system in store_names(config.embedders):
            units += [Unit(system, 0, 0, s) for s in scope_ids]
    for spec in config.consolidators:
        system = System(f"{PIPELINE}:{spec}", PIPELINE, spec)
        for rep in range(config.replicates):
            units += [Unit(system, 0, rep, s) for s in scope_ids]
    return Plan((setting,), tuple(units))


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of a sweep grid, in grid order (the last axis fastest)."""
    if not grid:
        raise ConfigError("sweep grid is empty")
    names = list(grid)
    for n in names:
        resolve(n)
        if not grid[n]:
            raise ConfigError(f"sweep grid for {n!r} has no values")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]


def point_params(point: Mapping[str, Any], base: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """memkit's params per group for one grid point over the `base` overrides."""
    kw: dict[str, dict[str, Any]] = {g: dict(base.get(g, {})) for g in GROUPS}
    for name, v in point.items():
        g, f = resolve(name)
        kw[g][f] = v
    try:
        return {g: GROUPS[g](**kw[g]) for g in GROUPS}
    except TypeError as e:
        raise ConfigError(f"bad sweep parameters {dict(point)!r}: {e}") from None


def _variant(name: str, params: Mapping[str, Any]) -> Variant:
    return Variant(name, params["recall"], params["assembly"])


def needs_pipeline(grid: Mapping[str, Sequence[Any]]) -> bool:
    """A consolidation tunable changes what is consolidated: pipeline mode."""
    return any(resolve(n)[0] == "consolidation" for n in grid)


def sweep_plan(
    grid: Mapping[str, Sequence[Any]],
    base: Mapping[str, Mapping[str, Any]],
    scope_ids: Sequence[str],
    *,
    consolidator: str = "heuristic",
) -> Plan:
    """The plan of a sweep (module docstring): pipeline units per grid point and
    scope with `consolidator`, else store units per fold point and scope."""
    points = [point_params(p, base) for p in grid_points(grid)]
    if needs_pipeline(grid):
        system = System(f"{PIPELINE}:{consolidator}", PIPELINE, consolidator)
        settings = tuple(
            Setting(
                p["fold"], p["consolidation"], (Variant("p", p["recall"], p["assembly"]),), (i,)
            )
            for i, p in enumerate(points)
        )
    else:
        by_fold: dict[FoldParams, list[int]] = {}
        for i, p in enumerate(points):
            by_fold.setdefault(p["fold"], []).append(i)
        system = System(STORE, STORE)
        settings = tuple(
            Setting(
                fold,
                points[idx[0]]["consolidation"],
                tuple(_variant(str(i), points[i]) for i in idx),
                tuple(idx),
            )
            for fold, idx in by_fold.items()
        )
    units = tuple(Unit(system, k, 0, s) for k in range(len(settings)) for s in scope_ids)
    return Plan(settings, units)
