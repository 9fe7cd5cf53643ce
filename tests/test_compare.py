"""Paired comparison pairs only units defined on both sides (hand-computed)."""

from __future__ import annotations

import json

import pytest
import row_fixtures

from evals.commands import compare_main
from evals.compare import compare_runs


def _row(system, scope, pid, recalled):
    return {
        **row_fixtures.probe(
            scope_id=scope,
            probe_id=pid,
            relevant=["f1"],
            recalled=[
                {"fact": f, "score": 1.0 - i / 10, "bytes": 10} for i, f in enumerate(recalled)
            ],
            admitted=[{"fact": f, "bytes": 10} for f in recalled],
        ).to_json(),
        "system": system,
        "replicate": 0,
    }


@pytest.fixture
def run(tmp_path):
    rows = [
        # p1: b returns nothing, so b's precision_returned is undefined there
        _row("a", "s1", "p1", ["f1"]),
        _row("b", "s1", "p1", []),
        _row("a", "s1", "p2", ["f1", "x"]),  # 0.5
        _row("b", "s1", "p2", ["f1"]),  # 1.0
        _row("a", "s2", "p3", ["x"]),  # 0.0
        _row("b", "s2", "p3", ["x", "f1"]),  # 0.5
    ]
    (tmp_path / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "manifest.json").write_text(json.dumps({"name": "t", "systems": ["a", "b"]}))
    return tmp_path


def test_compare_pairs_only_units_defined_on_both_sides(run):
    d = compare_runs(run, "a", None, "b", metrics=["precision_returned"]).set_index("metric")
    r = d.loc["precision_returned"]
    # pairs p2, p3: a = (0.5 + 0) / 2, b = (1 + 0.5) / 2; keeping p1 gave 0.5 - 0.75
    assert r["value"] == pytest.approx(0.25 - 0.75)
    assert r["n"] == 2 and r["clusters"] == 2


def test_compare_prints_the_number_of_pairs(run, capsys):
    argv = [str(run), "--a", "a", "--b", "b", "--metric", "precision_returned", "--no-report"]
    assert compare_main(argv) == 0
    out = capsys.readouterr().out
    assert "pairs" in out.splitlines()[0] and " 2 " in out.splitlines()[1]


def test_compare_refuses_an_unregistered_metric(run):
    from memkit.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown metric 'p@1'"):
        compare_runs(run, "a", None, "b", metrics=["p@1"])


def test_compare_plot_marks_direction_and_names_the_interval(run, rendered_figures):
    """The compare plot marks each metric ↑/↓ and names the interval method it drew
    (it used to say "paired bootstrap" whatever the method was)."""
    from evals.aggregate import metrics_from_run
    from evals.report import build_report
    from evals.runfolder import write_metrics

    write_metrics(run, metrics_from_run(run))  # a run folder a report can be built from
    d = compare_runs(run, "a", None, "b", metrics=["precision_returned", "budget_waste"])
    d.to_csv(run / "compare.csv", index=False)  # as `memkit eval compare` writes it
    build_report(run)
    assert (run / "compare.png").is_file()
    (fig,) = [f for f in rendered_figures if "Paired differences" in f.axes[0].get_title()]
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any(lb.startswith("precision_returned ↑") for lb in labels)
    assert any(lb.startswith("budget_waste ↓") for lb in labels)
    methods = set(d["method"].dropna())
    assert methods and all(m in ax.get_title() for m in methods)
    assert "bootstrap" not in ax.get_title() or any("bootstrap" in m for m in methods)


def _copy(run, dest, **manifest):
    dest.mkdir()
    (dest / "probes.jsonl").write_text((run / "probes.jsonl").read_text())
    (dest / "manifest.json").write_text(
        json.dumps({"name": "t", "systems": ["a", "b"], **manifest})
    )
    return dest


@pytest.mark.parametrize(
    ("a_manifest", "b_manifest", "named"),
    [
        ({"dataset": {"fingerprint": "f" * 8}}, {"dataset": {"fingerprint": "e" * 8}}, "ffffffff"),
        ({"git_revision": "abc123"}, {"git_revision": "def456"}, "abc123"),
    ],
    ids=["dataset", "code"],
)
def test_compare_refuses_runs_that_cannot_pair_unless_allowed(
    run, tmp_path, capsys, a_manifest, b_manifest, named
):
    """#32 finding 2: a --b-run on another dataset (or code) is an error naming both
    sides (exit 2); --allow-mismatch pairs what matches and says what differs."""
    ra, rb = _copy(run, tmp_path / "ra", **a_manifest), _copy(run, tmp_path / "rb", **b_manifest)
    argv = [str(ra), "--a", "a", "--b", "b", "--b-run", str(rb), "--metric", "precision_returned"]
    assert compare_main(argv) == 2
    err = capsys.readouterr().err
    other = json.dumps(b_manifest).split('"')[-2]
    assert named in err and other in err and "--allow-mismatch" in err
    assert compare_main([*argv, "--allow-mismatch"]) == 0
    out = capsys.readouterr()
    assert "warning" in out.err and named in out.err and "pairs" in out.out
    # the same identity on both sides pairs without a word
    same = _copy(run, tmp_path / "same", **a_manifest)
    assert compare_main([*argv[:-3], str(same), *argv[-2:]]) == 0
    assert "warning" not in capsys.readouterr().err


def test_compare_refuses_runs_probed_on_different_probe_sets(run, tmp_path):
    from memkit.errors import ConfigError

    rb = _copy(run, tmp_path / "rb")
    rows = [json.loads(x) for x in (rb / "probes.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["probe_id"] != "p3"]
    (rb / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"probe sets differ: 3 vs 2 probes, 2 shared"):
        compare_runs(run, "a", rb, "b", metrics=["precision_returned"])
    d = compare_runs(run, "a", rb, "b", metrics=["precision_returned"], allow_mismatch=True)
    assert d["n"].iloc[0] == 1  # p2 is the only probe defined on both sides of both runs
