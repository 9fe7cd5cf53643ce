"""LongMemEval's retrieval metrics, as its authors define them, over a recorded ranking.

A probe row from a `rank_all` probe (LongMemEval) carries `ranking`: every
recalled row in the store's order as `[turn fact id, session id]` (the turn
the row holds; a row that absorbed several turns by fold-in holds the latest).
The gold is the probe's `relevant` turns (marked `has_answer`).

Definitions (the authors' `src/retrieval/eval_utils.py`, restated):

- **turn level**, the ranked turns against the relevant turns:
  `recall_any@k` = 1 when any relevant turn is in the top k, else 0;
  `recall_all@k` = 1 when every relevant turn is in the top k, else 0;
  `ndcg_any@k` = DCG@k / ideal DCG@k with binary gains, where
  DCG = g1 + sum over ranks r >= 2 of g_r / log2(r) (the authors' discount:
  ranks 1 and 2 both weigh 1) and the ideal list holds min(k, relevant)
  relevant turns.
- **session level**, from the same turn ranking (the authors'
  `evaluate_retrieval_turn2session`): k grows to the smallest k' whose top k'
  turns span k distinct sessions (or the whole ranking); a relevant session
  is one holding a relevant turn, and it counts as retrieved when one of its
  relevant turns is in the top k'; `recall_any`, `recall_all` over relevant
  sessions and `ndcg_any` over the turns at k' follow as above.

Undefined (NaN, never 0) when the probe has no relevant turn; the authors
score such a question any=0, all=1. Pure functions; no store, no files.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from evals.registry import register
from memkit.errors import ConfigError

NAN = math.nan
K_VALUES: tuple[int, ...] = (5, 10)
LEVELS: tuple[str, ...] = ("session", "turn")
STATS: tuple[str, ...] = ("recall_any", "recall_all", "ndcg_any")


def _check_k(k: int) -> None:
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k!r}")


def dcg(gains: Sequence[float], k: int) -> float:
    """The authors' DCG@k: g1 + sum_{r>=2} g_r / log2(r)."""
    _check_k(k)
    g = list(gains)[:k]
    return sum(x if r == 1 else x / math.log2(r) for r, x in enumerate(g, start=1))


def ndcg_any(ranked: Sequence[str | None], relevant: Collection[str], k: int) -> float:
    """DCG@k of the ranked ids (gain 1 for a relevant id) over the ideal DCG@k."""
    rel = set(relevant)
    if not rel:
        return NAN
    ideal = dcg([1.0] * len(rel), k)
    return dcg([1.0 if x in rel else 0.0 for x in ranked], k) / ideal


def recall_any(ranked: Sequence[str | None], relevant: Collection[str], k: int) -> float:
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    return float(bool(rel & set(ranked[:k])))


def recall_all(ranked: Sequence[str | None], relevant: Collection[str], k: int) -> float:
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    return float(rel <= set(ranked[:k]))


def session_k(sessions: Sequence[str | None], k: int) -> int:
    """Smallest k' >= k whose top k' turns span k distinct sessions (or all turns)."""
    _check_k(k)
    seen: set[str | None] = set()
    for i, s in enumerate(sessions, start=1):
        seen.add(s)
        if i >= k and len(seen) >= k:
            return i
    return max(k, len(sessions))


def probe_retrieval(
    ranking: Sequence[Sequence[Any]],
    relevant: Collection[str],
    relevant_sessions: Collection[str],
    ks: Sequence[int] = K_VALUES,
) -> dict[str, float]:
    """`<level>_<stat>_at_<k>` for one probe (see the module docstring).

    `ranking` is `[turn, session]` per recalled row in order; `relevant_sessions`
    are the sessions of the relevant turns (ranked or not).
    """
    turns = [t for t, _ in ranking]
    sessions = [s for _, s in ranking]
    rel, want = set(relevant), set(relevant_sessions)
    out: dict[str, float] = {}
    for k in ks:
        out[f"turn_recall_any_at_{k}"] = recall_any(turns, rel, k)
        out[f"turn_recall_all_at_{k}"] = recall_all(turns, rel, k)
        out[f"turn_ndcg_any_at_{k}"] = ndcg_any(turns, rel, k)
        kk = session_k(sessions, k)
        got = {s for t, s in ranking[:kk] if t in rel}
        out[f"session_recall_any_at_{k}"] = float(bool(got)) if rel else NAN
        out[f"session_recall_all_at_{k}"] = float(want <= got) if rel else NAN
        out[f"session_ndcg_any_at_{k}"] = ndcg_any(turns, rel, kk)
    return out


class RankingUnit:
    """One probe's recorded ranking with every retrieval metric computed once."""

    __slots__ = ("values",)

    def __init__(self, row: Mapping[str, Any]):
        self.values = probe_retrieval(
            row["ranking"], row["relevant"], row.get("relevant_sessions") or ()
        )


def _register() -> None:
    for level in LEVELS:
        for k in K_VALUES:
            grown = (
                " (k grown to span k distinct sessions, as the authors)"
                if level == "session"
                else ""
            )
            for stat, text in (
                ("recall_any", f"with a has_answer {level} in the top {k}{grown}"),
                ("recall_all", f"with every has_answer {level} in the top {k}{grown}"),
            ):
                register(
                    f"{level}_{stat}_at_{k}",
                    unit="ranking",
                    definition=f"LongMemEval {level}-level {stat}@{k}: share of "
                    f"non-abstention questions {text}",
                    direction="higher",
                    family="ranking",
                )(lambda u, n=f"{level}_{stat}_at_{k}": u.values[n])
            register(
                f"{level}_ndcg_any_at_{k}",
                unit="ranking",
                definition=f"LongMemEval {level}-level ndcg_any@{k}: mean nDCG over "
                "non-abstention questions, binary gains on has_answer turns, discount 1 at "
                f"ranks 1-2 then 1/log2(rank){grown}",
                direction="higher",
                family="ranking",
            )(lambda u, n=f"{level}_ndcg_any_at_{k}": u.values[n])


_register()
