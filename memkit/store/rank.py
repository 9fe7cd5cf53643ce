"""Pure recall scoring (SPEC §4) on numpy arrays and plain values.

The store gathers candidates; these functions decide. Keeping them free of
SQLite lets evaluations re-rank recorded candidates under other tunables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memkit.errors import ConfigError
from memkit.params import DAY, DEFAULT_FLOOR, RecallParams
from memkit.store.cosine import fast_cosines


def decay(age_s: np.ndarray, half_life_days: float) -> np.ndarray:
    """0.5 ** (age / half-life); NaN age (no timestamp) gives 0, age <= 0 gives 1."""
    age = np.asarray(age_s, dtype=np.float64)
    out = np.zeros_like(age)
    known = ~np.isnan(age)
    hl = half_life_days * DAY
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        vals = np.power(0.5, age[known] / hl) if hl > 0 else np.where(age[known] <= 0, 1.0, 0.0)
    out[known] = vals
    out[known & (age <= 0)] = 1.0
    return out


def confidence_weight(confidence: np.ndarray, params: RecallParams = RecallParams()) -> np.ndarray:
    """clamp(confidence, min, max): legacy 0 and anything below 0.6 count as 0.6."""
    c = np.nan_to_num(np.asarray(confidence, dtype=np.float64), nan=params.confidence_min)
    return np.clip(c, params.confidence_min, params.confidence_max)


def _floor_for(dtype: np.dtype, floor: float) -> np.floating:
    """The floor in `dtype` such that x >= it exactly when float64(x) >= floor:
    the store's float32 cosines are cut without widening every row first."""
    if dtype != np.float32:
        return np.float64(floor)
    f = np.float32(floor)
    return f if float(f) >= floor else np.nextafter(f, np.float32(np.inf))


@dataclass(frozen=True, slots=True)
class VectorRanking:
    """Ranked survivors of the floor: positions into the candidate arrays plus breakdown."""

    order: np.ndarray
    cosine: np.ndarray
    confidence_weight: np.ndarray
    decay: np.ndarray
    score: np.ndarray


def rank_vector(
    cosine: np.ndarray,
    confidence: np.ndarray,
    recency_ts: np.ndarray,
    confirmed_ts: np.ndarray,
    tiebreak: np.ndarray,
    now: float,
    params: RecallParams = RecallParams(),
    limit: int = 0,
) -> VectorRanking:
    """Drop rows with cosine below the floor, score the rest, sort descending.

    `recency_ts` is last_seen_at falling back to created_at (NaN when neither),
    `confirmed_ts` orders ties (most recently confirmed first, NaN last) and
    `tiebreak` (e.g. rowid, larger first) makes the order total.
    Returned arrays are aligned with `order`. With `limit > 0` only the top
    `limit` survivors (ties at the cut included, then cut) are sorted, in O(n).
    """
    cosine = np.asarray(cosine)
    if cosine.dtype != np.float32:
        cosine = cosine.astype(np.float64, copy=False)
    floor = DEFAULT_FLOOR if params.floor is None else params.floor  # a store resolves None
    keep = np.flatnonzero(cosine >= _floor_for(cosine.dtype, floor))
    cos = cosine[keep].astype(np.float64, copy=False)
    cw = confidence_weight(np.asarray(confidence)[keep], params)
    dec = decay(now - np.asarray(recency_ts, dtype=np.float64)[keep], params.half_life_days)
    share = params.recency_share
    score = cos * cw * ((1.0 - share) + share * dec)
    if 0 < limit < score.size:
        kth = np.partition(score, score.size - limit)[score.size - limit]
        top = np.flatnonzero(score >= kth)
        keep, cos, cw, dec, score = keep[top], cos[top], cw[top], dec[top], score[top]
    conf_ts = np.nan_to_num(np.asarray(confirmed_ts, dtype=np.float64)[keep], nan=-np.inf)
    tb = np.asarray(tiebreak)[keep]
    idx = np.lexsort((-tb, -conf_ts, -score))
    if 0 < limit < idx.size:
        idx = idx[:limit]
    return VectorRanking(
        order=keep[idx],
        cosine=cos[idx],
        confidence_weight=cw[idx],
        decay=dec[idx],
        score=score[idx],
    )


