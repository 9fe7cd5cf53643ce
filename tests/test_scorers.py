"""Each metric against hand-computed fixtures: empty recall, no relevant facts,
ties, duplicates and a block the clamp stopped."""

from __future__ import annotations

import math

import pytest
import row_fixtures

from evals.rows import AttemptRow, RowError
from evals.scorers import (
    Write,
    attempt_validity,
    budget_waste,
    dedup_counts,
    extraction_counts,
    fold_outcomes,
    leaked,
    ndcg_at_k,
    precision_at_k,
    precision_of_returned,
    recall_at_k,
    reciprocal_rank,
    reciprocal_rank_pessimistic,
    relevant_shut_out,
    rows_per_fact,
)
from memkit.errors import ConfigError

nan = math.isnan
REL = {"f1", "f2"}


# --- precision ---------------------------------------------------------------


def test_precision_of_returned_fixtures():
    assert nan(precision_of_returned([], REL))  # empty recall: undefined
    assert precision_of_returned(["f1", "x", None, "f2"], REL) == 0.5
    assert nan(precision_of_returned(["x", "y"], set()))  # no relevant facts: undefined
    assert precision_of_returned(["f1", "f1"], REL) == 0.5  # a repeat is a miss


def test_precision_at_k_fixtures():
    assert precision_at_k([], REL, 3) == 0.0  # empty list: all misses
    assert precision_at_k(["f1", "x", "f2", "f2"], REL, 2) == 0.5
    assert precision_at_k(["f1", "x", "f2", "f2"], REL, 4) == 0.5  # f2 counts once
    assert precision_at_k(["f1"], REL, 4) == 0.25  # short list padded
    assert nan(precision_at_k(["f1"], set(), 1))


def test_precision_differs_from_p_at_k():
    labels = ["f1"]
    assert precision_of_returned(labels, REL) == 1.0
    assert precision_at_k(labels, REL, 8) == 0.125


def test_k_bound():
    assert precision_at_k(["f1"], REL, 1) == 1.0
    with pytest.raises(ConfigError, match="0"):
        precision_at_k(["f1"], REL, 0)
    with pytest.raises(ConfigError):
        recall_at_k(["f1"], REL, 0)
    with pytest.raises(ConfigError):
        ndcg_at_k(["f1"], REL, 0)


# --- recall@k ----------------------------------------------------------------


def test_recall_at_k_fixtures():
    assert recall_at_k([], REL, 8) == 0.0
    assert nan(recall_at_k(["f1"], set(), 8))  # no relevant facts
    assert recall_at_k(["x", "f1", "f1", "f2"], REL, 3) == 0.5  # repeats count once
    assert recall_at_k(["x", "f1", "f1", "f2"], REL, 4) == 1.0


# --- MRR ----------------------------------------------------------------------


def test_reciprocal_rank_fixtures():
    assert reciprocal_rank([], REL) == 0.0
    assert nan(reciprocal_rank(["f1"], set()))
    assert reciprocal_rank(["x", None, "f2"], REL) == pytest.approx(1 / 3)
    assert reciprocal_rank(["f2", "f1"], REL) == 1.0


def test_ties_change_mrr():
    labels, scores = ["x", "f1", "y"], [0.5, 0.5, 0.1]
    assert reciprocal_rank(labels, REL) == 0.5  # returned order breaks the tie
    assert reciprocal_rank_pessimistic(labels, scores, REL) == 0.5
    # relevant first in returned order, but tied with two misses
    labels, scores = ["f1", "x", "y"], [0.5, 0.5, 0.5]
    assert reciprocal_rank(labels, REL) == 1.0
    assert reciprocal_rank_pessimistic(labels, scores, REL) == pytest.approx(1 / 3)


def test_pessimistic_rr_fixtures():
    assert reciprocal_rank_pessimistic([], [], REL) == 0.0
    assert nan(reciprocal_rank_pessimistic(["f1"], [1.0], set()))
    assert reciprocal_rank_pessimistic(["x", "f2"], [0.9, 0.3], REL) == 0.5
    with pytest.raises(ConfigError, match="2 labels but 1 scores"):
        reciprocal_rank_pessimistic(["x", "f2"], [0.9], REL)


# --- nDCG ----------------------------------------------------------------------


