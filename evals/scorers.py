"""Metric definitions: pure functions over recorded results, one per number.

Every metric here is computed for one *unit* (a probe, a block, a write, a
consolidation attempt) from plain values, so it can be checked by hand. The
units themselves (one recorded row each) are `evals.units`; each reported
metric is registered once in `evals.registry`, as a small function of a unit,
by the module of its family in `evals.metrics`. Aggregation over units lives
in `evals.aggregate`, intervals in `evals.stats`. A probe's returned list is
given as *labels*: for each returned memory, in returned order, the gold
fact id it was matched to (or None when it matches no gold fact).

Definitions (the names are the ones reports print):

- `precision_of_returned`: distinct relevant facts returned / returned; NaN
  (n/a) when the list is empty or the probe has no relevant fact. A repeat
  of a relevant fact counts as a miss (as in recall and nDCG).
- `precision_at_k`: distinct relevant facts among the top k / k; a short
  list is padded with misses; NaN when the probe has no relevant fact (an
  off-topic probe is scored by `offtopic_silence` / `offtopic_bytes`).
- `recall_at_k`: distinct relevant facts among the top k / relevant facts;
  NaN when the probe has no relevant facts.
- `reciprocal_rank`: 1 / rank of the first relevant item, ranking by score
  (when given) with ties broken by the order the store returned; 0 when none
  is returned; NaN without relevant facts. `reciprocal_rank_pessimistic`
  ranks by score too but breaks ties against the relevant item, to show what
  ties are worth; it is never above `reciprocal_rank`.
- `ndcg_at_k`: binary gains (1 for the first occurrence of each relevant fact,
  0 for repeats and misses), discount 1/log2(rank+1), normalised by the ideal
  list of min(k, |relevant|) hits; NaN without relevant facts.
- Baselines: every ranking metric above is also registered as `<name>_full`
  (the same store's full ranking: the same query and tunables with the floor
  off, so every live candidate of the scope is ranked; recorded per probe as
  `full`) and `<name>_random` (the exact expectation of the metric over a
  uniformly random order of those same candidates, `evals.baselines`). Both
  are undefined when the probe recorded no full ranking (the keyword path
  answered, or a run from before baselines).
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
  fact already appeared earlier in the list; a removal is correct only when
  another copy of its fact stays admitted in the block; dedup recall =
  correct removals / true duplicates, precision = correct removals /
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

from evals.rows import WriteRow
from memkit.errors import PROPOSAL_CODES, ConfigError
from memkit.proposal import raw_op, unknown_ids, widening_entries

NAN = math.nan
Label = str | None


def _check_k(k: int) -> None:
    if k < 1:
        raise ConfigError(f"k must be >= 1, got {k!r}")


# --- ranking ----------------------------------------------------------------


def _distinct_hits(labels: Sequence[Label], relevant: Collection[str]) -> int:
    return len({f for f in labels if f is not None and f in relevant})


def precision_of_returned(labels: Sequence[Label], relevant: Collection[str]) -> float:
    """Distinct relevant facts returned / returned; NaN for an empty list or no relevant fact."""
    if not labels or not relevant:
        return NAN
    return _distinct_hits(labels, relevant) / len(labels)


def precision_at_k(labels: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """Distinct relevant facts among the first k / k (a short list counts as misses);
    NaN when the probe has no relevant fact."""
    _check_k(k)
    if not relevant:
        return NAN
    return _distinct_hits(labels[:k], relevant) / k


def recall_at_k(labels: Sequence[Label], relevant: Collection[str], k: int) -> float:
    """Distinct relevant facts among the first k / relevant facts; NaN if none."""
    _check_k(k)
    rel = set(relevant)
    if not rel:
        return NAN
    return len({f for f in labels[:k] if f in rel}) / len(rel)


def _by_score(labels: Sequence[Label], scores: Sequence[float], key: Any) -> list[Label]:
    if len(labels) != len(scores):
        raise ConfigError(f"{len(labels)} labels but {len(scores)} scores")
    order = sorted(range(len(labels)), key=lambda i: (-scores[i], key(i)))
    return [labels[i] for i in order]


def reciprocal_rank(
    labels: Sequence[Label], relevant: Collection[str], scores: Sequence[float] | None = None
) -> float:
    """1 / (1-based rank of the first relevant item); 0 if none.

    With `scores`, items rank by score first and ties keep returned order (a
    list the store returned in score order keeps its order); without, the
    returned order is the ranking.
    """
    if not relevant:
        return NAN
    if scores is not None:
        labels = _by_score(labels, scores, lambda i: i)
    for i, f in enumerate(labels):
        if f is not None and f in relevant:
            return 1.0 / (i + 1)
    return 0.0


def reciprocal_rank_pessimistic(
    labels: Sequence[Label], scores: Sequence[float], relevant: Collection[str]
) -> float:
    """Reciprocal rank by score with ties broken against relevant items.

    Sorting by score first makes it never exceed `reciprocal_rank(labels,
    relevant, scores)`: both rank by score, and only the tie-break differs.
    """
    ranked = _by_score(
        labels, scores, lambda i: (labels[i] is not None and labels[i] in relevant, i)
    )
    return reciprocal_rank(ranked, relevant)


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


@dataclass(frozen=True, slots=True)
class FoldGroupCounts:
    """One labelled fold group's writes (MSC merges: the facts a merged line folds in).

    Successors written as the `update` of a predecessor's row are not counted."""

    later: int
    """Writes after the group's first (the group already holds a row)."""
    folded_in_group: int
    """Of those, writes that folded into a row of the same group."""
    writes: int
    false_folds: int
    """Writes that folded into a row of another group."""


