"""SPEC §4: recall on the vector path and the keyword path, through the store."""

from __future__ import annotations

import numpy as np
import pytest
from test_store_helpers import Clock, TableEmbedder, foreign_write, remember_unfolded

from memkit.params import DAY, RecallParams
from memkit.store import SQLiteStore

E0 = [1, 0, 0, 0]


def unit(*xs):
    return np.array(xs, dtype=np.float32)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def emb():
    return TableEmbedder(dim=4)


@pytest.fixture
def store(make_store, clock, emb):
    s = make_store(embedder=emb, clock=clock)
    yield s
    s.close()


def put(store, emb, text, vec, **kw):
    emb.table[text] = vec
    return store.remember("s", text, **kw).id


def q(store, vec, limit=8, params=RecallParams(), query="query", scope="s"):
    return store.recall(scope, query, limit, params, query_embedding=np.asarray(vec, np.float32))


# --- floor -------------------------------------------------------------------------------


def test_floor_exact_bound_is_kept_and_one_past_is_dropped(make_store):
    emb = TableEmbedder(dim=16)
    s = make_store(embedder=emb, clock=Clock())
    emb.table["quarter"] = [1.0] * 16  # normalised: every component 0.25, exactly
    rid = s.remember("s", "quarter").id
    e0 = np.eye(16, dtype=np.float32)[0]
    hits = s.recall("s", "zzz", query_embedding=e0)
    assert [h.id for h in hits] == [rid] and hits[0].cosine == 0.25 and hits[0].path == "vector"
    past = RecallParams(floor=float(np.nextafter(0.25, 1.0)))
    # nothing survives: not "no results" but the keyword path (no keyword match -> nothing)
    assert s.recall("s", "zzz", params=past, query_embedding=e0) == []


def test_below_floor_dropped_and_keyword_path_answers(store, emb):
    far = put(store, emb, "Kiem Lai marketing lead is Alice", [0, 1, 0, 0])
    hits = q(store, E0, query="Who is the marketing lead for Kiem Lai?")
    assert [h.id for h in hits] == [far]
    assert hits[0].path == "keyword" and hits[0].keywords_matched == 4
    assert hits[0].cosine is None


def test_only_survivors_returned_when_some_clear_the_floor(store, emb):
    near = put(store, emb, "near", [1, 0.1, 0, 0])
    put(store, emb, "orthogonal near words", [0, 1, 0, 0])
    hits = q(store, E0, query="near")
    assert [h.id for h in hits] == [near] and hits[0].path == "vector"


def test_floor_is_a_tunable(store, emb):
    a = put(store, emb, "a", [1, 1, 0, 0])  # cos 0.707
    assert q(store, E0, params=RecallParams(floor=0.8)) == []
    assert [h.id for h in q(store, E0, params=RecallParams(floor=0.7))] == [a]


# --- score: confidence and recency ----------------------------------------------------------


def test_equal_cosine_higher_confidence_wins(store, emb):
    low = put(store, emb, "low", [1, 0, 0, 0], confidence=0.6)
    high = put(store, emb, "high", [1, 0, 0, 0], confidence=0.7)
    hits = q(store, E0)
    assert [h.id for h in hits] == [high, low]
    assert hits[0].confidence_weight == 0.7 and hits[1].confidence_weight == 0.6


@pytest.mark.parametrize(
    "conf, weight", [(0.0, 0.6), (0.59, 0.6), (0.6, 0.6), (0.61, 0.61), (1.0, 1.0)]
)
def test_confidence_clamped_below_at_06(store, emb, conf, weight):
    put(store, emb, "x", [1, 0, 0, 0], confidence=conf)
    (h,) = q(store, E0)
    assert h.confidence_weight == pytest.approx(weight)
    assert h.score == pytest.approx(1.0 * weight * 1.0)


def test_year_old_exact_match_beats_fresh_loose_match(store, emb, clock):
    old = put(store, emb, "old exact", [1, 0, 0, 0])
    clock.advance(365 * DAY)
    fresh = put(store, emb, "fresh loose", [0.5, 0.8660254, 0, 0])  # cos 0.5
    hits = q(store, E0)
    assert [h.id for h in hits] == [old, fresh]
    assert hits[0].decay == pytest.approx(0.5 ** (365 / 30))


def test_one_half_life_halves_decay_and_score_formula(store, emb, clock):
    put(store, emb, "x", [1, 0, 0, 0])
    clock.advance(30 * DAY)
    (h,) = q(store, E0)
    assert h.decay == pytest.approx(0.5)
    assert h.score == pytest.approx(1.0 * 0.7 * (0.7 + 0.3 * 0.5))


