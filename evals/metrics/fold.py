"""Fold-in and dedup metrics: did copies of one fact end in one row (store-mode
writes, labelled fold groups) and did the block drop the right paraphrases.

Definitions in `evals.scorers`; units are a fact's `Write`s, a fold group's
`FoldGroupCounts` and `evals.units.ProbeUnit`.
"""

from __future__ import annotations

from typing import Any

from evals.metrics.probe import probe_metric
from evals.registry import register
from evals.scorers import fold_outcomes, rows_per_fact


def _write(name: str, definition: str, direction: str, **kw: Any) -> Any:
    return register(name, unit="write", definition=definition, direction=direction, **kw)


_write(
    "fold_recall",
    "restatements folded into their own fact's row / restatements, pooled by fact",
    "higher",
    family="fold",
    pooled=True,
    lists=("headline", "sweep"),
)(lambda ws: (lambda c: (c.folded_restatements, c.restatements))(fold_outcomes(ws)))
_write(
    "false_fold_rate",
    "writes folded into another fact's row / writes, pooled by fact",
    "lower",
    family="fold",
    pooled=True,
    lists=("headline", "sweep"),
)(lambda ws: (lambda c: (c.false_folds, c.writes))(fold_outcomes(ws)))
_write(
    "rows_per_fact",
    "mean over facts of distinct rows the fact's writes landed in (1 is ideal)",
    "lower",
    family="rows_per_fact",
    lists=("sweep",),
)(lambda ws: float(rows_per_fact(ws)[ws[0].fact_id]))


register(
    "group_fold_recall",
    unit="fold_group",
    definition="writes of a labelled fold group (MSC merge) after its first, folded into a row "
    "of the same group / such writes, pooled by group",
    direction="higher",
    family="fold",
    pooled=True,
)(lambda g: (g.folded_in_group, g.later))
register(
    "group_false_fold_rate",
    unit="fold_group",
    definition="writes of a labelled fold group folded into another group's row / writes, "
    "pooled by group",
    direction="lower",
    family="fold",
    pooled=True,
)(lambda g: (g.false_folds, g.writes))

probe_metric(
    "dedup_recall",
    "removals that leave another copy of the fact admitted / true duplicates (copies of a "
    "fact already earlier in the recalled list), pooled",
    "higher",
    "dedup",
    pooled=True,
    lists=("headline",),
)(lambda p: (p.dedup.removed_true, p.dedup.true_duplicates))
probe_metric(
    "dedup_precision",
    "removals that leave another copy of the fact admitted / entries removed as "
    "paraphrases, pooled",
    "higher",
    "dedup",
    pooled=True,
)(lambda p: (p.dedup.removed_true, p.dedup.removed))
probe_metric(
    "dedup_bytes_saved",
    "mean per probe of clamped bytes of entries removed as paraphrases",
    "higher",
    "dedup_bytes",
)(lambda p: p.dedup.bytes_saved)
