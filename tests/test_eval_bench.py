"""`memkit bench harness` runs end to end on a tiny dataset and reports its numbers."""

from __future__ import annotations

import json

from test_eval_data import write_tiny_dataset

from evals.bench_harness import main


def test_bench_harness_json(tmp_path, capsys):
    root = write_tiny_dataset(tmp_path / "tiny")
    assert main(["--dataset", str(root), "--points", "3", "--embedder", "hashing", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["probes"] == 5 and out["floor_sweep_points"] == 3
    assert out["passes"] == 8  # one per eligible run (a6 failed: nothing staged)
    assert out["passes_per_s"] > 0 and out["store_mode_s"] >= 0
