"""Sweeps: grids over tunables, shared replays, recommended point, CLI output."""

from __future__ import annotations

import json
import re

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
    res = sweep(ds, {"floor": floors}, embedder=emb)
    f = res.frame
    assert sorted(f["floor"].unique()) == floors
    assert set(f["metric"]) >= {"ndcg_at_8", "budget_waste", "fold_recall"}
    assert len(f) == 20 * f["metric"].nunique()
    rec = res.recommended
    assert rec["objective"] == "default" and rec["metric"] == "budget_waste" and "floor" in rec
    assert rec["lo"] <= rec["value"] <= rec["hi"]
    # the default trade-off: no eligible point wastes less than the recommended one
    c = rec["constraint"]
    assert c["metric"] == "recall_at_8" and -c["margin"] == -0.05
    assert c["difference"] is None or c["difference"]["lo"] >= -0.05
    waste = f[f.metric == "budget_waste"].set_index("floor")["value"]
    assert rec["value"] == waste[rec["floor"]]
    # every point is listed with its verdict; no qualifying point wastes less
    assert [v["floor"] for v in c["points"]] == floors
    ok = [v["floor"] for v in c["points"] if v["qualifies"]]
    assert ok == [floors[i] for i in c["qualifying"]] and rec["floor"] in ok
    assert (waste[ok] >= rec["value"]).all()
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
        metrics=("relevant_shut_out",),
        objective="relevant_shut_out",
    )
    v = res.frame.set_index("block_bytes")["value"]
    assert v[33] == pytest.approx(v[34] + 1 / len(ds.probes))
    assert res.recommended["block_bytes"] == 34


def test_fold_threshold_sweep_changes_fold_recall(tiny, emb):
    _, ds = tiny
    # warm the cache here, so the test holds alone as in the whole file's order
    sweep(ds, {"fold_threshold": [0.5]}, embedder=emb, objective="fold_recall")
    calls = emb.calls
    res = sweep(ds, {"fold_threshold": [0.2, 0.99]}, embedder=emb, objective="fold_recall")
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


def _frame(metric, values, lo, hi):
    import pandas as pd

    k = len(values)
    return pd.DataFrame(
        {
            "point_index": list(range(k)),
            "x": [round(0.1 * (i + 1), 1) for i in range(k)],
            "metric": [metric] * k,
            "value": values,
            "lo": lo,
            "hi": hi,
            "n": [5] * k,
        }
    )


def test_recommend_prefers_first_of_ties_in_the_registered_direction():
    f = _frame("mrr", [0.5, 0.9, 0.9, 0.2], [0.4, 0.8, 0.8, 0.1], [0.6, 1, 1, 0.3])
    assert recommend(f, ["x"], "mrr")["x"] == 0.2  # higher is better: first of the ties
    g = _frame("budget_waste", [0.5, 0.9, 0.9, 0.2], [0.4, 0.8, 0.8, 0.1], [0.6, 1, 1, 0.3])
    assert recommend(g, ["x"], "budget_waste")["x"] == 0.4  # lower is better
    with pytest.raises(ConfigError, match=r"unknown metric 'zz'.*ndcg_at_8"):
        recommend(f, ["x"], "zz")
    with pytest.raises(ConfigError, match="no better direction"):
        recommend(f, ["x"], "empty_recall")


def test_default_objective_trades_waste_against_recall_and_flags_the_edge():
    import pandas as pd

    # the best recall sits at the lowest x, where waste is 0.86; without per-unit
    # values a point qualifies when its own lower end reaches best - margin (0.85)
    recall = _frame(
        "recall_at_8", [0.90, 0.89, 0.87, 0.70], [0.85, 0.86, 0.85, 0.62], [0.95, 0.92, 0.89, 0.78]
    )
    waste = _frame(
        "budget_waste", [0.86, 0.75, 0.60, 0.40], [0.8, 0.7, 0.55, 0.33], [0.9, 0.8, 0.65, 0.47]
    )
    rec = recommend(pd.concat([recall, waste]), ["x"])
    assert rec["x"] == 0.3 and rec["value"] == 0.60 and rec["metric"] == "budget_waste"
    assert rec["constraint"]["eligible_points"] == 3 and not rec["edge"]
    assert rec["constraint"]["qualifying"] == [0, 1, 2]
    assert "warning" not in rec
    # when the eligible set reaches the last point, the recommendation is the grid edge
    recall.loc[3, ["value", "lo", "hi"]] = [0.88, 0.85, 0.91]
    rec = recommend(pd.concat([recall, waste]), ["x"])
    assert rec["x"] == 0.4 and rec["edge"] == ["x=0.4 is the highest value tried"]
    assert "extend the grid" in rec["warning"]


