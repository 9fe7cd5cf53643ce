"""Metric definitions: pure functions over recorded results, one per number.

Every metric here is computed for one *unit* (a probe, a block, a write, a
consolidation attempt) from plain values, so it can be checked by hand and
aggregated with a bootstrap CI by `evals.stats`. A probe's returned list is
given as *labels*: for each returned memory, in returned order, the gold
fact id it was matched to (or None when it matches no gold fact).

Definitions (the names are the ones reports print):

- `precision_of_returned`: relevant returned / returned; NaN (n/a) when the
  list is empty. Duplicates of a relevant fact count as relevant.
- `precision_at_k`: relevant among the top k / k; an empty or short list is
  padded with misses, so this is 0 for an empty list.
- `recall_at_k`: distinct relevant facts among the top k / relevant facts;
  NaN when the probe has no relevant facts.
- `reciprocal_rank`: 1 / rank of the first relevant item in *returned order*
  (ties in score are broken by the order the store returned); 0 when none is
  returned; NaN without relevant facts. `reciprocal_rank_pessimistic` breaks
  score ties against the relevant item instead, to show what ties are worth.
- `ndcg_at_k`: binary gains (1 for the first occurrence of each relevant fact,
  0 for repeats and misses), discount 1/log2(rank+1), normalised by the ideal
  list of min(k, |relevant|) hits; NaN without relevant facts.
- `leaked`: the admitted block holds an entry of a fact that is retracted or
  superseded at probe time (supersede leakage is the share of probes).
- `budget_waste`: of the admitted entry bytes, those spent on superseded
  entries (fact stale at probe time), duplicates (fact already admitted
  earlier in the block) or irrelevant entries (fact not relevant, or
  unmatched), each byte counted once in that order of precedence.
- `relevant_shut_out`: distinct relevant facts that recall returned but the
  block did not admit (the clamp or dedup lost them).
- `fold_outcomes`: per fact write, whether a restatement folded into its own
  fact's row (fold recall), whether any write folded into another fact's row
  (false fold), and rows per fact.
- `dedup_counts`: inside one recalled list, true duplicates are entries whose
  fact already appeared earlier in the list; dedup recall = removed true
  duplicates / true duplicates, precision = removed true duplicates /
  removed, bytes saved = bytes of removed entries.
- `attempt_validity`: strict / after-repair validity, error code, hallucinated
  ids, scope-widening entries, op mix and change count of one attempt.
- `extraction_counts`: live rows matched to live gold facts (precision) and
  live gold facts covered by a live row (recall), at the end of a scope.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memkit.errors import ConfigError

NAN = math.nan
Label = str | None


def _check_k(k: int) -> None:
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k!r}")


# --- ranking ----------------------------------------------------------------


def precision_of_returned(labels: Sequence[Label], relevant: Collection[str]) -> float:
    """Relevant returned / returned; NaN for an empty list."""
    if not labels:
        return NAN
    return sum(1 for f in labels if f is not None and f in relevant) / len(labels)


def precision_at_k(labels: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """Relevant among the first k returned / k (a short list counts as misses)."""
    _check_k(k)
    return sum(1 for f in labels[:k] if f is not None and f in relevant) / k


def recall_at_k(labels: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """Distinct relevant facts among the first k / relevant facts; NaN if none."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    return len({f for f in labels[:k] if f in rel}) / len(rel)


def reciprocal_rank(labels: Sequence[Label], relevant: Collection[str]) -> float:
    """1 / (1-based rank of the first relevant item in returned order); 0 if none."""
    if not relevant:
        return NAN
    for i, f in enumerate(labels):
        if f is not None and f in relevant:
            return 1.0 / (i + 1)
    return 0.0


def reciprocal_rank_pessimistic(
    labels: Sequence[Label], scores: Sequence[float], relevant: Collection[str]
) -> float:
    """Reciprocal rank with score ties broken against relevant items.

    The best relevant item's rank is 1 + the items scoring strictly higher +
    the irrelevant items scoring exactly the same.
    """
    if len(labels) != len(scores):
        raise ConfigError(f"{len(labels)} labels but {len(scores)} scores")
    if not relevant:
        return NAN
    hits = [s for f, s in zip(labels, scores, strict=True) if f is not None and f in relevant]
    if not hits:
        return 0.0
    best = max(hits)
    above = sum(1 for s in scores if s > best)
    tied_misses = sum(
        1
        for f, s in zip(labels, scores, strict=True)
        if s == best and not (f is not None and f in relevant)
    )
    return 1.0 / (1 + above + tied_misses)


