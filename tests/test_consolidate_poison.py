"""Poison the provider fails on (issue #34 item 2): a content-filter 400 or a hang on
the poison's request counts like an invalid answer, so the split isolates the poison
and the scope's later evidence commits by pass 4; a transient 3 x 500 blip under the
README's `cache_dir` recipe is never cached, so the next pass asks again and commits.

Through LiteLLM against the local stub server (tests/stub_openai.py); nothing leaves
the host. The SIGKILL side (a provider 400 splitting and parking) is in
tests/test_consolidate_parking.py.
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

from stub_openai import StubServer, consolidation_payload, reply, server_error, slow, status
from virtual_time import run_virtual

from memkit.consolidate import (
    Reply,
    ResponseCache,
    build_rollout,
    get_consolidator,
    run_pass_sync,
)
from memkit.errors import (
    ANSWER_CODES,
    PROPOSAL_CODES,
    ProposalError,
    ProviderError,
    RequestTooLarge,
)
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams, WorkerParams
from memkit.store.parking import counted_code
from memkit.worker import DEADLINE_SHARE, ConsolidationWorker, PassRecord

S = "s"
PARAMS = ConsolidationParams(timeout_s=5.0)


def _learned(body) -> str:
    """One valid add per rollout of the request."""
    rollouts = consolidation_payload(body)["rollouts"]
    return json.dumps(
        {
            "changes": [
                {"ids": [], "entry": {"content": f"learned {r['id'][:12]}"}} for r in rollouts
            ]
        }
    )


def _poisoned(bad):
    """`bad` whenever the request holds the poison rollout, else a valid answer."""

    def script(body):
        if "POISON" in json.dumps(consolidation_payload(body)["rollouts"]):
            return bad
        return reply(_learned(body))

    return script


@pytest.fixture
def store(make_store):
    return make_store(embedder=None)


def _stage(store, n_later: int = 4) -> list[str]:
    ids = []
    for i, text in enumerate(["POISON", *(f"later evidence {i}" for i in range(n_later))]):
        r = build_rollout(S, [{"role": "user", "content": text}], "ok", run_id=f"r{i}")
        assert store.stage_rollout(replace(r, staged_at=float(i)))
        ids.append(r.id)
    return ids


def _consolidator(srv, name, **kw):
    opts = {"api_base": srv.url, "api_key": "stub", "json_mode": False, "base_delay_s": 0.01}
    return get_consolidator(f"litellm:openai/{name}", **{**opts, **kw})


def _passes(store, model, params, n):
    return [run_pass_sync(store, S, model, params) for _ in range(n)]


@pytest.mark.parametrize(
    ("bad", "params", "kind"),
    [
        (status(400), PARAMS, "bad_request"),  # a content filter
        (slow(30.0), replace(PARAMS, timeout_s=0.5), "timeout"),  # a hang
    ],
    ids=["content-filter-400", "hang"],
)
def test_a_request_the_provider_always_fails_is_isolated_and_later_evidence_commits_by_pass_4(
    store, bad, params, kind
):
    ids = _stage(store)
    with StubServer({"m": _poisoned(bad)}) as srv:
        model = _consolidator(srv, "m", max_attempts=1)
        results = _passes(store, model, params, 4)
    assert [r.outcome for r in results] == ["error", "error", "error", "committed"]
    assert all(r.error_code == "provider" for r in results[:3])
    assert [r.attempts[-1].outcome for r in results[:3]] == [kind] * 3
    assert [r.rollout_ids for r in results[:3]] == [tuple(ids[:4]), tuple(ids[:2]), (ids[0],)]
    assert results[2].parked == (ids[0],) and results[3].consumed == tuple(ids[1:5])
    (parked,) = store.parked_rollouts(S)
    assert (parked.id, parked.failed_passes, parked.parked_batch) == (ids[0], 3, 1)
    st = store.stats(S)
    assert (st["rollouts_pending"], st["rollouts_consumed"], st["rollouts_parked"]) == (0, 4, 1)


def test_a_blip_of_three_500s_under_cache_dir_is_not_cached_and_the_next_pass_commits(
    store, tmp_path
):
    """Before: the cache stored the 3 x 500 as the request's answer and replayed it for
    ever (12 frozen passes, 3 provider requests). Now the next pass asks again."""
    ids = _stage(store)
    served: list[int] = []

    def answer(body):  # three 500s, then the provider has recovered
        served.append(1)
        return server_error(500) if len(served) <= 3 else reply(_learned(body))

    cache = tmp_path / "cache"
    with StubServer({"m": answer}) as srv:
        model = _consolidator(srv, "m", cache_dir=cache, max_attempts=3)
        first = run_pass_sync(store, S, model, PARAMS)
        assert first.error_code == "provider" and first.parked == ()
        assert [a.outcome for a in first.attempts] == ["server"] * 3
        assert len(ResponseCache(cache)) == 0  # a failure is not a final answer
        second = run_pass_sync(store, S, model, PARAMS)
        assert len(srv.calls_for("m")) == 4
    assert second.outcome == "committed" and second.consumed == tuple(ids[:4])
    assert second.request_hash == first.request_hash and not second.attempts[0].cached
    assert len(ResponseCache(cache)) == 1  # the answer is cached
    pending = store.pending_rollouts(S)
    assert [(r.failed_passes, r.split_size) for r in pending] == [(0, None)]  # 5xx never counts


def _provider(kind, st=None):
    return ProviderError("x", kind=kind, status=st)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (_provider("bad_request", 400), "bad_request"),
        (_provider("bad_request", 422), "bad_request"),
        (_provider("error", 413), "bad_request"),  # an unclassified 4xx refusal
        (_provider("error", 499), "bad_request"),  # the bound of the 4xx range
        (_provider("error", 500), None),  # ... and one past it
        (_provider("error", 399), None),
        (_provider("timeout"), "timeout"),
        (_provider("auth", 401), None),  # a bad key says nothing about the evidence
        (_provider("permission", 403), None),
        (_provider("not_found", 404), None),
        (_provider("error", 408), None),
        (_provider("rate_limit", 429), None),
        (_provider("server", 503), None),
        (_provider("connection"), None),
        (_provider("replay_miss"), None),
    ],
)
def test_which_provider_failures_count(exc, code):
    assert counted_code(exc) == code


def test_which_proposal_failures_count():
    for c in PROPOSAL_CODES:
        assert counted_code(ProposalError(c, "x")) == (c if c in ANSWER_CODES else None)
    assert counted_code(RequestTooLarge("too big")) is None
    assert counted_code(ValueError("internal")) is None


class _HangsOnPoison:
    """Never answers a request holding the poison; one add per rollout otherwise."""

    name = "hangs"

    async def propose(self, request):
        if any("POISON" in m["content"] for r in request.rollouts for m in r.messages):
            await asyncio.Event().wait()
        changes = [
            {"ids": [], "entry": {"content": f"learned {r.id[:12]}"}} for r in request.rollouts
        ]
        attempt = CallAttempt(model="hangs", outcome="ok")
        return Reply(text=json.dumps({"changes": changes}), model="hangs", attempts=(attempt,))


def test_a_pass_deadline_turns_a_hang_into_a_counted_timeout(store):
    _stage(store)
    res = run_pass_sync(store, S, _HangsOnPoison(), PARAMS, deadline_s=0.2)
    assert res.error_code == "provider" and [a.outcome for a in res.attempts] == ["timeout"]
    assert "pass deadline of 0.2 s" in res.error
    assert store.pending_rollouts(S)[0].failed_passes == 1  # counted: the batch is split
    assert store.stats(S)["rollouts_isolating"] == 4
    # an answer inside the deadline is not touched by it
    r = build_rollout("t", [{"role": "user", "content": "fine"}], "ok")
    assert store.stage_rollout(r)
    ok = run_pass_sync(store, "t", _HangsOnPoison(), PARAMS, deadline_s=0.2)
    assert ok.outcome == "committed" and ok.consumed == (r.id,)


def test_under_the_worker_a_hang_is_parked_alone_and_later_evidence_commits(store):
    """The worker bounds a pass at `pass_timeout_s` and a pass it cancels counts
    nothing: `for_store` passes end their model call at DEADLINE_SHARE of it, so
    the hang counts and the poison is isolated (before: frozen on every pass)."""
    ids = _stage(store)
    records: list[PassRecord] = []
    params = WorkerParams(window_s=0.0, pass_timeout_s=0.5, retry_delay_s=0.0)

    async def main():
        w = ConsolidationWorker.for_store(
            store,
            _HangsOnPoison(),
            params,
            on_pass=records.append,
            on_error=lambda r: None,
            clock=asyncio.get_running_loop().time,
        )
        task = asyncio.create_task(w.run())
        for _ in range(6):  # a later run's submit each time, as finish_run does
            if not store.pending_rollouts(S):
                break
            w.submit(S)
            await w.wait_idle()
        await w.shutdown()
        await task

    # On a virtual clock (tests/virtual_time.py): the pass's own deadline (0.45 s)
    # and the worker's (0.5 s) fire in their order however loaded the machine is;
    # on a real clock a loaded machine let the worker's cancel win the race.
    run_virtual(main(), 60)
    assert DEADLINE_SHARE * params.pass_timeout_s < params.pass_timeout_s
    assert [r.id for r in store.parked_rollouts(S)] == [ids[0]]
    assert store.stats(S)["rollouts_consumed"] == 4
    failed = [r for r in records if r.outcome == "error"]
    assert len(failed) == 3 and all(r.error_code == "provider" for r in failed)
    assert all(r.result.attempts[-1].outcome == "timeout" for r in failed)
