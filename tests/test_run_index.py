"""A browsable index of runs (issue #33 item 2): `memkit eval list` finds every run
folder under reports/ (reports/latest too), marks unfinished ones "incomplete" (a
marker written at the start, removed at a clean finish) and never skips one
silently; `load_runs` includes incomplete runs only when asked and says how many it
left out. The --html page is checked in a browser in tests/test_report_layout.py."""

from __future__ import annotations

import json
import shutil

import pytest
from test_eval_data import write_tiny_dataset

import evals.runner
from evals.runfolder import INCOMPLETE
from evals.runs import find_runs, load_runs, status
from memkit.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


def _run(tiny, out, *extra):
    base = ["eval", "run", "--dataset", str(tiny), "--mode", "store", "--embedder", "hashing"]
    return main([*base, "--resamples", "20", "--quiet", "--out", str(out), *extra])


def _listed(capsys, *args) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["eval", "list", "--json", *args]) == 0
    return {r["path"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}


@pytest.fixture
def interrupted(tiny, tmp_path, monkeypatch):
    """A run killed after its metrics were written (Ctrl-C while it wrote latency.json)."""
    out = tmp_path / "reports" / "runs" / "killed"

    def kill(*_a, **_k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(evals.runner, "write_latency", kill)
        assert _run(tiny, out) == 130
    return out


def test_make_eval_then_eval_list_lists_that_run(tiny, tmp_path, monkeypatch, capsys):
    """Was: right after `make eval`, `memkit eval list` said "no runs yet" (it looked
    only in reports/runs/)."""
    monkeypatch.chdir(tmp_path)
    assert _run(tiny, "reports/latest", "--overwrite") == 0  # what `make eval` runs
    assert _run(tiny, "reports/runs/a") == 0
    assert _run(tiny, "reports/runs/deep/b") == 0  # at any depth
    listed = _listed(capsys)
    assert set(listed) == {"reports/latest", "reports/runs/a", "reports/runs/deep/b"}
    assert {r["status"] for r in listed.values()} == {"finished"}
    capsys.readouterr()
    assert main(["eval", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["path", "status", "started", "dataset", "headline"]
    assert any(x.startswith("reports/latest ") and " finished " in x for x in lines)


def test_a_run_is_marked_incomplete_until_its_clean_finish(tiny, tmp_path, monkeypatch):
    out = tmp_path / "run"
    seen = []
    real = evals.runner.write_metrics

    def spy(run_dir, table):
        seen.append((run_dir / INCOMPLETE).is_file())
        return real(run_dir, table)

    monkeypatch.setattr(evals.runner, "write_metrics", spy)
    assert _run(tiny, out) == 0
    assert seen == [True]  # written at the start, there while the run works
    assert not (out / INCOMPLETE).exists() and status(out) == "finished"


def test_an_interrupted_run_is_listed_incomplete_beside_a_good_one(
    tiny, interrupted, tmp_path, capsys
):
    """Was: the interrupted run had manifest.json and metrics.json and read as finished
    (or, killed earlier, was skipped silently); `eval list <unfinished> <good>` exited 2."""
    good = tmp_path / "reports" / "runs" / "good"
    assert _run(tiny, good) == 0
    assert (interrupted / INCOMPLETE).is_file()
    marker = json.loads((interrupted / INCOMPLETE).read_text())
    assert marker["what"] == "run" and marker["started_at"]
    listed = _listed(capsys, str(interrupted), str(good))
    assert listed[str(interrupted)]["status"] == "incomplete"
    assert listed[str(good)]["status"] == "finished"
    listed = _listed(capsys, str(tmp_path / "reports"))  # the folder finds both
    assert {r["status"] for r in listed.values()} == {"incomplete", "finished"}
    # a run killed before it wrote anything but its units is listed too
    early = tmp_path / "reports" / "runs" / "early"
    (early / "units" / "k").mkdir(parents=True)
    listed = _listed(capsys, str(early))
    assert listed[str(early)]["status"] == "incomplete" and listed[str(early)]["started"] == ""


def test_an_interrupted_run_can_be_resumed_or_overwritten(tiny, interrupted, capsys):
    assert _run(tiny, interrupted) == 2  # it holds a run: never written over silently
    assert _run(tiny, interrupted, "--resume") == 0
    assert status(interrupted) == "finished"
    (interrupted / INCOMPLETE).write_text("{}")
    for p in interrupted.iterdir():  # only the marker left: still a run folder to clear
        if p.name != INCOMPLETE:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert _run(tiny, interrupted, "--overwrite") == 0 and status(interrupted) == "finished"


def test_an_unreadable_run_is_listed_never_skipped(tiny, tmp_path, capsys):
    bad = tmp_path / "bad"
    assert _run(tiny, bad) == 0
    (bad / "manifest.json").write_text("{not json")
    listed = _listed(capsys, str(bad))
    assert listed[str(bad)]["status"].startswith("unreadable: JSONDecodeError")


def test_load_runs_includes_incomplete_runs_only_when_asked(tiny, interrupted, tmp_path):
    good = tmp_path / "reports" / "runs" / "good"
    assert _run(tiny, good) == 0
    with pytest.warns(UserWarning, match=r"left out 1 incomplete run\(s\) \(.*killed\)"):
        df = load_runs(tmp_path / "reports")
    assert set(df["run"]) == {"good"} and df.attrs["left_out"] == [str(interrupted)]
    both = load_runs(tmp_path / "reports", incomplete=True)
    assert set(both["run"]) == {"good", "killed"} and both.attrs["left_out"] == []
    assert set(both.groupby("run")["complete"].first().items()) == {
        ("good", True),
        ("killed", False),
    }
    assert find_runs(tmp_path / "reports", incomplete=False) == [good]


def test_a_sweep_is_marked_incomplete_until_its_report(tiny, tmp_path, monkeypatch, capsys):
    import evals.report

    out = tmp_path / "sweep"
    argv = ["eval", "sweep", "--dataset", str(tiny), "--embedder", "hashing", "--quiet"]
    argv += ["--grid", "floor=0.1,0.3", "--resamples", "20", "--out", str(out)]

    def boom(*_a, **_k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(evals.report, "build_report", boom)
        assert main(argv) == 130  # Ctrl-C while the report was written
    assert status(out) == "incomplete"
    assert main([*argv, "--overwrite"]) == 0 and status(out) == "finished"
