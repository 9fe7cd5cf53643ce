"""Run folders end to end: layout and versions, the report, byte-identical
metrics on a warm cache, resuming a killed run, and a paired two-model compare
against a stub OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from stub_openai import StubServer, fenced, reply
from test_eval_data import write_tiny_dataset

from evals.commands import compare_main, report_main, run_main
from evals.compare import compare_runs
from evals.datasets import load_dataset
from evals.replay import CachingEmbedder
from evals.runfolder import read_jsonl
from evals.runner import RunConfig, run_eval
from memkit.embed import get_embedder

GOOD = "litellm:openai/good"
BAD = "litellm:openai/bad"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    return root, load_dataset(root)


@pytest.fixture(scope="module")
def emb():
    return CachingEmbedder(get_embedder("wordllama"))


def _good(body):
    """A well-behaved model: one add per batch, from the first user message."""
    payload = json.loads(body["messages"][-1]["content"])
    users = [
        m["content"] for r in payload["rollouts"] for m in r["messages"] if m["role"] == "user"
    ]
    change = {"ids": [], "entry": {"kind": "fact", "content": users[0][:200]}}
    return reply(json.dumps({"changes": [change]}), prompt_tokens=100, completion_tokens=20)


BAD_ANSWER = fenced(json.dumps({"changes": [{"ids": ["mem-invented"], "entry": {"content": "x"}}]}))


@pytest.fixture
def server():
    with StubServer({"good": _good, "bad": BAD_ANSWER}) as srv:
        yield srv


def _cfg(root, srv, cache, consolidators=(GOOD,), **kw):
    opts = {c: {"api_base": srv.url, "api_key": "sk-test"} for c in consolidators}
    return RunConfig(
        dataset=str(root),
        name="t",
        store_mode=False,
        consolidators=tuple(consolidators),
        cache_dir=str(cache),
        model_options=opts,
        resamples=200,
        **kw,
    )


def test_run_folder_layout_versions_and_report(tiny, emb, tmp_path):
    root, ds = tiny
    out = tmp_path / "run"
    res = run_eval(
        RunConfig(dataset=str(root), resamples=200), out, quiet=True, dataset=ds, embedder=emb
    )
    for name in (
        "manifest.json",
        "metrics.json",
        "metrics.csv",
        "probes.jsonl",
        "writes.jsonl",
        "attempts.jsonl",
        "passes.jsonl",
        "extraction.jsonl",
        "matcher.json",
        "latency.json",
        "report.md",
        "report.html",
    ):
        assert (out / name).is_file(), name
    for name in ("probes", "writes", "attempts", "passes", "extraction"):
        rows = read_jsonl(out / f"{name}.jsonl")
        assert rows and all(r["version"] == 1 for r in rows), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["packages"]["litellm"] == "1.110.2"
    assert manifest["llm"] == {"litellm_version": "1.110.2", "price_map": "bundled"}
    assert manifest["dataset"]["fingerprint"] and manifest["started_at"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["version"] == 1 and "started_at" not in json.dumps(metrics)
    # every row carries the registry's unit and direction (json and csv alike)
    assert all(
        r["unit"] and r["direction"] in ("higher", "lower", "neutral") for r in metrics["metrics"]
    )
    assert "unit,direction" in (out / "metrics.csv").read_text().splitlines()[0]
    t = res.metrics.set_index(["system", "metric"])
    assert t.loc[("pipeline:oracle", "strict_validity"), "value"] == 1.0
    assert t.loc[("pipeline:oracle", "extraction_recall"), "value"] == 1.0
    assert 0 < t.loc[("pipeline:heuristic", "extraction_recall"), "value"] < 1
    assert {"store", "pipeline:heuristic", "pipeline:oracle", "matcher"} <= set(res.metrics.system)
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3 and "http://" not in html
    md = (out / "report.md").read_text()
    assert "95% CI" in md and "fold_recall" in md and "definition" in md
    assert report_main([str(out)]) == 0
    rows = json.loads((out / "breakdown.json").read_text())["rows"]
    assert {(r["system"], r["scope_id"]) for r in rows if r["metric"] == "ndcg_at_8"} == {
        (s, sc)
        for s in ("store", "pipeline:heuristic", "pipeline:oracle")
        for sc in ("alpha", "beta")
    }
    assert "Per scope: `store`" in (out / "report.md").read_text()


def test_same_inputs_warm_cache_byte_identical_metrics(tiny, emb, server, tmp_path):
    root, ds = tiny
    cache = tmp_path / "cache"
    cfg = _cfg(root, server, cache)
    run_eval(cfg, tmp_path / "a", quiet=True, dataset=ds, embedder=emb, report=False)
    first = len(server.calls)
    assert first > 0
    run_eval(cfg, tmp_path / "b", quiet=True, dataset=ds, embedder=emb, report=False)
    assert len(server.calls) == first  # every answer came from the cache
    a = (tmp_path / "a" / "metrics.json").read_bytes()
    assert a == (tmp_path / "b" / "metrics.json").read_bytes()


class Killed(Exception):
    """Stands in for the process being killed mid-run."""


def test_killed_run_resumes_without_repeating_attempts(tiny, emb, server, tmp_path):
    root, ds = tiny
    clean = _cfg(root, server, tmp_path / "clean-cache")
    run_eval(clean, tmp_path / "clean", quiet=True, dataset=ds, embedder=emb, report=False)
    needed = len(server.calls)
    server.calls.clear()

    cfg = _cfg(root, server, tmp_path / "cache", concurrency=1)
    seen = []

    units = tmp_path / "run" / "units"

    def kill_mid_second(row):
        # die in the middle of the second scope, once the first has finished
        seen.append(row)
        done = list(units.glob("*/*.json"))
        if done and not any(row.scope_id in p.name for p in done):
            raise Killed

    with pytest.raises(Killed):
        run_eval(
            cfg,
            tmp_path / "run",
            quiet=True,
            dataset=ds,
            embedder=emb,
            on_pass=kill_mid_second,
            report=False,
        )
    before = len(server.calls)
    assert 0 < before < needed + 1
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert list((tmp_path / "run" / "units").glob("*/*.json"))  # the finished scope
    run_eval(cfg, tmp_path / "run", quiet=True, dataset=ds, embedder=emb, report=False)
    assert len(server.calls) == needed  # nothing asked twice across kill + resume
    assert not (tmp_path / "run" / "units").exists()  # cleaned up once complete
    assert (tmp_path / "run" / "metrics.json").read_bytes() == (
        tmp_path / "clean" / "metrics.json"
    ).read_bytes()


def test_two_models_paired_compare_shows_validity_gap(tiny, emb, server, tmp_path):
    root, ds = tiny
    out = tmp_path / "cmp"
    cfg = _cfg(root, server, tmp_path / "cache", consolidators=(GOOD, BAD))
    res = run_eval(cfg, out, quiet=True, dataset=ds, embedder=emb)
    t = res.metrics.set_index(["system", "metric"])
    assert t.loc[(f"pipeline:{GOOD}", "strict_validity"), "value"] == 1.0
    assert t.loc[(f"pipeline:{BAD}", "strict_validity"), "value"] == 0.0
    assert t.loc[(f"pipeline:{BAD}", "error_parse"), "value"] == 1.0  # fenced: strict parse fails
    diff = compare_runs(out, f"pipeline:{GOOD}", None, f"pipeline:{BAD}").set_index("metric")
    sv = diff.loc["strict_validity"]
    assert sv["value"] == 1.0 and sv["n"] == 2 and sv["unit"] == "scope x replicate"
    # two scopes are two independent draws: the gap is there, but no interval over
    # two clusters can call it significant (the old unit bootstrap said [1, 1])
    assert sv["clusters"] == 2 and sv["lo"] < 0 < sv["hi"]
    assert compare_main([str(out), "--no-report"]) == 0
    assert (out / "compare.csv").is_file()
    assert report_main([str(out)]) == 0
    assert "Paired comparisons" in (out / "report.md").read_text()
    assert (out / "compare.png").is_file()


def test_lenient_parsing_separates_repaired_from_strict(tiny, emb, server, tmp_path):
    root, ds = tiny
    cfg = _cfg(
        root, server, tmp_path / "cache", consolidators=(BAD,), consolidation={"lenient": True}
    )
    res = run_eval(cfg, tmp_path / "r", quiet=True, dataset=ds, embedder=emb, report=False)
    t = res.metrics.set_index(["system", "metric"])
    # repaired parse, then the invented id is rejected
    assert t.loc[(f"pipeline:{BAD}", "error_unknown_id"), "value"] == 1.0
    assert t.loc[(f"pipeline:{BAD}", "hallucinating_attempts"), "value"] == 1.0


def test_cli_run_and_bad_arguments(tiny, tmp_path, capsys):
    root, _ = tiny
    out = tmp_path / "cli"
    assert (
        run_main(
            [
                "--dataset",
                str(root),
                "--out",
                str(out),
                "--mode",
                "store",
                "--quiet",
                "--resamples",
                "50",
                "--embedder",
                "hashing",
                "--no-report",
            ]
        )
        == 0
    )
    assert json.loads((out / "manifest.json").read_text())["systems"] == ["store"]
    assert run_main(["--dataset", str(root), "--set", "recall.nope=1", "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err
    assert run_main(["--quiet"]) == 2


def test_load_run_returns_frames(tiny, emb, tmp_path):
    from evals.runfolder import load_run
    from memkit.errors import ConfigError

    root, ds = tiny
    out = tmp_path / "r"
    run_eval(
        RunConfig(dataset=str(root), consolidators=("oracle",), resamples=50),
        out,
        quiet=True,
        dataset=ds,
        embedder=emb,
        report=False,
    )
    frames = load_run(out)
    assert set(frames["probes"]["system"]) == {"store", "pipeline:oracle"}
    assert len(frames["probes"]) == 2 * len(ds.probes)
    assert {"metric", "value", "lo", "hi", "n"} <= set(frames["metrics"].columns)
    with pytest.raises(ConfigError, match="not a finished run"):
        load_run(tmp_path)


def test_replay_consolidator_rescores_a_recorded_run_offline(tiny, emb, server, tmp_path):
    root, ds = tiny
    first = run_eval(
        _cfg(root, server, tmp_path / "cache"),
        tmp_path / "live",
        quiet=True,
        dataset=ds,
        embedder=emb,
        report=False,
    )
    calls = len(server.calls)
    spec = f"replay:{tmp_path / 'live'}"
    again = run_eval(
        RunConfig(dataset=str(root), store_mode=False, consolidators=(spec,), resamples=200),
        tmp_path / "replayed",
        quiet=True,
        dataset=ds,
        embedder=emb,
        report=False,
    )
    assert len(server.calls) == calls  # no provider involved
    a = first.metrics.set_index(["system", "metric"])["value"]
    b = again.metrics.set_index(["system", "metric"])["value"]
    for m in (
        "strict_validity",
        "extraction_recall",
        "extraction_precision",
        "ndcg_at_8",
        "budget_waste",
    ):
        assert a[(f"pipeline:{GOOD}", m)] == b[(f"pipeline:{spec}", m)], m


def test_run_matrix_datasets_by_params(tiny, tmp_path):
    from evals.runner import run_matrix

    root, _ = tiny
    f = run_matrix(
        [str(root)],
        ["oracle"],
        [{}, {"recall": {"floor": 0.9}}],
        out_root=tmp_path,
        quiet=True,
        embedder="hashing",
        resamples=50,
    )
    assert set(f["params"]) == {"{}", '{"recall": {"floor": 0.9}}'}
    assert {"store", "pipeline:oracle"} <= set(f["system"])
    assert (tmp_path / "tiny-p1" / "report.html").is_file()


def test_progress_on_stderr_unless_quiet(tiny, tmp_path, capsys):
    root, _ = tiny
    args = [
        "--dataset",
        str(root),
        "--mode",
        "store",
        "--resamples",
        "20",
        "--embedder",
        "hashing",
        "--no-report",
    ]
    assert run_main([*args, "--out", str(tmp_path / "a")]) == 0
    assert "2/2" in capsys.readouterr().err
    assert run_main([*args, "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("limit", [1, 2])
def test_one_semaphore_per_model_bounds_requests_in_flight(tiny, emb, tmp_path, limit):
    import dataclasses

    root, ds = tiny

    def slow_good(body):
        return dataclasses.replace(_good(body), delay_s=0.05)

    with StubServer({"good": slow_good}) as srv:
        cfg = _cfg(root, srv, tmp_path / "cache", concurrency=limit)
        run_eval(cfg, tmp_path / "r", quiet=True, dataset=ds, embedder=emb, report=False)
        assert srv.max_in_flight["good"] == limit  # two scopes, never more than the limit


def test_preset_overrides_and_unknown_preset():
    from evals.runner import REPO, preset
    from memkit.errors import ConfigError

    cfg = preset("bundled", name="example", replicates=2)
    assert (cfg.name, cfg.replicates) == ("example", 2)
    assert cfg.consolidators[:2] == ("heuristic", "oracle")
    recorded = [c.removeprefix("replay:") for c in cfg.consolidators[2:]]
    assert recorded and all((REPO / r).is_file() for r in recorded)  # committed recordings
    with pytest.raises(ConfigError, match="'nope'"):
        preset("nope")
    with pytest.raises(ConfigError, match="replicates"):
        preset("bundled", replicates=0)


def test_replicates_are_separate_samples(tiny, emb, server, tmp_path):
    root, ds = tiny
    one = run_eval(
        _cfg(root, server, tmp_path / "c1"),
        tmp_path / "one",
        quiet=True,
        dataset=ds,
        embedder=emb,
        report=False,
    )
    calls = len(server.calls)
    two = run_eval(
        _cfg(root, server, tmp_path / "c2", replicates=2),
        tmp_path / "two",
        quiet=True,
        dataset=ds,
        embedder=emb,
        report=False,
    )
    assert len(server.calls) == 3 * calls  # replicate 1 is not a cache hit of replicate 0
    reps = {r["replicate"] for r in read_jsonl(tmp_path / "two" / "attempts.jsonl")}
    assert reps == {0, 1}
    n1 = one.metrics.set_index(["system", "metric"]).loc[(f"pipeline:{GOOD}", "p_at_1"), "n"]
    n2 = two.metrics.set_index(["system", "metric"]).loc[(f"pipeline:{GOOD}", "p_at_1"), "n"]
    assert n2 == 2 * n1
