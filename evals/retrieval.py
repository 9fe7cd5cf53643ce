"""LongMemEval's retrieval metrics, as its authors define them, over a recorded ranking.

A probe row from a `rank_all` probe (LongMemEval) carries `ranking`: every
row the store recalled *at its floor* (no limit, but rows below the floor
are not ranked: with WordLlama at 0.25 a median 8 of 22 live oracle turns), in
the store's order as `[turn fact id, session id]` (the turn the row holds; a
row that absorbed several turns by fold-in holds the latest), and
`ranking_full`, the same with the floor off (every live turn ranked). The
gold is the probe's `relevant` turns (marked `has_answer`).

Three figures per metric, side by side in metrics.json and the report:
`<metric>` on `ranking` (what the store returns), `<metric>_full` on
`ranking_full` (the full ranking) and `<metric>_random`, its expectation over
a uniformly random order of `ranking_full`'s turns (exact at turn level,
seeded permutations at session level, see `random_retrieval`). Turn level is
the headline: on the oracle split a random order already scores ~0.98 at
session level.

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

import hashlib
import math
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from evals.baselines import random_dcg_any, random_recall_all, random_recall_any
from evals.registry import register
from evals.rows import ProbeRow
from memkit.errors import ConfigError

NAN = math.nan
K_VALUES: tuple[int, ...] = (5, 10)
LEVELS: tuple[str, ...] = ("turn", "session")
"""Turn level first: it is the headline (see `HEADLINE`)."""
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


def _session_values(
    ranking: Sequence[Sequence[Any]], rel: set[str], want: set[str], k: int
) -> dict[str, float]:
    turns = [t for t, _ in ranking]
    kk = session_k([s for _, s in ranking], k)
    got = {s for t, s in ranking[:kk] if t in rel}
    return {
        f"session_recall_any_at_{k}": float(bool(got)) if rel else NAN,
        f"session_recall_all_at_{k}": float(want <= got) if rel else NAN,
        f"session_ndcg_any_at_{k}": ndcg_any(turns, rel, kk),
    }


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
    rel, want = set(relevant), set(relevant_sessions)
    out = _turn_values(ranking, rel, ks, exact=True)
    for k in ks:
        out.update(_session_values(ranking, rel, want, k))
    return out


def _turn_values(
    ranking: Sequence[Sequence[Any]], rel: set[str], ks: Sequence[int], *, exact: bool
) -> dict[str, float]:
    """Turn-level statistics of this order (`exact`), or their exact expectation over
    a random order of the same turns (`evals.baselines`)."""
    turns = [t for t, _ in ranking]
    fns = (
        (recall_any, recall_all, ndcg_any)
        if exact
        else (random_recall_any, random_recall_all, random_dcg_any)
    )
    return {
        f"turn_{stat}_at_{k}": fn(turns, rel, k)
        for k in ks
        for stat, fn in zip(STATS, fns, strict=True)
    }


RANDOM_SEED = 0
"""Seed of the session-level random baseline's permutations (turn level is exact)."""
PERMUTATIONS = 200
"""Random orders averaged per probe for the session-level random baseline."""


def random_retrieval(
    ranking: Sequence[Sequence[Any]],
    relevant: Collection[str],
    relevant_sessions: Collection[str],
    key: str,
    ks: Sequence[int] = K_VALUES,
) -> dict[str, float]:
    """Every metric's expectation over a uniformly random order of `ranking`'s rows.

    Turn level is exact (`evals.baselines`). Session level grows k with the
    order, which has no closed form here: it is the mean over `PERMUTATIONS`
    orders drawn by numpy's PCG64 seeded with (`RANDOM_SEED`, the first 8
    bytes of sha256(`key`)), `key` being the probe id, so every probe's draw
    is reproducible and independent of the others.
    """
    rel, want = set(relevant), set(relevant_sessions)
    out = _turn_values(ranking, rel, ks, exact=False)
    digest = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    rng = np.random.default_rng([RANDOM_SEED, digest])
    if not ranking:  # one order only: the empty one
        for k in ks:
            out.update(_session_values(ranking, rel, want, k))
        return out
    orders = rng.permuted(np.tile(np.arange(len(ranking)), (PERMUTATIONS, 1)), axis=1)
    for k in ks:
        out.update(_session_means(ranking, rel, want, k, orders))
    return out


