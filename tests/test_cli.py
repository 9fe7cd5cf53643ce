"""The `memkit` command line as a newcomer meets it (issue #23): conventions, every
value checked before work starts, loud failures. Each test is a finding that used
to exit 0 with a wrong result or end in a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_eval_data import write_tiny_dataset

from memkit.cli import main

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


def _run(tiny, out, *extra):
    base = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--mode", "store"]
    return main([*base, "--embedder", "hashing", "--resamples", "20", "--quiet", *extra])


# --- conventions ----------------------------------------------------------------------


def test_version_help_and_bare_command(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "memkit 0.1.0"
    assert main([]) == 2  # was: bare `memkit` printed usage and exited 0
    assert "usage: memkit" in capsys.readouterr().err
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in ("store", "eval", "bench", "report"))
    assert main(["evla"]) == 2
    assert "did you mean eval?" in capsys.readouterr().err


COMMANDS = [
    ["eval", "run"],
    ["eval", "sweep"],
    ["eval", "compare"],
    ["eval", "list"],
    ["eval", "record"],
    ["report"],
    ["bench", "store"],
    ["bench", "scopes"],
    ["bench", "assemble"],
    ["bench", "harness"],
    ["store"],
    ["local-server"],
]


@pytest.mark.parametrize("argv", [["eval"], ["bench"], ["store", "stats"], *COMMANDS])
def test_help_at_every_level(argv, capsys):
    """Was: `memkit eval --help` failed."""
    assert main([*argv, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out


def _help_entries(text: str) -> list[tuple[str, bool]]:
    """(invocation, has help text) of every argument `--help` lists. A section is a
    heading ("options:") and indented lines: a group's description first (ended by a
    blank line), then one entry per argument, indented 2 (4: a subcommand); its help
    follows after two spaces or on the next, deeper indented line."""
    sections: list[list[list[str]]] = []  # section -> blank-separated chunks of lines
    for line in text.splitlines():
        if line and not line[0].isspace():
            heading = line.endswith(":") and not line.startswith("usage:")
            sections.append([[]] if heading else [])
        elif sections and sections[-1]:
            if line.strip():
                sections[-1][-1].append(line)
            elif sections[-1][-1]:
                sections[-1].append([])
    out = []
    for chunks in sections:
        chunks = [c for c in chunks if c]
        for i, line in enumerate(chunks[-1] if chunks else []):
            indent = len(line) - len(line.lstrip(" "))
            if indent not in (2, 4):
                continue  # a continuation line of the help above
            invocation, _, rest = line.strip().partition("  ")
            nxt = chunks[-1][i + 1] if i + 1 < len(chunks[-1]) else ""
            deeper = len(nxt) - len(nxt.lstrip(" ")) > 4
            out.append((invocation, bool(rest.strip()) or deeper))
    return out


def _help_of_every_level(argv, capsys) -> dict[str, str]:
    """`memkit <argv> --help` and the help of every subcommand below it."""
    assert main([*argv, "--help"]) == 0
    text = capsys.readouterr().out
    found = {" ".join(argv): text}
    for invocation, _ in _help_entries(text):
        if invocation.startswith("{"):
            for sub in invocation.strip("{}").split(","):
                found.update(_help_of_every_level([*argv, sub], capsys))
    return found


@pytest.mark.parametrize("argv", COMMANDS)
def test_every_option_has_help_text(argv, capsys):
    """Was: many options had no help text. Read from what `--help` shows, at every level."""
    helps = _help_of_every_level(argv, capsys)
    entries = [(cmd, inv, ok) for cmd, text in helps.items() for inv, ok in _help_entries(text)]
    assert any(inv.startswith("-h, --help") for _, inv, _ in entries)
    missing = [f"{cmd}: {inv}" for cmd, inv, ok in entries if not ok]
    assert missing == []


@pytest.mark.parametrize(
    "argv", [["bench", "harness"], ["eval", "compare"], ["report"], ["eval", "sweep"]]
)
def test_long_commands_take_quiet(argv, capsys):
    """Was: bench harness, compare and report had no --quiet."""
    assert main([*argv, "--help"]) == 0
    assert "--quiet" in capsys.readouterr().out


def test_usage_errors_exit_2(capsys):
    assert main(["eval", "run", "--no-such-flag"]) == 2
    assert main(["eval", "run", "--quiet"]) == 2  # no dataset
    assert "give --dataset or --preset" in capsys.readouterr().err


def test_console_script_in_a_subprocess(tmp_path):
    """The installed `memkit` entry point (not just main()) follows the conventions."""
    exe = os.path.join(os.path.dirname(sys.executable), "memkit")
    r = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    assert (r.returncode, r.stdout.strip()) == (0, "memkit 0.1.0")
    r = subprocess.run([exe, "eval", "list", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


# --- values checked before work starts ------------------------------------------------


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--set", "recall.floor=abc"], "want a number"),  # was: every metric 0.000, exit 0
        (["--set", "recall.floor=7"], "must be in [0, 1]"),  # was: ran
        (["--set", "recall.floor="], "empty value"),
        (["--set", "assembly.block_bytes=0"], "positive integer"),
        (["--set", "assembly.block_bytes=1.5"], "want an integer"),
        (["--set", "assembly.overflow=drop"], "want one of stop, skip"),
        (["--set", "recall.flor=0.3"], "did you mean recall.floor?"),
        (["--scope", "alpah"], "did you mean alpha?"),  # was: KeyError: 'metric'
        (["--limit", "1"], "limit applies to the adapters"),  # was: ignored but recorded
        (["--resamples", "0"], "positive integer"),
        (["--replicates", "3"], "--replicates applies to pipeline mode"),  # was: recorded
        (["--concurrency", "2"], "--concurrency applies to pipeline mode"),
        (["--api-base", "http://127.0.0.1:9/v1"], "--api-base applies to pipeline mode"),
    ],
)
def test_run_refuses_bad_values_before_work(tiny, tmp_path, capsys, flags, says):
    out = tmp_path / "r"
    assert _run(tiny, out, *flags) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not out.exists()  # nothing started


@pytest.mark.parametrize(
    "flags, says",
    [
        # issue #33 item 4; each was accepted, most ran and recorded another value
        (["--concurrency", "0"], "--concurrency must be an integer >= 1, got 0"),  # was: ran, 4
        (["--concurrency", "-1"], "--concurrency must be an integer >= 1, got -1"),
        (["--replicates", "0"], "--replicates must be an integer >= 1, got 0"),  # was: ran, 1
        (["--max-failure-share", "7"], "--max-failure-share must be a number in [0, 1], got 7"),
        (["--max-failure-share", "1.0001"], "in [0, 1], got 1.0001"),  # one past the bound
        (["--max-failure-share", "-0.01"], "in [0, 1], got -0.01"),
        (["--max-failure-share", "nan"], "in [0, 1], got nan"),
        (["--fail-under", "p_at_1=1.5"], "--fail-under p_at_1 must be a number in [0, 1], got 1.5"),
        (["--fail-under", "p_at_1=-0.1"], "in [0, 1], got -0.1"),
        (["--fail-under", "input_tokens=-1"], "must be a number >= 0, got -1"),
        (["--fail-under", "strict_validty=0.5"], "did you mean strict_validity?"),
        (["--mode", "store"], "--consolidator applies to pipeline mode; --mode store runs none"),
        (["--timeout", "0"], "--timeout must be a number > 0, got 0"),
        (["--max-tokens", "0"], "--max-tokens must be an integer >= 1, got 0"),
        (["--local-server-port", "65536"], "--local-server-port must be a number in [0, 65535]"),
    ],
)
def test_pipeline_run_refuses_out_of_range_values(tiny, tmp_path, capsys, flags, says):
    out = tmp_path / "r"
    argv = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--quiet"]
    assert main([*argv, "--consolidator", "heuristic", *flags]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize(
    "flags",
    [
        ["--concurrency", "1"],
        ["--replicates", "1"],
        ["--max-failure-share", "0"],
        ["--max-failure-share", "1"],
        ["--fail-under", "p_at_1=0"],
        ["--fail-under", "strict_validity=1"],
    ],
)
def test_values_at_their_bounds_are_accepted(tiny, tmp_path, flags):
    """The other side of each bound above: the value at the bound runs."""
    argv = ["eval", "run", "--dataset", str(tiny), "--out", str(tmp_path / "r"), "--quiet"]
    argv += ["--consolidator", "heuristic", "--embedder", "hashing", "--resamples", "20"]
    assert main([*argv, *flags, "--no-report"]) in (0, 1)  # 1: a floor failed, not a usage error
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    if flags[0] in ("--concurrency", "--replicates"):
        assert manifest["config"][flags[0][2:]] == 1  # recorded as given


def test_consolidator_and_dataset_file_hints(tmp_path, capsys):
    """Was: a consolidator typo got no "did you mean"; a LongMemEval file given as
    --dataset said "dataset folder does not exist" though the file exists."""
    assert main(["eval", "run", "--preset", "bundled", "--consolidator", "herustic"]) == 2
    assert "unknown consolidator 'herustic' (did you mean heuristic?)" in capsys.readouterr().err
    f = tmp_path / "longmemeval_oracle.json"
    f.write_text("[]")
    assert main(["eval", "run", "--dataset", str(f), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"use --dataset longmemeval:{tmp_path}" in err and err.count("\n") == 1, err
    g = tmp_path / "notes.txt"
    g.write_text("x")
    assert main(["eval", "run", "--dataset", str(g), "--quiet"]) == 2
    assert "is a file, not a dataset folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "grid, says",
    [
        ("floor=0.1,,0.3", "value 2 of '0.1,,0.3' is empty"),  # was: scored an empty point
        ("floor=0.1;0.2", "want a number"),  # was: ran the sweep, crashed writing the report
        ("floor=0.1,0.1", "repeated"),
        ("floor=", "--grid wants"),
        ("flor=0.1", "did you mean floor?"),
        ("half_life=0", "must be > 0"),
    ],
)
def test_sweep_refuses_bad_grids_before_work(tiny, tmp_path, capsys, grid, says):
    argv = ["eval", "sweep", "--dataset", str(tiny), "--grid", grid, "--out", str(tmp_path / "s")]
    assert main([*argv, "--embedder", "hashing", "--quiet"]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_sweep_refuses_unknown_objective(tiny, capsys):
    argv = ["eval", "sweep", "--dataset", str(tiny), "--grid", "floor=0.2", "--quiet"]
    assert main([*argv, "--objective", "ndcg@8"]) == 2
    err = capsys.readouterr().err
    assert "unknown metric 'ndcg@8'" in err and "ndcg_at_8" in err


def test_options_for_the_other_mode_are_refused(tiny, tmp_path, capsys):
    base = ["eval", "run", "--dataset", str(tiny), "--out", str(tmp_path / "r"), "--quiet"]
    assert main([*base, "--mode", "pipeline", "--curation", "all_rows"]) == 2
    assert "--curation applies to store mode" in capsys.readouterr().err
    assert main([*base, "--consolidator", "heuristic", "--api-base", "http://127.0.0.1:9"]) == 2
    assert "none is given" in capsys.readouterr().err


def test_unknown_adapter_gets_a_close_match(capsys):
    """Was: `lcomo:...` said "dataset folder does not exist"."""
    assert main(["eval", "run", "--dataset", "lcomo:../shared/datasets", "--quiet"]) == 2
    assert "unknown dataset adapter 'lcomo' (did you mean locomo?)" in capsys.readouterr().err


def test_compare_refuses_unknown_systems_and_metrics(tiny, tmp_path, capsys):
    out = tmp_path / "r"
    assert _run(tiny, out, "--no-report") == 0
    capsys.readouterr()
    # was: `--a storee` did not list the systems
    assert main(["eval", "compare", str(out), "--a", "storee", "--b", "store"]) == 2
    assert "unknown system 'storee' (did you mean store?); valid: store" in capsys.readouterr().err
    # was: `--metric p@1` printed `Empty DataFrame` and exited 0
    argv = ["eval", "compare", str(out), "--a", "store", "--b", "store", "--metric", "p@1"]
    assert main(argv) == 2
    assert "unknown metric 'p@1'" in capsys.readouterr().err
    assert main(["eval", "compare", str(out), "--a", "store"]) == 2


def test_sweep_shows_plain_progress_without_a_tty(tiny, tmp_path, capfd):
    """Was: the sweep showed no progress at all."""
    argv = ["eval", "sweep", "--dataset", str(tiny), "--grid", "floor=0.2,0.3"]
    assert main([*argv, "--embedder", "hashing", "--resamples", "20"]) == 0
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("sweep ")]
    assert lines and "\r" not in err and lines[-1].startswith("sweep 2/2")
    assert main([*argv, "--embedder", "hashing", "--resamples", "20", "--quiet"]) == 0
    assert "sweep " not in capfd.readouterr().err


# --- failures are loud and name what to do -------------------------------------------


def test_missing_optional_extra_says_what_to_install(monkeypatch, capsys):
    """Was: a raw ModuleNotFoundError traceback for faiss."""
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ModuleNotFoundError
    assert main(["bench", "store", "--sizes", "10", "--queries", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "needs the optional package 'faiss'" in err and "pip install" in err


def test_unwritable_out_names_the_path(tiny, tmp_path, capsys):
    """Was: a raw PermissionError traceback for a read-only --out."""
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        out = blocker / "run"  # a folder under a file: NotADirectoryError, even for root
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        out = ro / "run"
    assert _run(tiny, out) == 1
    err = capsys.readouterr().err
    assert str(out.parent) in err and err.count("\n") == 1 and "Traceback" not in err


def test_ctrl_c_prints_one_line_saying_how_to_resume(tiny, tmp_path, monkeypatch, capsys):
    """Was: CancelledError + KeyboardInterrupt tracebacks."""
    import evals.runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(evals.runner, "run_eval", interrupted)
    assert _run(tiny, tmp_path / "r") == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "--resume" in err


def test_real_ctrl_c_in_a_subprocess_then_resume(tmp_path):
    """SIGINT to a real `memkit eval run`: exit 130 and one line whose command resumes."""
    import shlex
    import signal

    exe = os.path.join(os.path.dirname(sys.executable), "memkit")
    argv = ["eval", "run", "--preset", "bundled", "--mode", "pipeline"]
    argv += ["--consolidator", "heuristic", "--embedder", "hashing", "--resamples", "20"]
    argv += ["--scope", "acme-web", "--scope", "homefin", "--scope", "pa-minh"]
    p = subprocess.Popen([exe, *argv], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("eval 1/"):
            p.send_signal(signal.SIGINT)
            break
    err = p.stderr.read()
    assert p.wait(timeout=120) == 130
    assert "Traceback" not in err and "CancelledError" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("memkit eval run: interrupted") and "--resume" in last
    again = shlex.split(last.split("`")[1])
    assert again[0] == "memkit"
    r = subprocess.run([exe, *again[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "reports" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "metrics.json").is_file()


def test_keyword_only_run_with_embedder_none(tiny, tmp_path, capsys):
    """Was: `--embedder none` ended in a traceback. Now a keyword-only baseline run."""
    out = tmp_path / "r"
    base = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--mode", "store"]
    assert main([*base, "--embedder", "none", "--resamples", "20", "--quiet"]) == 0
    probes = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    assert {p["fallback"] for p in probes} <= {"no_embedder", "empty_query"}


def test_failing_embedder_is_loud(tiny, tmp_path, monkeypatch, capsys):
    """Was: a litellm embedder without a key silently became keyword search, exit 0,
    and the report named that embedder beside recall 1.000."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")  # never the network
    out = tmp_path / "r"
    base = ["eval", "run", "--dataset", str(tiny), "--out", str(out), "--mode", "store"]
    emb = ["--embedder", "litellm:openai/text-embedding-3-small"]
    assert main([*base, *emb, "--resamples", "20", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "failed on every probe" in err and "keyword path" in err
    manifest = json.loads((out / "manifest.json").read_text())
    e = manifest["embedder_errors"]
    assert e["probes"] == e["probes_total"] > 0 and "Missing credentials" in e["last"]
    probes = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    assert {p["fallback"] for p in probes} == {"embed_error"}
    html = (out / "report.html").read_text()
    assert html.index("embedder failed") < html.index("<table")  # the banner opens it


def test_memkit_never_names_evals():
    """The library does not depend on the suite, not even by an import string: `eval`,
    `bench` and `report` reach `memkit` through the suite's entry points."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "memkit"
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("evals") else []
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "evals"]
    assert offenders == []
    from importlib import metadata

    eps = {ep.name: ep.value for ep in metadata.entry_points(group="memkit.commands")}
    assert eps == {
        "eval": "evals.commands:eval_main",
        "bench": "evals.commands:bench_main",
        "report": "evals.commands:report_main",
    }