def ndcg_at_k(labels: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """nDCG@k with binary gains; repeats of an already-credited fact gain 0."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    seen: set[str] = set()
    dcg = 0.0
    for i, f in enumerate(labels[:k]):
        if f in rel and f not in seen:
            seen.add(f)
            dcg += 1.0 / math.log2(i + 2)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(rel))))
    return dcg / ideal


# --- the block ---------------------------------------------------------------


def leaked(admitted: Iterable[Label], stale: Collection[str]) -> bool:
    """True when an admitted entry's fact is retracted or superseded (stale)."""
    return any(f is not None and f in stale for f in admitted)


@dataclass(frozen=True, slots=True)
class Waste:
    """Admitted entry bytes by what they were spent on (one block)."""

    admitted: int
    superseded: int
    duplicate: int
    irrelevant: int

    @property
    def wasted(self) -> int:
        return self.superseded + self.duplicate + self.irrelevant

    @property
    def share(self) -> float:
        """Wasted / admitted bytes; NaN for an empty block."""
        return self.wasted / self.admitted if self.admitted else NAN


def budget_waste(
    admitted: Sequence[tuple[Label, int]],
    relevant: Collection[str],
    stale: Collection[str] = (),
) -> Waste:
    """Split the admitted entry bytes of one block into useful and wasted.

    `admitted` is (fact label, entry bytes) per admitted entry, in block order.
    Precedence: superseded, then duplicate, then irrelevant.
    """
    total = sup = dup = irr = 0
    seen: set[str] = set()
    for f, n in admitted:
        if n < 0:
            raise ConfigError(f"entry bytes must be >= 0, got {n!r}")
        total += n
        if f is not None and f in stale:
            sup += n
        elif f is not None and f in seen:
            dup += n
        elif f is None or f not in relevant:
            irr += n
        if f is not None:
            seen.add(f)
    return Waste(total, sup, dup, irr)


def relevant_shut_out(
    recalled: Iterable[Label], admitted: Iterable[Label], relevant: Collection[str]
) -> int:
    """Distinct relevant facts recalled but absent from the admitted block."""
    got = {f for f in recalled if f is not None and f in relevant}
    return len(got - {f for f in admitted if f is not None})


# --- fold-in -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Write:
    """One store-mode write of a gold fact and where it landed."""

    fact_id: str
    restatement: bool
    """Not the fact's first evidence (its row should absorb this write)."""
    row_id: str
    folded: bool
    row_fact_id: str | None
    """The fact the row held before this write (None for a fresh insert)."""


@dataclass(frozen=True, slots=True)
class FoldCounts:
    restatements: int
    folded_restatements: int
    writes: int
    false_folds: int

    @property
    def fold_recall(self) -> float:
        """Restatements folded into their own fact's row / restatements."""
        return self.folded_restatements / self.restatements if self.restatements else NAN

    @property
    def false_fold_rate(self) -> float:
        """Writes folded into another fact's row / writes."""
        return self.false_folds / self.writes if self.writes else NAN


def fold_outcomes(writes: Sequence[Write]) -> FoldCounts:
    """Count fold recall and false folds over a sequence of writes."""
    rest = folded_ok = false = 0
    for w in writes:
        own = w.folded and w.row_fact_id == w.fact_id
        if w.restatement:
            rest += 1
            folded_ok += own
        if w.folded and w.row_fact_id != w.fact_id:
            false += 1
    return FoldCounts(rest, folded_ok, len(writes), false)


def rows_per_fact(writes: Sequence[Write]) -> dict[str, int]:
    """Distinct rows each fact's writes landed in (1 is ideal)."""
    rows: dict[str, set[str]] = {}
    for w in writes:
        rows.setdefault(w.fact_id, set()).add(w.row_id)
    return {f: len(r) for f, r in sorted(rows.items())}


# --- dedup -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DedupCounts:
    true_duplicates: int
    removed: int
    removed_true: int
    bytes_saved: int

    @property
    def recall(self) -> float:
        return self.removed_true / self.true_duplicates if self.true_duplicates else NAN

    @property
    def precision(self) -> float:
        return self.removed_true / self.removed if self.removed else NAN


def dedup_counts(recalled: Sequence[tuple[Label, int]], removed: Sequence[bool]) -> DedupCounts:
    """Score paraphrase removal on one recalled list.

    `recalled` is (fact label, entry bytes) in recall order; `removed[i]` says
    the assembler dropped entry i as a paraphrase. An unmatched entry is never
    a true duplicate.
    """
    if len(recalled) != len(removed):
        raise ConfigError(f"{len(recalled)} entries but {len(removed)} removal flags")
    seen: set[str] = set()
    true_dup = rem = rem_true = saved = 0
    for (f, n), r in zip(recalled, removed, strict=True):
        dup = f is not None and f in seen
        true_dup += dup
        if r:
            rem += 1
            rem_true += dup
            saved += n
        if f is not None:
            seen.add(f)
    return DedupCounts(true_dup, rem, rem_true, saved)


# --- consolidation attempts ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptScore:
    strict_valid: bool
    """Parsed strictly and passed validation."""
    valid_after_repair: bool
    """Parsed strictly or after the lenient repair, and passed validation."""
    error_code: str | None
    hallucinated_ids: int
    """Ids in the proposal that are not in the pass's snapshot."""
    widening: int
    """Entries naming a scope other than the pass's."""
    ops: Mapping[str, int]
    changes: int


def _ops(changes: Sequence[Any]) -> Counter[str]:
    c: Counter[str] = Counter()
    for ch in changes:
        if not isinstance(ch, Mapping):
            c["invalid"] += 1
            continue
        ids, entry = ch.get("ids") or [], ch.get("entry")
        if ids and entry is not None:
            c["merge"] += 1
        elif ids:
            c["retract"] += 1
        elif entry is not None:
            c["add"] += 1
        else:
            c["invalid"] += 1
    return c


def attempt_validity(
    parse_mode: str,
    error_code: str | None,
    changes: Sequence[Any] | None,
    snapshot_ids: Collection[str],
    scope_id: str,
) -> AttemptScore:
    """Score one consolidation attempt from its recorded outcome.

    `parse_mode` is "strict", "repaired" or "failed"; `error_code` the
    validation (or parse) code, None when valid; `changes` the parsed raw
    changes (None when unparsable).
    """
    if parse_mode not in ("strict", "repaired", "failed"):
        raise ConfigError(f"unknown parse mode {parse_mode!r}")
    ok = error_code is None and parse_mode != "failed"
    raw = list(changes or [])
    halluc = widen = 0
    for ch in raw:
        if not isinstance(ch, Mapping):
            continue
        ids = ch.get("ids") or []
        if isinstance(ids, list):
            halluc += sum(1 for i in ids if isinstance(i, str) and i not in snapshot_ids)
        entry = ch.get("entry")
        if isinstance(entry, Mapping):
            s = entry.get("scope_id", entry.get("scope"))
            widen += s not in (None, "", scope_id)
    return AttemptScore(
        strict_valid=ok and parse_mode == "strict",
        valid_after_repair=ok,
        error_code=error_code,
        hallucinated_ids=halluc,
        widening=widen,
        ops=dict(_ops(raw)),
        changes=len(raw),
    )


# --- extraction ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtractionCounts:
    rows: int
    rows_matched: int
    gold: int
    gold_covered: int
    stale_rows: int
    """Live rows that hold a retracted or superseded gold fact."""

    @property
    def precision(self) -> float:
        return self.rows_matched / self.rows if self.rows else NAN

    @property
    def recall(self) -> float:
        return self.gold_covered / self.gold if self.gold else NAN


def extraction_counts(
    row_labels: Sequence[Label], live_gold: Collection[str], stale_gold: Collection[str] = ()
) -> ExtractionCounts:
    """Compare a scope's live rows (by matched fact) with its live gold facts."""
    live = set(live_gold)
    matched = sum(1 for f in row_labels if f is not None and f in live)
    stale = sum(1 for f in row_labels if f is not None and f in stale_gold)
    covered = len({f for f in row_labels if f in live})
    return ExtractionCounts(len(row_labels), matched, len(live), covered, stale)
