"""The virtual-clock loop the scheduler tests run on: time moves only by jumping
to the next timer, timers fire in order, and a hang fails at once."""

from __future__ import annotations

import asyncio

import pytest
from virtual_time import run_virtual


def test_sleeping_moves_the_loop_clock_by_exactly_the_delay():
    async def main():
        loop = asyncio.get_running_loop()
        assert loop.time() == 0.0
        await asyncio.sleep(5.0)
        assert loop.time() == 5.0
        await asyncio.sleep(0)  # a yield is not a wait: the clock stays
        assert loop.time() == 5.0

    run_virtual(main(), timeout=10)


def test_timers_fire_in_due_order_and_ready_work_runs_before_the_clock_moves():
    async def main():
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []
        loop.call_later(2.0, lambda: seen.append(("late", loop.time())))
        loop.call_later(1.0, lambda: seen.append(("early", loop.time())))
        loop.call_soon(lambda: seen.append(("now", loop.time())))
        await asyncio.sleep(3.0)
        assert seen == [("now", 0.0), ("early", 1.0), ("late", 2.0)]

    run_virtual(main(), timeout=10)


def test_a_hang_is_a_timeout_and_work_inside_the_bound_finishes():
    async def hang():
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        run_virtual(hang(), timeout=60)

    async def just_inside():
        await asyncio.sleep(59.9)
        return "done"

    assert run_virtual(just_inside(), timeout=60) == "done"
