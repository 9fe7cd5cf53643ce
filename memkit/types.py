"""Records shared by the store, the assembler, the tools and consolidation.

All records are frozen dataclasses: a recalled memory or a staged rollout is a
value, never a live handle into the store, so evaluations can keep them, hash
them and compare them without aliasing surprises. Timestamps are UTC epoch
seconds (float); `None` means "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

KINDS: tuple[str, ...] = ("fact", "preference", "procedure", "learning", "outcome")
"""The five memory kinds of SPEC §1."""

Kind = Literal["fact", "preference", "procedure", "learning", "outcome"]

CONFIDENCE_CHOSEN = 0.7
"""Confidence when the model chose to remember (learn, memory_edit update)."""
CONFIDENCE_INFERRED = 0.6
"""Confidence when a reflection or consolidation pass inferred the memory."""


@dataclass(frozen=True, slots=True)
class Memory:
    """One row of the store; `superseded_by is None` means live (SPEC §1)."""

    id: str
    scope_id: str
    kind: str
    content: str
    tags: tuple[str, ...] = ()
    confidence: float = CONFIDENCE_CHOSEN
    source_run_id: str | None = None
    created_at: float | None = None
    seen_count: int = 1
    last_seen_at: float | None = None
    superseded_by: str | None = None
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def live(self) -> bool:
        return self.superseded_by is None

    @property
    def retracted(self) -> bool:
        """Retracted with no successor: the row points at itself."""
        return self.superseded_by == self.id


@dataclass(frozen=True, slots=True)
class Recalled:
    """A recalled memory with the score breakdown that explains its rank (SPEC §4.4).

    `path` is "vector", "keyword" or (memkit, `RecallParams.hybrid="rrf"`)
    "hybrid": the vector ranking and the keyword matches fused, `score` the
    fused score, `cosine` and its breakdown set when the row cleared the floor,
    `keywords_matched` when it matched a keyword. On the vector path `cosine`,
    `confidence_weight` (clamped confidence) and `decay` are set and
    `score = cosine * confidence_weight * (1 - recency_share + recency_share * decay)`.
    On the keyword path `keywords_matched` is set, `score` equals it, and
    `fallback` says why the vector path did not answer: "no_embedder",
    "embed_error" (embedding the query failed), "below_floor" (nothing
    cleared the floor) or "empty_query".
    """

    memory: Memory
    path: Literal["vector", "keyword", "hybrid"]
    score: float
    cosine: float | None = None
    confidence_weight: float | None = None
    decay: float | None = None
    keywords_matched: int | None = None
    fallback: Literal["no_embedder", "embed_error", "below_floor", "empty_query"] | None = None

    @property
    def id(self) -> str:
        return self.memory.id

    @property
    def kind(self) -> str:
        return self.memory.kind

    @property
    def content(self) -> str:
        return self.memory.content


@dataclass(frozen=True, slots=True)
class RememberResult:
    """Outcome of a write: the row's id and whether it folded into an existing row."""

    id: str
    folded: bool


@dataclass(frozen=True, slots=True)
class Rollout:
    """Staged evidence of one finished run (SPEC §1, §7)."""

    id: str
    scope_id: str
    messages: tuple[dict[str, Any], ...]
    final: str
    staged_at: float | None = None
    consumed_at: float | None = None
    run_id: str | None = None
    failed_passes: int = 0
    """(memkit) Passes this rollout was part of that got an invalid answer."""
    parked_at: float | None = None
    """(memkit) When it left the pending queue after too many invalid answers."""
    split_size: int | None = None
    """(memkit) In the split of a failed batch: the size of the sub-batch it is
    retried in next (None: not in a split)."""
    parked_batch: int | None = None
    """(memkit) The size of the batch whose failure parked it (1: it failed alone)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """The memory a change proposes to write (already validated)."""

    content: str
    kind: str = "fact"
    tags: tuple[str, ...] = ()
    confidence: float = CONFIDENCE_INFERRED
    scope_id: str = ""


@dataclass(frozen=True, slots=True)
class Change:
    """One item of a consolidation proposal (SPEC §1): add, merge or retract."""

    ids: tuple[str, ...] = ()
    entry: Entry | None = None

    @property
    def op(self) -> Literal["add", "merge", "retract", "invalid"]:
        return op_of(bool(self.ids), self.entry is not None)


def op_of(has_ids: bool, has_entry: bool) -> Literal["add", "merge", "retract", "invalid"]:
    """A change's operation from what it names: ids and an entry merge, ids alone
    retract, an entry alone adds, neither is invalid (SPEC §1)."""
    if has_ids and has_entry:
        return "merge"
    if has_ids:
        return "retract"
    if has_entry:
        return "add"
    return "invalid"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one committed pass did: ids written, ids retired, rollouts consumed."""

    added: tuple[str, ...] = ()
    retired: tuple[str, ...] = ()
    consumed: tuple[str, ...] = ()
    changes: tuple[Change, ...] = ()
    """The validated changes applied, in order (`added` holds their new ids)."""
