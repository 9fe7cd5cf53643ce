"""Finishing a run (SPEC §7 staging, §8) on the real store and consolidation pipeline.

Stores are real stores of both backends (no embedder); the consolidator is scripted, so
nothing here touches a model, and every scenario runs in well under a second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from virtual_time import run_virtual

from memkit.consolidate import Reply
from memkit.errors import ConfigError, ProviderError, TranscriptError
from memkit.llm import CallAttempt
from memkit.worker import (
    ConsolidationWorker,
    PassRecord,
    SubmitRefused,
    WorkerParams,
    afinish_run,
    finish_run,
)

FAST = WorkerParams(window_s=0.01, pass_timeout_s=1.0, retry_delay_s=0.05)


def make_run(scope: str, n: int, **over) -> dict:
    run = {
        "run_id": f"{scope}-run-{n}",
        "scope_id": scope,
        "parent_run_id": None,
        "status": "succeeded",
        "stop_reason": "stop",
        "turns": 1,
        "started_at": "2026-01-01T00:00:00Z",
        "task": f"task {n}",
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": f"In {scope}, deploys use script number {n}."},
            {"role": "assistant", "content": f"Noted: script {n}."},
        ],
        "final_answer": f"Noted: script {n}.",
        "usage": {"input_tokens": 1000, "output_tokens": 50, "cost_usd": 0.25},
    }
    run.update(over)
    return run


class Scripted:
    """A consolidator that adds one memory per pass and charges fixed usage.

    `script` is a list of per-call actions: "ok", "invalid" (merges an unknown
    id), "timeout" (provider timeout), or "hang" (never answers).
    """

    name = "scripted"

    def __init__(self, script: list[str] | None = None):
        self.script = script or []
        self.requests: list = []

    async def propose(self, request) -> Reply:
        action = self.script[len(self.requests)] if len(self.requests) < len(self.script) else "ok"
        self.requests.append(request)
        if action == "hang":
            await asyncio.Event().wait()
        if action == "timeout":
            err = ProviderError("scripted: timeout after 1 attempt(s)", kind="timeout")
            err.attempts = (CallAttempt(model="scripted", outcome="timeout"),)
            raise err
        if action == "invalid":
            changes = [{"ids": ["no-such-id"], "entry": None}]
        else:
            n = len(request.rollouts)
            changes = [{"entry": {"content": f"{request.scope_id}: {n} rollouts seen"}}]
        attempt = CallAttempt(
            model="scripted", outcome="ok", input_tokens=300, output_tokens=40, cost_usd=0.01
        )
        return Reply(text=json.dumps({"changes": changes}), model="scripted", attempts=(attempt,))


@pytest.fixture
def stores(make_store):
    """Two stores of the test's backend (SQLite and Postgres: the conformance fixture)."""
    return {s: make_store(embedder=None) for s in ("a", "b")}


def pending(store, scope) -> int:
    return len(store.pending_rollouts(scope, limit=100))


def test_capacity_one_a_a_b_then_b_consolidates_synchronously(stores):
    consolidator = Scripted()
    refused: list[BaseException] = []

    async def main():
        w = ConsolidationWorker.for_store(
            stores, consolidator, dataclasses.replace(FAST, capacity=1)
        )
        r1 = finish_run(stores["a"], make_run("a", 1), worker=w)
        r2 = finish_run(stores["a"], make_run("a", 2), worker=w)
        r3 = finish_run(stores["b"], make_run("b", 1), worker=w, on_error=refused.append)
        assert [r.consolidation for r in (r1, r2, r3)] == ["submitted", "submitted", "refused"]
        assert all(len(r.rollout_id) == 64 for r in (r1, r2, r3))
        assert [type(e) for e in refused] == [SubmitRefused]
        assert "'b'" in str(refused[0]) and r3.rollout_id in str(refused[0])
        assert pending(stores["a"], "a") == 2 and pending(stores["b"], "b") == 1
        task = asyncio.create_task(w.run())
        await w.wait_idle()
        assert len(consolidator.requests) == 1  # a committed once, both runs in one pass
        assert len(consolidator.requests[0].rollouts) == 2
        assert pending(stores["a"], "a") == 0 and pending(stores["b"], "b") == 1
        assert [m.content for m in stores["a"].live("a")] == ["a: 2 rollouts seen"]
        await w.shutdown()
        await task
        assert w.submit("b") is False
        late = finish_run(stores["b"], make_run("b", 2), worker=w)
        assert late.consolidation == "refused"  # a closed worker refuses too
        assert pending(stores["b"], "b") == 2

    asyncio.run(asyncio.wait_for(main(), 5))
    # later, with no worker: one synchronous pass in the finishing run
    res = finish_run(stores["b"], make_run("b", 3), consolidator=consolidator)
    assert res.consolidation == "sync" and res.pass_result.outcome == "committed"
    assert len(res.pass_result.consumed) == 3
    assert pending(stores["b"], "b") == 0
    assert [m.content for m in stores["b"].live("b")] == ["b: 3 rollouts seen"]


