"""The native consolidator through LiteLLM itself: `mock_response` and a stub server.

Every HTTP fault (429 with Retry-After, 500, a reply slower than the timeout,
a truncated body) and every bad answer (fenced JSON, invented ids) must leave
the evidence pending with an exact attempt count; usage, cost and latency are
recorded per attempt; the disk cache makes a warm rerun free.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from stub_openai import (
    StubServer,
    fenced,
    gate,
    rate_limited,
    reply,
    server_error,
    slow,
    status,
    truncated,
)

from memkit import SQLiteStore
from memkit.consolidate import (
    LiteLLMConsolidator,
    ResponseCache,
    build_rollout,
    get_consolidator,
    run_pass,
    run_pass_sync,
)
from memkit.errors import ProviderError
from memkit.params import ConsolidationParams

GOOD = json.dumps(
    {
        "changes": [
            {
                "ids": [],
                "entry": {
                    "kind": "procedure",
                    "content": "Deploy with `make deploy` from the repo root.",
                    "tags": ["ops"],
                    "confidence": 0.8,
                },
            }
        ]
    }
)
INVENTED = json.dumps({"changes": [{"ids": ["mem-made-up"], "entry": None}]})
FAST = ConsolidationParams(timeout_s=5.0)


def _store(scope: str = "s", n: int = 1) -> SQLiteStore:
    store = SQLiteStore.open(":memory:", embedder=None)
    for i in range(n):
        msgs = [{"role": "user", "content": f"We deploy with make deploy ({scope} {i})."}]
        store.stage_rollout(build_rollout(scope, msgs, "ok", run_id=f"{scope}-{i}"))
    return store


def _consolidator(srv: StubServer, name: str, **kw) -> LiteLLMConsolidator:
    opts = {"api_base": srv.url, "api_key": "stub", "base_delay_s": 0.01, "retry_cap_s": 0.5}
    opts.update(kw)
    return get_consolidator(f"litellm:openai/{name}", **opts)


@pytest.fixture(scope="module")
def srv():
    behaviours = {
        "good": reply(GOOD, prompt_tokens=321, completion_tokens=45),
        "rl_then_ok": [rate_limited(0.05), reply(GOOD)],
        "rl_long": [rate_limited(100), reply(GOOD)],
        "always_429": rate_limited(0.01),
        "e500": server_error(500),
        "e500_then_ok": [server_error(503), reply(GOOD)],
        "bad_request": status(400),
        "unauthorized": status(401),
        "forbidden": status(403),
        "missing_model": status(404),
        "slow": slow(3.0, GOOD),
        "trunc": truncated(GOOD),
        "fencer": fenced(GOOD),
        "inventor": reply(INVENTED),
        "paced": slow(0.15, '{"changes": []}'),
    }
    with StubServer(behaviours) as s:
        yield s


def _pending(store: SQLiteStore, scope: str = "s") -> int:
    return len(store.pending_rollouts(scope, 100))


def test_good_reply_commits_with_usage(srv):
    store = _store()
    c = _consolidator(srv, "good")
    res = run_pass_sync(store, "s", c, FAST)
    assert res.outcome == "committed", res.error
    assert _pending(store) == 0
    (a,) = res.attempts
    assert (a.outcome, a.status, a.input_tokens, a.output_tokens) == ("ok", 200, 321, 45)
    assert a.cost_usd == 0.0 and "no price" in a.cost_note  # unknown model: 0.0 with a note
    assert a.latency_s > 0 and a.parse_mode == "strict" and a.validation_code is None
    assert a.model == "openai/good" and a.consolidator == "litellm:openai/good"
    assert [m.content for m in store.live("s")] == ["Deploy with `make deploy` from the repo root."]
    # what was sent: the native prompt and the 2,048-token output ceiling
    call = srv.calls_for("good")[-1]
    assert call.body["max_tokens"] == 2048
    assert call.messages[0]["role"] == "system" and "untrusted" in call.messages[0]["content"]
    assert json.loads(call.messages[1]["content"])["rollouts"][0]["id"] == res.rollout_ids[0]


def test_sequential_event_loops_reuse_nothing_stale(srv):
    c = _consolidator(srv, "good")
    for _ in range(2):  # two asyncio.run loops in a row
        assert run_pass_sync(_store(), "s", c, FAST).outcome == "committed"


def test_429_retry_after_is_honoured(srv):
    store = _store()
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    n0 = len(srv.calls_for("rl_then_ok"))
    res = run_pass_sync(store, "s", _consolidator(srv, "rl_then_ok", sleep=sleep), FAST)
    assert res.outcome == "committed"
    assert [a.outcome for a in res.attempts] == ["rate_limit", "ok"]
    assert res.attempts[0].status == 429 and res.attempts[0].retry_after_s == 0.05
    assert waits == [0.05]
    assert len(srv.calls_for("rl_then_ok")) - n0 == 2


def test_retry_after_is_capped(srv):
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    c = _consolidator(srv, "rl_long", sleep=sleep, retry_cap_s=0.2)
    res = run_pass_sync(_store(), "s", c, FAST)
    assert res.outcome == "committed" and waits == [0.2]


@pytest.mark.parametrize(
    "model,outcome,attempts",
    [
        ("always_429", "rate_limit", 3),
        ("e500", "server", 3),
        # never retried: no later attempt can fix them
        ("bad_request", "bad_request", 1),
        ("unauthorized", "auth", 1),
        ("forbidden", "permission", 1),
        ("missing_model", "not_found", 1),
    ],
)
def test_provider_failures_keep_evidence_pending(srv, model, outcome, attempts):
    store = _store()
    errors: list[BaseException] = []
    n0 = len(srv.calls_for(model))
    res = run_pass_sync(store, "s", _consolidator(srv, model), FAST, on_error=errors.append)
    assert res.outcome == "error" and res.error_code == "provider"
    assert [a.outcome for a in res.attempts] == [outcome] * attempts
    assert len(srv.calls_for(model)) - n0 == attempts
    assert _pending(store) == 1 and store.live("s") == []
    assert len(errors) == 1 and errors[0].kind == outcome


def test_server_error_then_success(srv):
    res = run_pass_sync(_store(), "s", _consolidator(srv, "e500_then_ok"), FAST)
    assert [a.outcome for a in res.attempts] == ["server", "ok"]
    assert [a.index for a in res.attempts] == [0, 1]
    assert res.outcome == "committed"


def test_reply_slower_than_timeout(srv):
    store = _store()
    n0 = len(srv.calls_for("slow"))
    params = ConsolidationParams(timeout_s=0.3)
    res = run_pass_sync(store, "s", _consolidator(srv, "slow", max_attempts=2), params)
    assert res.outcome == "error" and res.error_code == "provider"
    assert [a.outcome for a in res.attempts] == ["timeout", "timeout"]
    assert all(0.25 < a.latency_s < 2.0 for a in res.attempts)
    assert len(srv.calls_for("slow")) - n0 == 2
    assert _pending(store) == 1


def test_truncated_body(srv):
    store = _store()
    n0 = len(srv.calls_for("trunc"))
    res = run_pass_sync(store, "s", _consolidator(srv, "trunc", max_attempts=2), FAST)
    assert res.outcome == "error" and res.error_code == "provider"
    assert len(res.attempts) == 2 and all(a.outcome != "ok" for a in res.attempts)
    assert len(srv.calls_for("trunc")) - n0 == 2
    assert _pending(store) == 1


def test_fenced_json_strict_fails_lenient_repairs(srv):
    store = _store()
    res = run_pass_sync(store, "s", _consolidator(srv, "fencer"), FAST)
    assert res.outcome == "error" and res.error_code == "parse"
    (a,) = res.attempts
    assert a.outcome == "parse" and a.parse_mode == "failed" and "```json" in a.raw_response
    # read once, judged both ways: strictly a parse failure, valid after repair
    assert (a.strict_code, a.lenient_code) == ("parse", None)
    assert a.parsed_changes == json.loads(GOOD)["changes"]
    assert _pending(store) == 1 and store.live("s") == []
    res = run_pass_sync(store, "s", _consolidator(srv, "fencer"), replace(FAST, lenient=True))
    assert res.outcome == "committed" and res.parse_mode == "repaired"
    assert res.attempts[0].parse_error  # the strict failure is still recorded
    assert _pending(store) == 0


def test_invented_ids_rejected(srv):
    store = _store()
    res = run_pass_sync(store, "s", _consolidator(srv, "inventor"), FAST)
    assert res.outcome == "error" and res.error_code == "unknown_id"
    assert res.attempts[0].validation_code == "unknown_id" and len(res.attempts) == 1
    assert res.attempts[0].strict_code == res.attempts[0].lenient_code == "unknown_id"
    assert _pending(store) == 1


def test_one_semaphore_per_model(srv):
    stores = {f"s{i}": _store(f"s{i}") for i in range(3)}
    c = _consolidator(srv, "paced", concurrency=1)
    c2 = _consolidator(srv, "good", concurrency=1)

    async def main():
        return await asyncio.gather(
            *(run_pass(st, sc, c, FAST) for sc, st in stores.items()),
            run_pass(_store(), "s", c2, FAST),
        )

    results = asyncio.run(main())
    assert all(r.outcome == "committed" for r in results)
    # three "paced" calls never overlapped; the other model was not blocked by them
    assert srv.max_in_flight["paced"] == 1
    paced = srv.calls_for("paced")
    assert len(paced) == 3 and paced[-1].time - paced[0].time >= 0.25
    assert srv.calls_for("good")[-1].time < paced[-1].time


def test_cache_warm_rerun_makes_no_provider_call(srv, tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    c = _consolidator(srv, "good", cache=cache)
    first = run_pass_sync(_store(n=2), "s", c, FAST)
    assert first.outcome == "committed" and c.provider_calls == 1 and len(cache) == 1
    n0 = len(srv.calls)
    again = _consolidator(srv, "good", cache_dir=tmp_path / "cache")  # a fresh process
    store = _store(n=2)
    second = run_pass_sync(store, "s", again, FAST)
    assert second.outcome == "committed" and again.provider_calls == 0 and len(srv.calls) == n0
    assert second.attempts[0].cached and second.request_hash == first.request_hash
    assert second.attempts[0].input_tokens == 321  # what the answer originally cost
    assert [m.content for m in store.live("s")] == [m.content for m in _live_after(first)]
    # another replicate is another sample: a miss
    third = run_pass(_store(n=2), "s", again, FAST, replicate=1)
    assert asyncio.run(third).outcome == "committed" and again.provider_calls == 1


def _live_after(res):
    return [ch.entry for ch in res.changes]


def test_cache_replays_every_attempt_of_a_pass(srv, tmp_path):
    """A 429 then an answer: the warm rerun shows the same two attempts, marked cached."""
    with StubServer({"m": [rate_limited(0.01), reply(GOOD)]}) as own:
        fresh = run_pass_sync(_store(), "s", _consolidator(own, "m", cache_dir=tmp_path), FAST)
        assert [a.outcome for a in fresh.attempts] == ["rate_limit", "ok"]
        again = _consolidator(own, "m", cache_dir=tmp_path)
        warm = run_pass_sync(_store(), "s", again, FAST)
    assert again.provider_calls == 0 and all(a.cached for a in warm.attempts)
    strip = ("cached", "latency_s")
    assert [{k: v for k, v in a.to_dict().items() if k not in strip} for a in warm.attempts] == [
        {k: v for k, v in a.to_dict().items() if k not in strip} for a in fresh.attempts
    ]


def test_a_pass_that_ended_in_provider_errors_is_never_cached(srv, tmp_path):
    """A failure is not a final answer (issue #34): a cached rerun asks the provider again."""
    c = _consolidator(srv, "e500", cache_dir=tmp_path / "c", max_attempts=2)
    first = run_pass_sync(_store(), "s", c, FAST)
    second = run_pass_sync(_store(), "s", c, FAST)
    assert first.error_code == second.error_code == "provider"
    assert [a.outcome for a in second.attempts] == ["server", "server"]
    assert c.provider_calls == 4 and not any(a.cached for a in (*first.attempts, *second.attempts))
    assert len(ResponseCache(tmp_path / "c")) == 0


def test_connection_and_config_errors_are_not_cached(srv, tmp_path):
    c = _consolidator(srv, "bad_request", cache_dir=tmp_path / "c", max_attempts=1)
    assert run_pass_sync(_store(), "s", c, FAST).outcome == "error"
    assert run_pass_sync(_store(), "s", c, FAST).outcome == "error"
    assert c.provider_calls == 2 and len(ResponseCache(tmp_path / "c")) == 0


# --- mock_response -----------------------------------------------------------------


def test_mock_response_usage_and_cost():
    from memkit.llm import litellm

    mock = {
        "choices": [{"message": {"role": "assistant", "content": GOOD}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    }
    c = get_consolidator("litellm:gpt-4o-mini", extra={"mock_response": mock})
    res = run_pass_sync(_store(), "s", c, FAST)
    assert res.outcome == "committed"
    (a,) = res.attempts
    assert (a.input_tokens, a.output_tokens) == (1000, 200)
    pin, pout = litellm().cost_per_token(
        model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=200
    )
    assert a.cost_usd == pytest.approx(pin + pout) and a.cost_usd > 0 and a.cost_note is None


@pytest.mark.parametrize(
    "extra,outcome,n",
    [
        ({"mock_response": "litellm.RateLimitError"}, "rate_limit", 2),
        ({"mock_response": "litellm.InternalServerError"}, "server", 2),
        ({"mock_timeout": True}, "timeout", 2),
    ],
)
def test_mock_failures(extra, outcome, n):
    store = _store()
    c = get_consolidator("litellm:gpt-4o-mini", extra=extra, max_attempts=n, base_delay_s=0.0)
    res = run_pass_sync(store, "s", c, ConsolidationParams(timeout_s=0.2))
    assert res.outcome == "error" and [a.outcome for a in res.attempts] == [outcome] * n
    assert _pending(store) == 1


def test_json_mode_follows_litellm():
    from memkit.llm import supports_json_mode

    assert supports_json_mode("gpt-4o-mini") is True
    assert supports_json_mode("openai/some-local-model") in (True, False)


def test_import_memkit_does_not_import_litellm():
    import subprocess

    code = "import memkit, memkit.consolidate, sys; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- retry policy and Retry-After parsing (pure) ------------------------------------


def test_retry_policy_delays():
    from memkit.llm import RetryPolicy

    p = RetryPolicy(max_attempts=4, cap_s=30.0, base_delay_s=1.0)
    assert [p.delay(n, None) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert p.delay(1, 30.0) == 30.0 and p.delay(1, 30.5) == 30.0  # at the cap and past it
    assert p.delay(1, -5.0) == 0.0 and p.delay(9, None) == 30.0


def test_retry_after_header_forms():
    """A 429's Retry-After as seconds, as milliseconds, as an HTTP date, unreadable
    or absent: what the attempt records (and the retry waits for)."""
    import email.utils
    import time

    from memkit import llm

    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    scripts = {
        "secs": status(429, headers={"Retry-After": "2.5"}),
        "ms": status(429, headers={"retry-after-ms": "150"}),
        "date": status(429, headers={"Retry-After": when}),
        "soon": status(429, headers={"Retry-After": "soon"}),
        "none": status(429),
        "e503": status(503, headers={"Retry-After": "2.5"}),  # not a rate limit: not read
    }

    async def first_attempt(name: str):
        with pytest.raises(ProviderError) as e:
            await llm.acomplete(
                f"openai/{name}",
                [{"role": "user", "content": "hi"}],
                api_base=srv.url,
                api_key="stub",
                json_mode=False,
                retry=llm.RetryPolicy(max_attempts=1),
            )
        (a,) = e.value.attempts
        return a.retry_after_s

    with StubServer(scripts) as srv:
        got = {name: asyncio.run(first_attempt(name)) for name in scripts}
    assert (got["secs"], got["ms"]) == (2.5, 0.15)
    assert 15 < got["date"] <= 21
    assert got["soon"] is None and got["none"] is None and got["e503"] is None


def test_json_mode_follows_litellm_unless_overridden(srv):
    # LiteLLM lists response_format among the openai provider's params: auto = on
    run_pass_sync(_store(), "s", _consolidator(srv, "good"), FAST)
    assert srv.calls_for("good")[-1].body["response_format"] == {"type": "json_object"}
    run_pass_sync(_store(), "s", _consolidator(srv, "good", json_mode=False), FAST)
    assert "response_format" not in srv.calls_for("good")[-1].body


def test_warm_cache_reruns_several_passes_for_free(srv, tmp_path):
    def passes(c):
        store = _store(n=9)  # three passes: 4 + 4 + 1 rollouts
        ids = iter(range(1000))
        store.new_id = lambda: f"mem-{next(ids)}"  # reproducible ids: same later snapshots
        out = [run_pass_sync(store, "s", c, FAST) for _ in range(4)]
        assert [r.outcome for r in out] == ["committed"] * 3 + ["nothing_pending"]
        return out

    cold = _consolidator(srv, "good", cache_dir=tmp_path / "c")
    first = passes(cold)
    assert cold.provider_calls == 3
    n0 = len(srv.calls)
    warm = _consolidator(srv, "good", cache_dir=tmp_path / "c")
    second = passes(warm)
    assert warm.provider_calls == 0 and len(srv.calls) == n0
    assert [r.request_hash for r in second] == [r.request_hash for r in first]
    assert all(r.attempts[0].cached for r in second[:3])


def test_consolidation_reaches_litellm_only_through_llm_module():
    import re

    root = Path(__file__).resolve().parents[1] / "memkit" / "consolidate"
    pattern = re.compile(r"^\s*(?:import litellm|from litellm\b)", re.MULTILINE)
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_model_limit_halves_on_429_and_climbs_back_by_one():
    from memkit.llm import ModelLimit

    async def main():
        lim = ModelLimit(8)
        tickets = [await lim.acquire() for _ in range(8)]
        assert lim.in_flight == 8 and lim.stats()["in_flight_max"] == 8
        # a burst of 429s from requests started before the first cut halves once
        await lim.release(tickets[0], "rate_limit", 0.1)
        await lim.release(tickets[1], "rate_limit", 0.1)
        assert lim.limit == 4
        for k in tickets[2:]:
            await lim.release(k, "ok", 0.1)
        t = await lim.acquire()  # started after the cut: may cut again
        await lim.release(t, "rate_limit", 0.1)
        assert lim.limit == 2
        for _ in range(2):  # a run of `limit` successes raises it by one
            await lim.release(await lim.acquire(), "ok", 0.1)
        assert lim.limit == 3
        for _ in range(100):
            await lim.release(await lim.acquire(), "ok", 0.1)
        assert lim.limit == 8  # never above the user's ceiling
        s = lim.stats()
        assert (s["rate_limited"], s["limit_min"], s["concurrency_limit"]) == (3, 2, 8)

    asyncio.run(main())


def test_a_closed_limit_sends_none_of_its_queued_requests(srv):
    """The eval stops a model at its first fatal error: requests of other scopes
    already queued for a slot raise ModelClosed and never reach the server."""
    from memkit import llm

    msgs = [{"role": "user", "content": "x"}]

    def call():
        kw = {"api_base": srv.url, "api_key": "k", "json_mode": False, "concurrency": 1}
        return asyncio.ensure_future(llm.acomplete("openai/paced", msgs, **kw))

    before = len(srv.calls)  # the server is the module's

    async def main():
        first = call()
        queued = [call() for _ in range(3)]
        while len(srv.calls) == before:
            await asyncio.sleep(0.01)
        await llm.model_limit("openai/paced").close("stopped by the test")
        await first  # the one in flight completes
        for t in [*queued, call()]:  # queued, and any later request
            with pytest.raises(llm.ModelClosed, match="stopped by the test"):
                await t

    asyncio.run(main())
    assert len(srv.calls) == before + 1


def test_one_limit_per_model_is_the_callers(srv):
    """No hidden second cap: 6 concurrent calls at concurrency 6 are all in flight."""
    from memkit import llm

    async def main():
        msgs = [{"role": "user", "content": "x"}]
        calls = [
            llm.acomplete(
                "openai/paced", msgs, api_base=srv.url, api_key="k", json_mode=False, concurrency=6
            )
            for _ in range(6)
        ]
        await asyncio.gather(*calls)
        return llm.limit_stats()["openai/paced"]

    # the stub holds each call until all 6 have arrived (a 0.15 s pace let a loaded
    # machine finish one before the last was sent: CI read 5 == 6)
    paced = srv.behaviours["paced"]
    srv.behaviours["paced"] = gate(6, slow(0.15, '{"changes": []}'), timeout_s=20)
    srv.max_in_flight.pop("paced", None)
    try:
        stats = asyncio.run(main())
    finally:
        srv.behaviours["paced"] = paced
    assert srv.max_in_flight["paced"] == 6 and stats["in_flight_max"] == 6


def test_missing_credentials_are_auth_and_never_retried(monkeypatch):
    from memkit import llm

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(ProviderError) as e:
        asyncio.run(llm.acomplete("openai/gpt-4o-mini", msgs, json_mode=False))
    assert e.value.kind == "auth" and len(e.value.attempts) == 1


@pytest.mark.parametrize(
    "model,opts,kind,cause",
    [
        ("openai/gpt-4o-mini", {}, "auth", "OPENAI_API_KEY"),
        ("anthropic/claude-3-haiku-20240307", {}, "auth", "ANTHROPIC_API_KEY"),
        ("notaprovider/foo", {}, "not_found", "unknown model string"),
        ("openai/x", {"api_base": "http://127.0.0.1:9/v1", "api_key": "k"}, "connection", ":9"),
    ],
)
def test_preflight_names_model_and_cause(monkeypatch, model, opts, kind, cause):
    from memkit import llm

    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ProviderError) as e:
        llm.preflight(model, **opts)
    msg = str(e.value)
    assert e.value.kind == kind and msg.startswith(model) and cause in msg and "\n" not in msg


def test_preflight_passes_a_reachable_base_with_a_key(srv):
    from memkit import llm

    llm.preflight("openai/good", api_base=srv.url, api_key="k")  # no raise


def test_preflight_checks_the_ollama_server_named_by_its_variable(monkeypatch):
    """OLLAMA_API_BASE set to a server that is not running fails at preflight (it
    used to pass: with the variable set nothing was missing and nothing was checked)."""
    import socket

    from memkit import llm

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OLLAMA_API_BASE", f"http://127.0.0.1:{port}")
    for model in ("ollama/llama3", "ollama_chat/llama3"):
        with pytest.raises(ProviderError) as e:
            llm.preflight(model)
        assert e.value.kind == "connection" and f":{port}" in str(e.value), str(e.value)


def test_a_model_timeout_option_governs_the_call_and_is_not_in_the_cache_key(srv, tmp_path):
    """`--timeout 900` (a model option, carried in `extra`) reached LiteLLM, but
    the asyncio backstop still fired at the pass's 60 s + 5: a recording run
    against a slow local model saw 65.0 s timeouts. The answer does not depend
    on the timeout, so neither does the cache key."""
    srv.behaviours["slow6"] = slow(6.0, GOOD)
    store = _store()
    params = ConsolidationParams(timeout_s=0.5)  # backstop was 5.5 s < the 6 s reply
    c = _consolidator(srv, "slow6", max_attempts=1, extra={"timeout": 30.0})
    res = run_pass_sync(store, "s", c, params)
    assert [a.outcome for a in res.attempts] == ["ok"], res.attempts
    assert res.outcome == "committed"
    # one cache: the same request under another timeout is a hit, under another
    # temperature (an option that can change the answer) a miss
    cache = ResponseCache(tmp_path / "cache")
    n0 = len(srv.calls_for("good"))
    sent = []
    for timeout, temperature in ((1.0, 0), (900.0, 0), (1.0, 0.5)):
        extra = {"timeout": timeout, "temperature": temperature}
        c = _consolidator(srv, "good", cache=cache, extra=extra)
        assert run_pass_sync(_store(), "s", c, FAST).outcome == "committed"
        sent.append(c.provider_calls)
    assert sent == [1, 0, 1]
    assert len(srv.calls_for("good")) - n0 == 2
    assert srv.calls_for("good")[-1].body["temperature"] == 0.5
