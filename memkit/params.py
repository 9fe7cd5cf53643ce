"""Every tunable of the SPEC (docs/spec.md), with the reference defaults.

A researcher overrides one field (`dataclasses.replace(RecallParams(), floor=0.3)`)
and the defaults reproduce the reference behaviour exactly. Fields marked
(memkit) go beyond the reference; their defaults are documented in docs/spec.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from memkit.errors import ConfigError

DAY = 86_400.0

DEFAULT_FLOOR = 0.25
"""The SPEC's vector-path floor: the floor of every embedder that names none of
its own (`memkit.embed.default_floor_of`: hashing, LiteLLM). WordLlama and MiniLM
carry floors calibrated by `memkit eval calibrate floor` (docs/embedders.md)."""


@dataclass(frozen=True, slots=True)
class RecallParams:
    """Store ranking (SPEC §4)."""

    floor: float | None = None
    """Vector-path relevance floor: rows with cosine below it are dropped. (memkit)
    None: the store's embedder's own `default_floor` (cosine scales differ between
    models: calibrated, WordLlama 0.07, MiniLM 0.22; `DEFAULT_FLOOR` 0.25 for any
    other; docs/embedders.md). Set it to reproduce the SPEC's 0.25."""
    half_life_days: float = 30.0
    """Recency decay half-life, from last_seen_at (fallback created_at)."""
    recency_share: float = 0.3
    """Share of the score that recency can move: weight = (1-share) + share*decay."""
    confidence_min: float = 0.6
    confidence_max: float = 1.0
    candidate_cap: int | None = None
    """(memkit) None = all live rows; 500 reproduces the reference cap."""
    keyword_default_limit: int = 8
    """Keyword path: limit <= 0 or > keyword_max_limit becomes this."""
    keyword_max_limit: int = 50
    hybrid: Literal["off", "rrf"] = "off"
    """(memkit) `rrf` fuses the vector ranking (rows above the floor) with the
    keyword ranking (rows matching a query keyword) by reciprocal-rank fusion
    (`memkit.rank.rrf_fuse`); `off` is the SPEC's vector-then-keyword recall."""

    def __post_init__(self) -> None:
        if self.hybrid not in ("off", "rrf"):
            raise ConfigError(f"RecallParams.hybrid must be 'off' or 'rrf', got {self.hybrid!r}")


@dataclass(frozen=True, slots=True)
class FoldParams:
    """Write-time fold-in (SPEC §3)."""

    threshold: float = 0.65
    """pg_trgm similarity at or above which a write folds into a live row."""
    window_days: float = 14.0
    """A target must have been seen strictly within this many days."""


@dataclass(frozen=True, slots=True)
class RedactionParams:
    """(memkit) Write-time redaction (SPEC §3.1)."""

    secrets: bool = True
    pii: bool = False


@dataclass(frozen=True, slots=True)
class AssemblyParams:
    """The recalled block (SPEC §5)."""

    limit: int = 8
    dedup_threshold: float = 0.80
    entry_bytes: int = 600
    block_bytes: int = 6000
    overflow: Literal["stop", "skip"] = "stop"
    """`stop` (reference): the first entry that overflows ends admission;
    `skip` (memkit): later entries that still fit are admitted."""


@dataclass(frozen=True, slots=True)
class ConsolidationParams:
    """Rollout staging and one consolidation pass (SPEC §7)."""

    # staging
    final_bytes: int = 8000
    evidence_messages: int = 32
    evidence_bytes: int = 32_000
    message_bytes: int = 4000
    tool_calls_annotated: int = 8
    tool_name_bytes: int = 64
    tool_args_bytes: int = 1024
    name_bytes: int = 64
    tool_call_id_bytes: int = 128
    # one pass
    max_rollouts: int = 4
    snapshot_size: int = 32
    snapshot_policy: Literal["recent", "relevant"] = "recent"
    request_bytes: int = 60_000
    output_tokens: int = 2048
    timeout_s: float = 60.0
    # validation
    max_changes: int = 16
    max_ids: int = 32
    content_bytes: int = 8192
    max_tags: int = 32
    tags_joined_bytes: int = 2048
    # parsing
    lenient: bool = False
    """(memkit) Repair a fenced / wrapped JSON answer; reported apart from strict."""
    # parking (memkit extension of §7.8)
    park_after: int = 3
    """(memkit) A rollout that was part of this many passes whose answer was
    invalid (a parse or validation code, never a provider error) is parked: it
    leaves the pending queue until `SQLiteStore.requeue`. 0 turns parking off."""
    isolate: bool = True
    """(memkit) A failed batch of several rollouts is retried in halves, then
    single rollouts, and only a rollout that fails alone is parked (README
    "Parking"). False: the whole batch counts and parks together, as before
    the split (a recording made that way replays that way)."""


@dataclass(frozen=True, slots=True)
class WorkerParams:
    """Scheduler tunables (SPEC §8); the defaults are the reference values."""

    capacity: int = 64
    """Scopes admitted at once (waiting, retrying and running all count)."""
    max_concurrent: int = 4
    """Passes in flight; the effective bound is min(max_concurrent, capacity)."""
    window_s: float = 0.2
    """Coalescing window: a newly admitted scope is due this long after submit."""
    pass_timeout_s: float = 60.0
    """Bound on one pass; a caller's earlier cancellation still wins."""
    retry_delay_s: float = 5.0
    """Delay before the single retry of a timed-out pass (holds no slot)."""
    full_batch: int = 4
    """A pass consuming this many rollouts means more may be pending: continue."""

    def __post_init__(self) -> None:
        for name in ("capacity", "max_concurrent", "full_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"WorkerParams.{name} must be an int >= 1, got {value!r}")
        for name in ("window_s", "retry_delay_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
                raise ConfigError(f"WorkerParams.{name} must be a number >= 0, got {value!r}")
        t = self.pass_timeout_s
        if not isinstance(t, int | float) or isinstance(t, bool) or not t > 0:
            raise ConfigError(f"WorkerParams.pass_timeout_s must be a number > 0, got {t!r}")

    @property
    def concurrency(self) -> int:
        """Passes allowed in flight: min(max_concurrent, capacity)."""
        return min(self.max_concurrent, self.capacity)
