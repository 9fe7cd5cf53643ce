"""An asyncio event loop on a virtual clock, for scheduler tests.

The loop's `time()` starts at 0 and moves only when the loop would otherwise
wait: instead of sleeping until its next timer, it jumps to it. Everything that
is ready still runs, in the same order as on a real loop, so "nothing happened
within 50 ms" is checked by letting 50 virtual ms pass: every timer due in that
span fires, deterministically, and the test takes no wall time. A component
under test must read the same clock (`clock=asyncio.get_running_loop().time`).

I/O still works (a socket or a thread's wake-up is polled before the clock
moves), but a test that waits on real I/O or a thread should use a real loop:
virtual time would run ahead of it.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any


class _JumpingSelector(selectors.BaseSelector):
    """A selector that, when nothing is ready, advances the loop's clock by the
    timeout it was given instead of blocking for it."""

    def __init__(self, loop: VirtualTimeLoop):
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj, events, data=None):
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj):
        return self._real.unregister(fileobj)

    def modify(self, fileobj, events, data=None):
        return self._real.modify(fileobj, events, data)

    def get_map(self):
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None):
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return self._real.select(None)
        self._loop.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`asyncio.SelectorEventLoop` whose clock is `now`, moved by the selector."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_virtual(coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
    """Run `coro` on a fresh virtual-time loop; more than `timeout` virtual seconds
    (a hang) raise TimeoutError, at once."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(asyncio.wait_for(coro, timeout))
