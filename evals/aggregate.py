"""From run-file rows to per-unit metric values and the metrics table.

Run-file rows (`probes.jsonl`, `writes.jsonl`, `attempts.jsonl`,
`extraction.jsonl`) become *units* (`UNIT_BUILDERS`), each tagged with the
cluster it is nested in (its scope); every registered metric of that unit
turns each unit into a value (or a numerator/denominator pair when pooled).
`estimate` turns one metric's `Values` into an interval with `evals.stats`.

This module leaves out the metric definitions (`evals.scorers`, registered
by `evals.metrics` in `evals.registry`) and the file I/O (`evals.runfolder`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evals import registry
from evals.rows import (
    TABLE_ROWS,
    AttemptRow,
    ExtractionRow,
    ProbeRow,
    WriteRow,
    by_system,
    rows_of,
)
from evals.runfolder import DIGITS, RUN_VERSION, write_json
from evals.scorers import Write
from evals.units import (
    AttemptUnit,
    FactUnit,
    ProbeUnit,
    RolloutUnit,
    RowUnit,
    judged_first,
    pass_units_in_order,
)


@dataclass
class Values:
    """One metric's per-unit values over a sample of units.

    `nums` holds the per-unit values (NaN where undefined), or numerators
    when `dens` is not None (a pooled ratio sum(nums) / sum(dens));
    `clusters[i]` names the cluster unit i is nested in (its scope).
    """

    nums: list[float] = field(default_factory=list)
    dens: list[float] | None = None
    clusters: list[Any] = field(default_factory=list)
    bounded: bool | None = None
    """The metric's values are shares in [0, 1] (None: judge from the values)."""


Unit = tuple[Any, Any]
"""(cluster key, unit object)."""


def probe_units(rows: Iterable[ProbeRow], *, include_apart: bool = False) -> list[Unit]:
    """Probes; a probe marked `apart` (LoCoMo adversarial) is left out unless asked for:
    it is reported in its group's table only (`evals.groups`)."""
    return [(r.scope_id, ProbeUnit(r)) for r in rows if include_apart or not r.apart]


def ranking_units(rows: Iterable[ProbeRow], *, include_apart: bool = False) -> list[Unit]:
    """Probes that recorded a full ranking (LongMemEval), abstention ones left out."""
    from evals.retrieval import RankingUnit

    return [
        (r.scope_id, RankingUnit(r))
        for r in rows
        if r.ranking is not None and not r.undefined and (include_apart or not r.apart)
    ]


def fold_group_units(rows: Iterable[WriteRow]) -> list[Unit]:
    """The writes of each labelled fold group (rows carrying `group`), in write order."""
    from evals.scorers import fold_group_counts

    by: dict[tuple[str, str], list[WriteRow]] = {}
    for w in rows:
        if w.group is not None:
            by.setdefault((w.scope_id, w.group), []).append(w)
    return [(key[0], fold_group_counts(by[key])) for key in sorted(by)]


def write_units(rows: Iterable[WriteRow]) -> list[Unit]:
    """A fact's writes are one unit (the writes of one fact are not independent)."""
    by_fact: dict[tuple[str, str], list[Write]] = {}
    for w in rows:
        by_fact.setdefault((w.scope_id, w.fact), []).append(
            Write(w.fact, w.restatement, w.row, w.folded, w.row_fact)
        )
    return [(key[0], by_fact[key]) for key in sorted(by_fact)]


def attempt_units(rows: Iterable[AttemptRow]) -> list[Unit]:
    """Every attempt; validity is judged only on the first answer to each distinct request."""
    rows = list(rows)
    return [
        (r.scope_id, AttemptUnit(r, first))
        for r, first in zip(rows, judged_first(rows), strict=True)
    ]


def pass_units(rows: Iterable[AttemptRow]) -> list[Unit]:
    """A pass's attempts (retries included) are one unit, marked when it resent a failed request."""
    units = pass_units_in_order(list(rows))
    units.sort(key=lambda u: str((u[0].scope_id, u[0].replicate, u[0].pass_)))
    return [(unit[0].scope_id, unit) for unit in units]


