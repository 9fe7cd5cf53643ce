"""The gold matcher: its rule (threshold, margin, scope) and its self-measurement."""

from __future__ import annotations

import math

import pytest

from evals.matcher import Matcher, pair_accuracy, similarity
from memkit.errors import ConfigError

FACTS = [
    {
        "fact_id": "deploy",
        "scope_id": "s",
        "content": "The deploy script is ops/deploy.sh",
        "paraphrases": ["Deploys go through ops/deploy.sh"],
    },
    {
        "fact_id": "tabs",
        "scope_id": "s",
        "content": "The user prefers tabs over spaces in Go code",
        "paraphrases": [],
    },
    {"fact_id": "other", "scope_id": "t", "content": "The deploy script is ops/deploy.sh"},
]


def test_similarity_rule():
    assert similarity("Same  text ", "same text") == 1.0
    assert similarity("", "") == 0.0
    # containment only with >= 3 words on both sides
    assert similarity("deploy script", "the deploy script is ops/deploy.sh") < 1.0
    long = "the deploy script lives at ops/deploy.sh in the repo"
    assert similarity("deploy script ops", long) == 1.0


def test_match_canonical_and_paraphrase():
    m = Matcher(FACTS)
    assert m.match("The deploy script is ops/deploy.sh", "s").fact_id == "deploy"
    assert m.match("deploys go through ops/deploy.sh", "s").fact_id == "deploy"
    assert m.match("User prefers tabs over spaces in Go", "s").fact_id == "tabs"


def test_match_respects_scope():
    m = Matcher(FACTS)
    assert m.match("The deploy script is ops/deploy.sh", "t").fact_id == "other"
    assert m.match("The deploy script is ops/deploy.sh", "nowhere").fact_id is None


def test_unrelated_text_matches_nothing():
    r = Matcher(FACTS).match("The weather in Hanoi is humid", "s")
    assert r.fact_id is None and r.score < 0.5


def test_threshold_bound():
    text = "deploy script at ops"
    s = Matcher(FACTS).match(text, "s").score
    assert 0.5 < s < 1.0
    assert Matcher(FACTS, threshold=s).match(text, "s").fact_id == "deploy"  # at the bound
    assert Matcher(FACTS, threshold=s + 1e-9).match(text, "s").fact_id is None
    with pytest.raises(ConfigError, match=r"1\.5"):
        Matcher(FACTS, threshold=1.5)


def test_margin_makes_ambiguous_rows_unmatched():
    facts = [
        {"fact_id": "a", "scope_id": "s", "content": "alpha beta gamma delta"},
        {"fact_id": "b", "scope_id": "s", "content": "alpha beta gamma epsilon"},
    ]
    r = Matcher(facts, threshold=0.1, margin=0.0).match("alpha beta gamma", "s")
    assert r.fact_id == "a" and r.score == r.runner_up  # tie: first fact wins at margin 0
    assert Matcher(facts, threshold=0.1, margin=0.05).match("alpha beta gamma", "s").fact_id is None
    with pytest.raises(ConfigError, match=r"-0\.1"):
        Matcher(facts, margin=-0.1)


def test_among_restricts_candidates():
    m = Matcher(FACTS)
    assert m.match("The deploy script is ops/deploy.sh", "s", among=["tabs"]).fact_id is None


def test_pair_accuracy_counts():
    pairs = [
        {"a": "the cat sat on the mat", "b": "The cat sat on the mat.", "label": "paraphrase"},
        {"a": "a b c", "b": "x y z", "label": "distinct"},
        {"a": "ship it friday", "b": "friday we ship it", "label": "paraphrase"},
        {"a": "red green blue", "b": "red green blue yellow", "label": "distinct"},
    ]
    acc = pair_accuracy(pairs)
    assert (acc.n, acc.tp, acc.fp, acc.fn, acc.tn) == (4, 2, 1, 0, 1)
    assert acc.precision == pytest.approx(2 / 3) and acc.recall == 1.0
    d = acc.as_dict()
    assert d["n"] == 4 and d["recall"] == 1.0
    empty = pair_accuracy([])
    assert math.isnan(empty.precision) and empty.as_dict()["precision"] is None
    with pytest.raises(ConfigError, match="'maybe'"):
        pair_accuracy([{"a": "x", "b": "y", "label": "maybe"}])


def test_exact_text_wins_over_containment_ties():
    facts = [
        {"fact_id": "old", "scope_id": "s", "content": "activated within 14 days of signup"},
        {
            "fact_id": "new",
            "scope_id": "s",
            "content": "activated within 7 days of signup (changed from 14)",
        },
    ]
    m = Matcher(facts)
    # containment makes both score 1.0; the identical text decides
    assert m.match("activated within 14 days of signup", "s").fact_id == "old"
    assert m.match("Activated within 7 days of signup (changed from 14)", "s").fact_id == "new"
    assert m.match("activated within days of signup", "s").fact_id is None
