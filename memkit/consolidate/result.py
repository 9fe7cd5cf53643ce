"""What a pass records: every attempt, and the pass outcome (SPEC §7.9).

`Attempt.to_dict()` is the line format of a run's `attempts.jsonl`; the
replay consolidator reads it back, so its field names are versioned and only
ever extended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from memkit.proposal import change_to_json
from memkit.types import Change, CommitResult

ATTEMPT_VERSION = 1
"""Version of `Attempt.to_dict()`; bump on any incompatible change."""


@dataclass(frozen=True)
class Attempt:
    """One consolidator attempt inside a pass (one HTTP request for a model).

    A provider retry adds an attempt; only the last attempt of a pass carries
    the raw response and its parse/validation outcome. The answer is read
    once and judged both ways: `strict_code` / `lenient_code` are the first
    failure code of the strict reading and of the lenient repair (None when
    that reading is valid) and `parsed_changes` the changes the lenient
    parse found, whatever mode the pass ran in; `parse_mode` and
    `validation_code` say what governed the pass itself. `cached` marks an
    attempt replayed from the response cache (tokens and cost are those
    originally paid, not paid again).
    """

    model: str
    consolidator: str
    request_hash: str
    replicate: int = 0
    index: int = 0
    outcome: str = "ok"
    """"ok", a provider failure ("rate_limit", "server", "timeout", "connection",
    "error", "replay_miss"), or "parse"/"invalid" when the answer was rejected."""
    status: int | None = None
    raw_response: str | None = None
    parse_mode: Literal["strict", "repaired", "failed"] | None = None
    parse_error: str | None = None
    validation_code: str | None = None
    """None when valid (or never validated), else the SPEC §7.6 error code."""
    strict_code: str | None = None
    lenient_code: str | None = None
    parsed_changes: list[Any] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_note: str | None = None
    latency_s: float = 0.0
    retry_after_s: float | None = None
    cached: bool = False
    error: str | None = None
    response_format: str | None = None
    """What constrained decoding (`memkit.llm.format_label`): None when the request
    carried no response_format, e.g. "json_object+schema" when it carried the
    proposal schema; strict parsing still judges the answer either way."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": ATTEMPT_VERSION,
            "model": self.model,
            "consolidator": self.consolidator,
            "request_hash": self.request_hash,
            "replicate": self.replicate,
            "index": self.index,
            "outcome": self.outcome,
            "status": self.status,
            "raw_response": self.raw_response,
            "parse_mode": self.parse_mode,
            "parse_error": self.parse_error,
            "validation_code": self.validation_code,
            "strict_code": self.strict_code,
            "lenient_code": self.lenient_code,
            "parsed_changes": self.parsed_changes,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "cost_note": self.cost_note,
            "latency_s": self.latency_s,
            "retry_after_s": self.retry_after_s,
            "cached": self.cached,
            "error": self.error,
            "response_format": self.response_format,
        }


@dataclass(frozen=True)
class PassResult:
    """The outcome of one consolidation pass; never raised, always returned.

    `outcome` is "committed", "nothing_pending" or "error"; on error
    `error_code` is a SPEC §7.6 code, "request_too_large", "provider" or
    "internal", and nothing was consumed.
    """

    scope_id: str
    outcome: Literal["committed", "nothing_pending", "error"]
    error_code: str | None = None
    error: str | None = None
    rollout_ids: tuple[str, ...] = ()
    snapshot_ids: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    commit: CommitResult | None = None
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)
    request_hash: str | None = None
    request_bytes: int = 0
    excerpt_size: int | None = None
    request_budget: int | None = None
    """(memkit) The byte limit the request was shaped to: SPEC §7.3's 60,000 or the
    model's lower budget (`memkit.consolidate.budget`)."""
    parse_mode: Literal["strict", "repaired", "failed"] | None = None
    parked: tuple[str, ...] = ()
    """(memkit) Rollouts this failed pass parked (their `park_after`-th counted failure)."""
    isolation: bool = False
    """(memkit) The batch was a sub-batch of a failed one being split
    (docs/behaviour.md "Parking")."""

    @property
    def ok(self) -> bool:
        return self.outcome != "error"

    @property
    def consumed(self) -> tuple[str, ...]:
        return self.commit.consumed if self.commit else ()

    def to_dict(self) -> dict[str, Any]:
        c = self.commit
        return {
            "version": ATTEMPT_VERSION,
            "scope_id": self.scope_id,
            "outcome": self.outcome,
            "error_code": self.error_code,
            "error": self.error,
            "rollout_ids": list(self.rollout_ids),
            "snapshot_ids": list(self.snapshot_ids),
            "changes": [change_to_json(ch) for ch in self.changes],
            "commit": None
            if c is None
            else {"added": list(c.added), "retired": list(c.retired), "consumed": list(c.consumed)},
            "attempts": [a.to_dict() for a in self.attempts],
            "request_hash": self.request_hash,
            "request_bytes": self.request_bytes,
            "excerpt_size": self.excerpt_size,
            "request_budget": self.request_budget,
            "parse_mode": self.parse_mode,
            "parked": list(self.parked),
            "isolation": self.isolation,
        }
