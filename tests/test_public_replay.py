"""Public benchmarks replayed as their gold means it: the MSC oracle ceiling, LoCoMo
categories and unmapped probes, LongMemEval haystack retrieval, tau-bench transcripts.
Read in place from ../shared/datasets (skipped when absent); small slices keep it fast."""

from __future__ import annotations

import json

from evals.adapters import load_msc
from evals.runfolder import read_jsonl
from evals.runner import RunConfig, run_eval


def _run(spec, out, *, consolidators=(), store_mode=True, limit=None):
    cfg = RunConfig(
        dataset=spec,
        name="public",
        store_mode=store_mode,
        consolidators=consolidators,
        limit=limit,
        resamples=50,
    )
    return run_eval(cfg, out, quiet=True, report=False)


def test_msc_oracle_is_a_ceiling_but_for_the_listed_identical_texts(shared_datasets, tmp_path):
    ds = load_msc(shared_datasets, limit=80)
    ambiguous = {f for a in ds.info["ambiguous_text"] for f in a["facts"]}
    texts = {(a["scope_id"], a["text"]) for a in ds.info["ambiguous_text"]}
    assert ambiguous  # this slice holds episodes whose two speakers share a line
    res = _run(f"msc:{shared_datasets}", tmp_path, consolidators=("oracle",), limit=80)
    t = res.metrics[res.metrics.system == "pipeline:oracle"].set_index("metric")
    assert t.loc["strict_validity", "value"] == 1.0
    assert t.loc["stale_rows", "value"] == 0.0
    rows = missed = 0
    for e in read_jsonl(tmp_path / "extraction.jsonl"):
        live = set(e["live_gold"])
        for r in e["rows"]:
            key = (e["scope_id"], " ".join(r["content"].split()).casefold())
            if key not in texts:
                rows += 1
                assert r["fact"] in live, r  # every unambiguous row holds a live fact
        covered = {r["fact"] for r in e["rows"]}
        missed += len(live - covered - ambiguous)
    assert rows > 500 and missed == 0
    # the identical texts are what keeps the oracle below 1.0, and nothing else
    assert t.loc["extraction_recall", "value"] < 1.0
    s = res.metrics[res.metrics.system == "store"].set_index("metric")
    assert {"group_fold_recall", "group_false_fold_rate"} <= set(s.index)
    m = res.metrics[res.metrics.system == "matcher"].set_index("metric")
    assert m.loc["matcher_recall", "n"] > 500  # measured on MSC's own fold gold
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["dataset"]["info"]["normalised"] == ds.info["normalised"]


def test_locomo_unmapped_probes_are_undefined_never_off_topic(shared_datasets, tmp_path):
    res = _run(f"locomo:{shared_datasets}", tmp_path, limit=2)
    rows = read_jsonl(tmp_path / "probes.jsonl")
    unmapped = [r for r in rows if r.get("undefined") == "unmapped"]
    assert unmapped and all(r["relevant"] == [] for r in unmapped)
    t = res.metrics.set_index("metric")
    overall = [r for r in rows if not r.get("apart")]
    scored = [r for r in overall if not r.get("undefined")]
    # relevance metrics are over mapped, non-adversarial probes only
    for m in ("p_at_1", "recall_at_8", "budget_waste", "precision_returned"):
        assert m in t.index
    assert t.loc["p_at_1", "n"] == len(scored) < len(overall)
    assert sum(r.get("undefined") == "unmapped" for r in overall) > 0
    # an unmapped probe's admitted bytes are never counted as (irrelevant) waste
    assert t.loc["budget_waste", "n"] == len(scored)
    groups = json.loads((tmp_path / "groups.json").read_text())["rows"]
    cats = {r["group"] for r in groups}
    assert cats == {"1 multi-hop", "2 temporal", "3 open-domain", "4 single-hop", "5 adversarial"}
    probes = {r["group"]: r["value"] for r in groups if r["metric"] == "probes"}
    assert sum(probes.values()) == len(rows)
    und = {r["group"]: r["value"] for r in groups if r["metric"] == "undefined_unmapped"}
    for g, n in und.items():
        p1 = next(r for r in groups if r["group"] == g and r["metric"] == "p_at_1")
        assert p1["n"] == probes[g] - n  # n beside each value: the defined probes
    assert all(r["apart"] == (r["group"] == "5 adversarial") for r in groups)