def _session_means(
    ranking: Sequence[Sequence[Any]], rel: set[str], want: set[str], k: int, orders: np.ndarray
) -> dict[str, float]:
    """`_session_values` averaged over the rows of `orders` (one permutation of the
    ranking's positions per row), computed for all orders at once."""
    if not rel:
        return {name: NAN for name in _session_values([], rel, want, k)}
    p, n = orders.shape
    code = {s: i for i, s in enumerate(dict.fromkeys(s for _, s in ranking))}
    sess = np.array([code[s] for _, s in ranking])[orders]
    hit = np.array([t in rel for t, _ in ranking])[orders]
    # first occurrence of each session along each order -> distinct sessions so far
    keyed = np.sort(sess * n + np.arange(n), axis=1)
    first = np.ones((p, n), dtype=bool)
    first[:, 1:] = keyed[:, 1:] // n != keyed[:, :-1] // n
    is_first = np.zeros((p, n), dtype=bool)
    np.put_along_axis(is_first, keyed % n, first, axis=1)
    distinct = np.cumsum(is_first, axis=1)
    grown = (distinct >= k) & (np.arange(1, n + 1) >= k)
    kk = np.where(grown.any(axis=1), grown.argmax(axis=1) + 1, max(k, n))
    cut = np.minimum(kk, n) - 1
    rows = np.arange(p)
    any_ = np.cumsum(hit, axis=1)[rows, cut] > 0
    all_ = np.ones(p, dtype=bool)
    for s in want:
        mask = (sess == code[s]) & hit if s in code else np.zeros((p, n), dtype=bool)
        earliest = np.where(mask.any(axis=1), mask.argmax(axis=1), n)
        all_ &= earliest <= cut
    size = max(n, len(rel), int(kk.max()))
    disc = np.array([1.0 if r == 1 else 1.0 / math.log2(r) for r in range(1, size + 1)])
    dcg_ = np.cumsum(hit * disc[:n], axis=1)[rows, cut]
    ideal = np.cumsum(disc)[np.minimum(kk, len(rel)) - 1]
    return {
        f"session_recall_any_at_{k}": float(any_.mean()),
        f"session_recall_all_at_{k}": float(all_.mean()),
        f"session_ndcg_any_at_{k}": float((dcg_ / ideal).mean()),
    }


class RankingUnit:
    """One probe's recorded rankings with every retrieval metric computed once:
    `values` on the store's ranking at the floor, `full` on the floor-off ranking,
    `random` over random orders of the floor-off ranking's rows (NaN each when
    the probe recorded no floor-off ranking)."""

    __slots__ = ("full", "random", "values")

    def __init__(self, row: ProbeRow):
        if row.ranking is None:
            raise ConfigError(f"probe {row.probe_id!r} recorded no ranking (not a rank_all probe)")
        want = row.relevant_sessions
        self.values = probe_retrieval(row.ranking, row.relevant, want)
        full = row.ranking_full
        undefined = dict.fromkeys(self.values, NAN)
        self.full = undefined if full is None else probe_retrieval(full, row.relevant, want)
        self.random = (
            undefined if full is None else random_retrieval(full, row.relevant, want, row.probe_id)
        )


HEADLINE = "turn_recall_any_at_5"
"""The LongMemEval number a report opens with: session level is near-trivial on the
oracle split (a random order of ~23 turns already spans the answer session)."""


def _register_three(name: str, definition: str) -> None:
    """A metric on the store's ranking at the floor, and its two baselines."""
    how = (
        f"mean of {PERMUTATIONS} seeded orders per probe, seed {RANDOM_SEED}"
        if name.startswith("session")
        else "exact expectation"
    )
    for suffix, figure, which in (
        ("", "the store's ranking at its floor, no limit", "values"),
        ("_full", "baseline: the same store's full ranking, floor off", "full"),
        ("_random", f"baseline: a random order of the full ranking's turns, {how}", "random"),
    ):
        register(
            name + suffix,
            unit="ranking",
            definition=f"{definition} ({figure})",
            direction="higher",
            family="ranking",
            lists=("headline",) if name == HEADLINE else (),
        )(lambda u, which=which: getattr(u, which)[name])


def _register() -> None:
    for level in LEVELS:
        grown = (
            " (k grown to span k distinct sessions, as the authors)" if level == "session" else ""
        )
        for k in K_VALUES:
            for stat, text in (
                ("recall_any", f"with a has_answer {level} in the top {k}{grown}"),
                ("recall_all", f"with every has_answer {level} in the top {k}{grown}"),
            ):
                _register_three(
                    f"{level}_{stat}_at_{k}",
                    f"LongMemEval {level}-level {stat}@{k}: share of non-abstention "
                    f"questions {text}",
                )
            _register_three(
                f"{level}_ndcg_any_at_{k}",
                f"LongMemEval {level}-level ndcg_any@{k}: mean nDCG over non-abstention "
                "questions, binary gains on has_answer turns, discount 1 at ranks 1-2 then "
                f"1/log2(rank){grown}",
            )


_register()
