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
from memkit.proposal import raw_op, unknown_ids, widening_entries

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
    return AttemptScore(
        strict_valid=ok and parse_mode == "strict",
        valid_after_repair=ok,
        error_code=error_code,
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


# --- aggregation over run-file rows (value + bootstrap CI per metric) ------------

K_VALUES: tuple[int, ...] = (1, 3, 8)

DEFINITIONS: dict[str, str] = {
    "precision_returned": "mean over probes with a non-empty list of relevant returned / returned",
    "p_at_{k}": "mean over probes of relevant in top {k} / {k} (short lists padded with misses)",
    "recall_at_{k}": (
        "mean over probes with relevant facts: distinct relevant in top {k} / relevant"
    ),
    "mrr": "mean reciprocal rank of the first relevant item, ties broken by returned order",
    "mrr_pessimistic": "mean reciprocal rank with score ties broken against relevant items",
    "ndcg_at_8": "mean nDCG@8, binary gains, repeats of a fact gain 0",
    "empty_recall": "share of probes where recall returned nothing",
    "supersede_leakage": "share of probes whose block admits a retracted or superseded fact",
    "budget_waste": (
        "wasted / admitted entry bytes, pooled over probes (superseded+duplicate+irrelevant)"
    ),
    "waste_irrelevant": "irrelevant / admitted entry bytes, pooled over probes",
    "waste_duplicate": "bytes of a fact already admitted in the block / admitted bytes, pooled",
    "waste_superseded": "bytes of retracted or superseded facts / admitted bytes, pooled",
    "relevant_shut_out": "mean per probe of relevant facts recalled but not admitted",
    "clamp_stopped": "share of probes whose block the byte budget stopped",
    "dedup_recall": "removed true duplicates / true duplicates in recalled lists, pooled",
    "dedup_precision": "removed true duplicates / entries removed as paraphrases, pooled",
    "dedup_bytes_saved": "mean per probe of clamped bytes of entries removed as paraphrases",
    "fold_recall": "restatements folded into their own fact's row / restatements, pooled by fact",
    "false_fold_rate": "writes folded into another fact's row / writes, pooled by fact",
    "rows_per_fact": "mean over facts of distinct rows the fact's writes landed in (1 is ideal)",
    "group_fold_recall": (
        "writes of a labelled fold group (MSC merge) after its first, folded into a row of "
        "the same group / such writes, pooled by group"
    ),
    "group_false_fold_rate": (
        "writes of a labelled fold group folded into another group's row / writes, pooled by group"
    ),
    "strict_validity": "share of answered attempts parsed strictly and valid",
    "valid_after_repair": "share of answered attempts valid after the lenient repair",
    "error_{code}": "share of answered attempts rejected with code {code}",
    "hallucinated_ids": "mean per answered attempt of ids not in the pass snapshot",
    "hallucinating_attempts": "share of answered attempts naming at least one unknown id",
    "widening_attempts": "share of answered attempts with an entry naming another scope",
    "op_{op}": "share of proposed changes that are {op}s, pooled over attempts",
    "changes_per_proposal": "mean changes per parsed proposal",
    "provider_failures": "share of attempts without an answer (provider error)",
    "input_tokens": "mean input tokens per attempt",
    "output_tokens": "mean output tokens per attempt",
    "cost_usd": "mean USD per attempt (LiteLLM bundled price map)",
    "tokens_per_pass": "mean input+output tokens per consolidation pass (retries included)",
    "cost_usd_per_pass": "mean USD per consolidation pass (retries included)",
    "attempts_per_pass": "mean model attempts per pass (1 + provider retries)",
    "latency_p50_s": "median attempt latency, seconds",
    "latency_p95_s": "95th percentile attempt latency, seconds",
    "extraction_precision": "share of live rows matched to a live gold fact (matcher)",
    "extraction_recall": "share of expected live gold facts covered by a live row (matcher)",
    "stale_rows": "share of live rows holding a retracted or superseded gold fact",
    "matcher_precision": "matcher rule as paraphrase classifier on labelled pairs: precision",
    "matcher_recall": "matcher rule as paraphrase classifier on labelled pairs: recall",
    "undefined_{reason}": (
        "share of probes whose relevance metrics are undefined ({reason}); they are left "
        "out of every relevance metric, never scored 0"
    ),
}


def definition(metric: str) -> str:
    """The printed definition of a metric name (templated names resolved)."""
    from evals.retrieval import DEFINITIONS as RETRIEVAL

    if metric in DEFINITIONS:
        return DEFINITIONS[metric]
    if metric in RETRIEVAL:
        return RETRIEVAL[metric]
    for key, text in DEFINITIONS.items():
        if "{" not in key:
            continue
        prefix = key.split("{")[0]
        if metric.startswith(prefix):
            arg = metric[len(prefix) :]
            return (
                text.replace("{k}", arg)
                .replace("{code}", arg)
                .replace("{op}", arg)
                .replace("{reason}", arg)
            )
    return ""


def _labels(row: Mapping[str, Any]) -> list[Label]:
    return [r["fact"] for r in row["recalled"]]


def probe_metrics(
    probes: Sequence[Mapping[str, Any]], *, include_apart: bool = False
) -> dict[str, tuple[list, list | None]]:
    """Per-probe unit values for every probe metric.

    Returns metric -> (values, None) for means, or (numerators, denominators)
    for pooled ratios; `evals.stats` turns each into an Estimate. A row marked
    `undefined` (e.g. LoCoMo `unmapped`: evidence no gold fact cites) has no
    relevance-based metric (never a 0, never off-topic) and counts in
    `undefined_<reason>`; rows marked `apart` (LoCoMo adversarial) are left
    out unless `include_apart` (their group's table). Rows with a `ranking`
    also give LongMemEval's retrieval metrics (`evals.retrieval`).
    """
    from evals.retrieval import retrieval_metrics

    out: dict[str, tuple[list, list | None]] = {}

    def add(name: str, v: float, den: float | None = None) -> None:
        nums, dens = out.setdefault(name, ([], None if den is None else []))
        nums.append(v)
        if dens is not None:
            dens.append(den)

    probes = [r for r in probes if include_apart or not r.get("apart")]
    reasons = sorted({str(r["undefined"]) for r in probes if r.get("undefined")})
    for row in probes:
        labels = _labels(row)
        rel = set(row["relevant"])
        stale = set(row.get("stale") or ())
        scores = [r["score"] for r in row["recalled"]]
        admitted = [a["fact"] for a in row["admitted"]]
        for reason in reasons:
            add(f"undefined_{reason}", float(row.get("undefined") == reason))
        add("empty_recall", float(not labels))
        add("supersede_leakage", float(leaked(admitted, stale)))
        add("clamp_stopped", float(bool(row.get("stopped"))))
        d = dedup_counts(
            [(r["fact"], r["bytes"]) for r in row["recalled"]],
            [bool(r.get("removed")) for r in row["recalled"]],
        )
        add("dedup_recall", d.removed_true, d.true_duplicates)
        add("dedup_precision", d.removed_true, d.removed)
        add("dedup_bytes_saved", d.bytes_saved)
        if row.get("undefined"):
            continue
        add("precision_returned", precision_of_returned(labels, rel))
        for k in K_VALUES:
            add(f"p_at_{k}", precision_at_k(labels, rel, k))
        for k in K_VALUES[1:]:
            add(f"recall_at_{k}", recall_at_k(labels, rel, k))
        add("mrr", reciprocal_rank(labels, rel))
        add("mrr_pessimistic", reciprocal_rank_pessimistic(labels, scores, rel))
        add("ndcg_at_8", ndcg_at_k(labels, rel, 8))
        w = budget_waste([(a["fact"], a["bytes"]) for a in row["admitted"]], rel, stale)
        add("budget_waste", w.wasted, w.admitted)
        add("waste_irrelevant", w.irrelevant, w.admitted)
        add("waste_duplicate", w.duplicate, w.admitted)
        add("waste_superseded", w.superseded, w.admitted)
        add("relevant_shut_out", relevant_shut_out(labels, admitted, rel))
    out.update(retrieval_metrics(probes))
    return out


def write_metrics(writes: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list, list | None]]:
    """Per-fact unit values for the fold-in metrics (facts are the resampled unit)."""
    by_fact: dict[tuple[str, str], list[Write]] = {}
    for w in writes:
        key = (w["scope_id"], w["fact"])
        by_fact.setdefault(key, []).append(
            Write(w["fact"], bool(w["restatement"]), w["row"], bool(w["folded"]), w["row_fact"])
        )
    rec_n, rec_d, ff_n, ff_d, rows = [], [], [], [], []
    for key in sorted(by_fact):
        ws = by_fact[key]
        c = fold_outcomes(ws)
        rec_n.append(c.folded_restatements)
        rec_d.append(c.restatements)
        ff_n.append(c.false_folds)
        ff_d.append(c.writes)
        rows.append(next(iter(rows_per_fact(ws).values())))
    out = {
        "fold_recall": (rec_n, rec_d),
        "false_fold_rate": (ff_n, ff_d),
        "rows_per_fact": (rows, None),
    }
    out.update(group_fold_metrics(writes))
    return out


