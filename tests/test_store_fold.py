"""SPEC §1 and §3: records, write validation, redaction on write and fold-in."""

from __future__ import annotations

import math
import string

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_helpers import T0, Clock, TableEmbedder, remember_unfolded

from memkit.errors import ConfigError
from memkit.params import DAY, FoldParams, RedactionParams
from memkit.text import trigram_similarity

VOCAB = ["ab", "abc", "abcd", "bcd", "deploy", "deploys", "x", "xy", "kiem", "lai", "lain"]
WORDING_1 = "The deploy script lives at ops/deploy.sh in the main repo"
WORDING_2 = "The deploy script lives in ops/deploy.sh in the main repository"


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(make_store, clock):
    s = make_store(embedder=None, clock=clock)
    yield s
    s.close()


def letters(chars: str) -> str:
    """Single-character words: each contributes exactly two grams of its own
    ("  x", " x "), so similarity = |shared chars| / |all chars|."""
    return " ".join(chars)


# --- records and write validation (SPEC §1) -------------------------------------


def test_new_row_defaults(store, clock):
    r = store.remember("s", "Postgres is on version 16", source_run_id="run-1", tags=["db"])
    m = store.get("s", r.id)
    assert not r.folded
    assert (m.kind, m.seen_count, m.confidence) == ("fact", 1, 0.7)
    assert m.created_at == m.last_seen_at == clock.t
    assert m.superseded_by is None and m.live
    assert m.tags == ("db",) and m.source_run_id == "run-1"


@pytest.mark.parametrize("conf", [0.0, 1.0])
def test_confidence_bounds_accepted(store, conf):
    assert store.get("s", store.remember("s", "x fact", confidence=conf).id).confidence == conf


@pytest.mark.parametrize("conf", [-0.01, 1.01, math.nan])
def test_confidence_outside_unit_interval_rejected(store, conf):
    with pytest.raises(ConfigError, match="confidence"):
        store.remember("s", "x fact", confidence=conf)


def test_unknown_kind_and_blank_content_rejected(store):
    with pytest.raises(ConfigError, match="'opinion'"):
        store.remember("s", "x", kind="opinion")
    with pytest.raises(ConfigError, match="non-blank"):
        store.remember("s", "   ")
    assert store.stats("s")["rows"] == 0


# --- fold-in (SPEC §3) --------------------------------------------------------------


def test_two_wordings_fold_into_one_row(store, clock):
    assert trigram_similarity(WORDING_1, WORDING_2) >= 0.65
    a = store.remember("s", WORDING_1, confidence=0.6, tags=["old"], source_run_id="r1")
    created = store.get("s", a.id).created_at
    clock.advance(3600)
    b = store.remember("s", WORDING_2, confidence=0.7, tags=["new"])
    assert b == type(b)(id=a.id, folded=True)
    live = store.live("s")
    assert len(live) == 1
    m = live[0]
    assert m.seen_count == 2
    assert m.content == WORDING_2  # newest wording wins
    assert m.tags == ("new",)
    assert m.confidence == 0.7  # max(old, new)
    assert m.created_at == created and m.last_seen_at == clock.t
    assert m.source_run_id == "r1"  # replaced only when the new one is set


def test_fold_keeps_higher_old_confidence_and_replaces_run_id_when_set(store):
    a = store.remember("s", WORDING_1, confidence=0.9, source_run_id="r1")
    store.remember("s", WORDING_2, confidence=0.7, source_run_id="r2")
    m = store.get("s", a.id)
    assert m.confidence == 0.9 and m.source_run_id == "r2"


def test_same_words_under_another_kind_is_a_new_row(store):
    a = store.remember("s", WORDING_1, kind="fact")
    b = store.remember("s", WORDING_1, kind="procedure")
    assert not b.folded and b.id != a.id
    assert len(store.live("s")) == 2


def test_other_scope_is_never_a_target(store):
    a = store.remember("s1", WORDING_1)
    b = store.remember("s2", WORDING_1)
    assert not b.folded and b.id != a.id


def test_threshold_exact_fold_bound(make_store):
    # 13 shared of 20 distinct single-char words: similarity exactly 0.65.
    common = string.ascii_lowercase[:13]
    a = letters(common + "nopq")
    b = letters(common + "rst")
    assert trigram_similarity(a, b) == 0.65
    s = make_store(embedder=None, clock=Clock())
    s.remember("s", a)
    assert s.remember("s", b).folded
    # one past: 13 shared of 21 (0.619...) does not fold
    s2 = make_store(embedder=None, clock=Clock())
    c = letters(common + "rstu")
    assert trigram_similarity(a, c) < 0.65
    s2.remember("s", a)
    assert not s2.remember("s", c).folded


@pytest.mark.parametrize("delta, folds", [(0.0, True), (1e-9, False)])
def test_threshold_is_a_tunable_with_inclusive_bound(make_store, delta, folds):
    sim = trigram_similarity(WORDING_1, WORDING_2)
    s = make_store(embedder=None, fold=FoldParams(threshold=sim + delta))
    s.remember("s", WORDING_1)
    assert s.remember("s", WORDING_2).folded is folds