def test_ndcg_fixtures():
    assert ndcg_at_k([], REL, 8) == 0.0
    assert nan(ndcg_at_k(["f1"], set(), 8))
    assert ndcg_at_k(["f1", "f2"], REL, 8) == 1.0
    # hit at rank 2 only, ideal has two hits: (1/log2 3) / (1 + 1/log2 3)
    g = 1 / math.log2(3)
    assert ndcg_at_k(["x", "f1"], REL, 8) == pytest.approx(g / (1 + g))
    # repeat of f1 gains nothing: DCG = 1, IDCG = 1 + g
    assert ndcg_at_k(["f1", "f1"], REL, 8) == pytest.approx(1 / (1 + g))
    # k=1 cuts both the list and the ideal
    assert ndcg_at_k(["f1", "x"], REL, 1) == 1.0


# --- leakage -------------------------------------------------------------------


def test_leaked_fixtures():
    assert leaked([], {"old"}) is False
    assert leaked(["f1", None], {"old"}) is False
    assert leaked(["f1", "old"], {"old"}) is True
    assert leaked(["old"], set()) is False


# --- budget waste ----------------------------------------------------------------


def test_budget_waste_fixtures():
    empty = budget_waste([], REL)
    assert empty.admitted == 0 and nan(empty.share)
    w = budget_waste([("f1", 100), ("f1", 50), ("x", 30), (None, 20), ("old", 40)], REL, {"old"})
    assert (w.admitted, w.duplicate, w.irrelevant, w.superseded) == (240, 50, 50, 40)
    assert w.share == pytest.approx(140 / 240)
    # no relevant facts: every byte is irrelevant
    assert budget_waste([("x", 10), ("y", 5)], set()).share == 1.0
    # a stale fact repeated is counted as superseded both times, never twice
    w = budget_waste([("old", 10), ("old", 10)], {"old"}, {"old"})
    assert (w.superseded, w.duplicate, w.irrelevant) == (20, 0, 0)
    with pytest.raises(ConfigError, match="-1"):
        budget_waste([("f1", -1)], REL)


def test_relevant_shut_out_by_clamp():
    # recall returned f1, f2, x; the clamp stopped after f1
    assert relevant_shut_out(["f1", "f2", "x"], ["f1"], REL) == 1
    assert relevant_shut_out([], [], REL) == 0
    assert relevant_shut_out(["f1", "f2"], ["f1", "f2"], REL) == 0
    assert relevant_shut_out(["f1", "f2"], [], set()) == 0  # no relevant facts


# --- fold-in ---------------------------------------------------------------------


def test_fold_outcomes_fixtures():
    assert nan(fold_outcomes([]).fold_recall)
    writes = [
        Write("a", False, "r1", False, None),
        Write("a", True, "r1", True, "a"),  # folded into own row
        Write("a", True, "r2", False, None),  # missed fold: a second row
        Write("b", False, "r1", True, "a"),  # distinct fact folded into a's row
    ]
    c = fold_outcomes(writes)
    assert (c.restatements, c.folded_restatements, c.writes, c.false_folds) == (2, 1, 4, 1)
    assert c.fold_recall == 0.5 and c.false_fold_rate == 0.25
    assert rows_per_fact(writes) == {"a": 2, "b": 1}
    # a restatement that folded into the wrong row is not a fold hit
    c = fold_outcomes([Write("a", True, "r9", True, "z")])
    assert (c.folded_restatements, c.false_folds) == (0, 1)


# --- dedup -----------------------------------------------------------------------


def test_dedup_counts_fixtures():
    empty = dedup_counts([], [], [])
    assert nan(empty.recall) and nan(empty.precision) and empty.bytes_saved == 0
    rec = [("a", 10), ("a", 12), ("b", 7), ("a", 9)]
    c = dedup_counts(rec, [False, True, True, False], ["a", "a"])
    assert (c.true_duplicates, c.removed, c.removed_true, c.bytes_saved) == (2, 2, 1, 19)
    assert c.recall == 0.5 and c.precision == 0.5
    # unmatched entries are never true duplicates
    c = dedup_counts([(None, 5), (None, 5)], [False, True], [None])
    assert (c.true_duplicates, c.precision) == (0, 0.0)
    with pytest.raises(ConfigError, match="2 entries but 1"):
        dedup_counts([("a", 1), ("a", 1)], [True], [])


# --- proposal validity ---------------------------------------------------------------


