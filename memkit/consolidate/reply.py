"""What every consolidator returns: `Reply`, and the `Consolidator` protocol.

Kept apart from `consolidators.py` so a consolidator module (the heuristic)
can build a reply without importing the registry that imports it. Holds no
consolidator itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from memkit.consolidate.request import ConsolidationRequest
from memkit.llm import CallAttempt


@dataclass(frozen=True)
class Reply:
    """A consolidator's raw answer with the attempts that produced it."""

    text: str
    model: str
    attempts: tuple[CallAttempt, ...] = field(default_factory=tuple)
    cached: bool = False

    @property
    def input_tokens(self) -> int:
        return sum(a.input_tokens for a in self.attempts)

    @property
    def output_tokens(self) -> int:
        return sum(a.output_tokens for a in self.attempts)

    @property
    def cost_usd(self) -> float:
        return sum(a.cost_usd for a in self.attempts)

    @property
    def latency_s(self) -> float:
        return sum(a.latency_s for a in self.attempts)


@runtime_checkable
class Consolidator(Protocol):
    """Proposes changes for one pass. Raise ProviderError when no answer came."""

    name: str

    async def propose(self, request: ConsolidationRequest) -> Reply: ...


def local_reply(name: str, text: str, t0: float) -> Reply:
    """A reply produced in-process (no provider): one "ok" attempt with its latency."""
    return Reply(
        text=text,
        model=name,
        attempts=(CallAttempt(model=name, outcome="ok", latency_s=time.perf_counter() - t0),),
    )
