"""Grids over tunables, scored with CIs, with a recommended operating point.

A grid maps tunable names to the values to try; every combination is a
point. Names are `<group>.<field>` of memkit's params (`recall.floor`,
`fold.window_days`, `assembly.block_bytes`, `consolidation.snapshot_policy`,
...) or one of the short aliases in `evals.tunables.ALIASES`.

Cost model, so sweeps stay cheap:
- recall and assembly tunables never change what is written, so all their
  points are probed on **one** store-mode replay (as variants);
- fold tunables change the writes: one replay per fold point, all sharing a
  `CachingEmbedder`, so every text is embedded once per sweep;
- consolidation tunables (snapshot policy, batch sizes) need pipeline mode:
  one pipeline replay per point with the chosen consolidator.
Each replay is a setting of the sweep's execution plan (`evals.plan.sweep_plan`),
run by the same runner as `eval run` (`evals.execute`).

The result is a long DataFrame (one row per point and metric: value, lo,
hi, n, clusters, method) plus the recommended point.

Objectives. The default (`DEFAULT_OBJECTIVE`) is a trade-off that counts
waste, by non-inferiority: a point qualifies when the *lower* end of the
paired 95% interval of its `recall_at_8` minus the best point's (over the
same probes, clustered by scope) clears -`MARGIN` (0.05), i.e. the data show
it loses less than the margin; among the qualifying points the one with the
smallest `budget_waste` wins, ties to the first in grid order. The best
point always qualifies. A rule on the interval's upper end would let noise
qualify a point (a wide interval reaches -margin more easily than a narrow
one), so it is not used. The recommendation lists every point with its
difference and why it did or did not qualify. Any registered metric with a direction
can be the objective instead (its best value in that direction). A
recommendation at the edge of the grid (the lowest or highest value tried of
a numeric tunable) is flagged: the optimum may lie outside, extend the grid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals import aggregate, kinds, registry
from evals.execute import Runtime, execute
from evals.matcher import Matcher
from evals.plan import PIPELINE, Setting, Unit, grid_points, sweep_plan
from evals.replay import CachingEmbedder, scopes_of
from evals.rows import ProbeRow
from evals.runfolder import DIGITS, RUN_VERSION, write_json, write_manifest, write_metrics
from evals.tunables import EMBEDDER_AXIS, resolve  # noqa: F401 (importable from here)
from memkit.errors import ConfigError
from memkit.params import RecallParams


def default_metrics() -> tuple[str, ...]:
    """The registry's sweep list."""
    return registry.names(listed="sweep")