def test_attempt_validity_fixtures():
    snap, scope = {"m1", "m2"}, "s"
    ok = attempt_validity(None, None, [{"ids": [], "entry": {"content": "x"}}], snap, scope)
    assert ok.strict_valid and ok.valid_after_repair and ok.ops == {"add": 1}
    fenced = attempt_validity("parse", None, [], snap, scope)
    assert not fenced.strict_valid and fenced.valid_after_repair and fenced.changes == 0
    assert fenced.error_code == "parse"
    bad = attempt_validity(
        "parse",
        "unknown_id",
        [
            {"ids": ["m1", "zz", "yy"], "entry": {"content": "c", "scope_id": "other"}},
            {"ids": ["m2"], "entry": None},
            {"ids": [], "entry": None},
        ],
        snap,
        scope,
    )
    assert not bad.valid_after_repair and bad.error_code == "parse"
    assert bad.hallucinated_ids == 2 and bad.widening == 1
    assert bad.ops == {"merge": 1, "retract": 1, "invalid": 1} and bad.changes == 3
    failed = attempt_validity("parse", "parse", None, snap, scope)
    assert not failed.valid_after_repair and failed.changes == 0
    with pytest.raises(ConfigError, match="'lenient'"):
        attempt_validity("lenient", None, [], snap, scope)
    with pytest.raises(ConfigError, match="strictly valid"):
        attempt_validity(None, "unknown_id", [], snap, scope)


def test_attempt_validity_sees_what_the_validator_sees():
    """#19's traps: a null scope_id hiding `scope`, and ids given as a bare string."""
    from memkit.errors import ProposalError
    from memkit.proposal import validate_changes

    hidden = [{"ids": [], "entry": {"content": "c", "scope_id": None, "scope": "other"}}]
    s = attempt_validity(None, None, hidden, set(), "s")
    assert s.widening == 1
    with pytest.raises(ProposalError) as e:
        validate_changes("s", ["a" * 64], [], hidden)
    assert e.value.code == "scope_widening"  # the validator agrees
    own = [{"ids": [], "entry": {"content": "c", "scope_id": None, "scope": "s"}}]
    assert attempt_validity(None, None, own, set(), "s").widening == 0
    bare = [{"ids": "zz", "entry": None}, {"ids": "m1", "entry": None}]
    assert attempt_validity("parse", "parse", bare, {"m1"}, "s").hallucinated_ids == 1


def _answered(request_hash, strict, lenient, changes=(), **kw):
    return row_fixtures.attempt(
        request_hash=request_hash,
        raw_response="...",
        parse_mode="failed" if strict else "strict",
        validation_code=strict,
        strict_code=strict,
        lenient_code=lenient,
        parsed_changes=list(changes),
        **kw,
    )


def _defined(values):
    return [v for v in values.nums if not math.isnan(v)]


def test_attempt_metrics_score_the_recorded_readings_once_per_distinct_request():
    from evals.aggregate import attempt_metrics

    rows = [
        _answered("h1", "parse", None),  # fenced but valid
        _answered("h1", "parse", None),  # the same request again (a freeze): not a new sample
        _answered("h1", "parse", None, replicate=1),  # another replicate is
        _answered("h2", "parse", "unknown_id", [{"ids": ["zz"], "entry": None}]),
        _answered("h3", None, None),
        row_fixtures.attempt(request_hash="h4", outcome="server"),
    ]
    m = attempt_metrics(rows)
    assert _defined(m["strict_validity"]) == [0.0, 0.0, 0.0, 1.0]
    assert _defined(m["valid_after_repair"]) == [1.0, 1.0, 0.0, 1.0]
    assert _defined(m["hallucinated_ids"]) == [0.0, 0.0, 1.0, 0.0]
    assert m["provider_failures"].nums == [0.0] * 5 + [1.0]  # every call counts here
    older = _answered("h1", None, None).to_json()
    del older["lenient_code"]  # a row from before the strict/lenient readings
    with pytest.raises(RowError, match=r"run:7: field 'lenient_code' is missing"):
        AttemptRow.from_json(older, "run:7")


def test_repeated_requests_count_resends_of_a_failed_request():
    from evals.aggregate import pass_metrics, pass_units

    def p(i, h, outcome, scope="s", rep=0):
        return row_fixtures.attempt(
            scope_id=scope, request_hash=h, outcome=outcome, replicate=rep, **{"pass": i}
        )

    rows = [
        p(0, "a", "invalid"),
        p(1, "a", "rate_limit"),  # a retry inside pass 1 ...
        p(1, "a", "parse"),  # ... then its answer: pass 1 repeats failed pass 0
        p(2, "b", "ok"),
        p(3, "b", "ok"),  # identical to a committed one: not a freeze
        p(10, "a", "ok"),  # after pass 2 in pass order (not "10" < "2")
        p(0, "a", "invalid", scope="t"),  # another scope starts clean
        p(1, "a", "invalid", rep=1),  # so does another replicate
    ]
    got = {
        (r[0].replicate, r[0].scope_id, r[0].pass_): v
        for (_, r), v in zip(
            pass_units(rows),
            pass_metrics(rows)["repeated_requests"].nums,
            strict=True,
        )
    }
    assert got == {
        (0, "s", 0): 0.0,
        (0, "s", 1): 1.0,
        (0, "s", 2): 0.0,
        (0, "s", 3): 0.0,
        (0, "s", 10): 1.0,
        (0, "t", 0): 0.0,
        (1, "s", 1): 0.0,
    }
    assert pass_metrics(rows)["attempts_per_pass"].nums.count(2.0) == 1


