"""Pipeline metrics: consolidation attempts and passes, extraction, rollouts, and
the names computed outside a unit (latency, the matcher's accuracy).

Definitions in `evals.scorers`; units are `evals.units.AttemptUnit`, `PassUnit`,
`RowUnit`, `FactUnit` and `RolloutUnit`.
"""

from __future__ import annotations

import math
from typing import Any

from evals.registry import add, register
from evals.rows import AttemptRow
from memkit.errors import PROPOSAL_CODES

NAN = math.nan


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
