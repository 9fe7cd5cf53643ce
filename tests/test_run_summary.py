"""A summary at the end of every run and sweep (issue #33 item 3): the headline table
(systems x headline metrics with intervals) on stdout, then the folder; `--quiet`
keeps only that (no progress)."""

from __future__ import annotations

import pytest
from test_eval_data import write_tiny_dataset

from evals.report import headline_text
from memkit.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


def _run(tiny, out, *flags):
    argv = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--embedder", "hashing"]
    return main([*argv, "--consolidator", "heuristic", "--resamples", "20", *flags])


@pytest.mark.parametrize("quiet", [True, False])
def test_a_run_ends_with_its_headline_then_its_folder(tiny, tmp_path, capsys, quiet):
    """Was: `make eval` printed only the folder."""
    out = tmp_path / "run"
    assert _run(tiny, out, *(["--quiet"] if quiet else [])) == 0
    got = capsys.readouterr()
    lines = got.out.splitlines()
    assert lines[0].split() == ["metric", "heuristic", "store"]  # short labels across
    recall = next(x for x in lines if x.startswith("recall_at_8 ↑"))
    assert recall.count("[") == 2  # a value [95% CI] per system
    assert lines[-2:] == [f"run written to {out}", f"report: {out / 'report.html'}"]
    assert "  heuristic = pipeline:heuristic" in lines  # what each label stands for
    assert got.out.index("recall_at_8") < got.out.index("run written to")
    assert ("eval 1/" in got.err) is not quiet  # --quiet: no progress, only the summary


def test_the_summary_is_the_reports_headline(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(tiny, out, "--quiet") == 0
    printed = capsys.readouterr().out
    assert headline_text(out) in printed
    md = (out / "report.md").read_text()
    for line in headline_text(out).splitlines()[1:]:
        if line.startswith("recall_at_8"):
            value = line.split()[2]  # the store's column comes second
            assert f"{value.rstrip('*')} [" in md


@pytest.mark.parametrize("quiet", [True, False])
def test_a_sweep_ends_with_its_points_the_recommendation_then_its_folder(
    tiny, tmp_path, capsys, quiet
):
    out = tmp_path / "sweep"
    argv = ["eval", "sweep", "--dataset", str(tiny), "--embedder", "hashing"]
    argv += ["--grid", "floor=0.1,0.3", "--resamples", "20", "--out", str(out)]
    assert main([*argv, *(["--quiet"] if quiet else [])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"sweep written to {out}"
    assert lines[-2].startswith("recommended floor=")
    table = lines[-5:-2]
    assert table[0].split()[:1] == ["floor"] and "recall_at_8 ↑" in table[0]
    assert [x.split()[0] for x in table[1:]] == ["0.1", "0.3"]
    assert sum("<- recommended" in x for x in table[1:]) == 1
    assert any(x.startswith("recommended: {") for x in lines) is not quiet  # JSON: not quiet
