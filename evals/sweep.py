"""Grids over tunables, scored with CIs, with a recommended operating point.

A grid maps tunable names to the values to try; every combination is a
point. Names are `<group>.<field>` of memkit's params (`recall.floor`,
`fold.window_days`, `assembly.block_bytes`, `consolidation.snapshot_policy`,
...) or one of the short aliases in `ALIASES`.

Cost model, so sweeps stay cheap:
- recall and assembly tunables never change what is written, so all their
  points are probed on **one** store-mode replay (as variants);
- fold tunables change the writes: one replay per fold point, all sharing a
  `CachingEmbedder`, so every text is embedded once per sweep;
- consolidation tunables (snapshot policy, batch sizes) need pipeline mode:
  one pipeline replay per point with the chosen consolidator.

The result is a long DataFrame (one row per point and metric: value, lo,
hi, n) plus the recommended point: the best value of the objective metric;
among points whose value ties the best, the first in grid order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals import aggregate, registry
from evals.matcher import Matcher
from evals.replay import (
    CachingEmbedder,
    Variant,
    oracle_gold,
    replay_pipeline_scope,
    replay_store,
    scopes_of,
)
from evals.runfolder import DIGITS, RUN_VERSION, write_json, write_manifest, write_metrics
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, ConsolidationParams, FoldParams, RecallParams

GROUPS: dict[str, type] = {
    "recall": RecallParams,
    "assembly": AssemblyParams,
    "fold": FoldParams,
    "consolidation": ConsolidationParams,
}
ALIASES: dict[str, str] = {
    "floor": "recall.floor",
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


def default_metrics() -> tuple[str, ...]:
    """The registry's sweep list."""
    return registry.names(listed="sweep")


def resolve(name: str) -> tuple[str, str]:
    """A tunable name as (group, field); unknown names are errors naming them."""
    full = ALIASES.get(name, name)
    group, _, fld = full.partition(".")
    cls = GROUPS.get(group)
    if cls is None or fld not in {f.name for f in dataclasses.fields(cls)}:
        from evals.checks import unknown

        full_names = [f"{g}.{f.name}" for g, c in GROUPS.items() for f in dataclasses.fields(c)]
        raise unknown("tunable", name, [*ALIASES, *full_names])
    return group, fld


@dataclass(frozen=True)
class SweepResult:
    frame: pd.DataFrame
    """One row per (point, metric): the grid columns, metric, value, lo, hi, n."""
    recommended: dict[str, Any]
    """The chosen point's tunables and its objective Estimate (value, lo, hi, n)."""
    params: tuple[str, ...]


def _points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    if not grid:
        raise ConfigError("sweep grid is empty")
    names = list(grid)
    for n in names:
        resolve(n)
        if not grid[n]:
            raise ConfigError(f"sweep grid for {n!r} has no values")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]


