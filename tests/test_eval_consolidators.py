"""Two models through the whole pipeline against a loopback stub (issue #16):
a clean one, and a sloppy one that fences its JSON and invents ids. The run
must score validity from each answer, count distinct requests, never let one
bad batch freeze a scope, and replay from the cache byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
import row_fixtures
from stub_openai import StubServer, consolidation_payload, fenced, first_time, rate_limited, reply

from evals.replay import CachingEmbedder
from evals.runfolder import read_jsonl
from evals.runner import RunConfig, load_any, run_eval
from memkit.embed import get_embedder

CLEAN = "litellm:openai/clean"
SLOPPY = "litellm:openai/sloppy"
SCOPES = ("acme-web", "growth-analytics", "infra-oncall")
"""Three of the bundled scopes: enough queue depth to freeze, a few seconds a run."""
KINDS = ("fenced_valid",) * 4 + ("invented",) * 2 + ("fenced_invented",) * 2 + ("valid",) * 2


def sloppy_kind(body: dict) -> str:
    """The sloppy model's answer to a request: fixed per request, like temperature 0."""
    digest = hashlib.sha256(body["messages"][-1]["content"].encode()).hexdigest()
    return KINDS[int(digest, 16) % len(KINDS)]


def _add(payload: dict) -> dict:
    users = [
        m["content"] for r in payload["rollouts"] for m in r["messages"] if m["role"] == "user"
    ]
    return {"ids": [], "entry": {"kind": "fact", "content": (users or ["x"])[0][:200]}}


def _clean(body: dict):
    return reply(json.dumps({"changes": [_add(consolidation_payload(body))]}))


def _sloppy(body: dict):
    kind = sloppy_kind(body)
    change = _add(consolidation_payload(body))
    if "invented" in kind:
        change = {"ids": ["mem-invented"], "entry": change["entry"]}
    text = json.dumps({"changes": [change]})
    return fenced(text) if kind.startswith("fenced") else reply(text)


@pytest.fixture(scope="module")
def bundled():
    return load_any("datasets/bundled")


@pytest.fixture(scope="module")
def emb():
    return CachingEmbedder(get_embedder("wordllama"))


def _run(ds, emb, srv, cache, out, consolidators=(CLEAN, SLOPPY), **kw):
    opts = {"api_base": srv.url, "api_key": "sk-stub", "base_delay_s": 0.001}
    cfg = RunConfig(
        dataset="datasets/bundled",
        name="two-models",
        store_mode=False,
        consolidators=consolidators,
        cache_dir=str(cache),
        model_options={c: opts for c in consolidators},
        resamples=200,
        scopes=SCOPES,
        **kw,
    )
    return run_eval(cfg, out, quiet=True, dataset=ds, embedder=emb, report=False)


