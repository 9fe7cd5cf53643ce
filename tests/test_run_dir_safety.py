"""--overwrite clears only what memkit wrote (issue #34 item 4) and one run folder has one
writer at a time (issue #33 item 5).

Was: `memkit eval run --out DIR --overwrite` deleted any folder holding a `manifest.json`
(source files and `.git` included) and exited 0; two concurrent runs into one folder
ended with a raw `.json.tmp` error."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_eval_data import write_tiny_dataset

from evals.runs import claim_run_dir
from memkit.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


def _run(tiny, out, *extra):
    base = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--embedder", "hashing"]
    return main([*base, "--mode", "store", "--resamples", "20", "--quiet", "--no-report", *extra])


def _tree(root: Path) -> dict[str, str]:
    """Every file under root (relative path -> sha256), symlinks by their target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "->" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "foreign",
    [
        {".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n"},
        {"src/app.py": "print('mine')\n"},
        {"notes.md": "keep me\n"},
        {"README.md": "an example's hand-written notes\n"},
        {"metrics.json.bak": "{}"},
    ],
)
def test_overwrite_refuses_a_run_folder_holding_foreign_files(tiny, tmp_path, capsys, foreign):
    out = tmp_path / "r"
    assert _run(tiny, out) == 0
    for rel, text in foreign.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    before = _tree(out)
    capsys.readouterr()
    assert _run(tiny, out, "--overwrite") == 2
    err = _one_line(capsys)
    assert "refusing to clear" in err and "files memkit did not write" in err
    assert next(iter(foreign)).split("/")[0] in err  # names what it found
    assert _tree(out) == before  # nothing deleted, memkit's own files included


def test_overwrite_refuses_a_forged_manifest(tiny, tmp_path, capsys):
    """A folder whose only file is someone else's manifest.json is not a run folder."""
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"name": "my-extension", "version": 1}))
    assert _run(tiny, out, "--overwrite") == 2
    assert "not a memkit run folder" in _one_line(capsys)
    assert json.loads((out / "manifest.json").read_text())["name"] == "my-extension"


def test_overwrite_refuses_a_symlink_and_leaves_its_target(tiny, tmp_path, capsys):
    out, target = tmp_path / "r", tmp_path / "precious"
    target.mkdir()
    (target / "data.txt").write_text("keep")
    assert _run(tiny, out) == 0
    (out / "units").symlink_to(target)
    assert _run(tiny, out, "--overwrite") == 2
    assert "files memkit did not write (units)" in _one_line(capsys)
    assert (target / "data.txt").read_text() == "keep" and (out / "units").is_symlink()


def test_overwrite_clears_every_file_a_full_run_writes(tiny, tmp_path, capsys):
    """The other side: a run with pipeline mode, a report and a comparison (every file a
    run writes, plots included) is cleared and rewritten, twice."""
    out = tmp_path / "r"
    argv = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--embedder", "hashing"]
    argv += ["--consolidator", "heuristic", "--consolidator", "oracle", "--resamples", "20"]
    argv += ["--quiet"]
    assert main(argv) == 0
    assert main(["eval", "compare", str(out), "--quiet"]) == 0
    assert {"report.html", "compare.csv", "recall.png", "attempts.jsonl"} <= {
        p.name for p in out.iterdir()
    }
    (out / "compare.csv").write_text("metric,a,b\nx,pipeline:old,pipeline:gone\n")
    for _ in range(2):
        assert main([*argv, "--overwrite"]) == 0
    assert not (out / "compare.csv").exists() and not (out / ".memkit-lock").exists()
    names = {p.name for p in out.iterdir()}
    assert "manifest.json" in names and "units" not in names


def test_overwrite_clears_a_killed_runs_units(tiny, tmp_path):
    """A killed run leaves units/<resume key>/ and no manifest: still memkit's folder."""
    out = tmp_path / "r"
    (out / "units" / "0123456789abcdef").mkdir(parents=True)
    (out / "units" / "0123456789abcdef" / "store-0.json").write_text("{}")
    (out / ".memkit-lock").write_text("123")  # left by a SIGKILL: no flock is held
    assert _run(tiny, out, "--overwrite") == 0
    assert (out / "manifest.json").is_file() and not (out / "units").exists()


def test_sweep_overwrite_refuses_foreign_files(tiny, tmp_path, capsys):
    out = tmp_path / "s"
    argv = ["eval", "sweep", "--dataset", str(tiny), "--grid", "floor=0.2,0.4", "--out", str(out)]
    argv += ["--embedder", "hashing", "--quiet"]
    assert main(argv) == 0
    (out / "keep.py").write_text("x = 1\n")
    before = _tree(out)
    capsys.readouterr()
    assert main([*argv, "--overwrite"]) == 2
    assert "keep.py" in capsys.readouterr().err
    assert _tree(out) == before


HOLD = """
import sys
from pathlib import Path
from evals.runs import claim_run_dir
with claim_run_dir(Path(sys.argv[1]), {}, None):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_run_into_a_held_folder_gets_one_line(tiny, tmp_path, capsys):
    out = tmp_path / "r"  # the holder claims it empty, as a run does before writing
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        for extra in (("--overwrite",), ("--resume",), ()):
            assert _run(tiny, out, *extra) == 2
            err = _one_line(capsys)
            assert "is being written by another memkit run" in err, err
            assert f"pid {holder.pid}" in err and ".tmp" not in err
            assert [p.name for p in out.iterdir()] == [".memkit-lock"]  # nothing written
    finally:
        holder.kill()  # SIGKILL: the lock goes with the process
        holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert _run(tiny, out) == 0  # the killed holder's lock is free
    assert (out / "manifest.json").is_file() and not (out / ".memkit-lock").exists()


def test_claim_run_dir_in_one_process(tmp_path):
    """The lock is per claim, not per process: a second claim in the same process is
    refused too, and released when the first ends."""
    from memkit.errors import ConfigError

    out = tmp_path / "r"
    with claim_run_dir(out, {}, None):
        assert (out / ".memkit-lock").read_text() == str(os.getpid())
        second = claim_run_dir(out, {}, None)
        with pytest.raises(ConfigError, match="being written by another memkit run"):
            second.__enter__()
    assert list(out.iterdir()) == []
    with claim_run_dir(out, {}, None):
        pass
