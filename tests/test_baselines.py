"""Issue #31 item 5: every retrieval number has two baselines beside it, the same
store's full ranking (floor off) and a random order of the same candidates. The
random expectations are checked against hand-computed values and against the
mean over every permutation of small candidate lists."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import row_fixtures

from evals import registry
from evals.baselines import (
    hit_probability,
    random_dcg_any,
    random_ndcg_at_k,
    random_precision_at_k,
    random_recall_all,
    random_recall_any,
    random_recall_at_k,
    random_reciprocal_rank,
)
from evals.replay import full_ranking
from evals.retrieval import ndcg_any, probe_retrieval, random_retrieval, recall_all, recall_any
from evals.scorers import (
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
)
from evals.units import ProbeUnit
from memkit.errors import ConfigError
from memkit.params import RecallParams


def test_recall_any_of_a_random_order_is_one_minus_a_ratio_of_binomials():
    # 23 turns, 2 gold, k = 5: 1 - C(21,5)/C(23,5) = 1 - 20349/33649
    turns = ["g1", "g2", *(f"x{i}" for i in range(21))]
    assert hit_probability(23, 2, 5) == 1 - Fraction(20349, 33649)
    assert random_recall_any(turns, {"g1", "g2"}, 5) == pytest.approx(13300 / 33649)
    # 10 candidates, 2 gold, top 3: 1 - 56/120 = 8/15
    assert hit_probability(10, 2, 3) == Fraction(8, 15)


def test_hit_probability_bounds():
    assert hit_probability(5, 2, 5) == 1  # k at n: everything is in the top k
    assert hit_probability(5, 2, 6) == 1  # one past n: clipped to n
    assert hit_probability(5, 0, 3) == 0  # nothing marked
    assert hit_probability(5, 5, 1) == 1  # everything marked
    assert hit_probability(0, 0, 1) == 0  # no candidates at all
    with pytest.raises(ConfigError, match="k must be >= 1"):
        hit_probability(5, 1, 0)
    with pytest.raises(ConfigError, match="marked"):
        hit_probability(5, 6, 1)  # one past n
    with pytest.raises(ConfigError, match="marked"):
        hit_probability(5, -1, 1)


def test_random_reciprocal_rank_by_hand():
    # one gold among 3: (1 + 1/2 + 1/3) / 3 = 11/18
    assert random_reciprocal_rank(["g", None, "x"], {"g"}) == pytest.approx(11 / 18)
    # two gold rows among 3: first at rank 1 w.p. 2/3, else rank 2: 2/3 + 1/6 = 5/6
    assert random_reciprocal_rank(["g", "g", None], {"g"}) == pytest.approx(5 / 6)
    assert random_reciprocal_rank([None, "x"], {"g"}) == 0.0  # gold not among candidates
    assert random_reciprocal_rank([], {"g"}) == 0.0
    assert math.isnan(random_reciprocal_rank(["g"], set()))


CASES = [
    # (candidates, relevant): repeats (a missed fold), unmatched rows, gold never written
    (["a", "b", None, "c", "x"], {"a", "c"}),
    (["a", "a", "b", None, "x", "y"], {"a", "b"}),
    (["a", None, "x", "a", "a"], {"a"}),
    (["a", "b", "x"], {"a", "b", "z"}),
    (["x", "y", None], {"a"}),
    (["a", "b", "c", "d"], {"a", "b", "c", "d"}),
]


def _over_all_orders(candidates, fn):
    perms = list(itertools.permutations(candidates))
    return sum(fn(list(p)) for p in perms) / len(perms)


@pytest.mark.parametrize(("candidates", "relevant"), CASES)
@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 7])
def test_random_expectations_equal_the_mean_over_every_order(candidates, relevant, k):
    """k runs past the list's length (6 and 7 for 5-6 candidates): the clip is tested."""
    checks = [
        (random_recall_at_k, lambda p: recall_at_k(p, relevant, k)),
        (random_precision_at_k, lambda p: precision_at_k(p, relevant, k)),
        (random_ndcg_at_k, lambda p: ndcg_at_k(p, relevant, k)),
        (random_recall_any, lambda p: recall_any(p, relevant, k)),
        (random_recall_all, lambda p: recall_all(p, relevant, k)),
        (random_dcg_any, lambda p: ndcg_any(p, relevant, k)),
    ]
    for random_fn, metric in checks:
        expected = _over_all_orders(candidates, metric)
        assert random_fn(candidates, relevant, k) == pytest.approx(expected, abs=1e-12), random_fn
    got = random_reciprocal_rank(candidates, relevant)
    assert got == pytest.approx(
        _over_all_orders(candidates, lambda p: reciprocal_rank(p, relevant))
    )


def test_random_baselines_are_undefined_without_relevant_facts():
    for fn in (random_recall_at_k, random_precision_at_k, random_ndcg_at_k, random_recall_all):
        assert math.isnan(fn(["a"], set(), 3))
    for fn in (random_recall_any, random_dcg_any):
        assert math.isnan(fn(["a"], set(), 3))
    with pytest.raises(ConfigError):
        random_recall_all(["a"], {"a"}, 0)


