"""Worker loops the SIGKILL harness (`kill_harness`) runs in its forked workers
(no tests here). Each takes an open store and runs passes until it is killed."""

from __future__ import annotations

import asyncio
import os

from memkit.consolidate import OracleConsolidator, run_pass

SCOPE = "crash"


def _markers(request):
    """Two marker memories per rollout: a half-applied pass would show one."""
    return [
        {"ids": [], "entry": {"kind": "fact", "content": f"marker {r.run_id} {part}"}}
        for r in request.rollouts
        for part in ("a", "b")
    ]


def _poison_or_marker(request):
    """Every eleventh run is poison: its batch fails until it is parked."""
    if any(int(r.run_id.split("-")[1]) % 11 == 0 for r in request.rollouts):
        return [{"ids": ["mem-invented"], "entry": None}]
    return [{"ids": [], "entry": {"content": f"marker {r.run_id}"}} for r in request.rollouts]


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
    """Passes that commit, or fail on a poison batch and park it after 3 failures."""
    await _passes(store, OracleConsolidator(_poison_or_marker), ("unknown_id",))
