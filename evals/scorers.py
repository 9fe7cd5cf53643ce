"""Metric definitions: pure functions over recorded results, one per number.

Every metric here is computed for one *unit* (a probe, a block, a write, a
consolidation attempt) from plain values, so it can be checked by hand; the
bottom of this module registers each reported metric once in
`evals.registry` (name, unit, definition, direction, pooled) as a small
function of a unit. Aggregation over units lives in `evals.aggregate`,
intervals in `evals.stats`. A probe's returned list is
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

Why over 600 lines: the last ~300 lines register every reported metric (one
small function of a unit each) beside the definitions they call, so a metric
is read, defined and registered in one file.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evals.baselines import (
    random_ndcg_at_k,
    random_precision_at_k,
    random_recall_at_k,
    random_reciprocal_rank,
)
from evals.registry import add, register
from evals.rows import AttemptRow, ProbeRow, WriteRow
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


# --- units: one recorded thing each metric below is computed from ----------------


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


# --- the registered metrics --------------------------------------------------------

K_VALUES: tuple[int, ...] = (1, 3, 8)
"""The k of P@k; recall@k uses those above 1."""


def _defined(fn: Any) -> Any:
    """A relevance metric: NaN on a probe whose relevance is undefined."""
    return lambda p, *a: NAN if p.undefined else fn(p, *a)


def _defined_pair(fn: Any) -> Any:
    """A pooled relevance metric: (NaN, NaN), dropped, on an undefined probe."""
    return lambda p, *a: (NAN, NAN) if p.undefined else fn(p, *a)


def _probe(name: str, definition: str, direction: str, family: str, **kw: Any) -> Any:
    return register(
        name, unit="probe", definition=definition, direction=direction, family=family, **kw
    )


def _ranking_metric(
    name: str,
    definition: str,
    system: Any,
    random: Any,
    lists: tuple[str, ...] = (),
    baseline_lists: tuple[str, ...] = (),
) -> None:
    """A ranking metric and its two baselines (`<name>_full`, `<name>_random`; see the
    module docstring), registered side by side so every table lists them together.
    `system(labels, scores, relevant)` scores a ranking (scores None: use the order);
    `random(candidates, relevant)` is its expectation over random orders. The baselines
    join the headline only where `baseline_lists` says so (recall@8's), so the first
    screen keeps its height; every table below lists them all."""
    _probe(name, definition, "higher", "ranking", lists=lists)(
        _defined(lambda p: system(p.labels, p.scores, p.relevant))
    )
    near = baseline_lists
    _probe(
        f"{name}_full",
        f"{name} of the same store's full ranking: floor off, every live candidate ranked "
        "(baseline: what the floor's cut costs or saves)",
        "higher",
        "ranking",
        lists=near,
    )(_defined(lambda p: NAN if p.full is None else system(p.full, None, p.relevant)))
    _probe(
        f"{name}_random",
        f"expected {name} of a uniformly random order of the full ranking's candidates, "
        "computed exactly (baseline: what ranking adds over chance)",
        "higher",
        "ranking",
        lists=near,
    )(_defined(lambda p: NAN if p.full is None else random(p.full, p.relevant)))


_ranking_metric(
    "precision_returned",
    "mean over probes with a relevant fact and a non-empty list of distinct relevant "
    "facts returned / returned (a repeat counts as a miss); its baselines return every "
    "candidate, so full and random agree",
    lambda labels, _s, rel: precision_of_returned(labels, rel),
    lambda cands, rel: precision_of_returned(cands, rel),
    lists=("compare", "sweep"),
)
for _k in K_VALUES:
    _ranking_metric(
        f"p_at_{_k}",
        f"mean over probes with a relevant fact of distinct relevant facts in top {_k} / {_k} "
        "(short lists padded with misses, repeats count as misses)",
        lambda labels, _s, rel, k=_k: precision_at_k(labels, rel, k),
        lambda cands, rel, k=_k: random_precision_at_k(cands, rel, k),
        lists=("headline", "breakdown", "compare", "sweep") if _k == 1 else (),
    )
for _k in K_VALUES[1:]:
    _ranking_metric(
        f"recall_at_{_k}",
        f"mean over probes with relevant facts: distinct relevant in top {_k} / relevant",
        lambda labels, _s, rel, k=_k: recall_at_k(labels, rel, k),
        lambda cands, rel, k=_k: random_recall_at_k(cands, rel, k),
        lists=("headline", "breakdown", "compare", "sweep") if _k == 8 else (),
        baseline_lists=("headline",) if _k == 8 else (),
    )

_ranking_metric(
    "mrr",
    "mean over probes with a relevant fact of 1 / rank of the first relevant item, ranked by "
    "score with ties broken by returned order",
    lambda labels, scores, rel: reciprocal_rank(labels, rel, scores),
    random_reciprocal_rank,
    lists=("headline", "breakdown", "compare", "sweep"),
)
_ranking_metric(
    "mrr_pessimistic",
    "mean reciprocal rank ranked by score with ties broken against relevant items "
    "(never above mrr); the full ranking has no recorded scores, so its baseline is "
    "mrr_full's",
    lambda labels, scores, rel: (
        reciprocal_rank(labels, rel)
        if scores is None
        else reciprocal_rank_pessimistic(labels, scores, rel)
    ),
    random_reciprocal_rank,
)
_ranking_metric(
    "ndcg_at_8",
    "mean nDCG@8, binary gains, repeats of a fact gain 0",
    lambda labels, _s, rel: ndcg_at_k(labels, rel, 8),
    lambda cands, rel: random_ndcg_at_k(cands, rel, 8),
    lists=("headline", "breakdown", "compare", "sweep"),
)
_probe(
    "empty_recall",
    "share of probes where recall returned nothing",
    "neutral",
    "block",
    lists=("sweep",),
)(lambda p: float(not p.labels))
_probe(
    "offtopic_silence",
    "share of probes without a relevant fact whose block is empty (nothing injected)",
    "higher",
    "block",
    lists=("headline", "sweep"),
)(_defined(lambda p: NAN if p.relevant else float(not p.admitted)))
_probe(
    "offtopic_bytes",
    "mean over probes without a relevant fact of bytes injected (rendered block)",
    "lower",
    "offtopic_bytes",
    lists=("headline",),
)(_defined(lambda p: NAN if p.relevant else float(p.block_bytes)))
_probe(
    "budget_waste",
    "wasted / admitted entry bytes, pooled over probes (superseded+duplicate+irrelevant)",
    "lower",
    "waste",
    pooled=True,
    lists=("headline", "breakdown", "compare", "sweep"),
)(_defined_pair(lambda p: (p.waste.wasted, p.waste.admitted)))
_probe(
    "supersede_leakage",
    "share of probes whose block admits a retracted or superseded fact",
    "lower",
    "block",
    lists=("headline", "breakdown", "compare", "sweep"),
)(lambda p: float(leaked(p.admitted, p.stale)))
_probe(
    "relevant_shut_out",
    "mean per probe of relevant facts recalled but not admitted",
    "lower",
    "per_probe_count",
    lists=("headline",),
)(_defined(lambda p: relevant_shut_out(p.labels, p.admitted, p.relevant)))
_probe(
    "waste_irrelevant",
    "irrelevant / admitted entry bytes, pooled over probes",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.irrelevant, p.waste.admitted)))
_probe(
    "waste_duplicate",
    "bytes of a fact already admitted in the block / admitted bytes, pooled",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.duplicate, p.waste.admitted)))
_probe(
    "waste_superseded",
    "bytes of retracted or superseded facts / admitted bytes, pooled",
    "lower",
    "waste",
    pooled=True,
)(_defined_pair(lambda p: (p.waste.superseded, p.waste.admitted)))
_probe(
    "clamp_stopped",
    "share of probes whose block the byte budget stopped",
    "neutral",
    "block",
)(lambda p: float(p.stopped))


def _write(name: str, definition: str, direction: str, **kw: Any) -> Any:
    return register(name, unit="write", definition=definition, direction=direction, **kw)


_write(
    "fold_recall",
    "restatements folded into their own fact's row / restatements, pooled by fact",
    "higher",
    family="fold",
    pooled=True,
    lists=("headline", "sweep"),
)(lambda ws: (lambda c: (c.folded_restatements, c.restatements))(fold_outcomes(ws)))
_write(
    "false_fold_rate",
    "writes folded into another fact's row / writes, pooled by fact",
    "lower",
    family="fold",
    pooled=True,
    lists=("headline", "sweep"),
)(lambda ws: (lambda c: (c.false_folds, c.writes))(fold_outcomes(ws)))
_write(
    "rows_per_fact",
    "mean over facts of distinct rows the fact's writes landed in (1 is ideal)",
    "lower",
    family="rows_per_fact",
    lists=("sweep",),
)(lambda ws: float(rows_per_fact(ws)[ws[0].fact_id]))


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


register(
    "group_fold_recall",
    unit="fold_group",
    definition="writes of a labelled fold group (MSC merge) after its first, folded into a row "
    "of the same group / such writes, pooled by group",
    direction="higher",
    family="fold",
    pooled=True,
)(lambda g: (g.folded_in_group, g.later))
register(
    "group_false_fold_rate",
    unit="fold_group",
    definition="writes of a labelled fold group folded into another group's row / writes, "
    "pooled by group",
    direction="lower",
    family="fold",
    pooled=True,
)(lambda g: (g.false_folds, g.writes))

_probe(
    "dedup_recall",
    "removals that leave another copy of the fact admitted / true duplicates (copies of a "
    "fact already earlier in the recalled list), pooled",
    "higher",
    "dedup",
    pooled=True,
    lists=("headline",),
)(lambda p: (p.dedup.removed_true, p.dedup.true_duplicates))
_probe(
    "dedup_precision",
    "removals that leave another copy of the fact admitted / entries removed as "
    "paraphrases, pooled",
    "higher",
    "dedup",
    pooled=True,
)(lambda p: (p.dedup.removed_true, p.dedup.removed))
_probe(
    "dedup_bytes_saved",
    "mean per probe of clamped bytes of entries removed as paraphrases",
    "higher",
    "dedup_bytes",
)(lambda p: p.dedup.bytes_saved)


def _attempt(name: str, definition: str, direction: str, family: str, **kw: Any) -> Any:
    return register(
        name, unit="attempt", definition=definition, direction=direction, family=family, **kw
    )


def _judged(fn: Any) -> Any:
    """An attempt metric defined only on answered attempts (NaN otherwise)."""
    return lambda a: NAN if a.score is None else fn(a.score)


_attempt(
    "strict_validity",
    "share of distinct answered requests whose answer parses strictly and is valid",
    "higher",
    "validity",
    lists=("headline", "compare"),
)(_judged(lambda s: float(s.strict_valid)))
_attempt(
    "valid_after_repair",
    "share of distinct answered requests whose answer is valid after the lenient repair",
    "higher",
    "validity",
    lists=("headline", "compare"),
)(_judged(lambda s: float(s.valid_after_repair)))
_attempt(
    "empty_proposal_share",
    "share of distinct answered requests whose answer parses strictly, is valid and proposes "
    'no change ({"changes": []}); strict_validity = this + nonempty_valid',
    "neutral",
    "validity",
    lists=("headline", "compare"),
)(_judged(lambda s: float(s.strict_valid and s.changes == 0)))
_attempt(
    "nonempty_valid",
    "share of distinct answered requests whose answer parses strictly, is valid and proposes "
    "at least one change",
    "higher",
    "validity",
    lists=("headline", "compare"),
)(_judged(lambda s: float(s.strict_valid and s.changes > 0)))
_attempt(
    "hallucinated_ids",
    "mean per distinct answered request of ids not in the pass snapshot",
    "lower",
    "per_attempt_count",
    lists=("headline", "compare"),
)(_judged(lambda s: float(s.hallucinated_ids)))


def _register_error_codes() -> None:
    for c in PROPOSAL_CODES:
        _attempt(
            f"error_{c}",
            f"share of distinct answered requests whose pass was refused with code {c}",
            "lower",
            "errors",
        )(_judged(lambda s, c=c: float(s.error_code == c)))


_register_error_codes()
_attempt(
    "hallucinating_attempts",
    "share of distinct answered requests naming at least one unknown id",
    "lower",
    "validity",
)(_judged(lambda s: float(s.hallucinated_ids > 0)))
_attempt(
    "widening_attempts",
    "share of distinct answered requests with an entry naming another scope",
    "lower",
    "validity",
)(_judged(lambda s: float(s.widening > 0)))
for _op in ("add", "merge", "retract"):
    _attempt(
        f"op_{_op}",
        f"share of proposed changes that are {_op}s, pooled over distinct requests",
        "neutral",
        "op_mix",
        pooled=True,
    )(
        lambda a, op=_op: (
            (NAN, NAN)
            if a.score is None
            else (float(a.score.ops.get(op, 0)), float(a.score.changes))
        )
    )
_attempt(
    "changes_per_proposal",
    "mean changes per parsed proposal (distinct requests)",
    "neutral",
    "per_attempt_count",
    lists=("compare",),
)(lambda a: NAN if a.score is None or a.row.parsed_changes is None else float(a.score.changes))


def _made(fn: Any) -> Any:
    """An attempt metric undefined (NaN) on a replay's request not in its recording."""
    return lambda a: NAN if a.missed else fn(a)


_attempt(
    "provider_failures",
    "share of attempts without an answer (provider error)",
    "lower",
    "validity",
)(_made(lambda a: float(not a.answered)))
_attempt("input_tokens", "mean input tokens per attempt", "lower", "tokens")(
    _made(lambda a: float(a.row.input_tokens))
)
_attempt("output_tokens", "mean output tokens per attempt", "lower", "tokens")(
    _made(lambda a: float(a.row.output_tokens))
)

register(
    "extraction_recall",
    unit="fact",
    definition="share of expected live gold facts covered by a live row (matcher)",
    direction="higher",
    family="extraction",
    lists=("headline", "breakdown", "compare"),
)(lambda f: float(f.covered))
register(
    "extraction_precision",
    unit="row",
    definition="share of live rows matched to a live gold fact (matcher)",
    direction="higher",
    family="extraction",
    lists=("headline", "breakdown", "compare"),
)(lambda r: float(r.fact is not None and r.fact in r.live_gold) if r.gold else NAN)
register(
    "stale_rows",
    unit="row",
    definition="share of live rows holding a retracted or superseded gold fact",
    direction="lower",
    family="extraction",
)(lambda r: float(r.fact is not None and r.fact in r.stale_gold) if r.gold else NAN)

register(
    "parked_rollouts",
    unit="rollout",
    definition=(
        "share of staged rollouts parked at the end of the scope (3 invalid answers; "
        "memkit extension of SPEC §7.8)"
    ),
    direction="lower",
    family="rollouts",
)(lambda r: float(r.state == "parked"))
register(
    "pending_rollouts",
    unit="rollout",
    definition="share of staged rollouts still pending at the end of the scope (never committed)",
    direction="lower",
    family="rollouts",
)(lambda r: float(r.state == "pending"))


def _unpriced(row: AttemptRow) -> bool:
    """An answer LiteLLM's price map could not price (its cost is unknown, not $0)."""
    return row.answered and bool(row.cost_note)


_attempt(
    "cost_usd",
    "mean USD per attempt (LiteLLM bundled price map)",
    "lower",
    "usd",
    lists=("headline",),
)(_made(lambda a: NAN if _unpriced(a.row) else float(a.row.cost_usd)))


def _pass(name: str, definition: str, family: str, lists: tuple[str, ...] = ()) -> Any:
    reg = register(
        name, unit="pass", definition=definition, direction="lower", family=family, lists=lists
    )
    # a pass whose request was not in the replay's recording asked no model: undefined
    return lambda fn: reg(
        lambda rows: NAN if any(r.outcome == "replay_miss" for r in rows) else fn(rows)
    )


_pass(
    "tokens_per_pass",
    "mean input+output tokens per consolidation pass (retries included)",
    "tokens",
    lists=("compare",),
)(lambda rows: float(sum(r.input_tokens + r.output_tokens for r in rows)))
# an answer the price map cannot price makes its attempt and pass cost undefined, not $0
_pass("cost_usd_per_pass", "mean USD per consolidation pass (retries included)", "usd")(
    lambda rows: NAN if any(_unpriced(r) for r in rows) else float(sum(r.cost_usd for r in rows))
)
_pass("attempts_per_pass", "mean model attempts per pass (1 + provider retries)", "attempts")(
    lambda rows: float(len(rows))
)
_pass(
    "repeated_requests",
    "share of passes whose request is identical to one an earlier pass of the scope failed with",
    "repeats",
)(lambda p: float(p.repeated))

# computed outside the unit functions: wall-clock latency (latency.json) and the
# matcher's own accuracy on labelled pairs (matcher.json)
for _name, _unit, _text in (
    ("latency_p50_s", "attempt", "median attempt latency, seconds"),
    ("latency_p95_s", "attempt", "95th percentile attempt latency, seconds"),
    ("latency_mean_s", "attempt", "mean attempt latency, seconds"),
    ("pass_wall_p50_s", "pass", "median wall-clock seconds per consolidation pass"),
    ("pass_wall_p95_s", "pass", "95th percentile wall-clock seconds per consolidation pass"),
):
    add(_name, unit=_unit, definition=_text, direction="lower", family="seconds")
for _name, _text in (
    ("matcher_precision", "matcher rule as paraphrase classifier on labelled pairs: precision"),
    ("matcher_recall", "matcher rule as paraphrase classifier on labelled pairs: recall"),
):
    add(_name, unit="pair", definition=_text, direction="higher", family="matcher", pooled=True)
