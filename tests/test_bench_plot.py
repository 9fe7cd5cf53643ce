"""`memkit bench plot`: the bench's JSON rows drawn; an unmeasured value is left
out and counted, never drawn as 0, and a file with nothing to draw is an error."""

from __future__ import annotations

import json

from evals import bench_plot
from evals.commands import bench_main


def _row(**extra):
    sweep = [
        {"ef_search": 200, "hnsw_p50": 13.0, "hnsw_recall8": 0.84, "small_hnsw_p50": 5.0,
         "small_hnsw_recall8": 1.0},
        {"ef_search": 100, "hnsw_p50": 6.1, "hnsw_recall8": 0.775, "small_hnsw_p50": None,
         "small_hnsw_recall8": None},
    ]  # fmt: skip
    return {"backend": "postgres", "rows": 1_000_000, "small_rows": 10_000,
            "ef_sweep": sweep, "load": "2.0/2.0/2.0"} | extra  # fmt: skip


def test_curves_follow_ef_search_and_count_undefined_points_instead_of_drawing_zero():
    big, small = bench_plot.ann_curves([_row(hnsw_graph=[24, 48])])
    assert big.points == [(6.1, 0.775, 100), (13.0, 0.84, 200)]  # ef ascending
    assert big.undefined == 0 and big.label == "1,000,000 rows, synthetic texts, m 24/48"
    assert small.points == [(5.0, 1.0, 200)] and small.undefined == 1
    assert "1 % scope" in small.label and "the default graph" not in small.label
    assert bench_plot.ann_curves([_row()])[0].label.endswith("the default graph")


def test_a_points_interval_follows_it_and_a_row_without_one_has_none():
    row = _row()
    row["ef_sweep"][0]["hnsw_recall8_ci"] = [0.83, 0.85]  # ef 200
    row["ef_sweep"][1]["hnsw_recall8_ci"] = [None, None]  # ef 100: one query, undefined
    big, small = bench_plot.ann_curves([row])
    assert big.intervals == (None, (0.83, 0.85))  # ef ascending, as the points
    assert small.intervals == (None,)


def test_two_runs_of_one_configuration_are_told_apart_in_the_legend():
    labels = [c.label for c in bench_plot.ann_curves([_row(), _row()])]
    assert labels == [
        "1,000,000 rows, synthetic texts, the default graph, run 1",
        "10,000 rows (1 % scope), synthetic texts, the default graph, run 1",
        "1,000,000 rows, synthetic texts, the default graph, run 2",
        "10,000 rows (1 % scope), synthetic texts, the default graph, run 2",
    ]


def test_write_bars_keep_an_unmeasured_race_as_none():
    row = {"rows": 100_000, "rem_1": 550.0, "rem_4": 627.0, "rem_4_own": None, "load": "2.4"}
    ((label, rates),) = bench_plot.write_bars([row, {"rows": 10}])  # no race: no bar
    assert label == "100,000 rows, load 2.4"
    assert rates == [550.0, 627.0, None, None, None, None]


def test_plot_writes_both_figures(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row(), {"rows": 100_000, "rem_4": 700.0, "shape_4": 2000.0}]))
    assert bench_main(["plot", str(rows), "--out", str(tmp_path / "out")]) == 0
    for name in ("ann.png", "writes.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_file_with_nothing_to_draw_or_not_rows_is_an_error_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([{"rows": 10, "exact_p50": 1.0}]))
    assert bench_main(["plot", str(empty), "--out", str(tmp_path / "o")]) != 0
    assert "nothing to plot in" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert bench_main(["plot", str(bad), "--out", str(tmp_path / "o")]) != 0
    assert "bad.json: not a bench rows file" in capsys.readouterr().err