# --- extraction --------------------------------------------------------------------


def test_extraction_counts_fixtures():
    empty = extraction_counts([], set())
    assert nan(empty.precision) and nan(empty.recall)
    c = extraction_counts(["a", "a", None, "old"], {"a", "b"}, {"old"})
    assert (c.rows, c.rows_matched, c.gold, c.gold_covered, c.stale_rows) == (4, 2, 2, 1, 1)
    assert c.precision == 0.5 and c.recall == 0.5
    assert extraction_counts([], {"a"}).recall == 0.0


def test_pass_metrics_sum_retries_per_pass():
    from evals.aggregate import pass_metrics

    assert pass_metrics([])["tokens_per_pass"].nums == []
    a = row_fixtures.attempt
    rows = [
        a(**{"pass": 0}, input_tokens=10, output_tokens=5, cost_usd=0.1),
        a(**{"pass": 0}, input_tokens=10, output_tokens=0, cost_usd=0.1),
        a(**{"pass": 1}, input_tokens=3, output_tokens=1, cost_usd=0.0),
    ]
    m = pass_metrics(rows)
    assert m["tokens_per_pass"].nums == [25.0, 4.0]
    assert m["cost_usd_per_pass"].nums == pytest.approx([0.2, 0.0])
    assert m["attempts_per_pass"].nums == [2.0, 1.0]


def test_aggregation_of_probe_rows_clamp_stopped_block():
    from evals.aggregate import estimate, probe_metrics

    row = row_fixtures.probe(
        relevant=["f1", "f2"],
        recalled=[
            {"fact": "f1", "score": 0.9, "bytes": 600, "removed": False},
            {"fact": "x", "score": 0.8, "bytes": 600, "removed": False},
            {"fact": "f2", "score": 0.7, "bytes": 600, "removed": False},
        ],
        admitted=[{"fact": "f1", "bytes": 600}, {"fact": "x", "bytes": 600}],
        stopped=["id-f2"],
    )
    m = probe_metrics([row])
    assert estimate(m["relevant_shut_out"]).value == 1.0
    assert estimate(m["clamp_stopped"]).value == 1.0
    assert estimate(m["budget_waste"]).value == 0.5
    assert estimate(m["recall_at_3"]).value == 1.0
    assert estimate(m["p_at_1"]).value == 1.0


def test_rows_per_fact_fixtures():
    assert rows_per_fact([]) == {}
    one = [Write("a", False, "r1", False, None), Write("a", True, "r1", True, "a")]
    assert rows_per_fact(one) == {"a": 1}  # ideal: every restatement folded
    # a false fold puts two facts in one row: each still counts that row once
    shared = [Write("a", False, "r1", False, None), Write("b", False, "r1", True, "a")]
    assert rows_per_fact(shared) == {"a": 1, "b": 1}
    missed = [
        Write("a", False, "r1", False, None),
        Write("a", True, "r2", False, None),
        Write("a", True, "r3", False, None),
    ]
    assert rows_per_fact(missed) == {"a": 3}


def test_pass_metrics_more_fixtures():
    from evals.aggregate import pass_metrics

    # passes are keyed by scope and replicate too: same pass index, different units
    a = row_fixtures.attempt
    rows = [
        a(input_tokens=1, output_tokens=1),
        a(scope_id="t", input_tokens=2, output_tokens=2),
        a(replicate=1, input_tokens=4, output_tokens=0),
    ]
    assert sorted(pass_metrics(rows)["tokens_per_pass"].nums) == [2.0, 4.0, 4.0]
    # no usage (a provider failure) counts as zero, the attempt still counts
    m = pass_metrics([a(outcome="server", **{"pass": 3})])
    assert m["tokens_per_pass"].nums == [0.0] and m["attempts_per_pass"].nums == [1.0]


# --- the audit's findings (issue #19), each a hand-computed fixture ------------------


