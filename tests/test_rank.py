"""memkit.store.rank: the pure recall scoring of SPEC §4."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memkit.params import DAY, RecallParams
from memkit.store import rank
from memkit.store.rank import (
    confidence_weight,
    cosine_scores,
    decay,
    keyword_limit,
    keyword_matches,
    keyword_order,
    rank_vector,
)


def test_decay_values():
    got = decay(np.array([0.0, -5.0, 30 * DAY, 60 * DAY, math.nan]), 30.0)
    np.testing.assert_allclose(got, [1.0, 1.0, 0.5, 0.25, 0.0])


def test_decay_half_life_is_a_tunable():
    assert decay(np.array([10 * DAY]), 10.0)[0] == pytest.approx(0.5)


def test_confidence_weight_clamp():
    got = confidence_weight(np.array([0.0, 0.59, 0.6, 0.8, 1.0, 1.5]))
    np.testing.assert_allclose(got, [0.6, 0.6, 0.6, 0.8, 1.0, 1.0])
    p = RecallParams(confidence_min=0.0, confidence_max=0.9)
    np.testing.assert_allclose(confidence_weight(np.array([0.1, 0.95]), p), [0.1, 0.9])


def test_cosine_scores_mismatched_length_is_zero():
    m = np.eye(3, dtype=np.float32)
    np.testing.assert_array_equal(cosine_scores(np.ones(2), m), [0, 0, 0])
    np.testing.assert_array_equal(cosine_scores(np.array([1, 0, 0]), m), [1, 0, 0])
    assert cosine_scores(np.ones(3), np.zeros((0, 3), np.float32)).shape == (0,)


def _rank(cos, conf=None, ts=None, now=0.0, params=RecallParams()):
    n = len(cos)
    conf = np.full(n, 0.7) if conf is None else np.asarray(conf, float)
    ts = np.zeros(n) if ts is None else np.asarray(ts, float)
    return rank_vector(np.asarray(cos, float), conf, ts, ts, np.arange(n), now, params)


def test_floor_inclusive():
    r = _rank([0.25, np.nextafter(0.25, 0), 0.9])
    assert list(r.order) == [2, 0]


def test_score_formula_and_breakdown():
    r = _rank([0.5], conf=[0.9], ts=[0.0], now=30 * DAY)
    assert r.score[0] == pytest.approx(0.5 * 0.9 * (0.7 + 0.3 * 0.5))
    assert (r.cosine[0], r.confidence_weight[0], r.decay[0]) == (0.5, 0.9, pytest.approx(0.5))


def test_recency_share_tunable():
    r = _rank([1.0], ts=[0.0], now=1e12, params=RecallParams(recency_share=1.0))
    assert r.score[0] == pytest.approx(0.0, abs=1e-9)


def test_ties_most_recently_confirmed_then_larger_tiebreak():
    cos = np.array([0.5, 0.5, 0.5, 0.5])
    ts = np.array([1.0, 3.0, math.nan, 3.0])
    r = rank_vector(
        cos,
        np.full(4, 0.7),
        ts,
        ts,
        np.array([10, 11, 12, 13]),
        3.0,
        RecallParams(recency_share=0.0),
    )
    assert list(r.order) == [3, 1, 0, 2]


def test_keyword_matches_substring_case_insensitive():
    assert keyword_matches(["lead", "kiem"], "LEADERSHIP team", ["Kiem-Lai"]) == 2
    assert keyword_matches(["lead"], "nothing", []) == 0


def test_keyword_order():
    assert keyword_order([1, 0, 2, 1], [5.0, 9.0, 1.0, None], [0, 1, 2, 3]) == [2, 0, 3]
    assert keyword_order([1, 1], [5.0, 5.0], [0, 1]) == [1, 0]


@pytest.mark.parametrize("limit, want", [(-1, 8), (0, 8), (1, 1), (50, 50), (51, 8)])
def test_keyword_limit(limit, want):
    assert keyword_limit(limit) == want


def test_limit_keeps_exact_top_with_ties_at_the_cut():
    rng = np.random.default_rng(0)
    cos = np.round(rng.uniform(0.3, 1.0, 500), 2)  # many exact ties
    ts = rng.integers(0, 50, 500).astype(float)
    args = (cos, np.full(500, 0.7), ts, ts, np.arange(500), 100.0)
    full = rank_vector(*args)
    for k in (1, 7, 8, 100, 499, 500, 600):
        part = rank_vector(*args, limit=k)
        assert list(part.order) == list(full.order[:k])
        np.testing.assert_array_equal(part.score, full.score[:k])


def test_cosine_scores_large_matrix_matches_matmul():
    rng = np.random.default_rng(1)
    m = rng.standard_normal((5000, 16)).astype(np.float32)
    q = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(cosine_scores(q, m), m @ q, rtol=1e-5, atol=1e-5)


def test_cosine_scores_on_a_transposed_column_store_view_matches_row_storage():
    """The store keeps vectors as columns and scores `cols[:, :n].T`, a strided view."""
    rng = np.random.default_rng(2)
    rows = rng.standard_normal((5000, 16)).astype(np.float32)
    cols = np.zeros((16, 6000), dtype=np.float32)
    cols[:, :5000] = rows.T
    q = rng.standard_normal(16).astype(np.float32)
    view = cols[:, :5000].T
    assert not view.flags.c_contiguous
    np.testing.assert_allclose(cosine_scores(q, view), cosine_scores(q, rows), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("floor", [0.0, 0.25, 0.35, 0.1 + 1e-12, -0.2, 1.0, 0.999999999])
def test_float32_floor_cut_equals_the_float64_cut(floor):
    """The store's float32 cosines are cut as their float64 values, never against a
    float32-rounded floor: every float32 neighbour of the floor, at and past it."""
    f = np.float32(floor)
    near = [f]
    for _ in range(3):
        near = [np.nextafter(near[0], np.float32(-2)), *near, np.nextafter(near[-1], np.float32(2))]
    cos = np.array(near, dtype=np.float32)
    n = cos.size
    p = RecallParams(floor=floor)
    r = rank_vector(cos, np.ones(n), np.zeros(n), np.zeros(n), np.arange(n), 0.0, p)
    want = {i for i, c in enumerate(cos) if float(c) >= floor}
    assert set(r.order.tolist()) == want  # e.g. float32(0.35) < 0.35 is dropped at 0.35
    assert r.cosine.dtype == np.float64  # survivors are widened for scoring


def test_cosine_needed_bounds_every_score_below_it():
    """No row whose cosine is below cosine_needed(s) scores s or more, whatever its
    confidence and age; the best row at exactly that cosine reaches s."""
    p = RecallParams(floor=-1.0)  # the floor is not part of the bound
    rng = np.random.default_rng(3)
    n = 20_000
    conf = rng.uniform(-0.5, 1.5, n)
    ages = rng.choice([0.0, 1.0, 30.0, 365.0, np.nan], n) * DAY
    for s in (0.42, 0.05, -0.1, -0.42):
        need = rank.cosine_needed(s, p)
        cos = np.full(n, need - 1e-9)  # (one ulp below can round back onto s)
        got = rank.rank_vector(cos, conf, 1e9 - ages, 1e9 - ages, np.arange(n), 1e9, p)
        assert got.score.size == 0 or got.score.max() < s
        best = rank.rank_vector(np.array([need]), [1.0 if s >= 0 else 0.0], [1e9], [1e9], [0],
                                1e9 if s >= 0 else 1e9 + 1e12, p)  # fmt: skip
        assert best.score[0] == pytest.approx(s)
    assert rank.cosine_needed(0.42, p) == pytest.approx(0.42)
    assert rank.cosine_needed(-0.42, p) == pytest.approx(-1.0)  # 0.6 x 0.7 at worst


@pytest.mark.parametrize(
    "params",
    [
        RecallParams(recency_share=1.0),  # the recency weight reaches 0
        RecallParams(confidence_min=0.0),  # so does the confidence weight
        RecallParams(confidence_max=float("nan")),
    ],
)
def test_cosine_needed_is_none_when_no_bound_follows(params):
    assert rank.cosine_needed(0.5, params) is None


def test_cosine_needed_just_inside_the_weight_range_still_bounds():
    assert rank.cosine_needed(0.5, RecallParams(recency_share=0.999)) == pytest.approx(0.5)
    assert rank.cosine_needed(-0.5, RecallParams(recency_share=0.999)) == pytest.approx(
        -0.5 / (0.6 * 0.001)
    )


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_weight_max_bounds_the_weights_of_every_row_under_the_maxima(share):
    """cosine x weight_max bounds the score of any row whose confidence and stamp are
    at most the maxima given; the row holding both maxima reaches it."""
    p = RecallParams(floor=-1.0, recency_share=share)
    rng = np.random.default_rng(4)
    n, now = 5_000, 1e9
    conf = rng.uniform(-0.5, 0.8, n)
    stamps = now - rng.choice([0.0, 1.0, 30.0, 365.0, np.nan], n) * DAY
    c_max, ts_max = float(conf.max()), float(np.nanmax(stamps))
    w = rank.weight_max(c_max, ts_max, now, p)
    got = rank.rank_vector(np.ones(n), conf, stamps, stamps, np.arange(n), now, p)
    assert got.score.max() <= w
    top = rank.rank_vector(np.ones(1), [c_max], [ts_max], [ts_max], [0], now, p)
    assert top.score[0] == pytest.approx(w)
    assert rank.weight_max(0.7, float("nan"), now, p) == pytest.approx(0.7 * (1.0 - share))
    assert rank.cosine_needed(0.35, p, w) == pytest.approx(0.35 / w) if w > 0 else True


@pytest.mark.parametrize(
    ("share", "c_max", "ts_max"),
    [(-0.01, 0.7, 0.0), (1.01, 0.7, 0.0), (0.3, float("nan"), 0.0), (0.3, 0.7, float("inf"))],
)
def test_weight_max_is_none_where_no_bound_follows(share, c_max, ts_max):
    assert rank.weight_max(c_max, ts_max, 1e9, RecallParams(recency_share=share)) is None


def test_cosine_needed_takes_the_weight_bound_for_scores_at_or_above_zero_only():
    p = RecallParams()
    assert rank.cosine_needed(0.49, p, 0.7) == pytest.approx(0.7)
    assert rank.cosine_needed(0.0, p, 0.7) == 0.0
    assert rank.cosine_needed(-0.1, p, 0.7) == rank.cosine_needed(-0.1, p)  # generic below 0
    assert rank.cosine_needed(0.49, p, 0.0) == rank.cosine_needed(0.49, p)  # no usable bound
    assert rank.cosine_needed(0.49, p, None) == pytest.approx(0.49)