def test_clean_and_sloppy_models_scored_from_their_answers(bundled, emb, tmp_path):
    # the clean model is rate limited once on every distinct request: 2 attempts a pass
    behaviours = {
        "clean": first_time(rate_limited(0.001), _clean),
        "sloppy": _sloppy,
    }
    with StubServer(behaviours) as srv:
        res = _run(bundled, emb, srv, tmp_path / "cache", tmp_path / "fresh")
        sent = len(srv.calls)
        _run(bundled, emb, srv, tmp_path / "cache", tmp_path / "cached")
        assert len(srv.calls) == sent  # the rerun made no provider call
        sloppy_bodies = {c.messages[-1]["content"]: c.body for c in srv.calls_for("sloppy")}
        # the reference behaviour (no parking) for comparison: the scope freezes
        frozen = _run(
            bundled,
            emb,
            srv,
            tmp_path / "cache",
            tmp_path / "frozen",
            consolidators=(SLOPPY,),
            consolidation={"park_after": 0},
        ).metrics.set_index(["system", "metric"])["value"]
    t = res.metrics.set_index(["system", "metric"])["value"]
    clean, sloppy = f"pipeline:{CLEAN}", f"pipeline:{SLOPPY}"

    # 1. validity from the response: fenced-but-valid answers count after repair
    kinds = Counter(sloppy_kind(b) for b in sloppy_bodies.values())
    fenced_valid_share = kinds["fenced_valid"] / sum(kinds.values())
    assert fenced_valid_share > 0.2
    assert t[(sloppy, "valid_after_repair")] >= fenced_valid_share
    assert t[(sloppy, "strict_validity")] < t[(sloppy, "valid_after_repair")]
    assert t[(clean, "strict_validity")] == t[(clean, "valid_after_repair")] == 1.0

    # 2. distinct requests are the unit; the freeze is visible
    assert t[(sloppy, "repeated_requests")] > 0
    assert t[(clean, "repeated_requests")] == 0
    n = res.metrics.set_index(["system", "metric"])["n"]
    assert n[(sloppy, "strict_validity")] == len(sloppy_bodies)

    # 3. no head-of-line freeze: a batch refused 3 times is parked, the queue moves on
    passes = read_jsonl(tmp_path / "fresh" / "passes.jsonl")
    failed = Counter(
        (p["scope_id"], p["request_hash"])
        for p in passes
        if p["system"] == sloppy and p["outcome"] == "error"
    )
    assert failed and max(failed.values()) <= 3
    unparked = Counter(
        (p["scope_id"], p["request_hash"])
        for p in read_jsonl(tmp_path / "frozen" / "passes.jsonl")
        if p["outcome"] == "error"
    )
    assert max(unparked.values()) > 3  # without parking one request fails again and again
    assert frozen[(sloppy, "repeated_requests")] > t[(sloppy, "repeated_requests")]
    assert frozen[(sloppy, "parked_rollouts")] == 0 < frozen[(sloppy, "pending_rollouts")]
    parked = [rid for p in passes if p["system"] == sloppy for rid in p["parked"]]
    assert parked and len(parked) == len(set(parked))
    assert t[(sloppy, "parked_rollouts")] > 0 and t[(clean, "parked_rollouts")] == 0
    assert not [p for p in passes if p["system"] == clean and p["parked"]]

    # 4. every attempt recorded and replayed: fresh and cached runs are byte-identical
    assert t[(clean, "attempts_per_pass")] == 2.0 and t[(clean, "provider_failures")] == 0.5
    fresh = (tmp_path / "fresh" / "metrics.json").read_bytes()
    assert fresh == (tmp_path / "cached" / "metrics.json").read_bytes()
    spend = json.loads((tmp_path / "cached" / "spend.json").read_text())["systems"]
    assert all(s["cached_attempts"] == s["attempts"] > 0 for s in spend.values())
    rows = read_jsonl(tmp_path / "cached" / "attempts.jsonl")
    assert rows and all(r["cached"] for r in rows)
    first = json.loads((tmp_path / "fresh" / "spend.json").read_text())["systems"]
    assert first[clean]["cached_attempts"] == 0
    print(
        f"sloppy: {len(sloppy_bodies)} distinct requests, fenced-valid share "
        f"{fenced_valid_share:.3f}, strict_validity {t[(sloppy, 'strict_validity')]:.3f}, "
        f"valid_after_repair {t[(sloppy, 'valid_after_repair')]:.3f}; repeated_requests "
        f"{t[(sloppy, 'repeated_requests')]:.3f} parked ({len(parked)} rollouts parked, "
        f"max {max(failed.values())} failures of one request) vs "
        f"{frozen[(sloppy, 'repeated_requests')]:.3f} unparked (max "
        f"{max(unparked.values())}); clean attempts_per_pass "
        f"{t[(clean, 'attempts_per_pass')]}, provider_failures "
        f"{t[(clean, 'provider_failures')]}; metrics.json {len(fresh):,} bytes, fresh == cached"
    )


def test_spend_splits_money_spent_from_replayed_answers(tmp_path):
    from evals.runfolder import write_jsonl, write_spend

    def attempt(system, cost, cached, **kw):
        row = row_fixtures.attempt(cost_usd=cost, cached=cached, **kw)
        return {**row.to_json(), "system": system}

    rows = [
        attempt("a", 0.25, False, raw_response="{}"),
        attempt("a", 0.5, True, raw_response="{}"),
        attempt("a", 0.0, False, outcome="server"),  # a provider failure costs nothing
        attempt("b", 0.125, True, raw_response="{}"),
    ]
    write_jsonl(tmp_path / "attempts.jsonl", rows)
    write_spend(tmp_path)
    got = json.loads((tmp_path / "spend.json").read_text())["systems"]
    assert {k: got["a"][k] for k in ("attempts", "cached_attempts")} == {
        "attempts": 3,
        "cached_attempts": 1,
    }
    assert (got["a"]["cost_usd_spent"], got["a"]["cost_usd_cached"]) == (0.25, 0.5)
    assert got["b"]["cost_usd_spent"] == 0.0 and got["b"]["cost_usd_cached"] == 0.125
