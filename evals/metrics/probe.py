"""Probe metrics: rankings (each with its full and random baselines) and the block.

Definitions in `evals.scorers`; the unit is `evals.units.ProbeUnit`.
"""

from __future__ import annotations

import math
from typing import Any

from evals.baselines import (
    random_ndcg_at_k,
    random_precision_at_k,
    random_recall_at_k,
    random_reciprocal_rank,
)
from evals.registry import register
from evals.scorers import (
    leaked,
    ndcg_at_k,
    precision_at_k,
    precision_of_returned,
    recall_at_k,
    reciprocal_rank,
    reciprocal_rank_pessimistic,
    relevant_shut_out,
)

NAN = math.nan


K_VALUES: tuple[int, ...] = (1, 3, 8)
"""The k of P@k; recall@k uses those above 1."""


def _defined(fn: Any) -> Any:
    """A relevance metric: NaN on a probe whose relevance is undefined."""
    return lambda p, *a: NAN if p.undefined else fn(p, *a)


def _defined_pair(fn: Any) -> Any:
    """A pooled relevance metric: (NaN, NaN), dropped, on an undefined probe."""
    return lambda p, *a: (NAN, NAN) if p.undefined else fn(p, *a)


def probe_metric(name: str, definition: str, direction: str, family: str, **kw: Any) -> Any:
    """Register a metric of one probe (`evals.units.ProbeUnit`)."""
    return register(
        name, unit="probe", definition=definition, direction=direction, family=family, **kw
    )


def _ranking_metric(
    name: str,
    definition: str,
    system: Any,
    random: Any,
    lists: tuple[str, ...] = (),
    baseline_lists: tuple[str, ...] = (),
) -> None:
    """A ranking metric and its two baselines (`<name>_full`, `<name>_random`; see the
    module docstring), registered side by side so every table lists them together.
    `system(labels, scores, relevant)` scores a ranking (scores None: use the order);
    `random(candidates, relevant)` is its expectation over random orders. The baselines
    join the headline only where `baseline_lists` says so (recall@8's), so the first
    screen keeps its height; every table below lists them all."""
    probe_metric(name, definition, "higher", "ranking", lists=lists)(
        _defined(lambda p: system(p.labels, p.scores, p.relevant))
    )
    near = baseline_lists
    probe_metric(
        f"{name}_full",
        f"{name} of the same store's full ranking: floor off, every live candidate ranked "
        "(baseline: what the floor's cut costs or saves)",
        "higher",
        "ranking",
        lists=near,
    )(_defined(lambda p: NAN if p.full is None else system(p.full, None, p.relevant)))
    probe_metric(
        f"{name}_random",
        f"expected {name} of a uniformly random order of the full ranking's candidates, "
        "computed exactly (baseline: what ranking adds over chance)",
        "higher",
        "ranking",
        lists=near,
    )(_defined(lambda p: NAN if p.full is None else random(p.full, p.relevant)))


_ranking_metric(
    "precision_returned",
    "mean over probes with a relevant fact and a non-empty list of distinct relevant "
    "facts returned / returned (a repeat counts as a miss); its baselines return every "
    "candidate, so full and random agree",
    lambda labels, _s, rel: precision_of_returned(labels, rel),
    lambda cands, rel: precision_of_returned(cands, rel),
    lists=("compare", "sweep"),
)
for _k in K_VALUES:
    _ranking_metric(
        f"p_at_{_k}",
        f"mean over probes with a relevant fact of distinct relevant facts in top {_k} / {_k} "
        "(short lists padded with misses, repeats count as misses)",
        lambda labels, _s, rel, k=_k: precision_at_k(labels, rel, k),
        lambda cands, rel, k=_k: random_precision_at_k(cands, rel, k),
        lists=("headline", "breakdown", "compare", "sweep") if _k == 1 else (),
    )
for _k in K_VALUES[1:]:
    _ranking_metric(
        f"recall_at_{_k}",
        f"mean over probes with relevant facts: distinct relevant in top {_k} / relevant",
        lambda labels, _s, rel, k=_k: recall_at_k(labels, rel, k),
        lambda cands, rel, k=_k: random_recall_at_k(cands, rel, k),
        lists=("headline", "breakdown", "compare", "sweep") if _k == 8 else (),
        baseline_lists=("headline",) if _k == 8 else (),
    )

_ranking_metric(
    "mrr",
    "mean over probes with a relevant fact of 1 / rank of the first relevant item, ranked by "
    "score with ties broken by returned order",
    lambda labels, scores, rel: reciprocal_rank(labels, rel, scores),
    random_reciprocal_rank,
    lists=("headline", "breakdown", "compare", "sweep"),
)
_ranking_metric(
    "mrr_pessimistic",
    "mean reciprocal rank ranked by score with ties broken against relevant items "
    "(never above mrr); the full ranking has no recorded scores, so its baseline is "
    "mrr_full's",
    lambda labels, scores, rel: (
        reciprocal_rank(labels, rel)
        if scores is None
        else reciprocal_rank_pessimistic(labels, scores, rel)
    ),
    random_reciprocal_rank,
)
_ranking_metric(
    "ndcg_at_8",
    "mean nDCG@8, binary gains, repeats of a fact gain 0",
    lambda labels, _s, rel: ndcg_at_k(labels, rel, 8),
    lambda cands, rel: random_ndcg_at_k(cands, rel, 8),
    lists=("headline", "breakdown", "compare", "sweep"),
)
probe_metric(
    "empty_recall",
    "share of probes where recall returned nothing",
    "neutral",
    "block",
    lists=("sweep",),
)(lambda p: float(not p.labels))
probe_metric(
    "offtopic_silence",
    "share of probes without a relevant fact whose block is empty (nothing injected)",
    "higher",
    "block",
    lists=("headline", "sweep"),
)(_defined(lambda p: NAN if p.relevant else float(not p.admitted)))
probe_metric(
    "offtopic_bytes",
    "mean over probes without a relevant fact of bytes injected (rendered block)",
    "lower",
    "offtopic_bytes",
    lists=("headline",),
)(_defined(lambda p: NAN if p.relevant else float(p.block_bytes)))
probe_metric(
    "budget_waste",
    "wasted / admitted entry bytes, pooled over probes (superseded+duplicate+irrelevant)",
    "lower",
    "waste",
    pooled=True,
    lists=("headline", "breakdown", "compare", "sweep"),
)(_defined_pair(lambda p: (p.waste.wasted, p.waste.admitted)))
probe_metric(
    "supersede_leakage",
    "share of probes whose block admits a retracted or superseded fact",
    "lower",
    "block",
    lists=("headline", "breakdown", "compare", "sweep"),
)(lambda p: float(leaked(p.admitted, p.stale)))
probe_metric(
    "relevant_shut_out",
    "mean per probe of relevant facts recalled but not admitted",
    "lower",
    "per_probe_count",
    lists=("headline",),
)(_defined(lambda p: relevant_shut_out(p.labels, p.admitted, p.relevant)))
probe_metric(
    "waste_irrelevant",
    "irrelevant / admitted entry bytes, pooled over probes",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.irrelevant, p.waste.admitted)))
probe_metric(
    "waste_duplicate",
    "bytes of a fact already admitted in the block / admitted bytes, pooled",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.duplicate, p.waste.admitted)))
probe_metric(
    "waste_superseded",
    "bytes of retracted or superseded facts / admitted bytes, pooled",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.superseded, p.waste.admitted)))
probe_metric(
    "clamp_stopped",
    "share of probes whose block the byte budget stopped",
    "neutral",
    "block",
)(lambda p: float(p.stopped))
