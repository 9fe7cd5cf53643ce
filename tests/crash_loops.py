"""Worker loops the SIGKILL harness (`kill_harness`) runs in its forked workers
(no tests here). Each takes an open store and runs passes until it is killed."""

from __future__ import annotations

import asyncio
import os

from memkit.consolidate import OracleConsolidator, run_pass
from memkit.errors import ProviderError
from memkit.llm import CallAttempt

SCOPE = "crash"


def _markers(request):
    """Two marker memories per rollout: a half-applied pass would show one."""
    return [
        {"ids": [], "entry": {"kind": "fact", "content": f"marker {r.run_id} {part}"}}
        for r in request.rollouts
        for part in ("a", "b")
    ]


def _number(r) -> int:
    return int(r.run_id.split("-")[1])


def _poison_or_marker(request):
    """Every eleventh run is poison: a batch holding it fails until it is parked alone."""
    if any(_number(r) % 11 == 0 for r in request.rollouts):
        return [{"ids": ["mem-invented"], "entry": None}]
    return [{"ids": [], "entry": {"content": f"marker {r.run_id}"}} for r in request.rollouts]


class _Refusing:
    """The provider refuses (HTTP 400, a content filter) any request holding every
    22nd run; the other poison runs get an invalid answer (`_poison_or_marker`)."""

    name = "refusing"

    def __init__(self):
        self.answers = OracleConsolidator(_poison_or_marker)

    async def propose(self, request):
        if any(_number(r) % 22 == 0 for r in request.rollouts):
            err = ProviderError("content filter", kind="bad_request", status=400)
            err.attempts = (CallAttempt(model="refusing", outcome="bad_request", status=400),)
            raise err
        return await self.answers.propose(request)


async def _passes(store, model, ok_codes: tuple[str, ...]) -> None:
    while True:
        res = await run_pass(store, SCOPE, model, on_error=lambda e: None)
        if res.outcome == "error" and res.error_code not in ok_codes:
            os.write(2, f"pass error: {res.error}\n".encode())
            os._exit(3)
        if res.outcome == "nothing_pending":
            await asyncio.sleep(0.001)


async def commit_loop(store) -> None:
    """Passes that always commit (two markers per rollout)."""
    await _passes(store, OracleConsolidator(_markers), ())


async def parking_loop(store) -> None:
    """Passes that commit, or fail on a batch holding a poison run (an invalid answer
    or a provider 400), split it and park the poison alone at its 3rd failure."""
    await _passes(store, _Refusing(), ("unknown_id", "provider"))
