"""`memkit eval run --preset bundled` (what `make eval` runs) on the bundled dataset:
the oracle is the ceiling (strict validity and extraction recall 1.0), the
heuristic scores lower but above zero, and both reports render."""

from __future__ import annotations

import json

import pytest

from evals.commands import run_main
from evals.runner import PRESETS, REPO


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory):
    if not (REPO / PRESETS["bundled"]["dataset"] / "dataset.json").is_file():
        pytest.skip("bundled dataset not built yet (datasets/bundled/dataset.json)")
    out = tmp_path_factory.mktemp("bundled") / "latest"
    rc = run_main(
        [
            "--preset",
            "bundled",
            "--out",
            str(out),
            "--quiet",
            "--resamples",
            "200",
            "--cache-dir",
            str(out.parent / "cache"),
        ]
    )
    assert rc == 0
    return out


def _metric(out, system, metric):
    rows = json.loads((out / "metrics.json").read_text())["metrics"]
    return next(r for r in rows if r["system"] == system and r["metric"] == metric)


def test_oracle_ceiling_and_heuristic_floor(bundled_run):
    out = bundled_run
    assert _metric(out, "pipeline:oracle", "strict_validity")["value"] == 1.0
    assert _metric(out, "pipeline:oracle", "extraction_recall")["value"] == 1.0
    h = _metric(out, "pipeline:heuristic", "extraction_recall")
    assert 0.0 < h["value"] < 1.0 and h["hi"] < 1.0
    assert _metric(out, "store", "p_at_1")["n"] > 100


def test_reports_render(bundled_run):
    out = bundled_run
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert html.startswith("<!doctype html>") and html.count("data:image/png;base64,") >= 3
    assert "System `store`" in md  # short labels, the full spec beside them
    for system in ("heuristic", "oracle"):
        assert f"System `{system}` (`pipeline:{system}`)" in md
    assert "Gold matcher accuracy" in md


def test_stale_twins_make_store_mode_leak(bundled_run):
    """Bundled 1.1.0 restates >= 10 facts before they are superseded or retracted,
    in words too far apart to fold: the twin row that curation misses leaks."""
    facts = [json.loads(x) for x in (REPO / "datasets/bundled/facts.jsonl").open()]
    twins = [
        f
        for f in facts
        if (f["superseded_by"] or f["retracted_in"]) and len(f["established_in"]) >= 2
    ]
    assert len(twins) >= 10
    out = bundled_run
    writes = [json.loads(x) for x in (out / "writes.jsonl").open()]
    unfolded = {w["fact"] for w in writes if w["restatement"] and not w["folded"]}
    assert len(unfolded & {f["fact_id"] for f in twins}) >= 10
    leak = _metric(out, "store", "supersede_leakage")
    assert leak["value"] > 0 and leak["lo"] > 0


def outside_range(run_dir):
    """Every interval end or value in a run folder's metrics.json, groups.json,
    breakdown.json, compare.csv and sweep.csv that lies outside its metric's range."""
    import math

    import pandas as pd

    from evals import registry

    def bad(rows, where, difference=False):
        out = []
        for r in rows:
            m = r.get("metric")
            if m not in registry.all_metrics():
                continue
            lo, hi = registry.value_range(m, difference=difference)
            for key in ("value", "lo", "hi"):
                v = r.get(key)
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                if not lo <= float(v) <= hi:
                    out.append(f"{where}: {r.get('system', '')} {m} {key}={v}")
        return out

    found = []
    for name, key in (
        ("metrics.json", "metrics"),
        ("groups.json", "rows"),
        ("breakdown.json", "rows"),
    ):
        if (run_dir / name).is_file():
            found += bad(json.loads((run_dir / name).read_text())[key], f"{run_dir.name}/{name}")
    for name, diff in (("compare.csv", True), ("sweep.csv", False)):
        if (run_dir / name).is_file():
            rows = pd.read_csv(run_dir / name).to_dict("records")
            found += bad(rows, f"{run_dir.name}/{name}", diff)
    return found


def test_no_interval_of_make_eval_or_a_compare_lies_outside_its_range(bundled_run):
    """#32 acceptance: shares in [0, 1], differences of shares in [-1, 1], counts >= 0,
    in make eval's files and its compare (valid_after_repair's difference was
    0.994 [0.979, 1.0085]), and in the committed example reports."""
    from evals.commands import compare_main

    assert compare_main([str(bundled_run), "--quiet", "--no-report"]) == 0
    assert (bundled_run / "compare.csv").is_file()
    assert outside_range(bundled_run) == []
    for d in (REPO / "reports" / "example", REPO / "reports" / "longmemeval-oracle"):
        assert outside_range(d) == [], d


def test_public_examples_stay_in_range(shared_datasets, tmp_path):
    """LoCoMo (2 conversations), MSC (20 episodes, oracle) and LongMemEval (10
    questions): no interval outside its metric's range."""
    from evals.runner import RunConfig, run_eval

    for spec, limit, cons in (("locomo", 2, ()), ("msc", 20, ("oracle",)), ("longmemeval", 10, ())):
        out = tmp_path / spec
        cfg = RunConfig(
            dataset=f"{spec}:{shared_datasets}",
            name=spec,
            consolidators=cons,
            store_mode=True,
            limit=limit,
            resamples=100,
        )
        run_eval(cfg, out, quiet=True, report=False)
        assert outside_range(out) == [], spec


def test_pipeline_headline_counts_empty_proposals_apart(bundled_run):
    """#32 finding 7: {"changes": []} is strictly valid; empty_proposal_share and
    nonempty_valid split strict_validity and both are in the pipeline headline."""
    from evals import registry

    schema = "pipeline:replay:datasets/bundled/recordings/smollm2-135m-schema.jsonl"
    valid = _metric(bundled_run, schema, "strict_validity")
    empty = _metric(bundled_run, schema, "empty_proposal_share")
    full = _metric(bundled_run, schema, "nonempty_valid")
    assert empty["value"] + full["value"] == pytest.approx(valid["value"])
    assert empty["value"] > full["value"]  # most of SmolLM2's valid answers are empty
    assert empty["n"] == full["n"] == valid["n"]
    head = registry.names(listed="headline")
    assert {"empty_proposal_share", "nonempty_valid"} <= set(head)
    md = (bundled_run / "report.md").read_text()
    assert "empty_proposal_share" in md and "nonempty_valid" in md


def test_bundled_floor_sweep_recommends_a_non_inferior_point(tmp_path):
    """#32 acceptance: on the bundled 20-point floor sweep the recommendation's recall
    interval against the best lies entirely above -margin (0.35 was chosen with
    [-0.149, -0.034]), and the report lists the qualifying set."""
    from evals.commands import sweep_main

    floors = ",".join(f"{0.05 * i:.2f}" for i in range(20))
    out = tmp_path / "floor"
    argv = ["--preset", "bundled", "--grid", f"floor={floors}", "--out", str(out), "--quiet"]
    assert sweep_main(argv) == 0
    rec = json.loads((out / "recommended.json").read_text())
    c = rec["constraint"]
    assert c["difference"] is None or c["difference"]["lo"] >= -c["margin"]
    assert rec["point_index"] in c["qualifying"] and len(c["points"]) == 20
    for v in c["points"]:
        d = v["difference"]
        assert v["qualifies"] == (d is None or (d["lo"] is not None and d["lo"] >= -0.05))
    md = (out / "report.md").read_text()
    assert f"Qualifying points ({len(c['qualifying'])} of 20)" in md
    assert outside_range(out) == []
