"""The one runner of an execution plan (`evals.plan`): every unit replayed once.

Store units run in plan order, synchronously (model-free). Pipeline units run
as asyncio tasks: one consolidator per (system, setting), built through
`evals.kinds`; a system's units hold one of `OPEN_SCOPES_PER_REQUEST *
concurrency` slots while open (a scope's passes run in order, different
scopes in parallel; open stores stay bounded whatever the number of scopes),
and its requests in flight are bounded by `memkit.llm`'s one limit per model,
which 429s lower. A model that calls a provider is stopped on its first fatal
error (`evals.providers.StopOnFatal`) when the caller asks for it.

The caller decides what a unit's result becomes and where it is kept
(`keep`), and which units are already done (`finished`: a resumed run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evals import kinds
from evals.matcher import Matcher
from evals.plan import STORE, Plan, Setting, System, Unit
from evals.providers import ModelStopped, StopOnFatal
from evals.replay import replay_pipeline_scope, replay_store_scope
from evals.rows import PassRow
from memkit.errors import ConfigError

OPEN_SCOPES_PER_REQUEST = 2
"""Scopes open per request slot. With exactly `concurrency` scopes open, each
scope's own CPU between two requests (commit, probes, staging, shaping) left its
slot idle: 0.68 of the ideal at concurrency 32 (`memkit bench harness --latency
0.5`). A second open scope per slot has its next request ready when one returns;
the model's requests in flight stay bounded by memkit.llm's one limit."""


@dataclass
class Runtime:
    """What executing a plan needs besides the plan: loaded data, embedders, options."""

    scopes: Mapping[str, Any]
    """scope id -> `evals.replay.ScopeData`."""
    embedder: Any
    """Pipeline systems' embedder, and a store system's without one of its own."""
    context: kinds.Context
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """consolidator spec -> `get_consolidator` keyword arguments."""
    concurrency: Mapping[str, int] = field(default_factory=dict)
    """consolidator spec -> units' requests in flight (default 4)."""
    store_embedders: Mapping[str, Any] = field(default_factory=dict)
    """store system name -> its own embedder (a run with several embedders)."""
    curation: str = "latest_row"
    store_url: str | None = None
    on_pass: Callable[[PassRow], None] | None = None
    stop_on_fatal: bool = False
    quiet: bool = False


@dataclass
class Executed:
    results: dict[Unit, Any]
    """unit -> what `keep` (or `finished`) returned; a stopped unit has none."""
    stopped: dict[str, str] = field(default_factory=dict)
    """system name -> why its model was stopped."""
    limits: dict[str, Any] = field(default_factory=dict)
    """Per model: the achieved concurrency and the time spent waiting on limits."""


Finished = Callable[[Unit], Any]
Keep = Callable[[Unit, Any], Any]
Step = Callable[[Unit, str], None]
"""Called once per unit: "" replayed, "done" already finished, "stopped" its model stopped."""


def execute(
    plan: Plan,
    rt: Runtime,
    *,
    finished: Finished | None = None,
    keep: Keep | None = None,
    step: Step | None = None,
) -> Executed:
    """Run every unit of `plan` not `finished`; `keep(unit, result)` what each gives."""
    done: Finished = finished or (lambda _u: None)
    kept: Keep = keep or (lambda _u, r: r)
    stepped: Step = step or (lambda _u, _what: None)
    out = Executed({})
    for unit in plan.units:
        if unit.system.mode != STORE:
            continue
        got = done(unit)
        if got is None:
            got = kept(unit, _store_unit(plan.setting(unit), unit, rt))
        out.results[unit] = got
        stepped(unit, "")
    if any(u.system.mode != STORE for u in plan.units):
        asyncio.run(_pipeline(plan, rt, out, done, kept, stepped))
    return out


def _store_unit(setting: Setting, unit: Unit, rt: Runtime) -> Any:
    return replay_store_scope(
        rt.scopes[unit.scope],
        embedder=rt.store_embedders.get(unit.system.name, rt.embedder),
        fold=setting.fold,
        variants=setting.variants,
        curation=rt.curation,
        store_url=rt.store_url,
    )


def _consolidator(system: System, rt: Runtime, stopped: dict[str, str]) -> Any:
    cons = kinds.build(system.spec, dict(rt.options.get(system.spec, {})), rt.context)
    if rt.stop_on_fatal and kinds.calls_model(system.spec):
        cons = StopOnFatal(cons, system.name, stopped, rt.quiet)
    return cons


async def _pipeline(
    plan: Plan, rt: Runtime, out: Executed, done: Finished, kept: Keep, stepped: Step
) -> None:
    from memkit import llm

    matcher = rt.context.matcher
    if matcher is None:
        raise ConfigError("pipeline units score extraction: the runtime needs a matcher")
    built: dict[tuple[System, int], Any] = {}
    slots: dict[System, asyncio.Semaphore] = {}
    tasks = []
    for unit in plan.units:
        system = unit.system
        if system.mode == STORE:
            continue
        if (system, unit.setting) not in built:
            built[system, unit.setting] = _consolidator(system, rt, out.stopped)
        if system not in slots:
            n = rt.concurrency.get(system.spec, 4)
            slots[system] = asyncio.Semaphore(OPEN_SCOPES_PER_REQUEST * n)
        got = done(unit)
        if got is not None:
            out.results[unit] = got
            stepped(unit, "done")
            continue
        cons = built[system, unit.setting]
        args = (cons, slots[system], matcher)
        tasks.append(_pipeline_unit(plan, unit, args, rt, out, kept, stepped))
    for coro in asyncio.as_completed(tasks):
        await coro
    out.limits.update(llm.limit_stats())


async def _pipeline_unit(
    plan: Plan,
    unit: Unit,
    args: tuple[Any, asyncio.Semaphore, Matcher],
    rt: Runtime,
    out: Executed,
    kept: Keep,
    stepped: Step,
) -> None:
    setting = plan.setting(unit)
    cons, slots, matcher = args
    async with slots:
        if unit.system.name in out.stopped:
            stepped(unit, "stopped")
            return
        try:
            r = await replay_pipeline_scope(
                rt.scopes[unit.scope],
                cons,
                embedder=rt.embedder,
                matcher=matcher,
                params=setting.consolidation,
                fold=setting.fold,
                variants=setting.variants,
                on_pass=rt.on_pass,
                replicate=unit.replicate,
                store_url=rt.store_url,
            )
        except ModelStopped:
            stepped(unit, "stopped")
            return
    out.results[unit] = kept(unit, r)
    stepped(unit, "")
