"""reports/embedders (issue #31): MiniLM at its calibrated floor against WordLlama at
its own, paired on the same probes, beside both baselines, on the bundled data and
LongMemEval oracle at turn level. The README's tables are built here from the
committed metrics.json and compare.csv, so they cannot drift from the files, and the
floors it states are the embedders' current defaults (a recalibration flags it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from memkit.embed import default_floor_of, get_embedder

REPORT = Path(__file__).resolve().parents[1] / "reports" / "embedders"
A, B = "store@wordllama", "store@minilm"
RUNS = {
    "bundled": ("recall_at_8", "mrr", "p_at_1", "ndcg_at_8", "offtopic_silence", "budget_waste"),
    "longmemeval-oracle": (
        "turn_recall_any_at_5",
        "turn_recall_any_at_10",
        "turn_ndcg_any_at_5",
        "turn_ndcg_any_at_10",
        "session_recall_any_at_5",
    ),
}


def _fmt(r: dict | None) -> str:
    v = None if r is None else r.get("value")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    lo, hi = r.get("lo"), r.get("hi")
    if lo is None or hi is None or any(math.isnan(x) for x in (lo, hi)):
        return f"{r['value']:.3f}"
    return f"{r['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def paired_table(run: Path, metrics: tuple[str, ...]) -> str:
    """One row per metric: each embedder's value [95% CI], the paired difference
    WordLlama - MiniLM [95% CI] over the same probes, and each one's full-ranking
    and random-order baselines (— where a metric has none)."""
    rows = json.loads((run / "metrics.json").read_text())["metrics"]
    val = {(r["system"], r["metric"]): r for r in rows}
    cmp = pd.read_csv(run / "compare.csv")
    pair = cmp[(cmp.a == A) & (cmp.b == B)].set_index("metric")
    out = [
        "| metric | WordLlama | MiniLM | WordLlama − MiniLM [95% CI] | n | "
        "full ranking (WordLlama / MiniLM) | random order (WordLlama / MiniLM) |",
        "|---|---|---|---|---:|---|---|",
    ]
    for m in metrics:
        d = pair.loc[m]
        diff = f"{d.value:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]"
        base = [
            " / ".join(_fmt(val.get((s, f"{m}_{kind}"))) for s in (A, B))
            for kind in ("full", "random")
        ]
        base = ["—" if b == "— / —" else b for b in base]
        out.append(
            f"| {m} | {_fmt(val.get((A, m)))} | {_fmt(val.get((B, m)))} | {diff} "
            f"| {int(d.n)} | {base[0]} | {base[1]} |"
        )
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_committed_run_pairs_the_two_embedders_on_the_same_probes(name):
    run = REPORT / name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["systems"] == [A, B]
    assert manifest["config"]["embedders"] == ["wordllama", "minilm"]
    assert manifest["config"]["recall"] == {}  # each at its own default floor
    cmp = pd.read_csv(run / "compare.csv")
    pair = cmp[(cmp.a == A) & (cmp.b == B)].set_index("metric")
    for m in RUNS[name]:
        assert m in pair.index and pair.loc[m].lo <= pair.loc[m].value <= pair.loc[m].hi


def test_the_readme_tables_are_the_committed_numbers_at_the_current_floors():
    readme = (REPORT / "README.md").read_text()
    for name, metrics in RUNS.items():
        assert paired_table(REPORT / name, metrics) in readme, name
    for spec, label in (("wordllama", "WordLlama"), ("minilm", "MiniLM")):
        floor = default_floor_of(get_embedder(spec))
        assert f"{label} at its calibrated floor {floor:.2f}" in readme