@pytest.mark.parametrize("age, folds", [(14 * DAY - 1, True), (14 * DAY, False)])
def test_window_is_strict(store, clock, age, folds):
    a = store.remember("s", WORDING_1)
    clock.advance(age)
    b = store.remember("s", WORDING_2)
    assert b.folded is folds
    assert (b.id == a.id) is folds


def test_window_is_a_tunable(make_store, clock):
    s = make_store(embedder=None, clock=clock, fold=FoldParams(window_days=1))
    s.remember("s", WORDING_1)
    clock.advance(DAY)
    assert not s.remember("s", WORDING_2).folded


def test_retracted_row_is_never_a_target(store):
    a = store.remember("s", WORDING_1)
    store.retract("s", a.id)
    b = store.remember("s", WORDING_1)
    assert not b.folded and b.id != a.id
    assert store.get("s", b.id).live and store.get("s", b.id).seen_count == 1
    assert store.get("s", a.id).superseded_by == a.id


def test_superseded_row_is_never_a_target(store):
    a = store.remember("s", WORDING_1)
    succ = store.update("s", a.id, "Deploy with make deploy from the repo root")
    b = store.remember("s", WORDING_1)
    assert not b.folded and b.id not in (a.id, succ)


def test_best_match_wins_among_two_distinct_targets(make_store, clock):
    s = make_store(embedder=None, clock=clock, fold=FoldParams(threshold=0.3))
    remember_unfolded(s, "s", [letters("abcdefgh"), letters("abcdwxyz")])
    res = s.remember("s", letters("abcdefgz"))  # 7/9 with the first, 5/11 with the second
    assert res.folded
    assert s.get("s", res.id).content == letters("abcdefgz")
    others = [m.content for m in s.live("s") if m.id != res.id]
    assert others == [letters("abcdwxyz")]


def test_empty_trigram_content_never_folds(store):
    store.remember("s", "!!!")
    assert not store.remember("s", "!!!").folded


def test_fold_scales_with_many_rows_same_answer(make_store, clock):
    """The trigram index probes only rare grams; it must find exactly what a full scan finds."""
    s = make_store(embedder=None, clock=clock)
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(vocab, 8, replace=False)) for _ in range(400)]
    remember_unfolded(s, "s", texts)
    probe = texts[123].split()
    probe[-1] = "zz"
    probe = " ".join(probe)
    expected = max(texts, key=lambda t: trigram_similarity(probe, t))
    assert trigram_similarity(probe, expected) >= 0.65
    res = s.remember("s", probe)
    assert res.folded
    assert len(s.live("s")) == 400
    assert expected not in [m.content for m in s.live("s")]


def test_refolding_updates_the_trigram_index(store):
    """After a fold the row is found by its new wording, not its old one."""
    a = store.remember("s", letters("abcdefghij"))
    store.remember("s", letters("abcdefghik"))  # 9/11 -> folds, content replaced
    res = store.remember("s", letters("abcdefghkl"))  # 9/11 with the new wording
    assert res.folded and res.id == a.id
    assert store.get("s", a.id).seen_count == 3


def test_lowering_the_fold_threshold_rebuilds_the_index_for_it(store):
    """The trigram index posts prefixes for the threshold it was built for; a
    lower threshold set later is served by a rebuilt index, not refused or missed."""
    a = store.remember("s", letters("abcdefghij"))
    assert not store.remember("s", letters("abcdefxyzw")).folded  # 6/14 < 0.65
    store.fold = FoldParams(threshold=0.4)
    res = store.remember("s", letters("efghijklmn"))  # 6/14 with the first row, 2/18 second
    assert res.folded and res.id == a.id
    store.fold = FoldParams(threshold=1.5)  # above 1: nothing folds, nothing breaks
    assert not store.remember("s", letters("efghijklmn")).folded


# --- embedding on write (SPEC §3.2) ---------------------------------------------------


def test_embedding_failure_stores_row_without_vector_reachable_by_keyword(make_store, clock):
    emb = TableEmbedder()
    s = make_store(embedder=emb, clock=clock)
    emb.fail = True
    r = s.remember("s", "Kiem Lai marketing lead is Alice")
    assert s.get("s", r.id).embedding is None
    emb.fail = False
    hits = s.recall("s", "marketing lead")
    assert [h.id for h in hits] == [r.id] and hits[0].path == "keyword"


def test_fold_replaces_embedding(make_store, clock):
    emb = TableEmbedder({WORDING_1: [1, 0, 0, 0], WORDING_2: [0, 1, 0, 0]})
    s = make_store(embedder=emb, clock=clock)
    a = s.remember("s", WORDING_1)
    s.remember("s", WORDING_2)
    np.testing.assert_allclose(s.get("s", a.id).embedding, [0, 1, 0, 0])
    hits = s.recall("s", "q", query_embedding=np.array([0, 1, 0, 0]))
    assert hits[0].id == a.id and hits[0].cosine == pytest.approx(1.0)


