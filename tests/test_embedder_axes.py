"""Issue #31 item 4: the embedder as an axis. `eval run --embedder A --embedder B`
gives one store system per embedder on the same probes, compared pairwise; a sweep
grid takes `embedder=A,B` beside the tunables and recommends a point per embedder;
a 1-D grid draws one line per embedder, a 2-D grid a heatmap."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_eval_data import write_tiny_dataset

from evals.commands import run_main, sweep_main
from evals.datasets import load_dataset
from evals.runner import RunConfig
from evals.sweep import sweep
from evals.sweep_plots import sweep_figure
from evals.tunables import parse_grid
from memkit.errors import ConfigError

PNG = b"\x89PNG"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    return root, load_dataset(root)


def test_run_with_two_embedders_gives_two_store_systems_compared_pairwise(tiny, tmp_path):
    root, _ = tiny
    out = tmp_path / "run"
    args = ["--dataset", str(root), "--mode", "store", "--out", str(out), "--quiet"]
    assert run_main([*args, "--embedder", "hashing", "--embedder", "hashing-64"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["systems"] == ["store@hashing", "store@hashing-64"]
    assert manifest["embedders"] == {
        "store@hashing": "hashing-256",
        "store@hashing-64": "hashing-64",
    }
    rows = json.loads((out / "metrics.json").read_text())["metrics"]
    for system in manifest["systems"]:  # every probe metric for each, beside its baselines
        got = {r["metric"] for r in rows if r["system"] == system}
        assert {"recall_at_8", "recall_at_8_full", "recall_at_8_random", "budget_waste"} <= got
    compare = pd.read_csv(out / "compare.csv")
    assert set(zip(compare["a"], compare["b"], strict=True)) == {
        ("store@hashing", "store@hashing-64")
    }
    assert {"recall_at_8", "budget_waste"} <= set(compare["metric"])
    probes = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    ids = {
        s: sorted(p["probe_id"] for p in probes if p["system"] == s) for s in manifest["systems"]
    }
    assert ids["store@hashing"] == ids["store@hashing-64"]  # the same probes
    assert "Paired comparisons" in (out / "report.md").read_text()


def test_one_embedder_keeps_the_plain_store_system(tiny, tmp_path):
    root, _ = tiny
    out = tmp_path / "run"
    args = ["--dataset", str(root), "--mode", "store", "--out", str(out), "--quiet"]
    assert run_main([*args, "--embedder", "hashing"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["systems"] == ["store"] and "embedders" not in manifest
    assert not (out / "compare.csv").exists()


def test_embedders_are_distinct_and_led_by_the_run_embedder():
    RunConfig("d", embedder="hashing", embedders=("hashing", "wordllama"))
    with pytest.raises(ConfigError, match="distinct"):
        RunConfig("d", embedder="hashing", embedders=("hashing", "hashing"))
    with pytest.raises(ConfigError, match="the first being"):
        RunConfig("d", embedder="hashing", embedders=("wordllama", "hashing"))


def test_sweep_takes_an_embedder_axis_and_recommends_a_point_per_embedder(tiny):
    _, ds = tiny
    assert parse_grid(["embedder=hashing,hashing-64", "floor=0.1,0.3"]) == {
        "embedder": ["hashing", "hashing-64"],
        "floor": [0.1, 0.3],
    }
    res = sweep(ds, {"embedder": ["hashing", "hashing-64"], "floor": [0.1, 0.3]})
    f = res.frame
    assert res.params == ("embedder", "floor")
    assert sorted(set(zip(f["embedder"], f["floor"], strict=True))) == [
        ("hashing", 0.1),
        ("hashing", 0.3),
        ("hashing-64", 0.1),
        ("hashing-64", 0.3),
    ]
    assert sorted(f["point_index"].unique()) == [0, 1, 2, 3]  # one index per (embedder, floor)
    by = res.recommended["by_embedder"]
    assert set(by) == {"hashing", "hashing-64"}
    for spec, rec in by.items():
        assert rec["embedder"] == spec and rec["floor"] in (0.1, 0.3)
        row = f[(f["point_index"] == rec["point_index"]) & (f["metric"] == rec["metric"])]
        assert row["embedder"].iloc[0] == spec and row["value"].iloc[0] == rec["value"]
    overall = res.recommended  # one of the four points, paired over the same probes
    hit = f[f["point_index"] == overall["point_index"]].iloc[0]
    assert (hit["embedder"], hit["floor"]) == (overall["embedder"], overall["floor"])
    assert overall["constraint"]["difference"] is None or overall["constraint"]["difference"]["n"]


def test_sweep_cli_refuses_two_embedders_outside_the_grid(tiny):
    root, _ = tiny
    args = ["--dataset", str(root), "--grid", "floor=0.1,0.2", "--quiet"]
    assert sweep_main([*args, "--embedder", "hashing", "--embedder", "hashing-64"]) == 2


def _frame(params, rows):
    f = pd.DataFrame.from_records(rows)
    f["param"] = ",".join(params)
    f["point"] = f["point_index"]
    return f


def _rows(axes):
    import itertools

    out = []
    for i, combo in enumerate(itertools.product(*axes.values())):
        for m, v in (("recall_at_8", 0.9 - 0.1 * i / 4), ("budget_waste", 0.5 + 0.05 * i)):
            out.append(
                {"point_index": i, **dict(zip(axes, combo, strict=True)), "metric": m, "value": v}
                | {"lo": v - 0.05, "hi": v + 0.05}
            )
    return out


def test_sweep_figure_by_grid_shape():
    one = {"embedder": ["a", "b"], "recall.floor": [0.1, 0.2, 0.3]}
    png = sweep_figure(_frame(list(one), _rows(one)), {"by_embedder": {}})
    assert png is not None and png.startswith(PNG)  # one line per embedder
    two = {"embedder": ["a", "b"], "recall.floor": [0.1, 0.2], "recall.recency_share": [0.1, 0.3]}
    rec = {"metric": "budget_waste", "constraint": {"metric": "recall_at_8"}}
    png = sweep_figure(_frame(list(two), _rows(two)), rec)
    assert png is not None and png.startswith(PNG)  # heatmaps per embedder
    plain2d = {"recall.floor": [0.1, 0.2], "recall.recency_share": [0.1, 0.3]}
    assert sweep_figure(_frame(list(plain2d), _rows(plain2d)), rec).startswith(PNG)
    flat = {"recall.floor": [0.1, 0.2, 0.3]}
    assert sweep_figure(_frame(list(flat), _rows(flat)), None) is None  # the report's own plot


def test_the_manifest_records_the_floor_each_store_system_used(tiny, tmp_path):
    """Each embedder has its own default floor (WordLlama 0.07, hashing 0.25): the
    manifest says which one made the numbers, or the floor the run set for all."""
    root, _ = tiny
    args = ["--dataset", str(root), "--mode", "store", "--quiet"]
    two = ["--embedder", "wordllama", "--embedder", "hashing"]
    assert run_main([*args, *two, "--out", str(tmp_path / "a")]) == 0
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["recall_floors"] == {"store@wordllama": 0.07, "store@hashing": 0.25}
    assert run_main([*args, *two, "--set", "floor=0.3", "--out", str(tmp_path / "b")]) == 0
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["recall_floors"] == {"store@wordllama": 0.3, "store@hashing": 0.3}
    assert run_main([*args, "--embedder", "none", "--out", str(tmp_path / "c")]) == 0
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["recall_floors"] == {"store": None}
