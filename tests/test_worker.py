"""The deferred consolidation worker (SPEC §8), scenario by scenario.

Passes are fakes backed by an in-test evidence store that counts reads, and
slow passes are held on `asyncio.Event`s. Every scenario runs on a virtual
clock (`tests/virtual_time.py`): windows, timeouts and retry delays pass in
virtual time, so "nothing happened within 50 ms" is a deterministic check
that takes no wall time, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from virtual_time import run_virtual

from memkit.errors import ConfigError, ProposalError, ProviderError
from memkit.worker import (
    ConsolidationWorker,
    PassOutcome,
    PassRecord,
    WorkerParams,
    error_code_of,
    summarize,
)

FAST = WorkerParams(window_s=0.01, pass_timeout_s=1.0, retry_delay_s=0.05)


def run(coro, timeout: float = 3.0):
    """Run one scenario on a virtual clock; a hang fails the test instead of the suite."""
    return run_virtual(coro, timeout)


def make_worker(pass_fn, *args, **kwargs) -> ConsolidationWorker:
    """A worker whose clock is the running loop's (virtual) one, unless the test sets one."""
    kwargs.setdefault("clock", asyncio.get_running_loop().time)
    return ConsolidationWorker(pass_fn, *args, **kwargs)


@dataclass(frozen=True)
class Result:
    outcome: str
    error_code: str | None = None
    consumed: int = 0
    usage: dict = field(default_factory=dict)


