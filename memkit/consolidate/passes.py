"""One consolidation pass (SPEC §7 "One pass"): read, ask, parse, validate, commit.

A pass never raises for an expected failure (provider, parse, validation,
stale snapshot, oversize request): it reports the exception to `on_error`,
returns a PassResult with `outcome="error"`, and leaves the evidence
pending. Only cancellation propagates, so a worker can bound a pass.

(memkit extension of SPEC §7.8) A failure that would repeat on the same
request (an answered but invalid proposal, or the provider's `bad_request` /
`timeout`: `memkit.store.parking.counted_code`) is counted against the batch by the
store (`record_failed_pass`), which splits a failed batch of several rollouts
in halves, retried first (`next_batch`), and parks a rollout that failed
alone at `params.park_after`: out of the queue, evidence kept,
`PassResult.parked` names them. Rate limits, 5xx, connection errors and
stale snapshots never count, so an outage cannot park evidence.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from memkit.consolidate.judge import judge
from memkit.consolidate.reply import Consolidator, Reply
from memkit.consolidate.request import (
    NATIVE_PROMPT,
    ConsolidationRequest,
    evidence_text,
    prepare_request,
)
from memkit.consolidate.result import Attempt, PassResult
from memkit.errors import ProposalError, ProviderError, RequestTooLarge
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams
from memkit.proposal import validate_proposal
from memkit.store.parking import counted_code
from memkit.text import byte_len
from memkit.types import CommitResult, Memory, Rollout

log = logging.getLogger(__name__)


class PassStore(Protocol):
    """The store side of a pass (SQLiteStore implements it)."""

    def pending_rollouts(self, scope_id: str, limit: int = 4) -> list[Rollout]: ...

    def snapshot(
        self, scope_id: str, limit: int = 32, *, policy: str = "recent", query: str = ""
    ) -> list[Memory]: ...

    def commit_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        snapshot: Sequence[Memory],
        changes: Any,
        params: ConsolidationParams = ...,
    ) -> CommitResult: ...


def _attempts(
    consolidator: Consolidator,
    request: ConsolidationRequest,
    calls: Sequence[CallAttempt],
    cached: bool = False,
) -> list[Attempt]:
    return [
        Attempt(
            model=c.model,
            consolidator=consolidator.name,
            request_hash=request.request_hash,
            replicate=request.replicate,
            index=i,
            outcome=c.outcome,
            status=c.status,
            input_tokens=c.input_tokens,
            output_tokens=c.output_tokens,
            cost_usd=c.cost_usd,
            cost_note=c.cost_note,
            latency_s=c.latency_s,
            retry_after_s=c.retry_after_s,
            cached=cached,
            error=c.error,
            response_format=c.response_format,
        )
        for i, c in enumerate(calls)
    ]


def _error_code(exc: BaseException) -> str:
    if isinstance(exc, ProposalError):
        return exc.code
    if isinstance(exc, RequestTooLarge):
        return "request_too_large"
    if isinstance(exc, ProviderError):
        return "provider"
    return "internal"


def _report(on_error: Callable[[BaseException], Any] | None, exc: BaseException) -> None:
    if on_error is None:
        log.warning("consolidation pass failed: %s", exc)
        return
    try:
        on_error(exc)
    except Exception:  # a broken callback must not turn into a failed run
        log.exception("consolidation on_error callback raised")


async def run_pass(
    store: PassStore,
    scope_id: str,
    consolidator: Consolidator,
    params: ConsolidationParams = ConsolidationParams(),
    *,
    on_error: Callable[[BaseException], Any] | None = None,
    replicate: int = 0,
    deadline_s: float | None = None,
) -> PassResult:
    """Run one pass for `scope_id`; see the module docstring for the error contract.

    `deadline_s` (seconds from the pass's start) bounds the model call: past it
    the call is abandoned and the pass fails as a provider `timeout`, which
    counts toward parking (a hang).
    A caller that bounds the whole pass (the worker) sets it below its own
    bound, since a pass cancelled from outside counts nothing."""
    started = time.monotonic()
    rollouts: list[Rollout] = []
    snapshot: list[Memory] = []
    request: ConsolidationRequest | None = None
    attempts: list[Attempt] = []
    parse_mode = None
    parked: tuple[str, ...] = ()
    isolation = False

    def failed(exc: BaseException) -> PassResult:
        _report(on_error, exc)
        return PassResult(
            scope_id=scope_id,
            outcome="error",
            error_code=_error_code(exc),
            error=str(exc),
            rollout_ids=tuple(r.id for r in rollouts),
            snapshot_ids=tuple(m.id for m in snapshot),
            attempts=tuple(attempts),
            request_hash=request.request_hash if request else None,
            request_bytes=byte_len(request.user_text) if request else 0,
            excerpt_size=request.excerpt_size if request else None,
            request_budget=request.params.request_bytes if request else None,
            parse_mode=parse_mode,
            parked=parked,
            isolation=isolation,
        )

    try:
        take = getattr(store, "next_batch", None) or store.pending_rollouts
        rollouts = list(take(scope_id, params.max_rollouts))
        isolation = any(getattr(r, "split_size", None) is not None for r in rollouts)
        if not rollouts:
            return PassResult(scope_id=scope_id, outcome="nothing_pending")
        snapshot = list(
            store.snapshot(
                scope_id,
                params.snapshot_size,
                policy=params.snapshot_policy,
                query=evidence_text(rollouts) if params.snapshot_policy == "relevant" else "",
            )
        )
        request = prepare_request(
            scope_id, rollouts, snapshot, _budgeted(consolidator, params), replicate=replicate
        )
        try:
            reply: Reply = await _ask(consolidator, request, deadline_s, started)
        except ProviderError as e:
            calls = getattr(e, "attempts", ())
            attempts = _attempts(consolidator, request, calls, getattr(e, "cached", False))
            raise
        attempts = _attempts(consolidator, request, reply.attempts, reply.cached)
        rollout_ids = [r.id for r in rollouts]
        judged = judge(
            reply.text,
            lambda raw: validate_proposal(scope_id, rollout_ids, snapshot, raw, params),
        )
        verdict, parse_mode = judged.under(params.lenient)
        code = verdict.code
        try:
            if verdict.error is not None:
                raise verdict.error
            commit = store.commit_pass(scope_id, rollout_ids, snapshot, verdict.typed, params)
        except ProposalError as e:
            code = e.code
            raise
        finally:
            if attempts:
                attempts[-1] = replace(
                    attempts[-1],
                    raw_response=reply.text,
                    parse_mode=parse_mode,
                    parse_error=None if judged.mode == "strict" else str(judged.strict.error),
                    validation_code=code,
                    strict_code=judged.strict.code,
                    lenient_code=judged.lenient.code,
                    parsed_changes=judged.lenient.changes,
                    outcome=attempts[-1].outcome if code is None else _rejected(code),
                )
        return PassResult(
            scope_id=scope_id,
            outcome="committed",
            rollout_ids=tuple(r.id for r in rollouts),
            snapshot_ids=tuple(m.id for m in snapshot),
            changes=commit.changes,
            commit=commit,
            attempts=tuple(attempts),
            request_hash=request.request_hash,
            request_bytes=byte_len(request.user_text),
            excerpt_size=request.excerpt_size,
            request_budget=request.params.request_bytes,
            parse_mode=parse_mode,
            isolation=isolation,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        if not isinstance(exc, ProposalError | ProviderError):
            log.exception("unexpected error in consolidation pass for %r", scope_id)
        counted = counted_code(exc)
        if counted is not None and rollouts:
            try:
                parked = _record_failure(
                    store,
                    scope_id,
                    [r.id for r in rollouts],
                    counted,
                    _policy(consolidator, params),
                )
            except Exception as rec:  # the pass failed either way; say why it was not counted
                log.exception("counting a failed pass for %r raised", scope_id)
                return failed(rec)
        return failed(exc)


async def _ask(
    consolidator: Consolidator,
    request: ConsolidationRequest,
    deadline_s: float | None,
    started: float,
) -> Reply:
    """The consolidator's answer, or ProviderError(kind="timeout") once `deadline_s`
    have passed since the pass `started` (time.monotonic)."""
    if deadline_s is None:
        return await consolidator.propose(request)
    left = max(0.0, deadline_s - (time.monotonic() - started))
    try:
        return await asyncio.wait_for(consolidator.propose(request), left)
    except TimeoutError:
        model = getattr(consolidator, "model", None) or consolidator.name
        why = f"no answer within the pass deadline of {deadline_s:g} s"
        err = ProviderError(f"{consolidator.name}: {why}", kind="timeout")
        err.attempts = (  # type: ignore[attr-defined]
            CallAttempt(model=str(model), outcome="timeout", latency_s=deadline_s, error=why),
        )
        raise err from None


def _budgeted(consolidator: Consolidator, params: ConsolidationParams) -> ConsolidationParams:
    """`params` with the consolidator's own request budget, when it has one (memkit
    extension of SPEC §7.3: a model with a small context takes smaller requests).
    Raises RequestTooLarge when the model's context leaves no room at all."""
    budget = getattr(consolidator, "request_budget", None)
    if budget is None:
        return params
    limit = budget(params, NATIVE_PROMPT)
    return params if limit == params.request_bytes else replace(params, request_bytes=limit)