def test_a_wide_interval_does_not_qualify_a_point_by_reaching_the_margin():
    """#32 finding 1: the rule reads the lower end. A noisy point whose interval merely
    reaches best - margin (upper end) used to win on waste; now a narrow point does."""
    import pandas as pd

    recall = _frame("recall_at_8", [0.90, 0.87, 0.86], [0.88, 0.86, 0.70], [0.92, 0.88, 0.99])
    waste = _frame("budget_waste", [0.86, 0.60, 0.40], [0.8, 0.55, 0.33], [0.9, 0.65, 0.47])
    rec = recommend(pd.concat([recall, waste]), ["x"])
    assert rec["x"] == 0.2 and rec["constraint"]["qualifying"] == [0, 1]
    why = {v["x"]: (v["qualifies"], v["why"]) for v in rec["constraint"]["points"]}
    assert why[0.3][0] is False and "fails" in why[0.3][1]
    assert why[0.1] == (True, "the best point") and not rec["constraint"]["only_best"]
    # at the bound: a lower end exactly at best - margin qualifies, one past it does not
    for lo, ok in ((0.85, True), (0.8499, False)):
        recall.loc[2, "lo"] = lo
        rec = recommend(pd.concat([recall, waste]), ["x"])
        assert (rec["x"] == 0.3) is ok
    recall.loc[[1, 2], "lo"] = 0.5
    assert recommend(pd.concat([recall, waste]), ["x"])["constraint"]["only_best"]


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
            "--quiet",
        ]
    )
    assert rc == 0
    assert "recommended" in capsys.readouterr().out
    rec = json.loads((out / "recommended.json").read_text())
    assert rec["floor"] in (0.1, 0.3) and rec["version"] == 1
    assert (out / "sweep.csv").is_file() and (out / "sweep.png").is_file()
    md = (out / "report.md").read_text()
    assert "Sweep" in md and f"Recommended floor={rec['floor']}" in md
    # issue #23: the sweep report names its commit (never "git `None`") and objective
    head = md.split("\n## ")[0]
    assert re.search(r"git `[0-9a-f]{12}`|git revision unknown", head) and "None" not in head
    assert "(objective `default`: smallest budget_waste" in head
    assert "budget_waste ↓" in md and "n=" in md
    assert sweep_main(["--dataset", str(root), "--grid", "nope=1", "--quiet"]) == 2
    capsys.readouterr()
    bad = ["--dataset", str(root), "--grid", "floor=0.1,0.3", "--objective", "ndcg@8", "--quiet"]
    assert sweep_main(bad) == 2
    err = capsys.readouterr().err
    assert "unknown metric 'ndcg@8'" in err and "did you mean ndcg_at_8" in err
    assert "budget_waste" in err and "offtopic_bytes" in err  # the full list, not a sample


def test_sweep_plot_one_panel_per_family_distinct_colours_and_the_point_drawn(
    tiny, tmp_path, rendered_figures
):
    """The sweep plot (issue #19 item 4): one panel per metric family (a share never
    shares an axis with a count or a ratio), no colour used by two series, and the
    recommended point drawn (a marker at its value and a line at its x)."""
    import pandas as pd
    from matplotlib.colors import to_hex

    from evals import registry

    root, _ = tiny
    out = tmp_path / "sw"
    grid = "floor=0.1,0.2,0.3,0.4"
    assert sweep_main(["--dataset", str(root), "--grid", grid, "--out", str(out), "--quiet"]) == 0
    assert (out / "sweep.png").is_file()
    frame = pd.read_csv(out / "sweep.csv")
    rec = json.loads((out / "recommended.json").read_text())
    # the figure the sweep's report drew (sweep.png)
    (fig,) = [f for f in rendered_figures if f.axes[0].get_title().startswith("Sweep over")]
    families = {registry.get(m).family for m in frame["metric"].unique()}
    assert len(fig.axes) == len(families) >= 2
    colours = []
    for ax in fig.axes:
        series = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        named = [ln.get_label().split(" ")[0] for ln in series if ln.get_label() != "recommended"]
        assert len({registry.get(m).family for m in named}) == 1  # one family per panel
        colours += [to_hex(ln.get_color()) for ln in series if ln.get_label() != "recommended"]
    assert len(colours) == frame["metric"].nunique() == len(set(colours))
    (panel,) = [
        ax
        for ax in fig.axes
        if rec["metric"] in {lb.split(" ")[0] for lb in ax.get_legend_handles_labels()[1]}
    ]
    marks = [c for c in panel.containers if c.get_label() == "recommended"]
    assert len(marks) == 1
    x, y = marks[0].lines[0].get_data()
    assert (float(x[0]), float(y[0])) == (rec["floor"], rec["value"])
    xs = {
        float(ln.get_xdata()[0])
        for ax in fig.axes
        for ln in ax.get_lines()
        if ln.get_linestyle() == "--"
    }
    assert xs == {rec["floor"]}
    assert f"recommended floor={rec['floor']:g}" in fig.axes[0].get_title()


def test_a_categorical_grid_writes_its_plot_and_report(tiny, tmp_path, capsys):
    """Was: `--grid snapshot_policy=recent,relevant` crashed drawing the plot
    (float('recent')) after sweep.csv was written, leaving the folder incomplete."""
    root, _ = tiny
    out = tmp_path / "policy"
    argv = ["--dataset", str(root), "--grid", "snapshot_policy=recent,relevant"]
    assert sweep_main([*argv, "--consolidator", "oracle", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert (out / "sweep.png").stat().st_size > 0 and not (out / "incomplete.json").exists()
    md = (out / "report.md").read_text()
    rec = json.loads((out / "recommended.json").read_text())["snapshot_policy"]
    assert rec in ("recent", "relevant") and f"Recommended snapshot_policy={rec}" in md
    assert "| snapshot_policy | relevant |" in md  # the points table names the value


def test_sweep_x_places_numbers_at_their_values_and_names_in_grid_order():
    import pandas as pd

    from evals.report.fmt import point_text
    from evals.report.plots import sweep_x

    nums = pd.DataFrame({"point": [0.3, 0.1, 0.3], "point_index": [1, 0, 1]})
    assert sweep_x(nums) == ([0.3, 0.1, 0.3], [])
    names = pd.DataFrame({"point": ["relevant", "recent", "relevant"], "point_index": [1, 0, 1]})
    assert sweep_x(names) == ([1.0, 0.0, 1.0], ["recent", "relevant"])
    assert (point_text(0.25), point_text(8), point_text("recent")) == ("0.25", "8", "recent")
