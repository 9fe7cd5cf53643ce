"""The pipeline harness at provider scale (issue #24), against the loopback stub:
`--concurrency` is the one limit on requests in flight, and 429s with
Retry-After slow a run down without losing a pass."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from stub_openai import StubServer, gate, rate_limited, slow

from evals.datasets import load_dataset
from evals.runfolder import read_jsonl
from evals.runner import RunConfig, run_eval
from evals.synthetic import write_synthetic

MODEL = "litellm:openai/paced"


@pytest.fixture(scope="module")
def eight(tmp_path_factory):
    root = write_synthetic(tmp_path_factory.mktemp("d") / "eight", scopes=8, runs=2)
    return root, load_dataset(root)


def _cfg(root, srv, tmp_path, **kw) -> RunConfig:
    return RunConfig(
        dataset=str(root),
        name="c",
        store_mode=False,
        consolidators=(MODEL,),
        embedder="hashing",
        cache_dir=str(tmp_path / "cache"),
        model_options={MODEL: {"api_base": srv.url, "api_key": "sk-test", "base_delay_s": 0.01}},
        resamples=20,
        **kw,
    )


def _warm(srv) -> None:
    """Import LiteLLM and make its first call outside the timed runs."""
    from memkit import llm

    msgs = [{"role": "user", "content": "warm up"}]
    asyncio.run(llm.acomplete("openai/warm", msgs, api_base=srv.url, api_key="k", json_mode=False))


def _run(cfg, out, ds) -> float:
    t0 = time.perf_counter()
    run_eval(cfg, out, quiet=True, dataset=ds, report=False)
    return time.perf_counter() - t0


def test_concurrency_8_puts_8_requests_in_flight_and_cuts_wall(eight, tmp_path):
    """At c=8 the stub holds the first requests until 8 have arrived (then answers
    each after the same 1 s as at c=1), so "8 in flight" is a fact on a loaded
    machine too; the wall ratio is the issue's acceptance, measured in this run
    (1 s, not 0.5 s: at load 10 on 2 cores the harness's own ~2 s at c=8 broke
    0.30 x a 0.5 s run)."""
    root, ds = eight
    with StubServer({"paced": slow(1.0), "warm": slow(0.0)}) as srv:
        _warm(srv)
        wall1 = _run(_cfg(root, srv, tmp_path / "1", concurrency=1), tmp_path / "r1", ds)
        assert srv.max_in_flight["paced"] == 1
        srv.max_in_flight.clear()
        srv.behaviours["paced"] = gate(8, slow(1.0), timeout_s=20)
        wall8 = _run(_cfg(root, srv, tmp_path / "8", concurrency=8), tmp_path / "r8", ds)
        assert srv.max_in_flight["paced"] == 8  # 8 scopes: every one has a request out
    print(f"wall c=1 {wall1:.2f} s, c=8 {wall8:.2f} s, ratio {wall8 / wall1:.3f}")
    assert wall8 < 0.30 * wall1
    limits = json.loads((tmp_path / "r8" / "manifest.json").read_text())["providers"]["limits"]
    assert limits["openai/paced"]["in_flight_max"] == 8
    assert limits["openai/paced"]["concurrency_limit"] == 8


def test_429_with_retry_after_loses_no_pass(eight, tmp_path):
    root, ds = eight
    lock = threading.Lock()
    seen: set[str] = set()
    count = [0]
    limited = []

    def every_third(body):
        """429 (Retry-After: 1) to one request in three; its retry is answered."""
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with lock:
            count[0] += 1
            if count[0] % 3 == 0 and key not in seen:
                seen.add(key)
                limited.append(key)
                return rate_limited(1)
        return slow(0.05)

    with StubServer({"paced": every_third}) as srv:
        cfg = _cfg(root, srv, tmp_path, concurrency=8)
        run_eval(cfg, tmp_path / "r", quiet=True, dataset=ds)
        sent = len(srv.calls)
    out = tmp_path / "r"
    passes = read_jsonl(out / "passes.jsonl")
    attempts = read_jsonl(out / "attempts.jsonl")
    assert limited and len(attempts) == sent  # every request is an attempt row
    assert sum(a["outcome"] == "rate_limit" for a in attempts) == len(limited)
    assert all(a["retry_after_s"] == 1 for a in attempts if a["outcome"] == "rate_limit")
    committed = [p for p in passes if p["outcome"] == "committed"]
    assert len(committed) == len(passes) == 8 * 2  # no failed pass, none lost
    consumed = sorted(r for p in committed for r in p["rollout_ids"])
    assert len(consumed) == len(set(consumed)) == 8 * 2
    lim = json.loads((out / "manifest.json").read_text())["providers"]["limits"]["openai/paced"]
    assert lim["rate_limited"] == len(limited)
    assert lim["limit_min"] < 8  # halved on 429
    assert lim["retry_wait_s"] >= len(limited) * 1.0  # Retry-After honoured
    assert 1 <= lim["in_flight_min"] <= lim["in_flight_median"] <= lim["in_flight_max"] <= 8
    failures = json.loads((out / "manifest.json").read_text())["providers"]["failures"]
    assert failures[f"pipeline:{MODEL}"]["fails_run"] is False
    report = (out / "report.md").read_text()  # the report shows what was achieved
    assert "Provider concurrency achieved" in report and "retry_wait_s" in report