def reopened(tmp_path, emb, clock, sql, args):
    """A row written here, then changed by another program; read by a fresh store."""
    path = str(tmp_path / "r.db")
    with SQLiteStore.open(path, embedder=emb, clock=clock) as s:
        rid = put(s, emb, "x", [1, 0, 0, 0])
    foreign_write(path, sql, (*args, rid))
    return SQLiteStore.open(path, embedder=emb, clock=clock)


def test_unknown_age_decays_to_zero(tmp_path, emb, clock):
    sql = "UPDATE memories SET last_seen_at = NULL, created_at = NULL WHERE id = ?"
    with reopened(tmp_path, emb, clock, sql, ()) as s:
        (h,) = q(s, E0)
    assert h.decay == 0.0 and h.score == pytest.approx(0.7 * 0.7)


def test_missing_last_seen_falls_back_to_created_at(tmp_path, emb, clock):
    sql = "UPDATE memories SET last_seen_at = NULL WHERE id = ?"
    with reopened(tmp_path, emb, clock, sql, ()) as s:
        clock.advance(30 * DAY)
        (h,) = q(s, E0)
    assert h.decay == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("last_seen", "created", "want"), [(None, "now", 0.5), (None, None, 0.0), ("now", None, 0.5)]
)
def test_recency_fallbacks_hold_when_a_foreign_write_patches_the_warm_cache(
    tmp_path, emb, clock, last_seen, created, want
):
    """The same fallbacks on the patch path: a change another connection made is
    applied row by row to the warm in-memory matrix (one changed row)."""
    path = str(tmp_path / "w.db")
    with SQLiteStore.open(path, embedder=emb, clock=clock) as s:
        rid = put(s, emb, "x", [1, 0, 0, 0])
        q(s, E0)  # warm the cache
        now = clock()
        foreign_write(
            path,
            "UPDATE memories SET last_seen_at = ?, created_at = ?, "
            "change_seq = (SELECT MAX(change_seq) + 1 FROM memories) WHERE id = ?",
            (now if last_seen else None, now if created else None, rid),
        )
        clock.advance(30 * DAY)
        (h,) = q(s, E0)
    assert h.decay == pytest.approx(want)


def test_future_timestamp_decays_as_one(store, emb, clock):
    put(store, emb, "x", [1, 0, 0, 0])
    clock.advance(-DAY)
    assert q(store, E0)[0].decay == 1.0


def test_ties_keep_most_recently_confirmed_first(store, emb, clock):
    p = RecallParams(recency_share=0.0)  # recency cannot move the score: exact ties
    ids = []
    for i in range(4):
        ids.append(put(store, emb, f"row{i}", [1, 0, 0, 0]))
        clock.advance(DAY)
    assert [h.id for h in q(store, E0, params=p)] == ids[::-1]
    # confirming the oldest again moves it first
    store.remember("s", "row0")
    assert next(h.id for h in q(store, E0, params=p)) == ids[0]


def test_limit_nonpositive_returns_all_survivors(store, emb):
    for i in range(12):
        put(store, emb, f"row{i}", [1, 0, 0, 0])
    assert len(q(store, E0, limit=0)) == 12
    assert len(q(store, E0, limit=-1)) == 12
    assert len(q(store, E0, limit=8)) == 8
    assert len(q(store, E0, limit=1)) == 1


def test_candidate_cap_keeps_most_recently_confirmed(store, emb, clock):
    old = put(store, emb, "old", [1, 0, 0, 0])
    clock.advance(DAY)
    new = put(store, emb, "new", [0.6, 0.8, 0, 0])
    assert [h.id for h in q(store, E0, params=RecallParams(candidate_cap=2))] == [old, new]
    assert [h.id for h in q(store, E0, params=RecallParams(candidate_cap=1))] == [new]
    assert [h.id for h in q(store, E0, params=RecallParams(candidate_cap=None))] == [old, new]


def test_mismatched_query_length_and_zero_query_fall_through(store, emb):
    rid = put(store, emb, "deploy notes", [1, 0, 0, 0])
    for vec in ([1, 0, 0], [0, 0, 0, 0]):
        hits = q(store, vec, query="deploy")
        assert [h.id for h in hits] == [rid] and hits[0].path == "keyword"


