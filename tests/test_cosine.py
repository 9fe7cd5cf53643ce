"""`memkit.store.cosine`: a row's cosine is its own bits in any matrix, and
`rank.near_top` keeps every row the full ranking answers with."""

from __future__ import annotations

import numpy as np
import pytest

from memkit.params import RecallParams
from memkit.store import cosine, rank

DIM = 64


def unit(rng, n, dim=DIM):
    m = rng.normal(size=(n, dim)).astype(np.float32)
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def column_view(rows):
    return np.ascontiguousarray(rows.T).T  # the store's layout: a view of column storage


@pytest.mark.parametrize("n", [1, 7, 100, 1024, 1025, 5000])  # both loops, at their switch
def test_a_rows_cosine_is_the_same_bits_in_any_matrix_and_layout(n):
    rng = np.random.default_rng(n)
    rows, q = unit(rng, n), unit(rng, 1)[0]
    whole = cosine.row_cosines(q, column_view(rows))
    np.testing.assert_array_equal(cosine.row_cosines(q, rows), whole)  # row-major
    for k in (1, 3, 4, 16):  # the same rows after dropping k: other positions, alignments
        np.testing.assert_array_equal(cosine.row_cosines(q, column_view(rows[k:])), whole[k:])
    pick = rng.permutation(n)[: max(n // 3, 1)]
    np.testing.assert_array_equal(cosine.row_cosines(q, rows[pick]), whole[pick])
    alone = [cosine.row_cosines(q, rows[i : i + 1])[0] for i in range(min(n, 50))]
    np.testing.assert_array_equal(alone, whole[: len(alone)])


def test_the_fixed_order_is_sequential_float32_sums_of_rounded_products():
    rng = np.random.default_rng(1)
    rows, q = unit(rng, 5, 8), unit(rng, 1, 8)[0]
    for r, got in zip(rows, cosine.row_cosines(q, rows), strict=True):
        acc = np.float32(r[0] * q[0])
        for j in range(1, 8):
            acc = np.float32(acc + np.float32(r[j] * q[j]))
        assert got.tobytes() == acc.tobytes()


def test_chunks_do_not_change_a_bit(monkeypatch):
    rng = np.random.default_rng(2)
    rows, q = unit(rng, 1000), unit(rng, 1)[0]
    whole = cosine.row_cosines(q, column_view(rows))
    for chunk, block in ((7, 5), (1000, 1000), (64, 2000)):  # both loops, every split
        monkeypatch.setattr(cosine, "CHUNK", chunk)
        monkeypatch.setattr(cosine, "BLOCK", block)
        np.testing.assert_array_equal(cosine.row_cosines(q, column_view(rows)), whole)
        np.testing.assert_array_equal(cosine.row_cosines(q, rows), whole)


def test_fast_cosines_stay_within_slack_and_edge_shapes_are_zero():
    rng = np.random.default_rng(3)
    for dim in (8, 64, 768):
        rows, q = unit(rng, 3000, dim), unit(rng, 1, dim)[0]
        for m in (rows, column_view(rows)):
            gap = np.abs(cosine.fast_cosines(q, m).astype(np.float64) - cosine.row_cosines(q, m))
            assert gap.max() <= cosine.slack(dim)
    assert cosine.row_cosines(np.ones(3), np.zeros((0, 3), np.float32)).shape == (0,)
    np.testing.assert_array_equal(cosine.row_cosines(np.ones(2), np.eye(3, dtype=np.float32)), 0)
    assert cosine.slack(64) < 1e-5 < cosine.slack(100_000)


def test_take_rows_keeps_the_column_layout_and_the_identity():
    rows = column_view(unit(np.random.default_rng(4), 20))
    assert cosine.take_rows(rows, np.arange(20)) is rows
    got = cosine.take_rows(rows, np.array([3, 1]))
    assert got.T.flags.c_contiguous
    np.testing.assert_array_equal(got, rows[[3, 1]])


def answer(cos, conf, rec, ids, now, params, limit):
    r = rank.rank_vector(cos, conf, rec, rec, ids, now, params, limit)
    return ids[r.order].tolist(), r.score.tolist()


@pytest.mark.parametrize("limit", [1, 8, 30, 0, -1])
@pytest.mark.parametrize(
    "params",
    [
        RecallParams(floor=0.0),
        RecallParams(floor=0.1, recency_share=1.0),
        RecallParams(floor=-1.0, recency_share=0.0, confidence_min=1.0),
        RecallParams(floor=0.05, recency_share=1.5),  # a weight that can turn negative
    ],
)
def test_near_top_is_a_superset_of_the_answer(limit, params):
    rng = np.random.default_rng(limit + 10)
    n, now = 4000, 1e9
    rows, q = unit(rng, n), unit(rng, 1)[0]
    rows[10:30] = rows[9]  # exact ties at every cut
    conf = rng.uniform(0.3, 1.0, n)
    rec = now - rng.uniform(0, 90 * 86400, n)
    rec[::17] = np.nan
    exact = cosine.row_cosines(q, rows)
    fast = cosine.fast_cosines(q, rows)
    near = rank.near_top(fast, conf, rec, now, params, limit, cosine.slack(DIM))
    full = answer(exact, conf, rec, np.arange(n), now, params, limit)
    assert answer(exact[near], conf[near], rec[near], near, now, params, limit) == full
    if limit > 0:
        assert near.size < n // 4  # it is a cut, not every row


def test_near_top_keeps_a_row_one_slack_under_the_floor_and_drops_one_past_it():
    s = 1e-4
    cos = np.array([0.5 - s, 0.5 - 1.01 * s, 0.9])
    ones = np.ones(3)
    got = rank.near_top(cos, ones, ones, 1.0, RecallParams(floor=0.5), 0, s)
    assert got.tolist() == [0, 2]
