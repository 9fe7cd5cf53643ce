"""Run folders that never lie (issue #23): unique default names, no run written into
another's folder, --resume only for the same configuration, --overwrite clears
first, `memkit eval list`, and `load_runs` as one long DataFrame."""

from __future__ import annotations

import json

import pytest
from test_eval_data import write_tiny_dataset

from evals.runs import COLUMNS, find_runs, load_runs
from memkit.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


def _run(tiny, *extra):
    base = ["eval", "run", "--dataset", str(tiny), "--mode", "store", "--embedder", "hashing"]
    return main([*base, "--resamples", "20", "--quiet", "--no-report", *extra])


def test_default_run_names_are_unique(tiny, tmp_path, monkeypatch, capsys):
    """Was: the default name `run` made every run write reports/runs/run."""
    monkeypatch.chdir(tmp_path)
    assert _run(tiny) == 0
    assert _run(tiny) == 0
    runs = sorted((tmp_path / "reports" / "runs").iterdir())
    assert len(runs) == 2 and all(r.name.startswith("run-") for r in runs)
    names = {json.loads((r / "manifest.json").read_text())["name"] for r in runs}
    assert names == {r.name for r in runs}


def test_an_existing_run_folder_is_refused(tiny, tmp_path, capsys):
    out = tmp_path / "r"
    assert _run(tiny, "--out", str(out)) == 0
    before = (out / "metrics.json").read_bytes()
    capsys.readouterr()
    assert _run(tiny, "--out", str(out), "--set", "recall.floor=0.5") == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "metrics.json").read_bytes() == before


def test_resume_only_with_the_same_configuration(tiny, tmp_path, capsys):
    out = tmp_path / "r"
    assert _run(tiny, "--out", str(out)) == 0
    capsys.readouterr()
    assert _run(tiny, "--out", str(out), "--resume") == 0
    assert _run(tiny, "--out", str(out), "--resume", "--set", "recall.floor=0.5") == 2
    assert "another configuration (recall differ)" in capsys.readouterr().err
    assert _run(tiny, "--out", str(tmp_path / "none"), "--resume") == 2
    assert _run(tiny, "--out", str(out), "--resume", "--overwrite") == 2


def test_resume_continues_a_killed_run(tiny, tmp_path, capsys):
    """A killed run keeps units/<key>/; --resume with the same flags picks them up."""
    import shutil

    out = tmp_path / "r"
    assert _run(tiny, "--out", str(out)) == 0
    metrics = (out / "metrics.json").read_bytes()
    # simulate a kill after the units were written: keep only units/, as a killed run does
    from evals.datasets import load_dataset
    from evals.runner import RunConfig, resume_key

    key = resume_key(
        RunConfig(**json.loads((out / "manifest.json").read_text())["config"]),
        load_dataset(tiny),
    )
    for p in out.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (out / "units" / key).mkdir(parents=True)
    assert _run(tiny, "--out", str(out)) == 2  # not without --resume
    assert _run(tiny, "--out", str(out), "--resume") == 0
    assert (out / "metrics.json").read_bytes() == metrics


def test_overwrite_clears_the_folder_first(tiny, tmp_path, capsys):
    """Was: a rerun kept the earlier run's compare.csv and reported its comparisons."""
    out = tmp_path / "r"
    assert _run(tiny, "--out", str(out)) == 0
    (out / "compare.csv").write_text("metric,a,b\nx,pipeline:old,pipeline:gone\n")
    assert _run(tiny, "--out", str(out), "--overwrite") == 0
    assert not (out / "compare.csv").exists()
    stranger = tmp_path / "notes"
    stranger.mkdir()
    (stranger / "todo.txt").write_text("keep me")
    capsys.readouterr()
    assert _run(tiny, "--out", str(stranger), "--overwrite") == 2
    assert "refusing to clear" in capsys.readouterr().err
    assert (stranger / "todo.txt").read_text() == "keep me"


def test_eval_list_and_load_runs(tiny, tmp_path, capsys):
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    assert _run(tiny, "--out", str(a)) == 0
    assert _run(tiny, "--out", str(b), "--set", "recall.floor=0.9") == 0
    capsys.readouterr()
    assert main(["eval", "list", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "store recall_at_8" in out and f"{a} " in out
    assert main(["eval", "list", str(tmp_path / "runs"), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["run"] for r in rows] == ["a", "b"] and rows[0]["systems"] == "store"

    df = load_runs(str(tmp_path / "runs" / "*"))
    assert list(df.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert set(df["run"]) == {"a", "b"} and set(df["system"]) == {"store"}
    wide = df.pivot_table(index="run", columns="metric", values="value")
    assert wide.loc["a", "recall_at_8"] >= wide.loc["b", "recall_at_8"]
    assert len(load_runs([a, b])) == len(df)
    assert find_runs(tmp_path / "runs") == [a, b]


def test_load_runs_refuses_what_is_not_a_run(tmp_path):
    from memkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"is not a run folder .* and holds none"):
        load_runs(tmp_path)
    with pytest.raises(ConfigError, match="no run folder matches"):
        load_runs(str(tmp_path / "nothing*"))