def cosine_scores(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Cosine of a normalised query against normalised rows; 0 for a mismatched length.

    In the matrix's precision (float32 in the store), not widened: `rank_vector`
    widens only the rows that clear the floor. The fast product
    (`memkit.store.cosine.fast_cosines`): a row's last bits may depend on the
    matrix it sits in; a store ranks `near_top`'s rows by `row_cosines`."""
    return fast_cosines(query, matrix)


def near_top(
    cos_fast: np.ndarray,
    confidence: np.ndarray,
    recency_ts: np.ndarray,
    now: float,
    params: RecallParams,
    limit: int,
    slack: float,
) -> np.ndarray:
    """Positions of the rows `rank_vector` could answer with, given cosines known
    within `slack` (`memkit.store.cosine.slack`): those that may clear the floor,
    and with `limit > 0` only those that may reach the limit-th score (ties
    included). A superset of the answer's rows, so ranking them alone by their
    exact cosines gives the answer ranking every row would.

    Why it holds: a row's score is its cosine x its weight w (confidence x
    recency), so a cosine off by `slack` moves a score by at most slack x |w|.
    The rows sure to clear the floor (cosine >= floor + slack) already hold
    `limit` scores of at least kth - slack x W (W the largest |w|), so a row of
    the answer has an exact score at least that, and a fast one 2 x slack x W
    under kth at worst."""
    c = np.asarray(cos_fast, dtype=np.float64)
    floor = DEFAULT_FLOOR if params.floor is None else params.floor
    idx = np.flatnonzero(c >= floor - slack)
    if limit <= 0 or idx.size <= limit:
        return idx
    share = params.recency_share
    age = now - np.asarray(recency_ts, dtype=np.float64)[idx]
    w = confidence_weight(np.asarray(confidence)[idx], params) * (
        (1.0 - share) + share * decay(age, params.half_life_days)
    )
    big = float(np.max(np.abs(w)))
    sure = c[idx] >= floor + slack
    n_sure = int(np.count_nonzero(sure))
    if not np.isfinite(big) or n_sure < limit:
        return idx
    score = c[idx] * w
    kth = np.partition(score[sure], n_sure - limit)[n_sure - limit]
    out: np.ndarray = idx[score >= kth - 2.0 * slack * big]
    return out


def keyword_matches(keywords: Sequence[str], content: str, tags: Sequence[str]) -> int:
    """Distinct keywords that are case-insensitive substrings of content or any tag."""
    text = content.lower()
    ltags = [t.lower() for t in tags]
    return sum(1 for k in keywords if k in text or any(k in t for t in ltags))


def keyword_order(
    matched: Sequence[int], confirmed_ts: Sequence[float | None], tiebreak: Sequence[int]
) -> list[int]:
    """Positions of rows with at least one match: more keywords first, then most
    recently confirmed (None last), then larger tiebreak."""
    pos = [i for i, m in enumerate(matched) if m > 0]
    ts = [(-np.inf if (t := confirmed_ts[i]) is None else t) for i in range(len(matched))]
    pos.sort(key=lambda i: (-matched[i], -ts[i], -tiebreak[i]))
    return pos


def keyword_limit(limit: int, params: RecallParams = RecallParams()) -> int:
    """limit <= 0 or > max becomes the default (SPEC §4.2)."""
    if limit <= 0 or limit > params.keyword_max_limit:
        return params.keyword_default_limit
    return limit


def weight_max(
    confidence_max_seen: float, recency_ts_max: float, now: float, params: RecallParams
) -> float | None:
    """The largest confidence weight x recency factor (SPEC §4.1) of any row whose
    confidence is at most `confidence_max_seen` and whose recency timestamp is at
    most `recency_ts_max` (NaN: no row is dated): a scope's own bound on how much
    a row's weights can lift its cosine. None when the factor is not monotone in
    them (`recency_share` outside 0..1) or a maximum is not finite."""
    share = params.recency_share
    if not 0.0 <= share <= 1.0 or not np.isfinite(confidence_max_seen):
        return None
    if np.isinf(recency_ts_max):
        return None
    cw = float(confidence_weight(np.array([confidence_max_seen]), params)[0])
    dec = float(decay(np.array([now - recency_ts_max]), params.half_life_days)[0])
    return cw * ((1.0 - share) + share * dec)


def cosine_needed(
    score: float, params: RecallParams = RecallParams(), weight: float | None = None
) -> float | None:
    """The lowest cosine at which a row can still score `score` or more, whatever
    its confidence and age (SPEC §4.1's score is cosine x a confidence weight
    x a recency weight, each within its clamp), or, given `weight` (`weight_max`
    of the rows in question), whatever their weights up to it. A store that
    reads candidates in descending cosine may stop below it. None when no such
    bound follows from `params` (a weight range that reaches 0 or below, or is
    not finite): then every row above the floor is a candidate."""
    raw = [params.confidence_min, params.confidence_max, params.recency_share, score]
    if not np.all(np.isfinite(raw)):
        return None
    if weight is not None and score >= 0 and np.isfinite(weight) and weight > 0:
        return score / weight
    lo_w = min(params.confidence_min, params.confidence_max)
    hi_w = max(params.confidence_min, params.confidence_max)
    share = params.recency_share
    lo_r, hi_r = min(1.0 - share, 1.0), max(1.0 - share, 1.0)
    corners = [w * r for w in (lo_w, hi_w) for r in (lo_r, hi_r)]
    if min(corners) <= 0:
        return None
    return score / max(corners) if score >= 0 else score / min(corners)


RRF_K = 60
"""Reciprocal-rank fusion's constant (Cormack, Clarke and Buettcher 2009): a row's
fused score is the sum over rankings of 1 / (RRF_K + rank), so a top rank in one
ranking weighs about as much as a middling rank in both."""


def rrf_fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion of ranked id lists: (id, sum of 1 / (k + rank)) by
    descending score, rank 1-based; ties go to the better best rank, then to the
    earlier ranking and position. An id repeated within one ranking counts once
    (its first rank)."""
    if k < 1:
        raise ConfigError(f"rrf k must be >= 1, got {k!r}")
    score: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}
    for li, ranking in enumerate(rankings):
        seen: set[str] = set()
        for r, x in enumerate(ranking, start=1):
            if x in seen:
                continue
            seen.add(x)
            score[x] = score.get(x, 0.0) + 1.0 / (k + r)
            best[x] = min(best.get(x, (r, li)), (r, li))
    return sorted(score.items(), key=lambda kv: (-kv[1], best[kv[0]]))