def _probe_row(relevant, recalled, admitted=None, block_bytes=None):
    """A probes.jsonl row: recalled is [(fact, score, bytes, removed)], admitted facts."""
    rec = [{"fact": f, "score": s, "bytes": b, "removed": r} for f, s, b, r in recalled]
    adm = [{"fact": f, "bytes": b} for f, _, b, r in recalled if not r]
    if admitted is not None:
        adm = [{"fact": f, "bytes": b} for f, b in admitted]
    account = {} if block_bytes is None else {"block_bytes": block_bytes}
    return row_fixtures.probe(relevant=relevant, recalled=rec, admitted=adm, account=account)


def test_p_at_k_is_undefined_without_a_relevant_fact():
    # an off-topic probe that returns nothing is right, not a miss
    assert nan(precision_at_k([], set(), 1))
    assert nan(precision_at_k(["x"], set(), 1))
    assert nan(precision_of_returned(["x", "y"], set()))
    from evals.aggregate import estimate, probe_metrics

    rows = [
        _probe_row(["f1"], [("f1", 0.9, 10, False)]),
        _probe_row([], []),  # off-topic, silent
        _probe_row([], [("x", 0.4, 30, False)]),  # off-topic, injects junk
    ]
    m = probe_metrics(rows)
    assert estimate(m["p_at_1"]).value == 1.0 and estimate(m["p_at_1"]).n == 1
    assert estimate(m["precision_returned"]).value == 1.0
    # off-topic probes have their own metrics: 1 of 2 silent, (0 + 30) / 2 bytes
    assert estimate(m["offtopic_silence"]).value == 0.5
    assert estimate(m["offtopic_silence"]).n == 2
    assert estimate(m["offtopic_bytes"]).value == 15.0


def test_offtopic_bytes_reads_the_rendered_block():
    from evals.aggregate import estimate, probe_metrics

    rows = [_probe_row([], [("x", 0.4, 30, False)], block_bytes=96), _probe_row(["f1"], [])]
    m = probe_metrics(rows)
    assert estimate(m["offtopic_bytes"]).value == 96.0
    assert estimate(m["offtopic_bytes"]).n == 1  # the on-topic probe is not a unit


def test_repeats_of_one_fact_count_once_in_precision():
    three = ["f1", "f1", "f1"]
    assert precision_at_k(three, REL, 3) == pytest.approx(1 / 3)
    assert precision_of_returned(three, REL) == pytest.approx(1 / 3)
    assert precision_at_k(["f1", "f2", "f1"], REL, 3) == pytest.approx(2 / 3)
    assert precision_of_returned(["f1", "x", "f1", "f2"], REL) == 0.5


def test_pessimistic_mrr_sorts_by_score_first():
    # not sorted by score: both rank by score; the pessimistic one never above mrr
    labels, scores = ["x", "f1"], [0.1, 0.5]
    assert reciprocal_rank(labels, REL, scores) == 1.0
    assert reciprocal_rank_pessimistic(labels, scores, REL) == 1.0
    labels, scores = ["f1", "x"], [0.1, 0.5]
    assert reciprocal_rank(labels, REL, scores) == 0.5
    assert reciprocal_rank_pessimistic(labels, scores, REL) == 0.5
    from evals.aggregate import estimate, probe_metrics

    m = probe_metrics([_probe_row(["f1"], [("x", 0.1, 5, False), ("f1", 0.5, 5, False)])])
    assert estimate(m["mrr_pessimistic"]).value <= estimate(m["mrr"]).value


def test_pessimistic_mrr_never_above_mrr_property():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    item = st.tuples(st.sampled_from(["f1", "f2", "x", None]), st.sampled_from([0.1, 0.5, 0.9]))

    @settings(max_examples=300, deadline=None)
    @given(st.lists(item, max_size=8))
    def check(items):
        labels = [f for f, _ in items]
        scores = [s for _, s in items]
        rr = reciprocal_rank(labels, REL, scores)
        pess = reciprocal_rank_pessimistic(labels, scores, REL)
        assert pess <= rr
        if labels == [f for f, _ in sorted(items, key=lambda t: -t[1])]:
            # a list in score order: mrr is its returned-order rank
            assert rr == reciprocal_rank(labels, REL)

    check()


def test_dedup_removing_the_only_surviving_copy_is_not_correct():
    # two copies of f1: the first shut out by the clamp, the second removed as its
    # paraphrase, so the block keeps no copy of f1 at all
    c = dedup_counts([("f1", 10), ("f1", 10)], [False, True], admitted=[])
    assert (c.true_duplicates, c.removed, c.removed_true) == (1, 1, 0)
    assert c.precision == 0.0 and c.recall == 0.0
    # the same removal with the first copy admitted is correct
    c = dedup_counts([("f1", 10), ("f1", 10)], [False, True], admitted=["f1"])
    assert (c.removed_true, c.precision, c.recall) == (1, 1.0, 1.0)