@dataclass(frozen=True)
class SweepResult:
    frame: pd.DataFrame
    """One row per (point, metric): the grid columns, metric, value, lo, hi, n."""
    recommended: dict[str, Any]
    """The chosen point's tunables and its objective Estimate (value, lo, hi, n)."""
    params: tuple[str, ...]
    units: Mapping[int, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    """point -> the objective's per-unit `Values` (pairs points on the same probes)."""


DEFAULT_OBJECTIVE = "default"
CONSTRAINT, TARGET = "recall_at_8", "budget_waste"
MARGIN = 0.05


def default_text(margin: float = MARGIN) -> str:
    return (
        f"smallest {TARGET} among points whose {CONSTRAINT} is non-inferior to the best "
        f"point's: the lower end of the paired 95% CI of point - best clears -{margin:g}"
    )


def objective_metrics(objective: str) -> tuple[str, ...]:
    """The metrics an objective reads; an unknown name lists the valid ones."""
    if objective == DEFAULT_OBJECTIVE:
        return (CONSTRAINT, TARGET)
    directed = [n for n, m in registry.all_metrics().items() if m.direction != "neutral"]
    if objective not in registry.all_metrics():
        from memkit.errors import did_you_mean

        raise ConfigError(
            f"unknown metric {objective!r} for the objective"
            f"{did_you_mean(objective, [DEFAULT_OBJECTIVE, *directed])}; valid: "
            f"{DEFAULT_OBJECTIVE!r} ({default_text()}) or a registered metric with a "
            f"direction: {', '.join(directed)}"
        )
    if registry.get(objective).direction == "neutral":
        raise ConfigError(f"objective {objective!r} has no better direction; pick another")
    return (objective,)


def _rows(
    point_i: int,
    point: Mapping[str, Any],
    groups: Mapping[str, Any],
    metrics: Sequence[str],
) -> list[dict[str, Any]]:
    out = []
    for m in metrics:
        if m not in groups:
            continue
        e = aggregate.estimate(groups[m])
        out.append(
            {
                "point_index": point_i,
                **point,
                "metric": m,
                "value": e.value,
                "lo": e.lo,
                "hi": e.hi,
                "n": e.n,
                "clusters": e.clusters,
                "method": e.method,
            }
        )
    return out


def sweep(
    dataset: Any,
    grid: Mapping[str, Sequence[Any]],
    *,
    objective: str = DEFAULT_OBJECTIVE,
    metrics: Sequence[str] | None = None,
    base: Mapping[str, Mapping[str, Any]] | None = None,
    embedder: Any = "wordllama",
    consolidator: str = "heuristic",
    consolidator_options: Mapping[str, Any] | None = None,
    scopes: Sequence[str] | None = None,
    margin: float = MARGIN,
    progress: Callable[[int, int, str], None] | None = None,
) -> SweepResult:
    """Score every grid point; see the module docstring for what each costs.

    `progress(done, total, what)` is called after each replayed scope;
    `consolidator_options` are `get_consolidator` keyword arguments (api_base, ...).
    An `embedder` axis in the grid sweeps the rest once per embedder (`EMBEDDER_AXIS`)."""
    from memkit.embed import get_embedder

    if EMBEDDER_AXIS in grid:
        kw: dict[str, Any] = dict(objective=objective, metrics=metrics, base=base)
        kw.update(consolidator=consolidator)
        kw.update(consolidator_options=consolidator_options, scopes=scopes, progress=progress)
        return _sweep_embedders(dataset, grid, margin=margin, **kw)

    points = grid_points(grid)
    in_scope = scopes_of(dataset, scopes)
    plan = sweep_plan(grid, base or {}, [s.scope_id for s in in_scope], consolidator=consolidator)
    needs = objective_metrics(objective)
    metrics = tuple(dict.fromkeys([*(default_metrics() if metrics is None else metrics), *needs]))
    for m in metrics:
        registry.get(m)
    emb = embedder if not isinstance(embedder, str) else CachingEmbedder(get_embedder(embedder))
    opts = dict(consolidator_options or {})
    pipeline = any(u.system.mode == PIPELINE for u in plan.units)
    rt = Runtime(
        scopes={s.scope_id: s for s in in_scope},
        embedder=emb,
        context=kinds.Context(dataset, Matcher(dataset.facts) if pipeline else None),
        options={consolidator: opts},
        concurrency={consolidator: int(opts.get("concurrency") or 4)},
    )
    done = [0]

    def step(u: Unit, _what: str) -> None:
        done[0] += 1
        if progress is not None:
            at = plan.setting(u).points
            what = f"point {at[0] + 1}/{len(points)}" if pipeline else f"{len(at)} point(s) on"
            progress(done[0], len(plan.units), f"{what} {u.scope}")

    ran = execute(plan, rt, step=step)
    rows: list[dict[str, Any]] = []
    kept: dict[int, dict[str, Any]] = {}
    """point -> the objective's per-unit Values (paired comparisons between points)"""
    for k, setting in enumerate(plan.settings):
        res = [ran.results[u] for u in plan.units if u.setting == k]  # in scope order
        for i, groups in _setting_groups(setting, res, pipeline):
            rows += _rows(i, points[i], groups, metrics)
            kept[i] = {m: groups[m] for m in needs if m in groups}
    frame = pd.DataFrame.from_records(rows).sort_values(["point_index", "metric"], kind="stable")
    frame = frame.reset_index(drop=True)
    rec = recommend(frame, list(grid), objective, kept, margin=margin)
    return SweepResult(frame, rec, tuple(grid), kept)


def _setting_groups(
    setting: Setting, res: Sequence[Any], pipeline: bool
) -> list[tuple[int, dict[str, Any]]]:
    """(grid point, its metric groups) for each point a setting's scope results score."""
    if pipeline:
        groups = aggregate.probe_metrics([r for x in res for r in x.probes])
        groups.update(aggregate.attempt_metrics([a for x in res for a in x.attempts]))
        groups.update(aggregate.extraction_metrics([e for x in res for e in x.extraction]))
        return [(setting.points[0], groups)]
    fold_groups = aggregate.write_metrics([w for x in res for w in x.writes])
    by_variant: dict[str, list[ProbeRow]] = {}
    for x in res:
        for row in x.probes:
            by_variant.setdefault(row.variant, []).append(row)
    out = []
    for i, v in zip(setting.points, setting.variants, strict=True):
        groups = aggregate.probe_metrics(by_variant.get(v.name, []))
        groups.update(fold_groups)
        out.append((i, groups))
    return out


def _sweep_embedders(
    dataset: Any, grid: Mapping[str, Sequence[Any]], *, margin: float, **kw: Any
) -> SweepResult:
    """`--grid embedder=wordllama,hashing` sweeps the other axes once per embedder on the
    same probes: the frame gains an `embedder` column, the recommendation is over every
    (embedder, point), paired on the same probes, and `recommended["by_embedder"]` holds
    each embedder's own recommended point (a floor per embedder: cosine scales differ)."""
    from memkit.embed import get_embedder

    specs = list(grid[EMBEDDER_AXIS])
    if not specs:
        raise ConfigError(f"sweep grid for {EMBEDDER_AXIS!r} has no values")
    rest = {k: v for k, v in grid.items() if k != EMBEDDER_AXIS}
    if not rest:  # the embedders alone: each at the run's floor
        floor = dict((kw.get("base") or {}).get("recall", {})).get("floor", RecallParams().floor)
        rest = {"recall.floor": [floor]}
    frames: list[pd.DataFrame] = []
    units: dict[int, Mapping[str, Any]] = {}
    by: dict[str, dict[str, Any]] = {}
    for spec in specs:
        res = sweep(
            dataset, rest, embedder=CachingEmbedder(get_embedder(spec)), margin=margin, **kw
        )
        offset = sum(len(f["point_index"].unique()) for f in frames)
        f = res.frame.copy()
        f.insert(1, EMBEDDER_AXIS, spec)
        f["point_index"] += offset
        frames.append(f)
        units.update({i + offset: v for i, v in res.units.items()})
        by[spec] = {
            EMBEDDER_AXIS: spec,
            **res.recommended,
            "point_index": res.recommended["point_index"] + offset,
        }
    frame = pd.concat(frames, ignore_index=True)
    params = (EMBEDDER_AXIS, *rest)
    rec = recommend(frame, params, kw["objective"], units, margin=margin)
    return SweepResult(frame, {**rec, "by_embedder": by}, params, units)


def _estimate_dict(row: Any) -> dict[str, Any]:
    return {
        "value": float(row["value"]),
        "lo": _nan_none(row["lo"]),
        "hi": _nan_none(row["hi"]),
        "n": int(row["n"]),
        "clusters": int(row.get("clusters", 0) or 0),
        "method": str(row.get("method", "") or ""),
    }


def _best(sub: pd.DataFrame, higher: bool) -> Any:
    best = sub["value"].max() if higher else sub["value"].min()
    return sub[sub["value"] == best].sort_values("point_index").iloc[0]


def _edges(frame: pd.DataFrame, params: Sequence[str], row: Any) -> list[str]:
    """Tunables whose recommended value is the lowest or highest value tried."""
    out = []
    for p in params:
        vals = sorted(
            {v for v in frame[p] if isinstance(v, int | float) and not isinstance(v, bool)}
        )
        if len(vals) >= 2 and row[p] in (vals[0], vals[-1]):
            side = "lowest" if row[p] == vals[0] else "highest"
            out.append(f"{p}={_plain(row[p])} is the {side} value tried")
    return out


def recommend(
    frame: pd.DataFrame,
    params: Sequence[str],
    objective: str = DEFAULT_OBJECTIVE,
    units: Mapping[int, Mapping[str, Any]] | None = None,
    *,
    margin: float = MARGIN,
) -> dict[str, Any]:
    """The recommended point for `objective` (module docstring), with its CI,
    the rule that chose it and an edge-of-grid flag.

    `units` (point -> metric -> `Values`) lets the default objective compare
    points paired on the same probes; without it, a point counts as not
    significantly below the best when its CI reaches the best's value minus
    `margin`.
    """
    objective_metrics(objective)
    if not 0 <= margin < 1:
        raise ConfigError(f"margin must be in [0, 1), got {margin!r}")
    if objective == DEFAULT_OBJECTIVE:
        cons = frame[(frame["metric"] == CONSTRAINT) & frame["value"].notna()]
        target = frame[(frame["metric"] == TARGET) & frame["value"].notna()]
        if cons.empty or target.empty:
            raise ConfigError(f"default objective: {CONSTRAINT} or {TARGET} undefined everywhere")
        best = _best(cons, higher=True)
        verdicts = [
            _verdict(cons, best, int(r["point_index"]), units, margin, params)
            for _, r in cons.sort_values("point_index").iterrows()
        ]
        ok = [v["point_index"] for v in verdicts if v["qualifies"]]
        row = _best(target[target["point_index"].isin(ok)], higher=False)
        rule = default_text(margin)
        c = cons[cons["point_index"] == row["point_index"]].iloc[0]
        extra = {
            "constraint": {
                "metric": CONSTRAINT,
                "at_point": _estimate_dict(c),
                "best": {
                    **{p: _plain(best[p]) for p in params},
                    **_estimate_dict(best),
                },
                "difference": next(
                    v["difference"] for v in verdicts if v["point_index"] == row["point_index"]
                ),
                "eligible_points": len(ok),
                "qualifying": ok,
                "only_best": len(ok) == 1,
                "points": verdicts,
                "margin": margin,
            },
            "metric": TARGET,
        }
    else:
        sub = frame[(frame["metric"] == objective) & frame["value"].notna()]
        if sub.empty:
            raise ConfigError(f"objective {objective!r} is undefined at every point")
        higher = registry.get(objective).direction == "higher"
        row = _best(sub, higher)
        rule = f"{'highest' if higher else 'lowest'} {objective} (first in grid order among ties)"
        extra = {"metric": objective}
    edges = _edges(frame, params, row)
    out = {p: _plain(row[p]) for p in params}
    out.update(
        {
            "objective": objective,
            "point_index": int(row["point_index"]),
            "rule": rule,
            **extra,
            **_estimate_dict(row),
            "edge": edges,
        }
    )
    if edges:
        out["warning"] = "at the edge of the grid (" + "; ".join(edges) + "): extend the grid"
    return out


def _difference(
    cons: pd.DataFrame, best: Any, i: int, units: Mapping[int, Mapping[str, Any]] | None
) -> dict[str, Any] | None:
    """Paired 95% CI of constraint(point i) - constraint(best point)."""
    from evals.stats import paired_interval

    b = int(best["point_index"])
    if units is None or CONSTRAINT not in units.get(i, {}) or CONSTRAINT not in units.get(b, {}):
        return None
    va, vb = units[i][CONSTRAINT], units[b][CONSTRAINT]
    if len(va.nums) != len(vb.nums) or va.clusters != vb.clusters:
        raise ConfigError("sweep points were not scored on the same units; cannot pair them")
    e = paired_interval(
        va.nums, va.dens, vb.nums, vb.dens, va.clusters, bounded=registry.bounded(CONSTRAINT)
    )
    return e.as_dict(6)


def _verdict(
    cons: pd.DataFrame,
    best: Any,
    i: int,
    units: Mapping[int, Mapping[str, Any]] | None,
    margin: float,
    params: Sequence[str],
) -> dict[str, Any]:
    """Whether point i is non-inferior to the best on the constraint, and why.

    Paired: the lower end of the CI of point - best must be >= -margin. Without
    per-unit values (a frame alone), the point's own lower end must reach the
    best value minus the margin. No interval at all cannot show non-inferiority.
    """
    r = cons[cons["point_index"] == i].iloc[0]
    head = {"point_index": i, **{p: _plain(r[p]) for p in params}, "value": float(r["value"])}
    if i == int(best["point_index"]):
        return {**head, "difference": None, "qualifies": True, "why": "the best point"}
    d = _difference(cons, best, i, units)
    if d is None:
        lo, bound = _nan_none(r["lo"]), float(best["value"]) - margin
        what = f"own lower end {_num(lo)} vs best {float(best['value']):.3f} - {margin:g}"
    else:
        lo, bound = d["lo"], -margin
        what = f"paired lower end {_num(lo)} vs -{margin:g}"
    if lo is None:
        return {**head, "difference": d, "qualifies": False, "why": f"no interval ({what})"}
    ok = lo >= bound
    return {
        **head,
        "difference": d,
        "qualifies": ok,
        "why": f"{what}: {'clears' if ok else 'fails'}",
    }


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def _nan_none(v: Any) -> float | None:
    v = float(v)
    return None if math.isnan(v) else v


def write_sweep(
    out: Path,
    res: SweepResult,
    *,
    config: Any,
    dataset: Any,
    grid: Mapping[str, Sequence[Any]],
    started_at: str,
) -> None:
    """A sweep folder: sweep.csv, recommended.json, the recommended point's
    metrics.json/csv and manifest.json, in the run-folder format."""
    from evals.aggregate import COLUMNS, row_fields

    out.mkdir(parents=True, exist_ok=True)
    frame = res.frame
    f = frame.copy()
    f["param"] = ",".join(res.params)
    f["point"] = f[res.params[0]] if len(res.params) == 1 else f["point_index"]
    f.to_csv(out / "sweep.csv", index=False, float_format="%.6f")
    write_json(out / "recommended.json", {"version": RUN_VERSION, **res.recommended})
    point = res.recommended["point_index"]
    rows = [
        {
            "system": "store@recommended",
            "metric": r.metric,
            "value": _round(r.value),
            "lo": _round(r.lo),
            "hi": _round(r.hi),
            "n": int(r.n),
            "clusters": int(r.clusters),
            "method": r.method,
            **row_fields(r.metric),
        }
        for r in frame[frame["point_index"] == point].itertuples()
    ]
    write_metrics(out, pd.DataFrame.from_records(rows, columns=COLUMNS))
    write_manifest(
        out,
        name=f"sweep {' x '.join(res.params)}",
        config=config.to_dict(),
        dataset=dataset,
        dataset_path=config.dataset,
        embedder=config.embedder,
        seed=config.seed,
        systems=["store"],
        started_at=started_at,
        grid=dict(grid),
    )


def _round(v: float) -> float | None:
    return None if v != v else round(float(v), DIGITS)