def _policy(consolidator: Consolidator, params: ConsolidationParams) -> ConsolidationParams:
    """`params` as the consolidator allows: a recording made before the split
    (`ReplayConsolidator.isolate` False) holds only whole-batch requests."""
    if params.isolate and getattr(consolidator, "isolate", True) is False:
        return replace(params, isolate=False)
    return params


def _record_failure(
    store: PassStore,
    scope_id: str,
    rollout_ids: Sequence[str],
    code: str,
    params: ConsolidationParams,
) -> tuple[str, ...]:
    """Count a failed pass against the batch (memkit §7.8 extension: split, then park).

    A store without `record_failed_pass` (a custom PassStore) never parks.
    """
    record = getattr(store, "record_failed_pass", None)
    if record is None:
        return ()
    return tuple(record(scope_id, rollout_ids, code, params))


def _rejected(code: str) -> str:
    """An answered attempt's outcome when its proposal was refused."""
    return "parse" if code == "parse" else "invalid"


def run_pass_sync(
    store: PassStore,
    scope_id: str,
    consolidator: Consolidator,
    params: ConsolidationParams = ConsolidationParams(),
    *,
    on_error: Callable[[BaseException], Any] | None = None,
    replicate: int = 0,
    deadline_s: float | None = None,
) -> PassResult:
    """`run_pass` for callers without an event loop (one pass in the finishing run)."""
    return asyncio.run(
        run_pass(
            store, scope_id, consolidator, params,
            on_error=on_error, replicate=replicate, deadline_s=deadline_s,
        )
    )  # fmt: skip