def fold_group_counts(writes: Sequence[WriteRow]) -> FoldGroupCounts:
    """Count one group's writes (rows of `writes.jsonl` carrying `group`, in order)."""
    later = ok = n = false = 0
    for w in writes:
        if w.update:
            continue
        folded, same = w.folded, w.row_group == w.group
        if n > 0:
            later += 1
            ok += folded and same
        false += folded and not same
        n += 1
    return FoldGroupCounts(later, ok, n, false)


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


def dedup_counts(
    recalled: Sequence[tuple[Label, int]], removed: Sequence[bool], admitted: Collection[Label]
) -> DedupCounts:
    """Score paraphrase removal on one recalled list.

    `recalled` is (fact label, entry bytes) in recall order; `removed[i]` says
    the assembler dropped entry i as a paraphrase; `admitted` holds the facts
    of the entries the block admitted. A removal is correct only when another
    copy of its fact stays admitted (removing the only surviving copy loses
    the fact). An unmatched entry is never a true duplicate.
    """
    if len(recalled) != len(removed):
        raise ConfigError(f"{len(recalled)} entries but {len(removed)} removal flags")
    kept = {f for f in admitted if f is not None}
    seen: set[str] = set()
    true_dup = rem = rem_true = saved = 0
    for (f, n), r in zip(recalled, removed, strict=True):
        true_dup += f is not None and f in seen
        if r:
            rem += 1
            rem_true += f is not None and f in kept
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


def attempt_validity(
    strict_code: str | None,
    lenient_code: str | None,
    changes: Sequence[Any] | None,
    snapshot_ids: Collection[str],
    scope_id: str,
    error_code: str | None = None,
) -> AttemptScore:
    """Score one answered consolidation attempt from its recorded readings.

    `strict_code` / `lenient_code` are the first failure code of the strict
    reading and of the lenient repair (None when valid), as the pass recorded
    them when it read the answer once; `changes` the parsed raw changes (None
    when unparsable); `error_code` the code that refused the pass (defaults
    to the strict one). Unknown ids and widening use `memkit.proposal`'s
    helpers, the validator's own rules.
    """
    for code in (strict_code, lenient_code, error_code):
        if code is not None and code not in PROPOSAL_CODES:
            raise ConfigError(f"unknown proposal error code {code!r}")
    if strict_code is None and lenient_code is not None:
        raise ConfigError(f"strictly valid but invalid after repair ({lenient_code!r})")
    raw = list(changes or [])
    return AttemptScore(
        strict_valid=strict_code is None,
        valid_after_repair=lenient_code is None,
        error_code=strict_code if error_code is None else error_code,
        hallucinated_ids=unknown_ids(raw, snapshot_ids),
        widening=widening_entries(raw, scope_id),
        ops=dict(Counter(raw_op(ch) for ch in raw)),
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
