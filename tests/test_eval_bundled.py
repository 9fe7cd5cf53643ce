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
    for system in ("store", "pipeline:heuristic", "pipeline:oracle"):
        assert f"System `{system}`" in md
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