def group_fold_metrics(writes: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list, list]]:
    """Fold-in scored against a source's labelled fold groups (MSC merges), pooled by group.

    Only writes carrying `group` (the fact's labelled group) and `row_group` (the
    group of the fact the row held before the write) count, and not a successor
    written as the `update` of its predecessor's row; none -> no metrics.
    A write whose group already holds a written row should fold into a row of
    its group (`group_fold_recall`); a fold into another group's row is a false
    fold (`group_false_fold_rate`).
    """
    by: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for w in writes:
        if w.get("group") is not None and not w.get("update"):
            by.setdefault((w["scope_id"], w["group"]), []).append(w)
    if not by:
        return {}
    rec_n, rec_d, ff_n, ff_d = [], [], [], []
    for key in sorted(by):
        seen = ok = wrong = 0
        for i, w in enumerate(by[key]):
            if i > 0:  # the group already has a row
                seen += 1
                ok += bool(w["folded"]) and w.get("row_group") == w["group"]
            wrong += bool(w["folded"]) and w.get("row_group") != w["group"]
        rec_n.append(ok)
        rec_d.append(seen)
        ff_n.append(wrong)
        ff_d.append(len(by[key]))
    return {
        "group_fold_recall": (rec_n, rec_d),
        "group_false_fold_rate": (ff_n, ff_d),
    }


