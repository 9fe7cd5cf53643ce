"""Store mode and pipeline mode on the tiny dataset: what gets written, what the
probes see, and the oracle/heuristic ceiling and floor."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from test_eval_data import write_tiny_dataset

from evals import aggregate, scorers
from evals.datasets import load_dataset
from evals.matcher import Matcher
from evals.replay import (
    CachingEmbedder,
    Variant,
    oracle_gold,
    replay_pipeline_scope,
    replay_store,
    scopes_of,
)
from memkit.embed import get_embedder
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, FoldParams, RecallParams


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return load_dataset(write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny"))


@pytest.fixture(scope="module")
def emb():
    return CachingEmbedder(get_embedder("wordllama"))


def _probe(rows, pid, variant="default"):
    return next(r for r in rows if r.probe_id == pid and r.variant == variant)


def test_scopes_in_time_order(ds):
    scopes = scopes_of(ds)
    assert [s.scope_id for s in scopes] == ["alpha", "beta"]
    assert [r.run_id for r in scopes[0].runs] == ["a1", "a2", "a3", "a4", "a5", "a6"]
    assert [p.probe_id for p in scopes[0].probes] == ["p1", "p2", "p3"]


def test_unknown_after_run_is_an_error(ds):
    from dataclasses import replace

    bad = replace(ds, probes=(replace(ds.probes[0], after_run="nope"),))
    with pytest.raises(ConfigError, match="'nope'"):
        scopes_of(bad)


def test_store_mode_writes_canonical_then_paraphrases(ds, emb):
    r = replay_store(ds, embedder=emb)
    deploy = [w for w in r.writes if w.fact == "deploy-script"]
    assert [w.restatement for w in deploy] == [False, True]
    ci = [w for w in r.writes if w.fact == "ci"]
    # "Buildkite runs our CI" vs "CI runs on Buildkite": same words, folds
    assert ci[1].folded and ci[1].row_fact == "ci" and ci[1].row == ci[0].row
    # the superseding fact is written as an update (a fresh successor row)
    make = next(w for w in r.writes if w.fact == "deploy-make")
    assert not make.folded and make.row not in {w.row for w in deploy[1:]}


def test_store_mode_retraction_and_stale_sets(ds, emb):
    r = replay_store(ds, embedder=emb)
    p2 = _probe(r.probes, "p2")
    assert set(p2.stale) == {"deploy-script", "stage-db"}
    assert "stage-db" not in {x.fact for x in p2.recalled}
    p1 = _probe(r.probes, "p1")
    assert p1.stale == () and p1.recalled[0].fact == "deploy-script"


def test_curation_policy_decides_leakage(ds, emb):
    # the restatement of deploy-script missed fold-in (two rows); updating only
    # the latest row leaves its twin live and it leaks into p2's block
    latest = _probe(replay_store(ds, embedder=emb).probes, "p2")
    assert scorers.leaked([a.fact for a in latest.admitted], set(latest.stale))
    ideal = _probe(replay_store(ds, embedder=emb, curation="all_rows").probes, "p2")
    assert not scorers.leaked([a.fact for a in ideal.admitted], set(ideal.stale))
    with pytest.raises(ConfigError, match="'some'"):
        replay_store(ds, embedder=emb, curation="some")


def test_fold_window_bound_reaches_the_store(ds, emb):
    # ci is restated 4 days after first evidence
    at = replay_store(ds, embedder=emb, fold=FoldParams(window_days=4.0001), scopes=["beta"])
    assert [w.folded for w in at.writes if w.fact == "ci"] == [False, True]
    past = replay_store(ds, embedder=emb, fold=FoldParams(window_days=4.0), scopes=["beta"])
    assert [w.folded for w in past.writes if w.fact == "ci"] == [False, False]


def test_variants_share_one_replay(ds, emb):
    variants = [
        Variant("open", RecallParams(floor=0.0)),
        Variant("tight", RecallParams(floor=0.25), AssemblyParams(block_bytes=30)),
    ]
    r = replay_store(ds, embedder=emb, variants=variants)
    assert len(r.probes) == 2 * len(ds.probes)
    tight = _probe(r.probes, "p1", "tight")
    # block budget 30 bytes: the 34-byte first entry overflows and stops admission
    assert tight.admitted == () and tight.stopped
    assert scorers.relevant_shut_out([x.fact for x in tight.recalled], [], set(tight.relevant)) == 1


def test_probe_with_no_relevant_facts(ds, emb):
    p5 = _probe(replay_store(ds, embedder=emb).probes, "p5")
    assert p5.relevant == ()
    assert math.isnan(scorers.recall_at_k([x.fact for x in p5.recalled], set(), 8))


def test_caching_embedder_embeds_each_text_once():
    inner = get_embedder("hashing")
    c = CachingEmbedder(inner)
    a = c.embed(["x", "y", "x"])
    assert a.shape == (3, inner.dim) and np.allclose(a[0], a[2])
    calls = c.calls
    c.embed(["y", "x"])
    assert c.calls == calls
    assert c.embed([]).shape == (0, inner.dim)


def _pipeline(ds, emb, spec):
    from memkit.consolidate import get_consolidator

    m = Matcher(ds.facts)
    opts = {"gold": oracle_gold(ds, m)} if spec == "oracle" else {}
    cons = get_consolidator(spec, **opts)
    return [
        asyncio.run(replay_pipeline_scope(s, cons, embedder=emb, matcher=m)) for s in scopes_of(ds)
    ]


def _value(groups, name):
    return aggregate.estimate(groups[name]).value


def test_oracle_is_the_ceiling(ds, emb):
    res = _pipeline(ds, emb, "oracle")
    att = aggregate.attempt_metrics([a for r in res for a in r.attempts])
    ext = aggregate.extraction_metrics([e for r in res for e in r.extraction])
    assert _value(att, "strict_validity") == 1.0
    assert _value(ext, "extraction_recall") == 1.0
    assert _value(ext, "extraction_precision") == 1.0
    assert _value(ext, "stale_rows") == 0.0
    # the oracle merged the superseded fact and retracted the retracted one
    ops = [c for r in res for p in r.passes for c in p.changes]
    assert any(c["ids"] and c["entry"] for c in ops)
    assert any(c["ids"] and c["entry"] is None for c in ops)


def test_heuristic_is_below_the_ceiling_but_above_zero(ds, emb):
    res = _pipeline(ds, emb, "heuristic")
    ext = aggregate.extraction_metrics([e for r in res for e in r.extraction])
    assert 0.0 < _value(ext, "extraction_recall") < 1.0
    # ineligible run a6 staged nothing: one pass per eligible run at most
    assert all(p.outcome == "committed" for r in res for p in r.passes)
    assert len([p for r in res for p in r.passes if p.scope_id == "alpha"]) == 5