def row_units(rows: Iterable[ExtractionRow]) -> list[Unit]:
    out: list[Unit] = []
    for e in rows:
        live, old = frozenset(e.live_gold), frozenset(e.stale_gold)
        out += [(e.scope_id, RowUnit(r.fact, live, old, e.gold)) for r in e.rows]
    return out


def fact_units(rows: Iterable[ExtractionRow]) -> list[Unit]:
    out: list[Unit] = []
    for e in rows:
        covered = {r.fact for r in e.rows}
        out += [(e.scope_id, FactUnit(f, f in covered)) for f in sorted(e.live_gold)]
    return out


def rollout_units(rows: Iterable[ExtractionRow]) -> list[Unit]:
    """Each staged rollout at the end of a scope, by where it ended (extraction rows)."""
    out: list[Unit] = []
    for e in rows:
        if e.rollouts is None:  # an older row: nothing recorded, no rollout unit
            continue
        for state in ("consumed", "pending", "parked"):
            out += [(e.scope_id, RolloutUnit(state))] * getattr(e.rollouts, state)
    return out


UNIT_BUILDERS: dict[str, tuple[str, Callable[[Any], list[Unit]]]] = {
    "probe": ("probes", probe_units),
    "write": ("writes", write_units),
    "attempt": ("attempts", attempt_units),
    "pass": ("attempts", pass_units),
    "row": ("extraction", row_units),
    "fact": ("extraction", fact_units),
    "rollout": ("extraction", rollout_units),
    "ranking": ("probes", ranking_units),
    "fold_group": ("writes", fold_group_units),
}
"""unit -> (run file it is built from, builder)."""
SPARSE_UNITS: frozenset[str] = frozenset({"ranking", "fold_group"})
"""Units only some sources record (LongMemEval rankings, MSC fold groups): a
system with none gets no such metric rather than an undefined row."""


def unit_values(unit: str, units: Sequence[Unit], metrics: Iterable[str] | None = None) -> dict:
    """metric -> `Values` for every registered metric of `unit` (or those named)."""
    wanted = None if metrics is None else set(metrics)
    out: dict[str, Values] = {}
    for m in registry.all_metrics().values():
        if m.unit != unit or m.fn is None or (wanted is not None and m.name not in wanted):
            continue
        dens: list[float] = []
        v = Values(dens=dens if m.pooled else None, bounded=registry.bounded(m.name))
        for cluster, u in units:
            x = m.fn(u)
            if m.pooled:
                v.nums.append(float(x[0]))
                dens.append(float(x[1]))
            else:
                v.nums.append(float(x))
            v.clusters.append(cluster)
        out[m.name] = v
    return out


def _of(unit: str) -> Callable[[Sequence[Any]], dict[str, Values]]:
    def fn(rows: Sequence[Any]) -> dict[str, Values]:
        return unit_values(unit, UNIT_BUILDERS[unit][1](rows))

    fn.__name__ = f"{unit}_metrics"
    fn.__doc__ = f"metric -> Values for every registered {unit} metric over run-file rows."
    return fn


probe_metrics = _of("probe")
write_metrics = _of("write")
attempt_metrics = _of("attempt")
pass_metrics = _of("pass")


def extraction_metrics(rows: Sequence[ExtractionRow]) -> dict[str, Values]:
    """metric -> Values for the extraction metrics (rows and gold facts as units)."""
    return {**_of("row")(rows), **_of("fact")(rows), **_of("rollout")(rows)}


def estimate(values: Values, *, clustered: bool = True) -> Any:
    """An `Estimate` of one metric's `Values`: units nested in their clusters
    (scopes), or independent units when `clustered` is False (within one scope)."""
    from evals.stats import interval

    return interval(
        values.nums, values.dens, values.clusters if clustered else None, bounded=values.bounded
    )