def test_background_usage_never_changes_the_finished_runs_usage(stores):
    run = make_run("a", 1)
    before = json.loads(json.dumps(run["usage"]))
    res = finish_run(stores["a"], run, consolidator=Scripted())
    assert res.usage == before and run["usage"] == before
    assert res.usage is not run["usage"]
    assert res.background_usage == {"input_tokens": 300, "output_tokens": 40, "cost_usd": 0.01}

    async def main():
        w = ConsolidationWorker.for_store(stores["b"], Scripted(), FAST)
        task = asyncio.create_task(w.run())
        run_b = make_run("b", 1)
        r = finish_run(stores["b"], run_b, worker=w)
        await w.wait_idle()
        assert (
            r.usage
            == run_b["usage"]
            == {
                "input_tokens": 1000,
                "output_tokens": 50,
                "cost_usd": 0.25,
            }
        )
        assert r.background_usage == {}
        assert w.usage_by_scope["b"] == {"input_tokens": 300, "output_tokens": 40, "cost_usd": 0.01}
        assert w.background_usage == w.usage_by_scope["b"]
        await w.shutdown()
        await task

    asyncio.run(asyncio.wait_for(main(), 5))


def test_a_staging_error_is_reported_and_the_run_still_finishes(stores):
    errors: list[BaseException] = []
    bad = make_run("a", 1, messages="not a list")
    res = finish_run(stores["a"], bad, consolidator=Scripted(), on_error=errors.append)
    assert res.consolidation == "skipped" and res.rollout_id is None
    assert [type(e) for e in errors] == [TranscriptError] and res.errors == tuple(errors)
    assert res.usage == bad["usage"]
    assert pending(stores["a"], "a") == 0


def test_an_ineligible_run_stages_nothing_and_submits_nothing(stores):
    async def main():
        w = ConsolidationWorker.for_store(stores["a"], Scripted(), FAST)
        for over in ({"status": "failed"}, {"parent_run_id": "root"}, {"stop_reason": "length"}):
            res = finish_run(stores["a"], make_run("a", 1, **over), worker=w)
            assert (res.consolidation, res.rollout_id, res.errors) == ("skipped", None, ())
        assert w.admitted == 0
        await w.shutdown()

    asyncio.run(main())
    assert pending(stores["a"], "a") == 0


def test_a_failed_synchronous_pass_is_reported_and_consumes_nothing(stores):
    errors: list[BaseException] = []
    res = finish_run(
        stores["a"], make_run("a", 1), consolidator=Scripted(["invalid"]), on_error=errors.append
    )
    assert res.consolidation == "sync"
    assert (res.pass_result.outcome, res.pass_result.error_code) == ("error", "unknown_id")
    assert len(errors) == 1 and getattr(errors[0], "code", None) == "unknown_id"
    assert pending(stores["a"], "a") == 1  # evidence waits for a later pass


def test_sync_finish_inside_a_running_loop_points_to_afinish_run(stores):
    async def main():
        with pytest.raises(ConfigError, match="afinish_run"):
            finish_run(stores["a"], make_run("a", 1), consolidator=Scripted())
        assert pending(stores["a"], "a") == 0  # refused before staging anything
        res = await afinish_run(stores["a"], make_run("a", 1), consolidator=Scripted())
        assert res.consolidation == "sync" and pending(stores["a"], "a") == 0

    asyncio.run(main())


def test_real_pass_timeout_is_retried_once_then_consumed(stores):
    async def main():
        records: list[PassRecord] = []
        consolidator = Scripted(["timeout", "ok"])
        w = ConsolidationWorker.for_store(
            stores["a"], consolidator, FAST, on_pass=records.append, on_error=lambda r: None
        )
        task = asyncio.create_task(w.run())
        finish_run(stores["a"], make_run("a", 1), worker=w)
        await w.wait_idle()
        assert [(r.outcome, r.error_code, r.next) for r in records] == [
            ("error", "provider", "retry"),
            ("committed", None, "leave"),
        ]
        assert len(consolidator.requests) == 2 and pending(stores["a"], "a") == 0
        await w.shutdown()
        await task

    asyncio.run(asyncio.wait_for(main(), 5))