def test_query_embedding_failure_falls_through_to_keywords(store, emb):
    rid = put(store, emb, "deploy notes", [1, 0, 0, 0])
    emb.table["deploy"] = [1, 0, 0, 0]
    assert store.recall("s", "deploy")[0].path == "vector"
    emb.fail = True
    hits = store.recall("s", "deploy")
    assert [h.id for h in hits] == [rid] and hits[0].path == "keyword"


def test_empty_query_skips_the_vector_path(store, emb):
    put(store, emb, "a", [1, 0, 0, 0])
    calls = emb.calls
    hits = store.recall("s", "")
    assert emb.calls == calls and hits[0].path == "keyword"


def test_retired_rows_never_appear_on_either_path(make_store, store, emb):
    a = put(store, emb, "alpha deploy", [1, 0, 0, 0])
    b = put(store, emb, "beta deploy", [1, 0, 0, 0])
    emb.table["gamma deploy"] = [1, 0, 0, 0]
    c = store.update("s", b, "gamma deploy")
    store.retract("s", a)
    for hits in (q(store, E0, limit=0), store.recall("s", "deploy"), store.recall("s", "")):
        assert [h.id for h in hits] == [c]
    kw = make_store(embedder=None)
    x = kw.remember("s", "alpha deploy").id
    kw.retract("s", x)
    assert kw.recall("s", "deploy") == [] and kw.recall("s", "") == []


def test_other_connection_writes_are_seen(tmp_path, clock):
    path = str(tmp_path / "m.db")
    e1, e2 = TableEmbedder({"x": E0, "y": E0}), TableEmbedder({"x": E0, "y": E0})
    s1 = SQLiteStore.open(path, embedder=e1, clock=clock)
    s2 = SQLiteStore.open(path, embedder=e2, clock=clock)
    a = s1.remember("s", "x").id
    assert [h.id for h in q(s1, E0)] == [a]  # warms s1's cache
    b = s2.remember("s", "y").id
    assert {h.id for h in q(s1, E0)} == {a, b}
    s2.retract("s", a)
    assert [h.id for h in q(s1, E0)] == [b]


# --- keyword path ---------------------------------------------------------------------------


@pytest.fixture
def kw(make_store, clock):
    s = make_store(embedder=None, clock=clock)
    yield s
    s.close()


def test_keyword_substring_semantics_content_and_tags(kw, clock):
    lead = kw.remember("s", "Alice owns LEADERSHIP of marketing").id
    clock.advance(1)
    tag = kw.remember("s", "Budget approved", tags=["Kiem-Lai"]).id
    clock.advance(1)
    kw.remember("s", "Unrelated note about lunch")
    hits = kw.recall("s", "marketing lead kiem")
    assert [h.id for h in hits] == [lead, tag]
    assert [h.keywords_matched for h in hits] == [2, 1]
    assert hits[0].score == 2.0 and hits[0].path == "keyword"


def test_keyword_rank_by_distinct_matches_then_recency(kw, clock):
    one_old = kw.remember("s", "marketing plan").id
    clock.advance(1)
    two = kw.remember("s", "marketing lead").id
    clock.advance(1)
    one_new = kw.remember("s", "lead time").id
    hits = kw.recall("s", "marketing marketing lead")
    assert [h.id for h in hits] == [two, one_new, one_old]


def test_no_keywords_returns_live_rows_most_recent_first(kw, clock):
    ids = []
    for text in ("apples are red", "the sky is blue", "grass grows green"):
        ids.append(kw.remember("s", text).id)
        clock.advance(1)
    for query in ("", "the of and", "a ? !"):
        assert [h.id for h in kw.recall("s", query)] == ids[::-1]


@pytest.mark.parametrize("limit, expect", [(0, 8), (-3, 8), (1, 1), (50, 50), (51, 8)])
def test_keyword_limit_bounds(kw, limit, expect):
    remember_unfolded(kw, "s", [f"marketing item {i}" for i in range(60)])
    assert len(kw.recall("s", "marketing", limit)) == expect
    assert len(kw.recall("s", "", limit)) == expect


def test_keyword_limit_tunables(kw):
    remember_unfolded(kw, "s", [f"marketing item {i}" for i in range(30)])
    p = RecallParams(keyword_default_limit=3, keyword_max_limit=10)
    assert len(kw.recall("s", "marketing", 11, p)) == 3
    assert len(kw.recall("s", "marketing", 10, p)) == 10


def test_keyword_case_insensitive_non_ascii(kw):
    rid = kw.remember("s", "Trưởng nhóm MARKETING là Đức").id
    assert [h.id for h in kw.recall("s", "đức marketing")] == [rid]
