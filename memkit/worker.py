"""The deferred consolidation worker (SPEC §8) and the host's finish-run entry point.

A finished run stages its evidence and *submits* its scope; the worker then
runs consolidation passes in the background so the run's answer never waits
on a model call. The scheduler is deliberately small and deterministic:

* admission is bounded (`capacity` scopes, waiting and running alike), so a
  burst of runs cannot grow memory without limit; a refused scope's evidence
  simply stays pending for its next successful run;
* a coalescing window (`window_s`) lets several runs of one scope share a
  pass; a repeat notification never moves a scope's due time, so a busy
  scope cannot starve itself;
* at most `min(max_concurrent, capacity)` passes run at once and never two
  for one scope; the earliest due wins, ties by admission order; a
  continuation takes a fresh order number so a backlog yields to waiters;
* a timed-out pass gets one retry after `retry_delay_s`, waiting as an
  ordinary queue entry so the delay holds no slot; nothing else is retried
  (a notification that arrived *during* a failed pass still earns one more
  pass: it stands for a later successful run, which SPEC §8 says re-admits
  the scope);
* a drained worker sleeps on an `asyncio.Event`: no timers, no polling.

Everything the worker learns about a pass goes through `PassRecord`; model
usage is summed into `background_usage`, apart from any run's own usage.
Only the glue (`ConsolidationWorker.for_store`, `finish_run`) touches a
store or `memkit.consolidate`, and only lazily.

Why over 600 lines: the scheduler (`ConsolidationWorker`, ~270 lines) and
the host's finish-run entry point (stage, then submit or one synchronous pass)
share `PassRecord`, `summarize` and the usage sums; the finish-run glue could
move to a module of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Protocol, cast

from memkit.errors import ConfigError, ProposalError, ProviderError, SubmitRefused
from memkit.params import ConsolidationParams, WorkerParams

log = logging.getLogger("memkit.worker")

TIMEOUT = "timeout"
"""Error code of a pass that exceeded its bound (or whose provider timed out)."""
SUCCESS_OUTCOMES = ("committed", "nothing_pending")
DEADLINE_SHARE = 0.9
"""`for_store` passes abandon their model call at this share of `pass_timeout_s`,
so a hang fails inside the pass, as a counted `timeout`, before the worker's
bound cancels it (a cancelled pass counts nothing, and its poison froze the scope)."""


class PassLike(Protocol):
    """What a pass function returns; `memkit.consolidate.PassResult` fits."""

    outcome: str  # "committed" | "nothing_pending" | "error"
    error_code: str | None


PassFn = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class PassOutcome:
    """A pass result reduced to what scheduling and accounting need.

    `timeout` is set when the pass failed because its model call timed out
    even if the pass reported a coarser code (e.g. "provider").
    """

    outcome: str
    error_code: str | None = None
    consumed: int = 0
    usage: Mapping[str, float] = field(default_factory=dict)
    timeout: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome in SUCCESS_OUTCOMES

    @property
    def timed_out(self) -> bool:
        return self.outcome == "error" and (self.timeout or self.error_code == TIMEOUT)


USAGE_FIELDS = ("input_tokens", "output_tokens", "cost_usd", "cost")
"""Numeric attempt fields summed into background usage."""


def _count(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    return len(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def summarize(result: Any) -> PassOutcome:
    """Reduce a pass result to a `PassOutcome`, tolerating the shapes we accept.

    `consumed` may be a count or a sequence of rollout ids, or come from
    `result.commit.consumed`; `usage` may be a mapping or be summed from
    `result.attempts` (`USAGE_FIELDS`). A failed pass whose last attempt's
    outcome is "timeout" counts as timed out.
    """
    if isinstance(result, PassOutcome):
        return result
    outcome = getattr(result, "outcome", None)
    if outcome not in (*SUCCESS_OUTCOMES, "error"):
        raise ConfigError(f"pass function returned an unknown outcome {outcome!r}")
    consumed = getattr(result, "consumed", None)
    if consumed is None and getattr(result, "commit", None) is not None:
        consumed = result.commit.consumed
    attempts = tuple(getattr(result, "attempts", ()) or ())
    usage = getattr(result, "usage", None)
    if usage is None:
        usage = {}
        for attempt in attempts:
            for key in USAGE_FIELDS:
                v = getattr(attempt, key, None)
                if _number(v):
                    usage[key] = usage.get(key, 0) + v
    last = getattr(attempts[-1], "outcome", None) if attempts else None
    return PassOutcome(
        outcome=outcome,
        error_code=getattr(result, "error_code", None),
        consumed=_count(consumed),
        usage=dict(usage),
        timeout=outcome == "error" and last == TIMEOUT,
    )


def error_code_of(exc: BaseException) -> str:
    """Stable code for an exception escaping a pass function."""
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, ProposalError):
        return exc.code
    if isinstance(exc, ProviderError):
        return exc.kind
    return "internal"


def add_usage(total: dict[str, float], usage: Mapping[str, float]) -> None:
    """Add numeric usage fields into `total` in place (non-numbers are ignored)."""
    for key, value in usage.items():
        if _number(value):
            total[key] = total.get(key, 0) + value


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One finished (not cancelled) pass, as reported to `on_pass` / `on_error`.

    `next` says what the scheduler did with the scope afterwards: "continue"
    (another pass queued), "retry" (timed out; one retry queued), or "leave".
    """

    scope_id: str
    attempt: int
    outcome: str
    error_code: str | None
    consumed: int
    usage: Mapping[str, float]
    started_at: float
    finished_at: float
    next: Literal["continue", "retry", "leave"]
    error: BaseException | None = field(default=None, compare=False)
    """The exception that escaped the pass function, if any."""
    detail: str | None = None
    """Why it failed: the escaped exception's text or the result's `error`."""
    result: Any = field(default=None, compare=False, repr=False)
    """The pass function's own result (e.g. a PassResult with every attempt)."""


