"""Sweeps: grids over tunables, shared replays, recommended point, CLI output."""

from __future__ import annotations

import json

import pytest
from test_eval_data import write_tiny_dataset

from evals.commands import sweep_main
from evals.datasets import load_dataset
from evals.replay import CachingEmbedder
from evals.sweep import recommend, resolve, sweep
from memkit.embed import get_embedder
from memkit.errors import ConfigError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    return root, load_dataset(root)


@pytest.fixture(scope="module")
def emb():
    return CachingEmbedder(get_embedder("wordllama"))


def test_resolve_names_and_aliases():
    assert resolve("floor") == ("recall", "floor")
    assert resolve("fold.window_days") == ("fold", "window_days")
    assert resolve("snapshot_policy") == ("consolidation", "snapshot_policy")
    with pytest.raises(ConfigError, match=r"'recall\.nope'"):
        resolve("recall.nope")
    with pytest.raises(ConfigError, match="'bogus'"):
        resolve("bogus")


def test_twenty_point_floor_sweep(tiny, emb):
    _, ds = tiny
    floors = [round(0.05 * i, 2) for i in range(20)]
    res = sweep(ds, {"floor": floors}, embedder=emb, resamples=100)
    f = res.frame
    assert sorted(f["floor"].unique()) == floors
    assert set(f["metric"]) >= {"ndcg_at_8", "budget_waste", "fold_recall"}
    assert len(f) == 20 * f["metric"].nunique()
    assert res.recommended["objective"] == "ndcg_at_8" and "floor" in res.recommended
    assert res.recommended["lo"] <= res.recommended["value"] <= res.recommended["hi"]
    # fold-in does not depend on the floor: one replay served every point
    fold = f[f["metric"] == "fold_recall"]["value"]
    assert fold.nunique() == 1


def test_block_bytes_sweep_bound(tiny, emb):
    _, ds = tiny
    # p1's first recalled entry is 34 bytes: a 34-byte block admits it, 33 stops
    # the block before it and shuts the relevant fact out
    res = sweep(
        ds,
        {"block_bytes": [33, 34]},
        embedder=emb,
        resamples=50,
        metrics=("relevant_shut_out",),
        objective="relevant_shut_out",
        maximize=False,
    )
    v = res.frame.set_index("block_bytes")["value"]
    assert v[33] == pytest.approx(v[34] + 1 / len(ds.probes))
    assert res.recommended["block_bytes"] == 34


def test_fold_threshold_sweep_changes_fold_recall(tiny, emb):
    _, ds = tiny
    calls = emb.calls
    res = sweep(
        ds, {"fold_threshold": [0.2, 0.99]}, embedder=emb, resamples=50, objective="fold_recall"
    )
    v = res.frame[res.frame.metric == "fold_recall"].set_index("fold_threshold")["value"]
    assert v[0.2] > v[0.99]
    assert res.recommended["fold_threshold"] == 0.2
    assert emb.calls == calls  # every text was already embedded: no new embedder calls


def test_snapshot_policy_sweep_runs_pipeline(tiny, emb):
    _, ds = tiny
    res = sweep(
        ds,
        {"snapshot_policy": ["recent", "relevant"]},
        embedder=emb,
        resamples=50,
        objective="extraction_recall",
        consolidator="oracle",
    )
    v = res.frame[res.frame.metric == "extraction_recall"]["value"]
    assert list(v) == [1.0, 1.0]


def test_grid_errors(tiny, emb):
    _, ds = tiny
    with pytest.raises(ConfigError, match="empty"):
        sweep(ds, {}, embedder=emb)
    with pytest.raises(ConfigError, match="no values"):
        sweep(ds, {"floor": []}, embedder=emb)


def test_recommend_prefers_first_of_ties():
    import pandas as pd

    f = pd.DataFrame(
        {
            "point_index": [0, 1, 2],
            "x": [1, 2, 3],
            "metric": ["m"] * 3,
            "value": [0.5, 0.9, 0.9],
            "lo": [0.4, 0.8, 0.8],
            "hi": [0.6, 1, 1],
            "n": [5, 5, 5],
        }
    )
    assert recommend(f, ["x"], "m")["x"] == 2
    assert recommend(f, ["x"], "m", maximize=False)["x"] == 1
    with pytest.raises(ConfigError, match="'zz'"):
        recommend(f, ["x"], "zz")


def test_cli_sweep_writes_frame_point_and_report(tiny, tmp_path, capsys):
    root, _ = tiny
    out = tmp_path / "sw"
    rc = sweep_main(
        [
            "--dataset",
            str(root),
            "--grid",
            "floor=0.1,0.3",
            "--out",
            str(out),
            "--resamples",
            "50",
            "--quiet",
        ]
    )
    assert rc == 0
    assert "recommended" in capsys.readouterr().out
    rec = json.loads((out / "recommended.json").read_text())
    assert rec["floor"] in (0.1, 0.3) and rec["version"] == 1
    assert (out / "sweep.csv").is_file() and (out / "sweep.png").is_file()
    assert "Sweep" in (out / "report.md").read_text()
    assert sweep_main(["--dataset", str(root), "--grid", "nope=1", "--quiet"]) == 2