def attempt_metrics(attempts: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list, list | None]]:
    """Per-attempt unit values for validity, op mix and cost metrics.

    "Answered" attempts are those that returned text (a provider failure has
    no proposal to judge; it counts only in `provider_failures`).
    """
    from memkit.errors import PROPOSAL_CODES

    out: dict[str, tuple[list, list | None]] = {}

    def add(name: str, v: float, den: float | None = None) -> None:
        nums, dens = out.setdefault(name, ([], None if den is None else []))
        nums.append(v)
        if dens is not None:
            dens.append(den)

    for a in attempts:
        answered = a.get("raw_response") is not None
        add("provider_failures", float(not answered))
        add("input_tokens", float(a.get("input_tokens") or 0))
        add("output_tokens", float(a.get("output_tokens") or 0))
        add("cost_usd", float(a.get("cost_usd") or 0.0))
        add("latency_s", float(a.get("latency_s") or 0.0))
        if not answered:
            continue
        mode = a.get("parse_mode") or "failed"
        code = a.get("validation_code")
        if mode == "failed" and code is None:
            code = "parse"
        s = attempt_validity(
            mode, code, a.get("parsed_changes"), set(a.get("snapshot_ids") or ()), a["scope_id"]
        )
        add("strict_validity", float(s.strict_valid))
        add("valid_after_repair", float(s.valid_after_repair))
        for c in PROPOSAL_CODES:
            add(f"error_{c}", float(s.error_code == c))
        add("hallucinated_ids", float(s.hallucinated_ids))
        add("hallucinating_attempts", float(s.hallucinated_ids > 0))
        add("widening_attempts", float(s.widening > 0))
        for op in ("add", "merge", "retract"):
            add(f"op_{op}", float(s.ops.get(op, 0)), float(s.changes))
        if mode != "failed":
            add("changes_per_proposal", float(s.changes))
    return out


def pass_metrics(attempts: Sequence[Mapping[str, Any]]) -> dict[str, tuple[list, list | None]]:
    """Per-pass sums over a pass's attempts (retries included): the pass is the unit."""
    by: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for a in attempts:
        key = (a.get("scope_id"), a.get("replicate", 0), a.get("pass"))
        by.setdefault(key, []).append(a)
    tokens, cost, tries = [], [], []
    for key in sorted(by, key=str):
        rows = by[key]
        tokens.append(
            float(sum((r.get("input_tokens") or 0) + (r.get("output_tokens") or 0) for r in rows))
        )
        cost.append(float(sum(r.get("cost_usd") or 0.0 for r in rows)))
        tries.append(float(len(rows)))
    return {
        "tokens_per_pass": (tokens, None),
        "cost_usd_per_pass": (cost, None),
        "attempts_per_pass": (tries, None),
    }


def extraction_metrics(
    extraction: Sequence[Mapping[str, Any]],
) -> dict[str, tuple[list, list | None]]:
    """Rows and gold facts as units for extraction precision / recall."""
    prec, rec, stale = [], [], []
    for e in extraction:
        live, old = set(e["live_gold"]), set(e["stale_gold"])
        labels = [r["fact"] for r in e["rows"]]
        prec.extend(float(f is not None and f in live) for f in labels)
        stale.extend(float(f is not None and f in old) for f in labels)
        covered = {f for f in labels if f in live}
        rec.extend(float(f in covered) for f in sorted(live))
    return {
        "extraction_precision": (prec, None),
        "extraction_recall": (rec, None),
        "stale_rows": (stale, None),
    }


def estimate(values: tuple[list, list | None], *, seed: int = 0, resamples: int = 1000) -> Any:
    """An `Estimate` from (values, None) or (numerators, denominators)."""
    from evals.stats import bootstrap_mean, bootstrap_ratio

    nums, dens = values
    if dens is None:
        return bootstrap_mean(nums, seed=seed, resamples=resamples)
    return bootstrap_ratio(nums, dens, seed=seed, resamples=resamples)