@dataclass(slots=True)
class _Entry:
    """Mutable scheduler state of one admitted scope (private)."""

    scope_id: str
    due: float
    order: int
    dirty: bool = False
    running: bool = False
    attempt: int = 1


class ConsolidationWorker:
    """Runs deferred consolidation passes, one scope at a time per scope (SPEC §8).

    `pass_fn(scope_id)` runs ONE pass and returns a `PassLike` (or raises).
    Tunables come from `params`; keyword overrides of its fields
    (`ConsolidationWorker(fn, capacity=1, window_s=0.01)`) are applied on top.
    Use from a single event loop: `submit` is synchronous and must be called
    from the loop's thread; start `run()` once as a task and `shutdown()` (or
    cancel that task) before closing stores.
    """

    def __init__(
        self,
        pass_fn: PassFn,
        params: WorkerParams = WorkerParams(),
        *,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[PassRecord], None] | None = None,
        on_pass: Callable[[PassRecord], None] | None = None,
        **overrides: Any,
    ):
        if not callable(pass_fn):
            raise ConfigError(f"pass_fn must be callable, got {pass_fn!r}")
        known = {f.name for f in fields(WorkerParams)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown worker parameter(s) {unknown} (want {sorted(known)})")
        self.params = replace(params, **overrides) if overrides else params
        self._pass_fn = pass_fn
        self._clock = clock
        self._on_error = on_error
        self._on_pass = on_pass
        self._entries: dict[str, _Entry] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._orders = itertools.count()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._draining = False
        self._started = False
        self._runner: asyncio.Task[Any] | None = None
        self.wakeups = 0
        """Scheduler loop iterations; constant while drained (no polling)."""
        self.background_usage: dict[str, float] = {}
        """Model usage summed over every background pass (never a run's usage)."""
        self.usage_by_scope: dict[str, dict[str, float]] = {}
        self.refused = 0
        """Submits refused because `capacity` scopes were admitted."""

    @classmethod
    def for_store(
        cls,
        store: Any,
        consolidator: Any,
        params: WorkerParams = WorkerParams(),
        *,
        consolidation: ConsolidationParams = ConsolidationParams(),
        **options: Any,
    ) -> ConsolidationWorker:
        """A worker whose passes are `memkit.consolidate.run_pass`.

        `store` is one store for every scope, a mapping scope id -> store, or a
        callable returning a scope's store. `options` go to the constructor
        (clock, on_error, on_pass, field overrides). `memkit.consolidate` is
        imported on the first pass only.
        """
        pick = _store_picker(store)

        async def pass_fn(scope_id: str) -> Any:
            from memkit.consolidate import run_pass

            # failures come back in the PassResult; the worker reports them once.
            # A hang must end inside the pass to count toward parking (docs/behaviour.md
            # "Parking"): the pass abandons its model call before our own bound.
            return await run_pass(
                pick(scope_id), scope_id, consolidator, consolidation, on_error=_ignore,
                deadline_s=DEADLINE_SHARE * params.pass_timeout_s,
            )  # fmt: skip

        return cls(pass_fn, params, **options)

    # -- host side ---------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def admitted(self) -> int:
        """Scopes admitted now (waiting, retrying or running)."""
        return len(self._entries)

    @property
    def running(self) -> tuple[str, ...]:
        """Scopes with a pass in flight."""
        return tuple(s for s, e in self._entries.items() if e.running)

    def due(self, scope_id: str) -> float | None:
        """When an admitted, waiting scope becomes due (None if not admitted)."""
        entry = self._entries.get(scope_id)
        return None if entry is None else entry.due

    def submit(self, scope_id: str) -> bool:
        """Ask for consolidation of `scope_id`; False means "not admitted".

        An admitted scope is only marked dirty: its due time never moves, so
        repeated notifications cannot postpone a scope already waiting.
        """
        if not isinstance(scope_id, str) or not scope_id:
            raise ConfigError(f"scope id must be a non-empty str, got {scope_id!r}")
        if self._closed or self._draining:
            return False
        entry = self._entries.get(scope_id)
        if entry is not None:
            entry.dirty = True
            return True
        if len(self._entries) >= self.params.capacity:
            self.refused += 1
            return False
        self._entries[scope_id] = _Entry(
            scope_id, self._clock() + self.params.window_s, next(self._orders)
        )
        self._idle.clear()
        self._wake.set()
        return True

    async def wait_idle(self) -> None:
        """Return once no scope is admitted (drained or shut down)."""
        await self._idle.wait()

    async def run(self) -> None:
        """The scheduler loop; returns after `shutdown()`, cancels passes if cancelled."""
        if self._started:
            raise ConfigError("ConsolidationWorker.run() may be started only once")
        self._started = True
        self._runner = asyncio.current_task()
        try:
            while not self._closed:
                self.wakeups += 1
                self._wake.clear()
                self._launch_due()
                delay = self._next_delay()
                if delay is None:
                    await self._wake.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
        finally:
            await self._stop()

    async def shutdown(self, *, drain: bool = False) -> None:
        """Close, cancel and join every active pass; queued evidence stays pending.

        `drain=True` first finishes the work already submitted: `submit` returns
        False from then on, the coalescing window is skipped, and every admitted scope runs
        its passes (a timeout's one retry included) until none is left; then it
        closes. A short script's `finish_run` thus stores its run before the
        script exits (without it, a scope still in its window is left pending)."""
        if drain and not self._closed:
            self._draining = True
            now = self._clock()
            for entry in self._entries.values():
                if not entry.running and entry.attempt == 1:
                    entry.due = min(entry.due, now)  # no one left to coalesce with
            self._wake.set()
            await asyncio.sleep(0)  # a run() task created just before gets to start
            if not self._started:  # nobody runs the scheduler: run it for the drain
                self._runner = asyncio.create_task(self.run())
            await self._idle.wait()
        await self._stop()
        runner = self._runner
        if runner is not None and runner is not asyncio.current_task() and not runner.done():
            await asyncio.wait({runner})

    # -- scheduling ------------------------------------------------------

    def _launch_due(self) -> None:
        slots = self.params.concurrency - len(self._tasks)
        if slots <= 0:
            return
        now = self._clock()
        due = sorted(
            (e for e in self._entries.values() if not e.running and e.due <= now),
            key=lambda e: (e.due, e.order),
        )
        for entry in due[:slots]:
            entry.running = True
            entry.dirty = False  # notifications so far are covered by this pass
            self._tasks[entry.scope_id] = asyncio.create_task(
                self._pass(entry), name=f"memkit-consolidate:{entry.scope_id}"
            )

    def _next_delay(self) -> float | None:
        """Seconds until the earliest waiting scope is due; None = wait for a notification."""
        if len(self._tasks) >= self.params.concurrency:
            return None
        waiting = [e.due for e in self._entries.values() if not e.running]
        if not waiting:
            return None
        return max(0.0, min(waiting) - self._clock())

    async def _pass(self, entry: _Entry) -> None:
        started = self._clock()
        error: BaseException | None = None
        result: Any = None
        try:
            result = await asyncio.wait_for(
                self._pass_fn(entry.scope_id), self.params.pass_timeout_s
            )
            outcome = summarize(result)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if self._closed or (task is not None and task.cancelling()):
                raise  # shutdown: nothing consumed, evidence stays pending
            outcome, error = PassOutcome("error", "cancelled"), exc
        except Exception as exc:
            outcome, error = PassOutcome("error", error_code_of(exc)), exc
        self._finish(entry, outcome, started, error, result)

    def _finish(
        self,
        entry: _Entry,
        outcome: PassOutcome,
        started: float,
        error: BaseException | None,
        result: Any,
    ) -> None:
        scope = entry.scope_id
        self._tasks.pop(scope, None)
        entry.running = False
        add_usage(self.background_usage, outcome.usage)
        add_usage(self.usage_by_scope.setdefault(scope, {}), outcome.usage)
        now = self._clock()
        attempt = entry.attempt
        nxt: Literal["continue", "retry", "leave"]
        if outcome.timed_out and attempt == 1:
            nxt, entry.attempt = "retry", 2
            entry.due, entry.order = now + self.params.retry_delay_s, next(self._orders)
        elif (outcome.ok and outcome.consumed >= self.params.full_batch) or entry.dirty:
            # A full batch may leave more pending; a notification during the pass
            # means a later run staged evidence this pass may not have read.
            nxt, entry.attempt, entry.dirty = "continue", 1, False
            entry.due, entry.order = now, next(self._orders)
        else:
            nxt = "leave"
            self._entries.pop(scope, None)
            if not self._entries:
                self._idle.set()
        detail = getattr(result, "error", None)
        if isinstance(error, TimeoutError) and not str(error):
            detail = f"pass for {scope!r} exceeded pass_timeout_s={self.params.pass_timeout_s}"
        elif error is not None:
            detail = f"{type(error).__name__}: {error}"
        record = PassRecord(
            scope, attempt, outcome.outcome, outcome.error_code, outcome.consumed,
            dict(outcome.usage), started, now, nxt, error,
            detail if isinstance(detail, str) else None, result,
        )  # fmt: skip
        if not outcome.ok:
            if self._on_error is None:
                log.warning(
                    "consolidation pass for %r failed (%s): %s", scope, outcome.error_code, detail
                )
            self._notify(self._on_error, record)
        self._notify(self._on_pass, record)
        self._wake.set()

    def _notify(self, callback: Callable[[PassRecord], None] | None, record: PassRecord) -> None:
        if callback is None:
            return
        try:
            callback(record)
        except Exception:  # a host callback must never kill the scheduler
            log.exception("worker callback failed for scope %r", record.scope_id)

    async def _stop(self) -> None:
        self._closed = True
        self._wake.set()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._entries.clear()
        self._idle.set()


def _ignore(_exc: BaseException) -> None:
    return None


def _store_picker(store: Any) -> Callable[[str], Any]:
    if hasattr(store, "pending_rollouts"):
        return lambda _scope: store
    if isinstance(store, Mapping):
        return store.__getitem__
    if callable(store):
        return cast("Callable[[str], Any]", store)
    raise ConfigError(
        f"store must be a store, a mapping or a callable scope -> store, got {store!r}"
    )


# -- the host's finish-run entry point ----------------------------------------


Consolidation = Literal["submitted", "refused", "sync", "skipped"]


@dataclass(frozen=True, slots=True)
class FinishResult:
    """What finishing a run did about memory; the run itself always succeeds.

    `consolidation`: "submitted" to a worker, "refused" by it (evidence stays
    pending), "sync" (one pass ran in the finishing run), or "skipped" (nothing
    staged, or neither worker nor consolidator). `usage` is the run's own usage,
    copied untouched; `background_usage` is what the synchronous pass spent.
    """

    scope_id: str
    run_id: str | None
    rollout_id: str | None
    consolidation: Consolidation
    pass_result: Any = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    background_usage: Mapping[str, float] = field(default_factory=dict)
    errors: tuple[BaseException, ...] = field(default=(), compare=False)


def _report(on_error: Callable[[BaseException], None] | None, exc: BaseException) -> None:
    if on_error is None:
        log.warning("%s", exc)
        return
    try:
        on_error(exc)
    except Exception:
        log.exception("finish_run on_error callback failed")


def _stage(
    store: Any, run: Mapping[str, Any], params: ConsolidationParams, errors: list[BaseException]
) -> Any:
    from memkit.consolidate import stage_run

    try:
        return stage_run(store, run, params)
    except Exception as exc:  # SPEC §7 staging 4: reported, the answer still succeeds
        errors.append(exc)
        return None


def _begin(
    store: Any,
    run: Mapping[str, Any],
    worker: ConsolidationWorker | None,
    consolidator: Any,
    params: ConsolidationParams,
    errors: list[BaseException],
) -> tuple[FinishResult, bool]:
    """Stage and submit; returns the partial result and whether a sync pass is due."""
    usage = dict(run.get("usage") or {})  # a copy: background work never touches it
    rollout = _stage(store, run, params, errors)  # validates the transcript, scope included
    rid = getattr(rollout, "id", None)
    scope = rollout.scope_id if rollout is not None else str(run.get("scope_id") or "")
    base = FinishResult(scope, run.get("run_id"), rid, "skipped", usage=usage)
    if rollout is None:
        return base, False
    if worker is not None:
        if worker.submit(scope):
            return replace(base, consolidation="submitted"), False
        errors.append(SubmitRefused(scope, rid))
        return replace(base, consolidation="refused"), False
    return base, consolidator is not None


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _close(
    result: FinishResult,
    errors: list[BaseException],
    on_error: Callable[[BaseException], None] | None,
) -> FinishResult:
    for exc in errors:
        _report(on_error, exc)
    return replace(result, errors=tuple(errors))


def _sync_outcome(result: FinishResult, pass_result: Any) -> FinishResult:
    """Fold a synchronous pass into the result (run_pass reported any failure)."""
    usage = summarize(pass_result).usage
    return replace(result, consolidation="sync", pass_result=pass_result, background_usage=usage)


async def afinish_run(
    store: Any,
    run: Mapping[str, Any],
    *,
    worker: ConsolidationWorker | None = None,
    consolidator: Any = None,
    params: ConsolidationParams = ConsolidationParams(),
    on_error: Callable[[BaseException], None] | None = None,
) -> FinishResult:
    """`finish_run` for hosts already inside an event loop (the sync pass is awaited)."""
    errors: list[BaseException] = []
    result, sync = _begin(store, run, worker, consolidator, params, errors)
    if sync:
        from memkit.consolidate import run_pass

        try:
            pass_result = await run_pass(
                store, result.scope_id, consolidator, params, on_error=errors.append
            )
            result = _sync_outcome(result, pass_result)
        except Exception as exc:
            errors.append(exc)
    return _close(result, errors, on_error)


def finish_run(
    store: Any,
    run: Mapping[str, Any],
    *,
    worker: ConsolidationWorker | None = None,
    consolidator: Any = None,
    params: ConsolidationParams = ConsolidationParams(),
    on_error: Callable[[BaseException], None] | None = None,
) -> FinishResult:
    """Finish a run's memory side (SPEC §7 staging, §8): stage, then consolidate.

    Stages the run's evidence, then submits its scope to `worker`, or with no
    worker runs one pass synchronously with `consolidator`. Staging errors,
    refusals and failed passes go to `on_error` and into `result.errors`; none
    of them fails the run, and the run's own usage is never changed. Call it
    from the worker's loop thread; without a worker, from outside any running
    loop (inside one, await `afinish_run`).
    """
    if worker is None and consolidator is not None and _in_loop():
        raise ConfigError("finish_run without a worker inside a running loop: use afinish_run")
    done = afinish_run(
        store, run, worker=worker, consolidator=consolidator, params=params, on_error=on_error
    )
    if worker is None and consolidator is not None:
        return asyncio.run(done)  # one synchronous pass
    try:  # nothing to await (stage and submit only): run the coroutine to its end here
        done.send(None)
    except StopIteration as finished:
        result: FinishResult = finished.value
        return result
    done.close()
    raise ConfigError("finish_run: staging or submitting awaited; use afinish_run")