# --- redaction on write (SPEC §3.1) ---------------------------------------------------


def test_secrets_redacted_by_default(store):
    r = store.remember("s", "Use api_key=abcd1234efgh for staging", tags=["token: zzzzzzzz"])
    m = store.get("s", r.id)
    assert "abcd1234efgh" not in m.content and "[REDACTED]" in m.content
    assert m.tags == ("token: [REDACTED]",)


def test_pii_is_opt_in(make_store, clock):
    text = "Ask alice@example.com about the 10.0.0.12 box"
    plain = make_store(embedder=None, clock=clock)
    assert plain.get("s", plain.remember("s", text).id).content == text
    pii = make_store(embedder=None, clock=clock, redaction=RedactionParams(pii=True))
    got = pii.get("s", pii.remember("s", text).id).content
    assert "alice@example.com" not in got and "10.0.0.12" not in got


def test_redaction_can_be_disabled(make_store, clock):
    s = make_store(embedder=None, clock=clock, redaction=RedactionParams(secrets=False))
    text = "password=hunter22"
    assert s.get("s", s.remember("s", text).id).content == text


def test_fold_time_is_from_clock_not_wall(make_store, clock):
    clock.t = T0 - 100 * DAY
    s = make_store(embedder=None, clock=clock)
    a = s.remember("s", WORDING_1)
    assert s.get("s", a.id).created_at == T0 - 100 * DAY


# make_store opens a fresh store (on Postgres: a fresh schema) per example.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6), min_size=1, max_size=30
    ),
    probe=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6),
    threshold=st.sampled_from([0.3, 0.5, 0.65, 0.8, 1.0]),
)
def test_indexed_fold_target_equals_brute_force(make_store, rows, probe, threshold):
    """Prefix filtering and the overlap bounds never lose (or invent) a fold target."""
    s = make_store(embedder=None, fold=FoldParams(threshold=threshold))
    texts = [" ".join(r) for r in rows]
    remember_unfolded(s, "s", texts)
    p = " ".join(probe)
    sims = [trigram_similarity(p, t) for t in texts]
    best = max(sims)
    before = {m.id: m.content for m in s.live("s")}
    res = s.remember("s", p)
    assert res.folded is (best >= threshold)
    if res.folded:  # the target is a row with the best similarity
        assert trigram_similarity(p, before[res.id]) == best
    s.close()


# --- fold_target: the decision without the write ------------------------------------


def test_fold_target_names_what_remember_then_folds_into_and_writes_nothing(store, clock):
    assert store.fold_target("s", WORDING_2) is None  # empty scope: remember would insert
    first = store.remember("s", WORDING_1)
    store.remember("s", WORDING_1, kind="preference")  # another kind never folds in
    before = store.digest()
    target = store.fold_target("s", WORDING_2)
    assert target is not None and target.id == first.id and target.kind == "fact"
    assert store.digest() == before  # a read: nothing stored changed
    assert store.remember("s", WORDING_2) == type(first)(id=first.id, folded=True)
    assert store.fold_target("s", "weekly backup runs at noon in region west") is None
    assert store.fold_target("other", WORDING_2) is None  # scopes never mix
    clock.advance(15 * DAY)  # out of the window
    assert store.fold_target("s", WORDING_2) is None
    assert store.remember("s", WORDING_2).folded is False
    with pytest.raises(ConfigError):
        store.fold_target("s", "x", kind="gossip")


def test_fold_target_sees_another_connections_write(store_url, clock):
    from memkit.store import open_store

    a = open_store(store_url, embedder=None, clock=clock)
    b = open_store(store_url, embedder=None, clock=clock)
    try:
        assert b.fold_target("s", WORDING_2) is None  # b's indexes load, empty
        r = a.remember("s", WORDING_1)
        assert b.fold_target("s", WORDING_2).id == r.id
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("past", [0, 1])
def test_a_fresh_connection_reads_every_row_of_a_scope_of_one_read_chunk_and_one_past(
    store_url, clock, past
):
    """A writer's first fold-in reads the scope's rows in chunks (Postgres streams
    them `STREAM_ROWS` at a time, the build takes `BUILD_ROWS`): with exactly one
    chunk of rows, and with the last row one past it, every row is found."""
    from unittest.mock import patch

    import memkit.store.gram_index as gram_index
    import memkit.store.postgres as postgres
    from memkit.store import open_store

    texts = [f"note {i} about the {w} cluster" for i, w in enumerate(VOCAB[:6] + VOCAB[:1])]
    a = open_store(store_url, embedder=None, clock=clock)
    try:
        ids = remember_unfolded(a, "s", texts[: 6 + past])
    finally:
        a.close()
    with patch.object(postgres, "STREAM_ROWS", 6), patch.object(gram_index, "BUILD_ROWS", 6):
        b = open_store(store_url, embedder=None, clock=clock)
        try:
            for i, text in enumerate(texts[: 6 + past]):
                assert b.fold_target("s", text).id == ids[i]
        finally:
            b.close()