def row_fields(metric: str) -> dict[str, Any]:
    """The registry fields a metrics.json/csv row carries beside the numbers."""
    m = registry.get(metric)
    return {"unit": m.unit, "direction": m.direction, "definition": m.definition}


COLUMNS = [
    "system",
    "metric",
    "value",
    "lo",
    "hi",
    "n",
    "clusters",
    "method",
    "unit",
    "direction",
    "definition",
]


def groups_from_run(d: Path) -> dict[str, dict[str, Values]]:
    """system -> metric -> Values for every unit a run folder's files hold."""
    groups: dict[str, dict[str, Values]] = {}
    cache: dict[str, list[Any]] = {}
    for unit, (fname, build) in UNIT_BUILDERS.items():
        rows = cache.setdefault(fname, rows_of(d, TABLE_ROWS[fname]))
        for sys_, sys_rows in by_system(rows).items():
            units = build(sys_rows)
            if units or unit not in SPARSE_UNITS:
                groups.setdefault(sys_, {}).update(unit_values(unit, units))
    return groups


def metrics_from_run(run_dir: str | Path) -> pd.DataFrame:
    """The metrics table of a run folder: one row per (system, metric)."""
    d = Path(run_dir)
    groups = groups_from_run(d)
    records = []
    for sys_ in sorted(groups):
        for metric in sorted(groups[sys_]):
            e = estimate(groups[sys_][metric])
            records.append(
                {
                    "system": sys_,
                    "metric": metric,
                    **e.as_dict(registry.digits(metric, DIGITS)),
                    **row_fields(metric),
                }
            )
    mpath = d / "matcher.json"
    if mpath.is_file() and any(s.startswith("pipeline:") for s in groups):
        m = json.loads(mpath.read_text(encoding="utf-8"))
        for key in ("precision", "recall"):
            ci = m.get(f"{key}_ci") or {"value": m[key], "lo": None, "hi": None, "n": m["n"]}
            ci = {"clusters": ci.get("n"), "method": "", **ci}
            records.append(
                {"system": "matcher", "metric": f"matcher_{key}", **ci}
                | row_fields(f"matcher_{key}")
            )
    return pd.DataFrame.from_records(records, columns=COLUMNS)


def breakdown_from_run(run_dir: str | Path) -> pd.DataFrame:
    """The registry's breakdown metrics per (system, scope), each with its CI
    (within one scope the units are taken as independent)."""
    d = Path(run_dir)
    listed = registry.names(listed="breakdown")
    recs = []
    for fname in dict.fromkeys(f for f, _ in UNIT_BUILDERS.values()):
        wanted = [m for m in listed if UNIT_BUILDERS[registry.get(m).unit][0] == fname]
        if not wanted:
            continue
        by: dict[tuple[str, str], list[Any]] = {}
        for sys_, sys_rows in by_system(rows_of(d, TABLE_ROWS[fname])).items():
            for r in sys_rows:
                by.setdefault((sys_, r.scope_id), []).append(r)
        for (sys_, scope), rows in sorted(by.items()):
            for m in wanted:
                build = UNIT_BUILDERS[registry.get(m).unit][1]
                v = unit_values(registry.get(m).unit, build(rows), [m])[m]
                e = estimate(v, clustered=False)
                recs.append(
                    {
                        "system": sys_,
                        "scope_id": scope,
                        "metric": m,
                        **e.as_dict(registry.digits(m, DIGITS)),
                    }
                )
    return pd.DataFrame.from_records(
        recs,
        columns=["system", "scope_id", "metric", "value", "lo", "hi", "n", "clusters", "method"],
    )


def write_breakdown(run_dir: Path) -> None:
    t = breakdown_from_run(run_dir)
    rows = json.loads(t.to_json(orient="records", double_precision=10))
    write_json(run_dir / "breakdown.json", {"version": RUN_VERSION, "rows": rows})
