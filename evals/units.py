"""Units: one recorded thing each registered metric is computed from.

`evals.aggregate.UNIT_BUILDERS` turns typed run rows (`evals.rows`) into these;
each one computes once what several metrics share (a probe's waste and dedup
counts, an attempt's validity), from the pure definitions in `evals.scorers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evals.rows import AttemptRow, ProbeRow
from evals.scorers import (
    AttemptScore,
    Label,
    attempt_validity,
    budget_waste,
    dedup_counts,
)


class ProbeUnit:
    """One probe row of `probes.jsonl`, with what several metrics share computed once."""

    __slots__ = (
        "admitted",
        "block_bytes",
        "dedup",
        "full",
        "labels",
        "relevant",
        "scores",
        "stale",
        "stopped",
        "undefined",
        "waste",
    )

    def __init__(self, row: ProbeRow):
        self.undefined: str | None = row.undefined
        """A reason the probe's relevance metrics are undefined (LoCoMo `unmapped`:
        evidence no gold fact cites; LongMemEval `abstention`): they are NaN for
        it, never 0, and it is never an off-topic probe."""
        self.labels: list[Label] = row.labels
        self.full: list[Label] | None = None if row.full is None else list(row.full)
        """The same store's full ranking (floor off), one label per live candidate;
        None when not recorded (the vector path did not answer, or an older run)."""
        self.relevant = set(row.relevant)
        self.stale = set(row.stale)
        self.scores = [r.score for r in row.recalled]
        self.admitted: list[Label] = [a.fact for a in row.admitted]
        self.waste = budget_waste(
            [(a.fact, a.bytes) for a in row.admitted], self.relevant, self.stale
        )
        self.dedup = dedup_counts(
            [(r.fact, r.bytes) for r in row.recalled],
            [r.removed for r in row.recalled],
            self.admitted,
        )
        self.stopped = bool(row.stopped)
        self.block_bytes = row.account.get("block_bytes", self.waste.admitted)
        """Bytes of the rendered block (header included) when recorded, else entry bytes."""


class AttemptUnit:
    """One attempt row of `attempts.jsonl`; `score` is None for a provider failure
    (no answer, nothing to judge: it counts only in `provider_failures` and cost)
    and for a repeat of a request already judged (`first` is False): validity
    counts each distinct (replicate, model, request hash) once, by its first
    answer, so a frozen scope resending one request is not a new sample."""

    __slots__ = ("answered", "first", "missed", "row", "score")

    def __init__(self, row: AttemptRow, first: bool = True):
        self.row = row
        self.answered = row.answered
        self.missed = row.outcome == "replay_miss"
        """A replay's request not in its recording: no attempt of the model at all, so
        every attempt metric is undefined on it (counted in the manifest instead)."""
        self.first = first
        self.score: AttemptScore | None = None
        if self.answered and first and row.parse_mode is not None:
            self.score = attempt_validity(
                row.strict_code,
                row.lenient_code,
                row.parsed_changes,
                set(row.snapshot_ids),
                row.scope_id,
                row.validation_code,
            )


def judged_first(rows: Sequence[AttemptRow]) -> list[bool]:
    """Per attempt row: is it the first answered one of its (replicate, model, request)?"""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for r in rows:
        key = (r.replicate, r.model, r.request_hash)
        out.append(not r.answered or key not in seen)
        if r.answered:
            seen.add(key)
    return out


class PassUnit(list[AttemptRow]):
    """One pass's attempt rows (retries included), in order; `repeated` when the
    pass resent a request byte-identical to one an earlier pass of its scope and
    replicate sent and failed with (a frozen queue)."""

    repeated: bool = False


def pass_units_in_order(rows: Sequence[AttemptRow]) -> list[PassUnit]:
    """Group attempt rows into passes, in (replicate, scope, pass) order, marking repeats."""
    by: dict[tuple[Any, ...], PassUnit] = {}
    for a in rows:
        key = (str(a.replicate), a.scope_id, a.pass_)
        by.setdefault(key, PassUnit()).append(a)
    failed: set[tuple[Any, ...]] = set()
    out = []
    for key in sorted(by):
        unit = by[key]
        h = unit[0].request_hash
        seen = (key[0], key[1], h)
        unit.repeated = seen in failed
        if unit[-1].outcome != "ok":
            failed.add(seen)
        out.append(unit)
    return out


@dataclass(frozen=True, slots=True)
class RowUnit:
    """A live row at the end of a scope, by the gold fact it matched."""

    fact: Label
    live_gold: frozenset[str]
    stale_gold: frozenset[str]
    gold: bool = True
    """False when the source has no gold memory for the scope (tau-bench, SWE-agent):
    every row metric is then undefined (NaN), never 0."""


@dataclass(frozen=True, slots=True)
class FactUnit:
    """A live gold fact at the end of a scope, and whether a live row covers it."""

    fact: str
    covered: bool


@dataclass(frozen=True, slots=True)
class RolloutUnit:
    """A staged rollout at the end of a scope: "consumed", "pending" or "parked"."""

    state: str