def test_shutdown_mid_pass_leaves_real_evidence_pending(stores):
    async def main():
        consolidator = Scripted(["hang"])
        w = ConsolidationWorker.for_store(stores["a"], consolidator, FAST)
        task = asyncio.create_task(w.run())
        finish_run(stores["a"], make_run("a", 1), worker=w)
        while not consolidator.requests:
            await asyncio.sleep(0.005)
        await w.shutdown()
        await task
        assert pending(stores["a"], "a") == 1 and stores["a"].live("a") == []

    asyncio.run(asyncio.wait_for(main(), 5))


def test_a_hang_on_a_real_pass_ends_at_its_deadline_is_retried_and_consumed(stores):
    """`for_store` passes end a hanging model call at DEADLINE_SHARE of the worker's
    bound, as a provider timeout (it counts toward parking, docs/behaviour.md "Parking"); the
    worker retries a timed-out pass once."""

    async def main():
        records: list[PassRecord] = []
        consolidator = Scripted(["hang", "ok"])
        params = dataclasses.replace(FAST, pass_timeout_s=1.0, retry_delay_s=0.02)
        w = ConsolidationWorker.for_store(
            stores["a"],
            consolidator,
            params,
            on_pass=records.append,
            on_error=lambda r: None,
            clock=asyncio.get_running_loop().time,
        )
        task = asyncio.create_task(w.run())
        finish_run(stores["a"], make_run("a", 1), worker=w)
        await w.wait_idle()
        assert [(r.error_code, r.next) for r in records] == [("provider", "retry"), (None, "leave")]
        assert records[0].result.attempts[-1].outcome == "timeout"
        assert len(consolidator.requests) == 2 and pending(stores["a"], "a") == 0
        await w.shutdown()
        await task

    # virtual time: the pass's deadline (0.9 s) fires before the worker's bound (1 s)
    # however loaded the machine is (tests/virtual_time.py)
    run_virtual(main(), 5)


# --- through LiteLLM itself (mock_response / mock_timeout; no network) -----------


def litellm_consolidator(**extra):
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from memkit.consolidate import LiteLLMConsolidator

    return LiteLLMConsolidator("openai/gpt-4o-mini", extra=extra, max_attempts=1)


def test_litellm_usage_is_background_usage_and_the_run_keeps_its_own(stores):
    text = json.dumps({"changes": [{"entry": {"content": "deploys use script number 1"}}]})
    mock = {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 123, "completion_tokens": 7, "total_tokens": 130},
    }
    run = make_run("a", 1)
    res = finish_run(stores["a"], run, consolidator=litellm_consolidator(mock_response=mock))
    assert res.consolidation == "sync" and res.pass_result.outcome == "committed"
    assert res.background_usage["input_tokens"] == 123
    assert res.background_usage["output_tokens"] == 7
    assert res.background_usage["cost_usd"] > 0  # LiteLLM's bundled price map
    assert res.usage == run["usage"] == make_run("a", 1)["usage"]


def test_litellm_timeouts_two_provider_calls_then_evidence_stays_pending(stores):
    from memkit.params import ConsolidationParams

    async def main():
        consolidator = litellm_consolidator(mock_timeout=True)
        records: list[PassRecord] = []
        w = ConsolidationWorker.for_store(
            stores["a"],
            consolidator,
            dataclasses.replace(FAST, retry_delay_s=0.02),
            consolidation=ConsolidationParams(timeout_s=0.02),
            on_pass=records.append,
            on_error=lambda r: None,
        )
        task = asyncio.create_task(w.run())
        finish_run(stores["a"], make_run("a", 1), worker=w)
        await w.wait_idle()
        assert [(r.attempt, r.error_code, r.next) for r in records] == [
            (1, "provider", "retry"),
            (2, "provider", "leave"),
        ]
        assert consolidator.provider_calls == 2  # exactly two model calls
        assert pending(stores["a"], "a") == 1 and stores["a"].live("a") == []
        await w.shutdown()
        await task

    asyncio.run(asyncio.wait_for(main(), 10))


def test_for_store_rejects_something_that_is_not_a_store():
    with pytest.raises(ConfigError, match="42"):
        ConsolidationWorker.for_store(42, Scripted())