def _params(point: Mapping[str, Any], base: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    kw: dict[str, dict[str, Any]] = {g: dict(base.get(g, {})) for g in GROUPS}
    for name, v in point.items():
        g, f = resolve(name)
        kw[g][f] = v
    try:
        return {g: GROUPS[g](**kw[g]) for g in GROUPS}
    except TypeError as e:
        raise ConfigError(f"bad sweep parameters {dict(point)!r}: {e}") from None


def _rows(
    point_i: int,
    point: Mapping[str, Any],
    groups: Mapping[str, Any],
    seed: int,
    resamples: int,
    metrics: Sequence[str],
) -> list[dict[str, Any]]:
    out = []
    for m in metrics:
        if m not in groups:
            continue
        e = aggregate.estimate(groups[m], seed=seed, resamples=resamples)
        out.append(
            {
                "point_index": point_i,
                **point,
                "metric": m,
                "value": e.value,
                "lo": e.lo,
                "hi": e.hi,
                "n": e.n,
            }
        )
    return out


def sweep(
    dataset: Any,
    grid: Mapping[str, Sequence[Any]],
    *,
    objective: str = "ndcg_at_8",
    maximize: bool = True,
    metrics: Sequence[str] | None = None,
    base: Mapping[str, Mapping[str, Any]] | None = None,
    embedder: Any = "wordllama",
    consolidator: str = "heuristic",
    scopes: Sequence[str] | None = None,
    seed: int = 0,
    resamples: int = 1000,
    progress: Callable[[int, int, str], None] | None = None,
) -> SweepResult:
    """Score every grid point; see the module docstring for what each costs.

    `progress(done, total, what)` is called after each replayed scope."""
    from memkit.embed import get_embedder

    base = base or {}
    points = _points(grid)
    n_scopes = len(scopes_of(dataset, scopes))
    done = [0]

    def step(what: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total, what)

    registry.get(objective)
    metrics = tuple(
        dict.fromkeys([*(default_metrics() if metrics is None else metrics), objective])
    )
    for m in metrics:
        registry.get(m)
    emb = embedder if not isinstance(embedder, str) else CachingEmbedder(get_embedder(embedder))
    needs_pipeline = any(resolve(n)[0] == "consolidation" for n in grid)
    rows: list[dict[str, Any]] = []
    if needs_pipeline:
        total = len(points) * n_scopes
        matcher = Matcher(dataset.facts)
        from memkit.consolidate import get_consolidator

        opts = {"gold": oracle_gold(dataset, matcher)} if consolidator == "oracle" else {}
        for i, point in enumerate(points):
            p = _params(point, base)
            cons = get_consolidator(consolidator, **opts)
            v = Variant("p", p["recall"], p["assembly"])

            async def run_all(p=p, cons=cons, v=v, i=i) -> list[Any]:
                out = []
                for s in scopes_of(dataset, scopes):
                    out.append(
                        await replay_pipeline_scope(
                            s,
                            cons,
                            embedder=emb,
                            matcher=matcher,
                            params=p["consolidation"],
                            fold=p["fold"],
                            variants=(v,),
                        )
                    )
                    step(f"point {i + 1}/{len(points)} {s.scope_id}")
                return out

            res = asyncio.run(run_all())
            groups = aggregate.probe_metrics([r for x in res for r in x.probes])
            groups.update(aggregate.attempt_metrics([a for x in res for a in x.attempts]))
            groups.update(aggregate.extraction_metrics([e for x in res for e in x.extraction]))
            rows += _rows(i, point, groups, seed, resamples, metrics)
    else:
        # group points by their fold setting: one replay per fold point
        by_fold: dict[FoldParams, list[tuple[int, dict[str, Any], Variant]]] = {}
        for i, point in enumerate(points):
            p = _params(point, base)
            by_fold.setdefault(p["fold"], []).append(
                (i, point, Variant(str(i), p["recall"], p["assembly"]))
            )
        total = len(by_fold) * n_scopes
        for fold, items in by_fold.items():
            what = f"{len(items)} point(s) on"
            r = replay_store(
                dataset,
                embedder=emb,
                fold=fold,
                variants=[v for _, _, v in items],
                scopes=scopes,
                on_scope=lambda sid, what=what: step(f"{what} {sid}"),
            )
            fold_groups = aggregate.write_metrics(r.writes)
            by_variant: dict[str, list[dict[str, Any]]] = {}
            for row in r.probes:
                by_variant.setdefault(row["variant"], []).append(row)
            for i, point, v in items:
                groups = aggregate.probe_metrics(by_variant.get(v.name, []))
                groups.update(fold_groups)
                rows += _rows(i, point, groups, seed, resamples, metrics)
    frame = pd.DataFrame.from_records(rows).sort_values(["point_index", "metric"], kind="stable")
    frame = frame.reset_index(drop=True)
    return SweepResult(frame, recommend(frame, list(grid), objective, maximize), tuple(grid))


def recommend(
    frame: pd.DataFrame, params: Sequence[str], objective: str, maximize: bool = True
) -> dict[str, Any]:
    """The best point on `objective` (first in grid order among ties)."""
    sub = frame[(frame["metric"] == objective) & frame["value"].notna()]
    if sub.empty:
        raise ConfigError(f"objective {objective!r} is undefined at every point")
    best = sub["value"].max() if maximize else sub["value"].min()
    row = sub[sub["value"] == best].sort_values("point_index").iloc[0]
    out = {p: _plain(row[p]) for p in params}
    out.update(
        {
            "objective": objective,
            "maximize": maximize,
            "value": float(row["value"]),
            "lo": _nan_none(row["lo"]),
            "hi": _nan_none(row["hi"]),
            "n": int(row["n"]),
        }
    )
    return out


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
    obj = frame[(frame["metric"] == res.recommended["objective"])]
    point = obj[obj["value"] == res.recommended["value"]]["point_index"].min()
    rows = [
        {
            "system": "store@recommended",
            "metric": r.metric,
            "value": _round(r.value),
            "lo": _round(r.lo),
            "hi": _round(r.hi),
            "n": int(r.n),
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
