"""Providers fail fast and loud, are configured like users configure them, and a
quiet run is quiet (issue #16 items 5-8), through the CLI against the loopback stub."""

from __future__ import annotations

import json
import os
import socket
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from stub_openai import StubServer, first_time, rate_limited, reply, status
from test_eval_data import write_tiny_dataset

from evals.commands import run_main, sweep_main
from evals.labels import labels
from evals.report import headline_text
from evals.runfolder import read_jsonl

KEY_VAR = "MEMKIT_TEST_GATEWAY_KEY"
KEY = "sk-gateway-test-7f3a"
BASE = ["--mode", "pipeline", "--embedder", "hashing", "--resamples", "20"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")


@pytest.fixture(scope="module", autouse=True)
def litellm_loaded():
    """Import LiteLLM once: the fail-fast bound is on the harness, not on one import."""
    from memkit import llm

    llm.litellm()


@pytest.fixture
def srv():
    behaviours = {
        "good": reply('{"changes": []}'),
        "always429": rate_limited(0),
        "missing": status(404),
        "flaky": first_time(rate_limited(0), reply('{"changes": []}')),
    }
    with StubServer(behaviours, api_key=KEY) as s:
        yield s


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(captured) -> list[str]:
    return [x for x in (captured.out + captured.err).splitlines() if x.strip()]


@pytest.mark.parametrize(
    "model,extra,cause",
    [
        ("litellm:openai/gpt-4o-mini", [], "OPENAI_API_KEY"),
        ("litellm:notaprovider/foo", [], "unknown model string"),
        ("litellm:openai/x", ["--api-base", "http://127.0.0.1:{port}/v1"], "unreachable"),
    ],
    ids=["no-key", "unknown-model", "dead-endpoint"],
)
def test_bad_provider_fails_fast_with_one_line_and_no_pass(
    tiny, tmp_path, capfd, monkeypatch, model, extra, cause
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv(KEY_VAR, KEY)
    extra = [x.format(port=_closed_port()) for x in extra]
    if extra:
        extra += ["--api-key-env", KEY_VAR]
    out = tmp_path / "run"
    t0 = time.perf_counter()
    code = run_main(["--dataset", str(tiny), *BASE, "--consolidator", model, *extra,
                     "--out", str(out)])  # fmt: skip
    took = time.perf_counter() - t0
    lines = _lines(capfd.readouterr())
    print(f"{model}: exit {code} in {took:.2f} s: {lines}")
    assert code != 0 and took < 5.0
    assert len(lines) == 1 and model.split(":", 1)[1] in lines[0] and cause in lines[0]
    assert not out.exists()  # zero passes: nothing was run, no folder made


def test_api_key_env_sends_that_key_and_never_records_it(tiny, tmp_path, srv, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    out = tmp_path / "run"
    code = run_main(
        ["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/good",
         "--api-base", srv.url, "--api-key-env", KEY_VAR, "--temperature", "0",
         "--max-tokens", "300", "--model-seed", "7", "--json-mode", "off",
         "--out", str(out), "--quiet"]
    )  # fmt: skip
    assert code == 0
    assert srv.calls and set(srv.auth_seen) == {f"Bearer {KEY}"}  # preflight GET + every POST
    body = srv.calls[0].body
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0, 300, 7)
    assert "response_format" not in body
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY not in f.read_text(encoding="utf-8", errors="replace"), f
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["model_options"]["litellm:openai/good"]["api_key_env"] == KEY_VAR
    report = (out / "report.md").read_text()
    assert "unknown price" in report  # the stub model has no price: never shown as $0


def test_a_wrong_key_is_refused_at_preflight(tiny, tmp_path, srv, monkeypatch, capfd):
    monkeypatch.setenv(KEY_VAR, "sk-wrong")
    code = run_main(["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/good",
                     "--api-base", srv.url, "--api-key-env", KEY_VAR,
                     "--out", str(tmp_path / "r")])  # fmt: skip
    lines = _lines(capfd.readouterr())
    assert code != 0 and len(lines) == 1 and "refused the key" in lines[0]
    assert srv.calls == []


def test_a_key_given_on_the_command_line_is_refused(tiny, tmp_path, capfd):
    code = run_main(["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/good",
                     "--model-option", "litellm:openai/good:api_key=sk-x",
                     "--out", str(tmp_path / "r")])  # fmt: skip
    assert code == 2 and "api_key_env" in capfd.readouterr().err


def test_sweep_accepts_the_same_provider_flags(tiny, tmp_path, srv, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    code = sweep_main(
        ["--dataset", str(tiny), "--embedder", "hashing", "--resamples", "20", "--quiet",
         "--grid", "max_rollouts=2,4", "--objective", "strict_validity",
         "--consolidator", "litellm:openai/good",
         "--api-base", srv.url, "--api-key-env", KEY_VAR, "--temperature", "0.5"]
    )  # fmt: skip
    assert code == 0 and srv.calls
    assert set(srv.auth_seen) == {f"Bearer {KEY}"}
    assert {c.body["temperature"] for c in srv.calls} == {0.5}


def test_experiment_file_drives_run_and_sweep(tiny, tmp_path, srv, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'name = "exp"\ndatasets = ["{tiny}"]\nmodes = ["pipeline"]\nreplicates = 2\n'
        f'concurrency = 3\n\n[models."litellm:openai/good"]\napi_base = "{srv.url}"\n'
        f'api_key_env = "{KEY_VAR}"\ntemperature = 0.25\nmax_tokens = 123\n',
        encoding="utf-8",
    )
    out = tmp_path / "run"
    code = run_main(["--experiment", str(exp), "--embedder", "hashing", "--resamples", "20",
                     "--out", str(out), "--quiet", "--no-report"])  # fmt: skip
    assert code == 0
    cfg = json.loads((out / "manifest.json").read_text())["config"]
    assert (cfg["replicates"], cfg["concurrency"], cfg["store_mode"]) == (2, 3, False)
    assert cfg["consolidators"] == ["litellm:openai/good"]
    assert {(c.body["temperature"], c.body["max_tokens"]) for c in srv.calls} == {(0.25, 123)}
    n = len(srv.calls)
    code = sweep_main(["--experiment", str(exp), "--embedder", "hashing", "--resamples", "20",
                       "--grid", "max_rollouts=2,4", "--objective", "strict_validity",
                       "--quiet"])  # fmt: skip
    assert code == 0 and len(srv.calls) > n
    bad = tmp_path / "bad.toml"
    bad.write_text('[models."litellm:openai/good"]\ntemprature = 0\n', encoding="utf-8")
    assert run_main(["--experiment", str(bad), "--dataset", str(tiny)]) == 2


def test_quiet_failing_provider_prints_at_most_5_lines(tiny, tmp_path, srv, monkeypatch, capfd):
    monkeypatch.setenv(KEY_VAR, KEY)
    out = tmp_path / "run"
    code = run_main(["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/always429",
                     "--api-base", srv.url, "--api-key-env", KEY_VAR, "--out", str(out),
                     "--quiet"])  # fmt: skip
    lines = _lines(capfd.readouterr())
    print("\n".join(lines))
    summary = headline_text(out).splitlines()  # the end-of-run summary, every run prints it
    assert lines[: len(summary)] == summary
    assert code == 1 and len(lines) - len(summary) <= 5
    assert any("PROVIDER FAILURE: pipeline:litellm:openai/always429" in x for x in lines)
    attempts = read_jsonl(out / "attempts.jsonl")
    assert attempts and all(a["outcome"] == "rate_limit" for a in attempts)
    assert (out / "llm.log").is_file()  # LiteLLM's and memkit's own lines went here
    report = (out / "report.md").read_text().splitlines()
    banner = next(x for x in report if x.strip())  # after the title: the banner first
    assert banner.startswith("#")
    first = next(x for x in report[1:] if x.strip())
    assert "PROVIDER FAILURE" in first and f"{len(attempts)} of {len(attempts)} attempts" in first


def test_failure_share_above_the_threshold_fails_the_run_and_at_it_does_not(
    tiny, tmp_path, srv, monkeypatch, capfd
):
    """The flaky model is rate limited once on every request, then answers: exactly
    half its attempts fail. That passes the default threshold (0.5: fails *above*)
    and fails a run given --max-failure-share 0.4, naming the system and its counts."""
    monkeypatch.setenv(KEY_VAR, KEY)
    args = ["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/flaky",
            "--api-base", srv.url, "--api-key-env", KEY_VAR, "--quiet", "--no-report"]  # fmt: skip
    assert run_main([*args, "--out", str(tmp_path / "a")]) == 0
    attempts = read_jsonl(tmp_path / "a" / "attempts.jsonl")
    assert sum(a["outcome"] == "rate_limit" for a in attempts) * 2 == len(attempts) > 0
    capfd.readouterr()
    code = run_main([*args, "--out", str(tmp_path / "b"), "--max-failure-share", "0.4"])
    lines = _lines(capfd.readouterr())
    summary = headline_text(tmp_path / "b").splitlines()  # every run ends with its summary
    assert code == 1 and lines[: len(summary)] == summary and len(lines) - len(summary) <= 5
    n = len(read_jsonl(tmp_path / "b" / "attempts.jsonl"))
    assert any(
        "PROVIDER FAILURE: pipeline:litellm:openai/flaky" in x and f"{n // 2} of {n}" in x
        for x in lines
    ), lines


def test_not_found_stops_the_model_at_once(tiny, tmp_path, srv, monkeypatch, capfd):
    monkeypatch.setenv(KEY_VAR, KEY)
    code = run_main(["--dataset", str(tiny), *BASE, "--consolidator", "litellm:openai/missing",
                     "--api-base", srv.url, "--api-key-env", KEY_VAR, "--concurrency", "1",
                     "--out", str(tmp_path / "r"), "--quiet"])  # fmt: skip
    err = capfd.readouterr().err
    assert code == 1 and len(srv.calls) == 1  # never retried, no later pass sent
    assert "pipeline:litellm:openai/missing: stopped: not_found (HTTP 404)" in err


def test_fail_under_exits_1_below_a_floor_and_0_above(tiny, tmp_path, capfd):
    args = ["--dataset", str(tiny), "--mode", "store", "--embedder", "hashing",
            "--resamples", "20", "--no-report", "--quiet"]  # fmt: skip
    assert run_main([*args, "--out", str(tmp_path / "a"), "--fail-under", "recall_at_8=0"]) == 0
    capfd.readouterr()
    code = run_main([*args, "--out", str(tmp_path / "b"), "--fail-under", "p_at_8=1",
                     "--fail-under", "mrr=0"])  # fmt: skip
    err = capfd.readouterr().err
    assert code == 1 and "FAIL-UNDER: store: p_at_8 =" in err and "mrr" not in err
    assert run_main([*args, "--out", str(tmp_path / "c"), "--fail-under", "recal=1"]) == 2
    # a floor no value can reach is a usage error now (was: run, then exit 1)
    assert run_main([*args, "--out", str(tmp_path / "d"), "--fail-under", "recall_at_8=1.01"]) == 2
    assert not (tmp_path / "d").exists()


def test_cost_in_significant_figures():
    from evals.report import usd

    assert [usd(x) for x in (0.000289, 0.0123456, 1.5, 1234.5, 0.0)] == [
        "$0.000289",
        "$0.0123",
        "$1.50",
        "$1,234",
        "$0",
    ]


def test_progress_without_a_tty_prints_periodic_plain_lines(capsys):
    from evals.runner import Progress

    p = Progress(100, every_s=3600)
    for _ in range(100):
        p.step("x")
    err = capsys.readouterr().err
    assert "\r" not in err and err.count("\n") == 2  # the first and the last step


def test_litellm_log_lines_go_to_the_file_once_and_never_to_the_console(tmp_path, capfd):
    """LiteLLM's loggers have their own stderr handler and propagate too: with a root
    handler (as a host or pytest installs) each line was printed twice. Inside log_to
    each record is written once, to the run's file, and none reaches the console."""
    import logging

    from evals.providers import LOGGERS, log_to

    root = logging.StreamHandler()  # a console handler on the root logger
    logging.getLogger().addHandler(root)
    try:
        with log_to(tmp_path / "llm.log", litellm=True):
            for i, name in enumerate(LOGGERS):
                logging.getLogger(name).warning("line %d from %s", i, name)
    finally:
        logging.getLogger().removeHandler(root)
    log = (tmp_path / "llm.log").read_text().splitlines()
    assert [x.split(" WARNING ", 1)[1] for x in log] == [
        f"line {i} from {n}" for i, n in enumerate(LOGGERS)
    ]
    out = capfd.readouterr()
    assert "line " not in out.out + out.err


def test_cost_is_readable_totalled_and_unknown_never_zero(tiny, tmp_path, monkeypatch):
    """gpt-4o-mini (priced by LiteLLM's bundled map) and a model it does not price,
    both answered by the stub: the headline shows the priced cost in significant
    figures, tokens and cost totals per system, the price source, and for the
    unpriced model "unknown price" and an undefined cost_usd (it read as a best,
    bold $0 before)."""
    from evals.report import usd

    monkeypatch.setenv(KEY_VAR, KEY)
    answer = reply('{"changes": []}')
    with StubServer({"gpt-4o-mini": answer, "good": answer}, api_key=KEY) as srv:
        out = tmp_path / "run"
        code = run_main(["--dataset", str(tiny), *BASE, "--consolidator",
                         "litellm:openai/gpt-4o-mini", "--consolidator", "litellm:openai/good",
                         "--api-base", srv.url, "--api-key-env", KEY_VAR, "--out", str(out),
                         "--quiet"])  # fmt: skip
    assert code == 0
    priced, unpriced = "pipeline:litellm:openai/gpt-4o-mini", "pipeline:litellm:openai/good"
    rows = read_jsonl(out / "attempts.jsonl")
    spent = sum(r["cost_usd"] for r in rows if r["system"] == priced)
    assert spent > 0 and all(r["cost_note"] for r in rows if r["system"] == unpriced)
    metrics = {(m["system"], m["metric"]): m for m in json.loads(
        (out / "metrics.json").read_text())["metrics"]}  # fmt: skip
    assert metrics[(unpriced, "cost_usd")]["value"] is None
    assert metrics[(unpriced, "cost_usd_per_pass")]["value"] is None
    assert metrics[(priced, "cost_usd")]["value"] > 0
    report = (out / "report.md").read_text()
    assert "(prices: LiteLLM " in report and "bundled price map)" in report
    head = report.split("## Headline", 1)[1].split("\n## ", 1)[0]
    table = {x.split("|")[1].strip(): x for x in head.splitlines() if x.startswith("| ")}
    label = {v: k for k, v in labels([priced, unpriced]).items()}  # columns: short labels
    cols = [label[c.strip()] for c in table["metric"].split("|")[2:-1]]
    cell = {
        name: dict(zip(cols, [c.strip() for c in line.split("|")[2:-1]], strict=True))
        for name, line in table.items()
    }
    assert cell["cost_usd ↓"][unpriced] == "n/a"
    assert cell["cost_usd ↓"][priced].startswith(usd(spent / len(
        [r for r in rows if r["system"] == priced])))  # fmt: skip
    assert cell["cost (run total, spent + replayed)"] == {
        unpriced: "unknown price",
        priced: usd(spent),
    }
    for system in (priced, unpriced):
        mine = [r for r in rows if r["system"] == system]
        tin, tout = sum(r["input_tokens"] for r in mine), sum(r["output_tokens"] for r in mine)
        assert cell["tokens (run total)"][system] == f"{tin + tout:,} ({tin:,} in, {tout:,} out)"