SESSION_CASES = [
    # (ranking, relevant turns, relevant sessions)
    ([["a1", "A"], ["b1", "B"], ["a2", "A"], ["c1", "C"], ["b2", "B"]], {"b2"}, {"B"}),
    ([["a1", "A"], ["b1", "B"], ["a2", "A"], ["c1", "C"], ["b2", "B"]], {"a2", "c1"}, {"A", "C"}),
    ([["a1", "A"], ["a2", "A"], ["b1", "B"], ["c1", None], ["d1", "D"]], {"a1", "z9"}, {"A", "Z"}),
    ([["a1", "A"], ["a2", "A"], ["a3", "A"]], {"a3"}, {"A"}),
    ([["x", "X"], ["y", "Y"]], {"q"}, {"Q"}),  # gold not ranked at all
]


@pytest.mark.parametrize(("ranking", "rel", "want"), SESSION_CASES)
def test_session_level_random_is_seeded_reproducible_and_near_the_exact_mean(ranking, rel, want):
    one = random_retrieval(ranking, rel, want, "probe-1")
    assert one == random_retrieval(ranking, rel, want, "probe-1")
    exact = {
        name: _over_all_orders(ranking, lambda p, n=name: probe_retrieval(p, rel, want)[n])
        for name in one
    }
    assert set(one) == set(exact) and len(one) == 12  # 2 levels x 3 statistics x 2 k
    for name, value in one.items():
        if name.startswith("turn"):
            assert value == pytest.approx(exact[name], abs=1e-12), name
        else:  # 200 seeded orders: within a few standard errors of the exact mean
            assert value == pytest.approx(exact[name], abs=0.1), name


def test_session_level_random_draws_per_probe_and_handles_the_empty_cases():
    ranking, rel, want = SESSION_CASES[0]
    assert random_retrieval(ranking, rel, want, "p1") != random_retrieval(ranking, rel, want, "p2")
    empty = random_retrieval([], rel, want, "p1")
    assert empty == probe_retrieval([], rel, want)  # the one order of nothing
    assert all(math.isnan(v) for v in random_retrieval(ranking, set(), set(), "p1").values())


def _row(recalled, full, relevant):
    return row_fixtures.probe(
        relevant=sorted(relevant),
        recalled=[{"fact": f, "score": 1.0 - i / 10, "bytes": 10} for i, f in enumerate(recalled)],
        full=full,
    )


def test_probe_metrics_carry_full_and_random_baselines_side_by_side():
    # the floor kept 1 row (a miss); the full ranking has the gold second of 4
    unit = ProbeUnit(_row(["x"], ["x", "g", "y", "z"], {"g"}))
    value = {
        n: registry.get(n).fn(unit)
        for n in ("recall_at_3", "recall_at_3_full", "recall_at_3_random", "mrr", "mrr_full")
    }
    assert value["recall_at_3"] == 0.0
    assert value["recall_at_3_full"] == 1.0
    assert value["recall_at_3_random"] == pytest.approx(3 / 4)
    assert value["mrr"] == 0.0 and value["mrr_full"] == 0.5
    assert registry.get("mrr_random").fn(unit) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    # every ranking metric has both baselines registered right after it
    names = registry.names(unit="probe")
    for base in ("precision_returned", "p_at_1", "recall_at_8", "mrr", "ndcg_at_8"):
        i = names.index(base)
        assert names[i + 1 : i + 3] == (f"{base}_full", f"{base}_random")
    # no full ranking recorded (keyword path, older run): undefined, never 0
    blind = ProbeUnit(_row(["x"], None, {"g"}))
    assert math.isnan(registry.get("recall_at_3_full").fn(blind))
    assert math.isnan(registry.get("recall_at_3_random").fn(blind))


def test_longmemeval_metrics_have_both_baselines_and_turn_level_leads():
    names = registry.names(unit="ranking")
    assert names[0] == "turn_recall_any_at_5"
    assert names[1:3] == ("turn_recall_any_at_5_full", "turn_recall_any_at_5_random")
    headline = registry.names(listed="headline")
    assert {"turn_recall_any_at_5", "turn_recall_any_at_5_random"} <= set(headline)
    assert "seed 0" in registry.definition("session_recall_any_at_5_random")
    assert "exact" in registry.definition("turn_recall_any_at_5_random")


class Words:
    """Deterministic 3-d embedder: rows about cats, dogs and taxes point three ways."""

    dim = 3
    name = "words-3"

    def embed(self, texts):
        import numpy as np

        axes = {"cat": 0, "dog": 1, "tax": 2}
        out = np.full((len(texts), 3), 0.05, dtype=np.float32)
        for i, t in enumerate(texts):
            for w, j in axes.items():
                if w in t:
                    out[i, j] = 1.0
        return out


def test_full_ranking_ranks_every_live_row_past_the_floor(make_store):
    store = make_store(embedder=Words())
    for text in ("my cat sleeps", "the dog barks", "tax forms due", "cat food brand"):
        store.remember("s", text)
    tight = RecallParams(floor=0.9)
    assert len(store.recall("s", "cat", limit=0, params=tight)) == 2
    full = full_ranking(store, "s", "cat", tight)
    assert full is not None and len(full) == 4  # the floor dropped two; full keeps them
    assert {h.content for h in full[:2]} == {"my cat sleeps", "cat food brand"}
    assert all(h.path == "vector" for h in full)
    keyword_only = make_store(embedder=None)
    keyword_only.remember("s", "my cat sleeps")
    assert full_ranking(keyword_only, "s", "cat", tight) is None  # a keyword list is no ranking
