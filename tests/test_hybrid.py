"""Issue #31 item 6: hybrid ranking, keyword and vector evidence fused by
reciprocal-rank fusion behind `RecallParams.hybrid` (off by default), on both
backends, and sweepable like any tunable."""

from __future__ import annotations

import dataclasses

import pytest
from test_baselines import Words  # 3-d: texts about cats, dogs and taxes point three ways
from test_eval_data import write_tiny_dataset

from evals.datasets import load_dataset
from evals.replay import CachingEmbedder
from evals.sweep import sweep
from evals.tunables import parse_grid, resolve
from memkit.embed import get_embedder
from memkit.errors import ConfigError
from memkit.params import RecallParams
from memkit.store.rank import RRF_K, rrf_fuse


def test_rrf_fuse_by_hand():
    fused = rrf_fuse([["a", "b", "c"], ["c", "d"]], k=60)
    assert [x for x, _ in fused] == ["c", "a", "b", "d"]  # b and d tie: b's best rank is earlier
    score = dict(fused)
    assert score["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert score["a"] == pytest.approx(1 / 61)
    assert score["b"] == score["d"] == pytest.approx(1 / 62)


def test_rrf_fuse_bounds_and_repeats():
    assert RRF_K == 60
    # k at its bound; the repeat of a counts once, and b keeps its position (rank 3)
    assert rrf_fuse([["a", "a", "b"]], k=1) == [("a", 0.5), ("b", 0.25)]
    with pytest.raises(ConfigError, match="rrf k must be >= 1"):
        rrf_fuse([["a"]], k=0)  # one past it
    assert rrf_fuse([[], []]) == []
    assert rrf_fuse([]) == []


def _filled(make_store):
    store = make_store(embedder=Words())
    for text in ("my cat sleeps all day", "the dog barks", "tax forms due friday"):
        store.remember("s", text)
    return store


def test_hybrid_is_off_by_default_and_recall_is_the_spec_vector_path(make_store):
    assert RecallParams().hybrid == "off"
    store = _filled(make_store)
    hits = store.recall("s", "cat forms")
    assert [h.content for h in hits] == ["my cat sleeps all day"]
    assert hits[0].path == "vector"


def test_hybrid_adds_a_keyword_match_below_the_floor_on_both_backends(make_store):
    store = _filled(make_store)
    rrf = RecallParams(hybrid="rrf")
    hits = store.recall("s", "cat forms", params=rrf)
    assert [h.content for h in hits] == ["my cat sleeps all day", "tax forms due friday"]
    assert all(h.path == "hybrid" for h in hits)
    cat, tax = hits
    assert cat.cosine is not None and cat.cosine > 0.25 and cat.keywords_matched == 1
    assert tax.cosine is None and tax.keywords_matched == 1  # below the floor: keyword evidence
    # vector: cat 1st; keywords (one each, the more recent first): tax 1st, cat 2nd
    assert cat.score == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert tax.score == pytest.approx(1 / (RRF_K + 1))
    # a row on both rankings outranks rows on one; the limit cuts after fusion
    store.remember("s", "cat forms for the vet")
    both = store.recall("s", "cat forms", limit=1, params=rrf)
    assert [h.content for h in both] == ["cat forms for the vet"]
    assert both[0].keywords_matched == 2 and both[0].cosine is not None


def test_hybrid_below_the_floor_keeps_the_keyword_matches(make_store):
    store = _filled(make_store)
    for query in ("zebra", "the dog", "cat"):
        off = store.recall("s", query, params=RecallParams(floor=1.5))
        rrf = store.recall("s", query, params=RecallParams(hybrid="rrf", floor=1.5))
        if query == "zebra":  # no vector survivor, no keyword match: nothing, as off
            assert off == rrf == []
        else:  # below the floor but matching a keyword: fused, not a fallback
            assert [h.id for h in rrf] == [h.id for h in off]
            assert all(h.fallback == "below_floor" for h in off)
            assert all(h.path == "hybrid" and h.fallback is None for h in rrf)


def test_hybrid_is_a_sweep_axis(tmp_path):
    assert resolve("hybrid") == ("recall", "hybrid")
    assert parse_grid(["hybrid=off,rrf"]) == {"hybrid": ["off", "rrf"]}
    with pytest.raises(ConfigError, match="want one of off, rrf"):
        parse_grid(["hybrid=off,bm25"])
    ds = load_dataset(write_tiny_dataset(tmp_path / "tiny"))
    res = sweep(ds, {"hybrid": ["off", "rrf"]}, embedder=CachingEmbedder(get_embedder("hashing")))
    f = res.frame
    assert sorted(f["hybrid"].unique()) == ["off", "rrf"]
    recall = f[f.metric == "recall_at_8"].set_index("hybrid")["value"]
    assert recall["rrf"] >= recall["off"]  # fusion only adds keyword evidence to the list
    assert res.recommended["hybrid"] in ("off", "rrf")


def test_hybrid_value_is_checked():
    with pytest.raises(ConfigError, match=r"RecallParams\.hybrid must be 'off' or 'rrf'"):
        dataclasses.replace(RecallParams(), hybrid="bm25")
    with pytest.raises(ConfigError, match="got 'RRF'"):
        RecallParams(hybrid="RRF")
