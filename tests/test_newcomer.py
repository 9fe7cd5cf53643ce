"""A newcomer's first session, scripted (issue #23 acceptance): on a fresh clone, the
README's `make eval`, a sweep, two runs and a compare, `memkit eval list`, and
`load_runs` of the two runs, with no run folder ever overwritten.

The clone reuses this checkout's virtualenv (no install: `make -o` marks it up to
date) and puts the clone first on PYTHONPATH, so the clone's code is what runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_newcomer_walk_on_a_fresh_clone(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout to clone")
    clone = tmp_path / "memkit"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    # the working tree as it is (a test run may precede the commit)
    for rel in subprocess.run(
        ["git", "ls-files", "-m", "-o", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split():
        src = REPO / rel
        if src.is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / rel)
    env = {**os.environ, "PYTHONPATH": str(clone), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def sh(*argv: str) -> subprocess.CompletedProcess:
        r = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{' '.join(argv)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        return r

    memkit = str(BIN / "memkit")
    # 1. the README's first command (the venv exists: make must not reinstall)
    sh("make", "-o", ".venv/.installed-dev", "eval", f"BIN={BIN}")
    assert (clone / "reports" / "latest" / "report.html").is_file()
    # 2. a sweep
    sweep = ["eval", "sweep", "--preset", "bundled", "--grid", "floor=0.2,0.3", "--quiet"]
    sh(memkit, *sweep, "--out", "reports/runs/floor")
    # 3. two runs with default names, and a compare
    run = ["eval", "run", "--preset", "bundled", "--scope", "acme-web", "--quiet"]
    both = ["--consolidator", "heuristic", "--consolidator", "oracle"]
    sh(memkit, *run, "--mode", "pipeline", *both)
    runs = clone / "reports" / "runs"
    first = next(d for d in runs.iterdir() if d.name.startswith("bundled-"))
    before = {p.name: p.read_bytes() for p in first.iterdir() if p.is_file()}
    sh(memkit, *run, "--mode", "store")
    sh(memkit, "eval", "compare", str(first), "--quiet")
    assert (first / "compare.csv").is_file()
    # 4. eval list
    listed = [json.loads(x) for x in sh(memkit, "eval", "list", "--json").stdout.splitlines()]
    paths = {r["path"] for r in listed}  # every run under reports/, `make eval`'s too
    assert {"reports/latest", "reports/runs/floor", str(first.relative_to(clone))} <= paths
    assert sum(p.startswith("reports/runs/bundled-") for p in paths) == 2
    assert {r["status"] for r in listed} == {"finished"}
    sh(memkit, "eval", "list", "--html")
    index = (clone / "reports" / "index.html").read_text()
    assert all(f'data-run="{p}"' in index for p in paths)
    # 5. load_runs of the two runs
    code = (
        "from evals.runs import load_runs; "
        "df = load_runs('reports/runs/bundled-*'); "
        "print(df.run.nunique(), sorted(df.system.unique()), list(df.columns[:9]))"
    )
    out = sh(str(BIN / "python"), "-c", code).stdout
    assert out.startswith("2 ['matcher', 'pipeline:heuristic', 'pipeline:oracle', 'store']")
    assert "'direction'" in out
    # nothing was overwritten: the first run's files are as they were (compare adds its own)
    after = {p.name: p.read_bytes() for p in first.iterdir() if p.is_file()}
    data = [k for k in before if k.endswith((".json", ".jsonl", ".csv"))]
    assert "metrics.json" in data and all(after[k] == before[k] for k in data)
    # the same command twice never shares a folder, and an existing one is refused
    r = subprocess.run(
        [memkit, *sweep, "--out", "reports/runs/floor"], cwd=clone, env=env, capture_output=True
    )
    assert r.returncode == 2 and b"already holds a run" in r.stderr
