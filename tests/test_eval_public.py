"""Store mode on public benchmarks (LoCoMo, LongMemEval) and the matcher on public
paraphrase pairs, read in place from ../shared/datasets (skipped when absent).
Small `limit=` subsets keep this fast."""

from __future__ import annotations

import json

import pandas as pd

from evals.adapters import load_mrpc, load_paws
from evals.matcher import pair_accuracy
from evals.runner import RunConfig, run_eval


def _store_run(spec, limit, out):
    cfg = RunConfig(dataset=spec, name="public", consolidators=(), limit=limit, resamples=100)
    return run_eval(cfg, out, quiet=True, report=False)


def test_locomo_store_mode(shared_datasets, tmp_path):
    res = _store_run(f"locomo:{shared_datasets}", 1, tmp_path / "locomo")
    t = res.metrics.set_index("metric")
    assert set(res.metrics.system) == {"store"}
    rows = [json.loads(x) for x in (tmp_path / "locomo" / "probes.jsonl").read_text().splitlines()]
    scored = [r for r in rows if not r.get("apart") and not r.get("undefined")]
    on_topic = [r for r in scored if r["relevant"]]  # P@k is defined on these only
    assert len(scored) > 100 and t.loc["p_at_1", "n"] == len(on_topic)
    # one conversation is one cluster of questions: a value, but no interval
    for m in ("recall_at_8", "mrr", "ndcg_at_8", "budget_waste"):
        assert 0.0 <= t.loc[m, "value"] <= 1.0 and t.loc[m, "clusters"] == 1
        assert t.loc[m, "method"] == "no interval (1 cluster)" and pd.isna(t.loc[m, "lo"])
    # observations are distinct facts written once: nothing to leak
    assert t.loc["supersede_leakage", "value"] == 0.0
    manifest = json.loads((tmp_path / "locomo" / "manifest.json").read_text())
    assert manifest["dataset"]["fingerprint"]


def test_longmemeval_store_mode(shared_datasets, tmp_path):
    res = _store_run(f"longmemeval:{shared_datasets}", 10, tmp_path / "lme")
    t = res.metrics.set_index("metric")
    assert t.loc["mrr", "n"] >= 5
    assert 0.0 <= t.loc["recall_at_8", "value"] <= 1.0


def test_matcher_on_public_pairs(shared_datasets):
    for pairs in (load_mrpc(shared_datasets, limit=300), load_paws(shared_datasets, limit=300)):
        acc = pair_accuracy(pairs)
        assert acc.n == 300 and acc.tp + acc.fn > 0
        assert 0.0 < acc.recall <= 1.0 and 0.0 < acc.precision <= 1.0