class Evidence:
    """Pending rollouts per scope; counts every storage read."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = defaultdict(list)
        self.consumed: dict[str, list[str]] = defaultdict(list)
        self.reads = 0
        self._n = 0

    def stage(self, scope: str, n: int = 1) -> None:
        for _ in range(n):
            self._n += 1
            self.pending[scope].append(f"r{self._n}")

    def read(self, scope: str, limit: int = 4) -> list[str]:
        self.reads += 1
        return list(self.pending[scope][:limit])

    def consume(self, scope: str, ids: list[str]) -> None:
        self.pending[scope] = [r for r in self.pending[scope] if r not in ids]
        self.consumed[scope].extend(ids)


class Passes:
    """A fake `pass_fn`: read <= 4 pending, then commit them unless scripted otherwise.

    `script[scope]` is a list of per-call actions: "ok", "hang" (never returns),
    "invalid" (rejected proposal), "boom" (raises), or an asyncio.Event to wait on
    before committing. Calls beyond the script are "ok".
    """

    def __init__(self, evidence: Evidence, script: dict[str, list[Any]] | None = None):
        self.ev = evidence
        self.script = script or {}
        self.calls: dict[str, int] = defaultdict(int)
        self.starts: list[str] = []
        self.inflight: dict[str, int] = defaultdict(int)
        self.peak_total = 0
        self.peak_per_scope = 0
        self.cancelled: list[str] = []
        self.started = asyncio.Event()

    def total_inflight(self) -> int:
        return sum(self.inflight.values())

    async def __call__(self, scope: str) -> Result:
        n = self.calls[scope]
        self.calls[scope] += 1
        actions = self.script.get(scope, [])
        action = actions[n] if n < len(actions) else "ok"
        self.starts.append(scope)
        self.inflight[scope] += 1
        self.peak_total = max(self.peak_total, self.total_inflight())
        self.peak_per_scope = max(self.peak_per_scope, self.inflight[scope])
        self.started.set()
        try:
            if isinstance(action, asyncio.Event):
                await action.wait()
            elif action == "hang":
                await asyncio.Event().wait()
            batch = self.ev.read(scope)
            if action == "invalid":
                return Result("error", "unknown_id", usage={"input_tokens": 5})
            if action == "boom":
                raise RuntimeError("disk on fire")
            if not batch:
                return Result("nothing_pending")
            self.ev.consume(scope, batch)
            return Result("committed", consumed=len(batch), usage={"input_tokens": 10, "cost": 0.5})
        except asyncio.CancelledError:
            self.cancelled.append(scope)
            raise
        finally:
            self.inflight[scope] -= 1


class Recorder:
    """on_pass callback that lets a test await the n-th finished pass."""

    def __init__(self) -> None:
        self.records: list[PassRecord] = []
        self._cond: asyncio.Condition | None = None

    def __call__(self, record: PassRecord) -> None:
        self.records.append(record)
        if self._cond is not None:
            asyncio.get_running_loop().create_task(self._poke())

    async def _poke(self) -> None:
        assert self._cond is not None
        async with self._cond:
            self._cond.notify_all()

    async def until(self, n: int) -> None:
        self._cond = self._cond or asyncio.Condition()
        async with self._cond:
            await self._cond.wait_for(lambda: len(self.records) >= n)

    def order(self) -> list[tuple[str, int]]:
        return [(r.scope_id, r.consumed) for r in self.records]


async def settle(n: int = 5) -> None:
    """Let ready tasks run a few steps (no wall-clock waiting)."""
    for _ in range(n):
        await asyncio.sleep(0)


# --- parameters -----------------------------------------------------------------


def test_params_reference_defaults():
    p = WorkerParams()
    assert (p.capacity, p.max_concurrent, p.window_s) == (64, 4, 0.2)
    assert (p.pass_timeout_s, p.retry_delay_s, p.full_batch) == (60.0, 5.0, 4)
    assert p.concurrency == 4
    assert WorkerParams(capacity=2).concurrency == 2
    assert WorkerParams(capacity=4).concurrency == 4
    assert WorkerParams(capacity=5).concurrency == 4


@pytest.mark.parametrize(
    "field_, bad, ok",
    [
        ("capacity", 0, 1),
        ("max_concurrent", 0, 1),
        ("full_batch", 0, 1),
        ("window_s", -0.001, 0.0),
        ("retry_delay_s", -1, 0),
        ("pass_timeout_s", 0, 0.001),
        ("capacity", True, 2),
    ],
)
def test_params_bounds_name_the_bad_value(field_, bad, ok):
    with pytest.raises(ConfigError, match=rf"{field_}.*{bad!r}"):
        WorkerParams(**{field_: bad})
    assert getattr(WorkerParams(**{field_: ok}), field_) == ok


def test_submit_rejects_a_bad_scope_id():
    w = ConsolidationWorker(Passes(Evidence()))
    with pytest.raises(ConfigError, match="''"):
        w.submit("")
    with pytest.raises(ConfigError, match="None"):
        w.submit(None)  # type: ignore[arg-type]


# --- admission ----------------------------------------------------------------


def test_capacity_one_scopes_a_a_b():
    async def main():
        ev = Evidence()
        passes = Passes(ev)
        rec = Recorder()
        w = make_worker(passes, dataclasses.replace(FAST, capacity=1), on_pass=rec)
        # three runs finish: a, a, b; each stages its evidence, then submits
        ev.stage("a")
        assert w.submit("a") is True
        ev.stage("a")
        assert w.submit("a") is True  # already admitted: coalesced
        ev.stage("b")
        assert w.submit("b") is False  # full: refused and counted
        assert w.refused == 1
        assert len(ev.pending["a"]) == 2 and len(ev.pending["b"]) == 1
        task = asyncio.create_task(w.run())
        await w.wait_idle()
        assert passes.calls == {"a": 1}
        assert ev.consumed["a"] == ["r1", "r2"] and ev.pending["b"] == ["r3"]
        await w.shutdown()
        await task
        assert w.submit("b") is False
        assert w.submit("c") is False
        assert ev.pending["b"] == ["r3"]
        # without a worker, the next run of b consolidates synchronously, one pass
        await passes("b")
        assert ev.pending["b"] == [] and ev.consumed["b"] == ["r3"]

    run(main())


def test_capacity_bound_counts_running_and_waiting_scopes():
    async def main():
        gate = asyncio.Event()
        passes = Passes(Evidence(), {"s0": [gate]})
        w = make_worker(
            passes, dataclasses.replace(FAST, capacity=3, max_concurrent=1, window_s=0.0)
        )
        task = asyncio.create_task(w.run())
        assert w.submit("s0")
        await passes.started.wait()  # s0 running, holds the only slot
        assert w.running == ("s0",)
        assert w.submit("s1") and w.submit("s2")  # at the bound: 3 admitted
        assert w.admitted == 3
        assert w.submit("s3") is False  # one past the bound
        assert w.submit("s1") is True  # an admitted scope is never refused
        gate.set()
        await w.wait_idle()
        assert w.submit("s3") is True  # room again once scopes leave
        await w.shutdown()
        await task

    run(main())


def test_notifications_inside_the_window_never_postpone_a_due_scope():
    async def main():
        now = [100.0]
        passes = Passes(Evidence())
        rec = Recorder()
        w = make_worker(
            passes,
            dataclasses.replace(FAST, window_s=0.2, max_concurrent=1),
            clock=lambda: now[0],
            on_pass=rec,
        )
        assert w.submit("a")
        assert w.due("a") == pytest.approx(100.2)
        now[0] = 100.1
        assert w.submit("b")
        for _ in range(3):  # a keeps being notified inside its window
            assert w.submit("a")
        assert w.due("a") == pytest.approx(100.2)  # unchanged
        assert w.due("b") == pytest.approx(100.3)
        now[0] = 101.0
        task = asyncio.create_task(w.run())
        await w.wait_idle()
        # a was due first although notified last; one pass covers its notifications
        assert passes.starts == ["a", "b"]
        await w.shutdown()
        await task

    run(main())


def test_window_bound_scope_starts_at_due_not_before():
    async def main():
        now = [0.0]
        passes = Passes(Evidence())
        w = make_worker(passes, dataclasses.replace(FAST, window_s=0.02), clock=lambda: now[0])
        task = asyncio.create_task(w.run())
        assert w.submit("a")
        now[0] = 0.0199  # just inside the window
        await asyncio.sleep(0.05)  # the scheduler re-checks at least once
        assert passes.starts == []
        now[0] = 0.02  # exactly due
        await asyncio.wait_for(passes.started.wait(), 0.5)
        assert passes.starts == ["a"]
        await w.shutdown()
        await task

    run(main())


def test_a_steady_stream_of_notifications_cannot_starve_a_scope():
    async def main():
        ev = Evidence()
        passes = Passes(ev)
        w = make_worker(passes, dataclasses.replace(FAST, window_s=0.03))
        task = asyncio.create_task(w.run())
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert w.submit("a")
        while not passes.started.is_set():
            assert loop.time() - t0 < 1.0, "scope postponed by notifications"
            ev.stage("a")
            w.submit("a")
            await asyncio.sleep(0.005)
        await w.shutdown()
        await task

    run(main())


# --- passes -----------------------------------------------------------------


def test_nine_pending_rollouts_drain_in_three_passes_then_no_reads_while_idle():
    async def main():
        ev = Evidence()
        ev.stage("s", 9)
        passes = Passes(ev)
        rec = Recorder()
        w = make_worker(passes, FAST, on_pass=rec)
        task = asyncio.create_task(w.run())
        assert w.submit("s")
        await w.wait_idle()
        assert [r.consumed for r in rec.records] == [4, 4, 1]
        assert [r.next for r in rec.records] == ["continue", "continue", "leave"]
        assert ev.pending["s"] == [] and len(ev.consumed["s"]) == 9
        await settle()  # the scheduler handles the last pass's notification
        reads, wakeups = ev.reads, w.wakeups
        assert reads == 3
        await asyncio.sleep(0.15)  # many windows' worth of idleness
        assert ev.reads == reads  # no storage reads while idle
        assert w.wakeups == wakeups  # blocked on notification: no timer ticks
        assert not task.done()
        await w.shutdown()
        await task

    run(main())


def test_full_batch_bound_three_consumed_leaves_four_continues():
    async def main():
        ev = Evidence()
        ev.stage("three", 3)
        ev.stage("four", 4)
        rec = Recorder()
        w = make_worker(Passes(ev), FAST, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("three")
        w.submit("four")
        await w.wait_idle()
        got = {(r.scope_id, r.consumed, r.outcome, r.next) for r in rec.records}
        assert got == {
            ("three", 3, "committed", "leave"),
            ("four", 4, "committed", "continue"),
            ("four", 0, "nothing_pending", "leave"),
        }
        await w.shutdown()
        await task

    run(main())


def test_slow_scope_never_blocks_a_fast_one():
    async def main():
        ev = Evidence()
        ev.stage("slow")
        ev.stage("fast")
        gate = asyncio.Event()
        rec = Recorder()
        w = make_worker(Passes(ev, {"slow": [gate]}), FAST, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("slow")
        await asyncio.sleep(0.02)
        w.submit("fast")
        await rec.until(1)
        assert rec.order() == [("fast", 1)]
        assert ev.pending["slow"] == ["r1"]  # still held
        gate.set()
        await w.wait_idle()
        assert rec.order() == [("fast", 1), ("slow", 1)]
        await w.shutdown()
        await task

    run(main())


def test_one_pass_per_scope_in_flight_and_one_follow_up_for_evidence_during_it():
    async def main():
        ev = Evidence()
        ev.stage("s")
        gate = asyncio.Event()
        passes = Passes(ev, {"s": [gate]})
        rec = Recorder()
        w = make_worker(passes, FAST, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("s")
        await passes.started.wait()
        for _ in range(5):  # five runs finish during the slow pass
            ev.stage("s")
            assert w.submit("s") is True
            await asyncio.sleep(0.015)  # longer than the window
        assert passes.calls["s"] == 1  # never a second pass in flight
        gate.set()
        await w.wait_idle()
        assert passes.peak_per_scope == 1
        assert [r.next for r in rec.records] == ["continue", "leave"]
        assert passes.calls["s"] == 2  # exactly one follow-up
        assert ev.pending["s"] == [] and len(ev.consumed["s"]) == 6
        await w.shutdown()
        await task

    run(main())


def test_fifty_scopes_capacity_64_run_four_at_once_and_cancel_joins_them():
    async def main():
        ev = Evidence()
        hold = asyncio.Event()  # never set
        script = {f"s{i}": [hold] for i in range(50)}
        for s in script:
            ev.stage(s)
        passes = Passes(ev, script)
        w = make_worker(passes, dataclasses.replace(FAST, window_s=0.0))
        assert all(w.submit(s) for s in script)
        assert w.admitted == 50
        task = asyncio.create_task(w.run())
        await passes.started.wait()
        await asyncio.sleep(0.05)  # ample time for a fifth to (wrongly) start
        assert passes.total_inflight() == 4 and passes.peak_total == 4
        assert passes.starts == ["s0", "s1", "s2", "s3"]  # due ties broken by order
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sorted(passes.cancelled) == ["s0", "s1", "s2", "s3"]  # joined
        assert passes.total_inflight() == 0
        assert ev.reads == 0 and not any(ev.consumed.values())
        assert sum(len(v) for v in ev.pending.values()) == 50
        assert w.closed and w.submit("s0") is False and w.submit("new") is False
        assert w.admitted == 0

    run(main())


def test_concurrency_is_min_of_four_and_capacity():
    async def main():
        hold = asyncio.Event()
        passes = Passes(Evidence(), {s: [hold] for s in "abc"})
        w = make_worker(passes, dataclasses.replace(FAST, capacity=2, window_s=0.0))
        assert w.submit("a") and w.submit("b") and not w.submit("c")
        task = asyncio.create_task(w.run())
        await asyncio.sleep(0.03)
        assert passes.peak_total == 2
        await w.shutdown()
        await task
        assert sorted(passes.cancelled) == ["a", "b"]

    run(main())


def test_shutdown_keeps_queued_evidence_pending_and_run_returns():
    async def main():
        ev = Evidence()
        ev.stage("q", 2)
        w = make_worker(Passes(ev), dataclasses.replace(FAST, window_s=10.0))
        task = asyncio.create_task(w.run())
        assert w.submit("q")
        await settle()
        await w.shutdown()
        await asyncio.wait_for(task, 0.5)  # returns normally, no pass ran
        assert ev.reads == 0 and ev.pending["q"] == ["r1", "r2"]
        assert w.submit("q") is False
        with pytest.raises(ConfigError, match="once"):
            await w.run()

    run(main())


# --- timeouts, errors, retries -----------------------------------------------------


TIMEOUTS = WorkerParams(
    max_concurrent=1, window_s=0.0, pass_timeout_s=0.05, retry_delay_s=0.08, capacity=8
)


def test_timeout_is_retried_once_without_holding_its_slot_then_consumed():
    async def main():
        ev = Evidence()
        ev.stage("t")
        ev.stage("h")
        passes = Passes(ev, {"t": ["hang", "ok"]})
        rec = Recorder()
        errors: list[PassRecord] = []

        def on_pass(record: PassRecord) -> None:
            rec(record)
            if record.next == "retry":
                assert w.submit("h")  # a healthy scope arrives as t starts its delay

        w = make_worker(passes, TIMEOUTS, on_pass=on_pass, on_error=errors.append)
        task = asyncio.create_task(w.run())
        w.submit("t")
        await w.wait_idle()
        assert rec.records[0].error_code == "timeout" and rec.records[0].next == "retry"
        assert "'t' exceeded pass_timeout_s=0.05" in rec.records[0].detail
        assert errors == rec.records[:1]
        # one slot, yet h ran during t's retry delay: the delay held no slot
        assert passes.starts == ["t", "h", "t"]
        assert passes.calls["t"] == 2  # exactly two model calls
        assert ev.consumed["t"] == ["r1"] and ev.pending["t"] == []
        assert rec.records[-1].attempt == 2 and rec.records[-1].next == "leave"
        await w.shutdown()
        await task

    run(main())


def test_second_timeout_is_not_retried_and_evidence_stays_pending():
    async def main():
        ev = Evidence()
        ev.stage("t")
        passes = Passes(ev, {"t": ["hang", "hang", "ok"]})
        rec = Recorder()
        w = make_worker(passes, TIMEOUTS, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("t")
        await w.wait_idle()
        assert [(r.attempt, r.error_code, r.next) for r in rec.records] == [
            (1, "timeout", "retry"),
            (2, "timeout", "leave"),
        ]
        await asyncio.sleep(0.1)  # longer than the retry delay: no third call
        assert passes.calls["t"] == 2
        assert ev.pending["t"] == ["r1"] and ev.consumed["t"] == []
        # the next successful run of the scope re-admits it
        assert w.submit("t")
        await w.wait_idle()
        assert ev.pending["t"] == []
        await w.shutdown()
        await task

    run(main())


def test_pass_timeout_bound_a_pass_just_inside_is_not_timed_out():
    async def main():
        ev = Evidence()
        ev.stage("s")

        async def pass_fn(scope):
            await asyncio.sleep(0.02)
            return await Passes(ev)(scope)

        rec = Recorder()
        w = make_worker(pass_fn, dataclasses.replace(TIMEOUTS, pass_timeout_s=0.1), on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("s")
        await w.wait_idle()
        assert [(r.outcome, r.attempt) for r in rec.records] == [("committed", 1)]
        await w.shutdown()
        await task

    run(main())


def test_provider_timeout_reported_by_the_pass_counts_as_a_timeout():
    async def main():
        ev = Evidence()
        ev.stage("p")
        calls = []

        async def pass_fn(scope):
            calls.append(scope)
            if len(calls) == 1:
                return Result("error", "timeout")
            raise ProviderError("read timed out", kind="timeout")

        rec = Recorder()
        w = make_worker(pass_fn, TIMEOUTS, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("p")
        await w.wait_idle()
        assert [(r.error_code, r.next) for r in rec.records] == [
            ("timeout", "retry"),
            ("timeout", "leave"),
        ]
        assert isinstance(rec.records[1].error, ProviderError)
        await w.shutdown()
        await task

    run(main())


@pytest.mark.parametrize("frozen_clock", [False, True], ids=["loop-clock", "frozen-clock"])
def test_invalid_proposal_not_retried_and_a_backlog_yields_after_a_full_batch(frozen_clock):
    """With a frozen clock every due time ties, so only fresh order numbers decide."""

    async def main():
        ev = Evidence()
        ev.stage("big", 6)
        ev.stage("small", 1)
        ev.stage("invalid", 1)
        passes = Passes(ev, {"invalid": ["invalid"]})
        rec = Recorder()
        errors: list[PassRecord] = []
        w = make_worker(
            passes,
            dataclasses.replace(FAST, max_concurrent=1, window_s=0.0),
            on_pass=rec,
            on_error=errors.append,
            **({"clock": lambda: 7.0} if frozen_clock else {}),
        )
        for s in ("big", "small", "invalid"):
            assert w.submit(s)
        task = asyncio.create_task(w.run())
        await w.wait_idle()
        assert passes.starts == ["big", "small", "invalid", "big"]
        assert rec.order() == [("big", 4), ("small", 1), ("invalid", 0), ("big", 2)]
        assert [(e.scope_id, e.error_code, e.next) for e in errors] == [
            ("invalid", "unknown_id", "leave")
        ]
        assert passes.calls["invalid"] == 1  # rejected once, never retried
        assert ev.pending["invalid"] == ["r8"]
        await w.shutdown()
        await task

    run(main())


def test_a_raising_pass_or_callback_never_kills_the_worker():
    async def main():
        ev = Evidence()
        ev.stage("x")
        ev.stage("y")
        passes = Passes(ev, {"x": ["boom"]})

        seen: list[PassRecord] = []

        def bad_callback(record):
            seen.append(record)
            raise ValueError("host bug")

        w = make_worker(passes, FAST, on_error=bad_callback, on_pass=bad_callback)
        task = asyncio.create_task(w.run())
        w.submit("x")
        w.submit("y")
        await w.wait_idle()
        assert passes.calls == {"x": 1, "y": 1}
        assert ev.pending["x"] == ["r1"] and ev.pending["y"] == []
        failed = [r for r in seen if r.scope_id == "x"]
        assert len(failed) == 2  # on_error, then on_pass
        assert failed[0].error_code == "internal" and failed[0].next == "leave"
        assert failed[0].detail == "RuntimeError: disk on fire"
        assert not task.done()
        await w.shutdown()
        await task

    run(main())


# --- usage ------------------------------------------------------------------------


def test_background_usage_is_accumulated_per_scope_and_in_total():
    async def main():
        ev = Evidence()
        ev.stage("a", 5)
        ev.stage("b", 1)
        ev.stage("bad", 1)
        w = make_worker(Passes(ev, {"bad": ["invalid"]}), FAST)
        task = asyncio.create_task(w.run())
        for s in ("a", "b", "bad"):
            w.submit(s)
        await w.wait_idle()
        assert w.usage_by_scope["a"] == {"input_tokens": 20, "cost": 1.0}
        assert w.usage_by_scope["b"] == {"input_tokens": 10, "cost": 0.5}
        assert w.usage_by_scope["bad"] == {"input_tokens": 5}  # failed attempts still cost
        assert w.background_usage == {"input_tokens": 35, "cost": 1.5}
        await w.shutdown()
        await task

    run(main())


# --- pure helpers -----------------------------------------------------------------


def test_summarize_accepts_counts_sequences_commits_and_attempts():
    assert summarize(Result("committed", consumed=3)).consumed == 3

    @dataclass
    class Commit:
        consumed: tuple = ("a", "b")

    @dataclass
    class Attempt:
        input_tokens: int
        output_tokens: int
        cost_usd: float
        outcome: str = "ok"

    @dataclass
    class Full:
        outcome: str = "committed"
        error_code: str | None = None
        commit: Commit = field(default_factory=Commit)
        attempts: tuple = (Attempt(10, 2, 0.1), Attempt(5, 1, 0.2))

    s = summarize(Full())
    assert s == PassOutcome(
        "committed",
        None,
        2,
        {"input_tokens": 15, "output_tokens": 3, "cost_usd": pytest.approx(0.3)},
    )
    assert s.ok and not s.timed_out
    assert summarize(Result("error", "timeout")).timed_out
    # a provider failure whose last attempt timed out is a timeout; others are not
    timed = Full(outcome="error", error_code="provider", attempts=(Attempt(0, 0, 0, "timeout"),))
    assert summarize(timed).timed_out and summarize(timed).error_code == "provider"
    limited = Full(
        outcome="error", error_code="provider", attempts=(Attempt(0, 0, 0, "rate_limit"),)
    )
    assert not summarize(limited).timed_out
    with pytest.raises(ConfigError, match="'weird'"):
        summarize(Result("weird"))


def test_error_codes_of_escaping_exceptions():
    assert error_code_of(TimeoutError()) == "timeout"
    assert error_code_of(ProposalError("bounds", "17 changes")) == "bounds"
    assert error_code_of(ProviderError("429", kind="rate_limit")) == "rate_limit"
    assert error_code_of(KeyError("x")) == "internal"


def test_a_run_finishing_during_a_failed_pass_readmits_the_scope_once():
    async def main():
        ev = Evidence()
        ev.stage("s")
        gate = asyncio.Event()
        first_started = asyncio.Event()
        passes = Passes(ev)
        failed = []

        async def pass_fn(scope):
            if not failed:  # the first pass is slow, then its proposal is rejected
                failed.append(scope)
                first_started.set()
                await gate.wait()
                return Result("error", "unknown_id")
            return await passes(scope)

        rec = Recorder()
        w = make_worker(pass_fn, FAST, on_pass=rec)
        task = asyncio.create_task(w.run())
        w.submit("s")
        await first_started.wait()
        ev.stage("s")  # a later successful run stages and notifies during the pass
        assert w.submit("s")
        gate.set()
        await w.wait_idle()
        assert [(r.outcome, r.next) for r in rec.records] == [
            ("error", "continue"),
            ("committed", "leave"),
        ]
        assert ev.pending["s"] == [] and len(ev.consumed["s"]) == 2
        await w.shutdown()
        await task

    run(main())


def test_keyword_overrides_of_params_and_unknown_names():
    w = ConsolidationWorker(Passes(Evidence()), FAST, capacity=1, window_s=0.5)
    assert (w.params.capacity, w.params.window_s, w.params.retry_delay_s) == (1, 0.5, 0.05)
    with pytest.raises(ConfigError, match="windw_s"):
        ConsolidationWorker(Passes(Evidence()), windw_s=0.5)
    with pytest.raises(ConfigError, match=r"capacity.*0"):
        ConsolidationWorker(Passes(Evidence()), capacity=0)
    with pytest.raises(ConfigError, match="pass_fn"):
        ConsolidationWorker(None)  # type: ignore[arg-type]


def test_no_discovery_of_stored_scopes_on_start():
    async def main():
        ev = Evidence()
        ev.stage("old", 3)  # evidence left by an earlier process
        w = make_worker(Passes(ev), FAST)
        task = asyncio.create_task(w.run())
        await asyncio.sleep(0.05)
        assert ev.reads == 0 and ev.pending["old"] == ["r1", "r2", "r3"]
        assert w.submit("old")  # the scope's next successful run re-admits it
        await w.wait_idle()
        assert ev.pending["old"] == []
        await w.shutdown()
        await task

    run(main())


# --- a model-based check over random interleavings ---------------------------------

SCOPES = ("p", "q", "r", "s", "t")
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(SCOPES)),
        st.tuples(st.just("release"), st.integers(0, 3)),
        st.tuples(st.just("tick"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(capacity=st.integers(1, 5), max_concurrent=st.integers(1, 4), ops=OPS)
def test_random_interleavings_keep_every_bound_and_lose_no_accepted_evidence(
    capacity, max_concurrent, ops
):
    """Passes read first, block on a gate, then commit what they read (like run_pass).

    Invariants after every step: in flight <= min(max_concurrent, capacity), never
    two passes of one scope, admitted <= capacity, and submit is refused exactly
    when the worker is full. After draining, every rollout staged before an
    accepted submit has been consumed.
    """

    async def main():
        ev = Evidence()
        gates: list[asyncio.Event] = []
        inflight: dict[str, int] = defaultdict(int)

        async def pass_fn(scope):
            inflight[scope] += 1
            try:
                batch = ev.read(scope)
                gate = asyncio.Event()
                gates.append(gate)
                await gate.wait()
                ev.consume(scope, batch)
                return Result("committed" if batch else "nothing_pending", consumed=len(batch))
            finally:
                inflight[scope] -= 1

        params = WorkerParams(capacity=capacity, max_concurrent=max_concurrent, window_s=0.0)
        w = make_worker(pass_fn, params, clock=lambda: 0.0)
        task = asyncio.create_task(w.run())
        must_consume: dict[str, int] = defaultdict(int)
        for op, arg in ops:
            if op == "submit":
                full = w.admitted >= capacity and w.due(arg) is None
                ev.stage(arg)
                accepted = w.submit(arg)
                assert accepted is not full
                if accepted:
                    must_consume[arg] = len(ev.pending[arg]) + len(ev.consumed[arg])
            elif op == "release":
                open_gates = [g for g in gates if not g.is_set()]
                if open_gates:
                    open_gates[arg % len(open_gates)].set()
            await settle(3)
            assert sum(inflight.values()) <= min(max_concurrent, capacity)
            assert all(n <= 1 for n in inflight.values())
            assert w.admitted <= capacity
        while w.admitted:
            for g in gates:
                g.set()
            await settle(3)
        for scope, n in must_consume.items():
            assert len(ev.consumed[scope]) >= n, (scope, n, ev.consumed[scope])
        await w.shutdown()
        await task

    run(main())


# --- the glue on a real store of either backend -------------------------------------


def test_for_store_drains_every_scope_of_a_real_store(make_store):
    """`ConsolidationWorker.for_store` over one shared store (SQLite and Postgres):
    passes of several scopes in flight at once, continuations past a full batch,
    every staged rollout consumed exactly once with its lesson written."""
    from memkit.consolidate import OracleConsolidator, build_rollout

    store = make_store(embedder=None)
    scopes = ("p", "q", "r")
    for scope in scopes:
        for i in range(6):  # more than one full batch (4): the worker continues
            msgs = [{"role": "user", "content": f"{scope} evidence {i}"}]
            store.stage_rollout(build_rollout(scope, msgs, "ok", run_id=f"{scope}-{i}"))

    def gold(request):
        return [
            {"ids": [], "entry": {"content": f"lesson of {r.run_id}"}} for r in request.rollouts
        ]

    records: list[PassRecord] = []

    async def main():
        w = ConsolidationWorker.for_store(
            store,
            OracleConsolidator(gold),
            FAST,
            max_concurrent=3,
            on_pass=records.append,
            clock=asyncio.get_running_loop().time,
        )
        task = asyncio.create_task(w.run())
        for scope in scopes:
            assert w.submit(scope)
        await w.wait_idle()
        await w.shutdown()
        await task

    run(main(), timeout=30)
    committed = [r for r in records if r.outcome == "committed"]
    assert sorted(r.consumed for r in committed) == [2, 2, 2, 4, 4, 4]
    assert [r.scope_id for r in committed if r.next == "continue"] != []
    for scope in scopes:
        assert store.pending_rollouts(scope, 100) == []
        assert sorted(m.content for m in store.live(scope)) == sorted(
            f"lesson of {scope}-{i}" for i in range(6)
        )
    assert store.stats()["rollouts_consumed"] == 18
