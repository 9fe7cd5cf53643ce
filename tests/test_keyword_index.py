"""The keyword path on an index returns exactly what the SPEC §4.2 scan returns."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_helpers import Clock

from memkit.params import RecallParams
from memkit.store import SQLiteStore, rank
from memkit.store.keyword_index import KeywordIndex
from memkit.text import keywords

# Short keywords, case pairs, letters whose lowercase changes length (İ), final
# sigma, a titlecase digraph, non-ASCII digits, separators, underscore, NUL.
ALPHABET = "abAB dbDB İiıΣσςǅǆ٣²1_-.\x00é"
text = st.text(alphabet=ALPHABET, min_size=1, max_size=10)
row = st.tuples(
    text,
    st.lists(text, max_size=2),
    st.one_of(st.none(), st.sampled_from([1.0, 2.0, 3.0])),  # ties and unknown recency
)


def literal(rows: dict[int, tuple], query: str, limit: int) -> list[tuple[int, int]]:
    """SPEC §4.2 as a scan (the reference's code path)."""
    kws = keywords(query)
    ids = sorted(rows)
    matched = [rank.keyword_matches(kws, rows[i][0], rows[i][1]) for i in ids]
    order = rank.keyword_order(matched, [rows[i][2] for i in ids], ids)[:limit]
    return [(ids[j], matched[j]) for j in order]


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "put", "put", "drop"]), st.integers(1, 12), row),
        max_size=40,
    ),
    query=st.text(alphabet=ALPHABET, max_size=16),
    limit=st.integers(1, 10),
)
def test_index_equals_the_literal_scan(ops, query, limit):
    ix, rows = KeywordIndex(), {}
    for op, rowid, (content, tags, seen) in ops:
        if op == "put":
            ix.put(rowid, content, tags, seen)
            rows[rowid] = (content, tags, seen)
        else:
            ix.drop(rowid)
            rows.pop(rowid, None)
    assert ix.search(keywords(query), limit) == literal(rows, query, limit)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["put", "put", "drop", "search"]), st.integers(1, 8), row),
        max_size=40,
    ),
    query=st.text(alphabet=ALPHABET, min_size=1, max_size=8),
)
def test_queued_writes_are_applied_in_order_at_every_query(ops, query):
    """Writes queue until the next query; a query between writes sees exactly
    the rows written before it (put after drop, drop after put, rewordings)."""
    ix, rows = KeywordIndex(), {}
    for op, rowid, (content, tags, seen) in ops:
        if op == "put":
            ix.put(rowid, content, tags, seen)
            rows[rowid] = (content, tags, seen)
        elif op == "drop":
            ix.drop(rowid)
            rows.pop(rowid, None)
        else:
            assert ix.search(keywords(query), 5) == literal(rows, query, 5)
            assert ix.backlog == (0, len(rows))
    assert len(ix) == len(rows)


def test_two_character_keywords_and_tags_match_exactly():
    ix = KeywordIndex()
    ix.put(1, "the db is postgres", (), 1.0)
    ix.put(2, "no match here", ["DB-admin"], 2.0)
    ix.put(3, "dbx? no: d b", (), 3.0)
    ix.put(4, "Ddb", (), None)
    assert ix.search(["db"], 8) == [(3, 1), (2, 1), (1, 1), (4, 1)]
    assert ix.search(["db", "admin"], 8)[0] == (2, 2)


def test_compaction_keeps_answers():
    ix = KeywordIndex()
    for i in range(3000):
        ix.put(i, f"row {i} about deploys", (), float(i))
    for i in range(2500):
        ix.drop(i)
    ix.put(7, "a revived deploy row", (), 1e9)
    assert len(ix) == 501
    assert ix.search(["deploy"], 3) == [(7, 1), (2999, 1), (2998, 1)]
    assert ix.search(["row"], 600)[-1] == (2500, 1)


stored = st.text(alphabet=ALPHABET.replace("\x00", ""), min_size=1, max_size=10)
"""Text a store keeps: no NUL (refused on both backends); queries may hold one."""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(st.tuples(st.booleans(), stored, st.lists(stored, max_size=2)), max_size=12),
    retract=st.lists(st.integers(0, 11), max_size=3),
    query=st.text(alphabet=ALPHABET, min_size=1, max_size=16),
)
def test_store_keyword_recall_follows_another_connection(writes, retract, query):
    """b's keyword index loads first; a then writes and retracts; b's answer is the
    scan of the live rows (public reads: live() is last seen desc, rowid desc)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "k.db")
        clock = Clock()
        a = SQLiteStore.open(path, embedder=None, clock=clock)
        b = SQLiteStore.open(path, embedder=None, clock=clock)
        a.remember("s", "warm up row")
        b.recall("s", "warm")  # b's index is built before the writes below
        ids = []
        for advance, content, tags in writes:
            if not content.strip():
                continue
            clock.advance(1.0 if advance else 0.0)
            ids.append(a.remember("s", content, tags=tags).id)
        for i in retract:
            if i < len(ids) and ids[i] in {m.id for m in a.live("s")}:
                a.retract("s", ids[i])
        live = a.live("s")
        rows = {-j: (m.content, m.tags, m.last_seen_at) for j, m in enumerate(live)}
        lim = rank.keyword_limit(8, RecallParams())
        want = [(live[-j].id, n) for j, n in literal(rows, query, lim)]
        got = [(h.id, h.keywords_matched) for h in b.recall("s", query)]
        if keywords(query):
            assert got == want
        a.close()
        b.close()


def test_recency_none_ranks_last():
    ix = KeywordIndex()
    ix.put(5, "ab", (), None)
    ix.put(1, "ab", (), -math.inf)
    ix.put(2, "ab", (), 0.0)
    assert [r for r, _ in ix.search(["ab"], 8)] == [2, 5, 1]
