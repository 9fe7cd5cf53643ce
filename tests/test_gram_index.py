"""The in-memory trigram index behind fold-in (SPEC §3.3): exact against brute force."""

from __future__ import annotations

import math
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import memkit.store.gram_index as gram_index
from memkit.store.gram_index import GramIndex
from memkit.text import jaccard, trigram_similarity, trigrams

VOCAB = [
    "deploy", "deploys", "staging", "stage", "the", "a", "cluster", "clusters", "budget",
    "eu", "west", "v1", "v2", "runs", "on", "Kiem", "Lai", "lead", "marketing", "x",
]  # fmt: skip


def brute(live: dict[int, str], probe: str, t: float) -> dict[int, float]:
    g = trigrams(probe)
    sims = {r: jaccard(g, trigrams(c)) for r, c in live.items()}
    return {r: s for r, s in sims.items() if s >= t}


op = st.one_of(
    st.tuples(st.just("put"), st.integers(1, 25), st.lists(st.sampled_from(VOCAB), max_size=8)),
    st.tuples(st.just("drop"), st.integers(1, 25), st.just([])),
    st.tuples(st.just("compact"), st.just(0), st.just([])),
    # a write: search with the grams, then put the same grams object (the store's
    # pattern, which reuses the search's gram ids and order)
    st.tuples(st.just("fold"), st.integers(1, 25), st.lists(st.sampled_from(VOCAB), max_size=8)),
)


@settings(max_examples=120, deadline=None)
@given(
    ops=st.lists(op, max_size=60),
    probes=st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=8), min_size=1),
    t=st.sampled_from([0.05, 0.3, 0.5, 0.65, 0.8, 0.99, 1.0]),
    floor_share=st.sampled_from([0.0, 0.5, 1.0]),
    hits=st.sampled_from([1, 2, 3, 10]),
    bulk=st.booleans(),
    few=st.sampled_from([0, 10**9]),
)
def test_similar_equals_brute_force_through_rewords_drops_and_compaction(
    ops, probes, t, floor_share, hits, bulk, few
):
    """Stale postings (reworded, dropped rows), compaction, prefixes posted for
    any floor <= t and any depth never lose or invent a match, whichever way
    the candidates are scored (`few`: all vectorised, all one by one)."""
    with patch.object(gram_index, "FEW", few):
        _similar_equals_brute_force(ops, probes, t, floor_share, hits, bulk)


def _similar_equals_brute_force(ops, probes, t, floor_share, hits, bulk):
    floor = t * floor_share
    gi, live = GramIndex(floor, hits), {}
    if bulk:  # a bulk-built order, then grams first seen later go to its front
        seed = {100 + i: " ".join(VOCAB[i : i + 3]) for i in range(0, len(VOCAB), 4)}
        gi, live = GramIndex.build(seed.items(), floor, hits), dict(seed)
    for kind, rowid, words in ops:
        if kind == "put":
            gi.put(rowid, " ".join(words))
            live[rowid] = " ".join(words)
        elif kind == "drop":
            gi.drop(rowid)
            live.pop(rowid, None)
        elif kind == "fold":
            text = " ".join(words)
            grams = trigrams(text)
            got = gi.similar(grams, t)
            assert got.keys() == brute(live, text, t).keys()
            gi.put(rowid, text, grams)
            live[rowid] = text
        else:
            gi.compact()
    assert len(gi) == len(live)
    for words in probes:
        p = " ".join(words)
        got, want = gi.similar(trigrams(p), t), brute(live, p, t)
        assert got.keys() == want.keys()
        for r in got:
            assert got[r] == pytest.approx(want[r], abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(
    writes=st.lists(
        st.tuples(st.integers(1, 12), st.lists(st.sampled_from(VOCAB), min_size=1, max_size=8)),
        min_size=1,
        max_size=40,
    ),
    t=st.sampled_from([0.3, 0.5, 0.65, 0.8]),
    hits=st.sampled_from([1, 2]),
)
def test_writes_that_search_then_put_post_the_prefix_of_the_order(writes, t, hits):
    """A write's put reuses its search's gram ids and order; the prefix it posts
    must still be the row's first grams in the order (shallow depths, a floor
    at the threshold: the rows post only part of their grams)."""
    seed = {100 + i: " ".join(VOCAB[i : i + 3]) for i in range(0, len(VOCAB), 2)}
    gi, live = GramIndex.build(seed.items(), t, hits), dict(seed)
    for rowid, words in writes:
        text = " ".join(words)
        grams = trigrams(text)
        assert gi.similar(grams, t).keys() == brute(live, text, t).keys()
        gi.put(rowid, text, grams)
        live[rowid] = text
    for words in VOCAB:
        assert gi.similar(trigrams(words), t).keys() == brute(live, words, t).keys()


def test_floor_and_depth_are_checked_and_thresholds_below_the_floor_refused():
    with pytest.raises(ValueError, match=r"floor 1\.5"):
        GramIndex(1.5)
    with pytest.raises(ValueError, match=r"floor -0\.1"):
        GramIndex(-0.1)
    with pytest.raises(ValueError, match="hits 0"):
        GramIndex(0.5, 0)
    gi = GramIndex(0.65, 1)
    gi.put(1, "deploy staging cluster")
    assert gi.similar(trigrams("deploy staging cluster"), 0.65) == {1: 1.0}  # at the floor
    with pytest.raises(ValueError, match=r"threshold 0.6499.*>= 0.65"):
        gi.similar(trigrams("deploy staging cluster"), 0.6499)
    with pytest.raises(ValueError, match="threshold 0"):
        GramIndex().similar(trigrams("deploy"), 0.0)


def test_a_floor_posts_only_prefixes_and_common_grams_drop_out_when_reordered():
    """Each row posts its first m - ceil(floor m) + hits grams in the order; once
    the rows added outnumber those the order came from (1,000 at least), the
    order is set afresh, and a gram that turned common goes to the back."""
    import random

    words = (
        "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
        "november oscar papa quebec romeo sierra uniform victor whiskey xray yankee zulu"
    ).split()
    seed = {-j: " ".join(words) for j in range(1, 11)}
    seed[0] = "the"  # its grams are the rarest when the order is set
    gi, rng = GramIndex.build(seed.items(), 0.65, 2), random.Random(7)
    rows = dict(seed)
    for rowid in range(1, 1001):
        rows[rowid] = "the " + " ".join(rng.sample(words, 5))
        gi.put(rowid, rows[rowid])

    def posts(m):  # grams a row of m grams posts: its prefix in the order
        return min(m, m - math.ceil(0.65 * m - 1e-9) + 2)

    assert gi.holders(" th") >= set(range(1, 1001))  # every new row: no reorder yet
    assert gi.stale_postings == 0
    assert gi.postings == sum(posts(len(trigrams(x))) for x in rows.values())
    rows[1001] = "the " + " ".join(words[:5])
    gi.put(1001, rows[1001])  # one past the bound: the order is set afresh
    # now only the row that is nothing but "the" (4 grams, posting 3) may hold it
    assert gi.holders(" th") <= {0}
    assert gi.postings == sum(posts(len(trigrams(x))) for x in rows.values())
    for probe in (rows[7], rows[1001], "the alpha bravo charlie", " ".join(words)):
        for t in (0.65, 0.8, 1.0):
            assert gi.similar(trigrams(probe), t) == pytest.approx(brute(rows, probe, t))


def test_similarity_at_the_threshold_is_included_and_just_above_is_not():
    gi = GramIndex()
    gi.put(1, "deploy staging cluster")
    probe = "deploy staging clusters"
    s = trigram_similarity(probe, "deploy staging cluster")
    assert gi.similar(trigrams(probe), s) == {1: pytest.approx(s)}
    assert gi.similar(trigrams(probe), s + 1e-9) == {}


def test_empty_probe_threshold_above_one_and_empty_index_match_nothing():
    gi = GramIndex()
    assert gi.similar(trigrams("deploy"), 0.5) == {}
    gi.put(1, "deploy")
    assert gi.similar(frozenset(), 0.5) == {}
    assert gi.similar(trigrams("deploy"), 1.0) == {1: 1.0}
    assert gi.similar(trigrams("deploy"), 1.01) == {}


def test_unseen_grams_count_against_the_probe():
    gi = GramIndex()
    gi.put(1, "deploy staging")
    probe = trigrams("deploy staging zzqx")  # 'zzqx' grams are in no row
    want = jaccard(probe, trigrams("deploy staging"))
    assert gi.similar(probe, want) == {1: pytest.approx(want)}
    assert gi.similar(probe, want + 1e-9) == {}


def test_reword_replaces_old_grams_and_same_words_are_a_no_op():
    gi = GramIndex()
    gi.put(7, "budget review weekly")
    gi.put(7, "budget review weekly")  # same wording: nothing goes stale
    assert gi.stale_postings == 0
    gi.put(7, "cluster migration eu west")
    assert gi.similar(trigrams("budget review weekly"), 0.5) == {}
    assert 7 in gi.similar(trigrams("cluster migration eu west"), 0.9)
    assert gi.stale_postings == len(trigrams("budget review weekly"))


def test_drop_is_idempotent_and_compaction_clears_stale_postings():
    gi = GramIndex()
    for i in range(1, 6):
        gi.put(i, f"row number {i} of the deploy log")
    gi.drop(3)
    gi.drop(3)
    gi.drop(99)
    assert len(gi) == 4 and 3 not in gi
    before = gi.similar(trigrams("row number 2 of the deploy log"), 0.3)
    assert gi.stale_postings > 0
    gi.compact()
    assert gi.stale_postings == 0
    assert gi.similar(trigrams("row number 2 of the deploy log"), 0.3) == before
    assert 3 not in before


def test_compaction_triggers_once_dead_postings_outweigh_live_ones():
    import itertools

    gi = GramIndex()
    words = [
        "".join(w)
        for w in itertools.islice(itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=3), 3000)
    ]
    text = " ".join(words)
    per = len(trigrams(text))
    for n in range(20):
        gi.put(1, f"{text} v{n}")  # every reword kills one wording's postings
    assert 19 * per > 50_000  # without compaction the dead postings would pass the bar
    assert gi.stale_postings <= 50_000
    assert gi.similar(trigrams(f"{text} v19"), 1.0) == {1: 1.0}


def test_bulk_build_answers_like_one_put_per_row():
    rows = [
        (i, " ".join(VOCAB[j % len(VOCAB)] for j in range(i, i + 1 + i % 7))) for i in range(60)
    ]
    one, bulk = GramIndex(), GramIndex.build(rows)
    for rowid, text in rows:
        one.put(rowid, text)
    assert len(bulk) == len(one) == 60 and bulk.stale_postings == 0
    for _, text in rows[::7]:
        for t in (0.3, 0.65, 1.0):
            assert bulk.similar(trigrams(text), t) == one.similar(trigrams(text), t)
    bulk.put(5, "deploy staging cluster")  # still takes writes after a bulk build
    bulk.drop(6)
    assert 5 in bulk.similar(trigrams("deploy staging cluster"), 1.0) and 6 not in bulk
    assert GramIndex.build([]).similar(trigrams("deploy"), 0.5) == {}


@settings(max_examples=80, deadline=None)
@given(
    nslots=st.sampled_from([1, 50, 5_000, 200_000]),
    total=st.integers(0, 3_000),
    min_hits=st.integers(1, 12),
    hot=st.integers(0, 30),
    seed=st.integers(0, 2**16),
)
@example(nslots=3_200, total=99, min_hits=2, hot=5, seed=1)  # sorted: 99 * 32 < 3,200
@example(nslots=3_200, total=100, min_hits=2, hot=5, seed=1)  # the bound: bincount
def test_count_at_least_equals_a_plain_count_on_every_path(nslots, total, min_hits, hot, seed):
    """The sorted runs (few postings) and bincount (many) agree with a plain count."""
    from collections import Counter

    import numpy as np

    from memkit.store.gram_index import count_at_least

    rng = np.random.default_rng(seed)
    slots = rng.integers(0, nslots, total)
    if hot and total:  # a few slots hit many times, as true fold targets are
        slots[: min(total, hot * min_hits)] = rng.integers(0, nslots, hot).repeat(min_hits)[:total]
    slots = slots.astype(np.int32)
    want = sorted(s for s, c in Counter(slots.tolist()).items() if c >= min_hits)
    assert count_at_least(slots, min_hits, nslots).tolist() == want


def test_holders_and_postings_count_live_rows_only():
    gi = GramIndex(0.0, 3)
    gi.put(1, "deploy script")
    gi.put(2, "deploy notes")
    assert gi.holders("dep") == {1, 2} and gi.holders("zzz") == frozenset()
    full = gi.postings
    assert full == len(trigrams("deploy script")) + len(trigrams("deploy notes"))  # floor 0
    gi.drop(1)
    assert gi.holders("dep") == {2}
    assert gi.postings == full and gi.stale_postings == len(trigrams("deploy script"))
    gi.compact()
    assert gi.postings == len(trigrams("deploy notes")) and gi.stale_postings == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), t=st.sampled_from([0.3, 0.5, 0.65, 0.9]))
def test_both_ways_of_scoring_give_the_same_doubles(seed, t):
    """One by one (few candidates) and vectorised (many) score every candidate
    to the same float, so which one runs never changes a fold-in decision."""
    import random

    rng = random.Random(seed)
    rows = [(r, " ".join(rng.choices(VOCAB, k=rng.randint(1, 7)))) for r in range(300)]
    gi = GramIndex.build(rows, floor=min(t, 0.5), hits=2)
    for _ in range(20):
        probe = trigrams(" ".join(rng.choices(VOCAB, k=rng.randint(1, 7))))
        with patch.object(gram_index, "FEW", 0):
            many = gi.similar(probe, t)
        with patch.object(gram_index, "FEW", 10**9):
            few = gi.similar(probe, t)
        assert many == few
        assert all(type(s) is float for s in few.values())


WORDS = [*VOCAB, "Kiểm", "lại", "ĐÀ", "straße", "日本語", "école", "ÉCOLE", "v1.2", "a_b"]
WORDS += ["ΟΔΟΣ", "İstanbul", "😀x", "𝔘nicode", "ǅemal", "x\u0301y", "٣٤", "—", "ﬁne"]
text_st = st.lists(st.sampled_from(WORDS), max_size=7).map(" ".join)  # "" among them


def _chunked_build_answers_like_puts(texts, chunk, read, probes):
    rows = list(enumerate(texts, 1))
    with (
        patch.object(gram_index, "CHUNKS", 10**9),  # every chunk is CHUNK_MIN grams
        patch.object(gram_index, "CHUNK_MIN", chunk),
        patch.object(gram_index, "BUILD_ROWS", read),
    ):
        bulk = GramIndex.build(iter(rows), floor=0.65)
    one = GramIndex(0.65)
    for rowid, text in rows:
        one.put(rowid, text)
    assert len(bulk) == len(one) == len(rows) and bulk.stale_postings == 0
    live = dict(rows)
    for probe in [*texts, *probes]:
        for t in (0.65, 0.8, 1.0):
            got = bulk.similar(trigrams(probe), t)
            assert got == one.similar(trigrams(probe), t) == brute(live, probe, t)
    return bulk


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(text_st, max_size=40).flatmap(
        lambda ts: (
            st.lists(st.sampled_from(ts), max_size=20).map(lambda dup: ts + dup)
            if ts
            else st.just(ts)
        )
    ),
    chunk=st.integers(1, 80),
    read=st.sampled_from([1, 2, 7, 4_096]),
    probes=st.lists(text_st, max_size=5),
)
def test_a_chunked_build_answers_like_one_put_per_row(texts, chunk, read, probes):
    """Whatever the chunks' size (posted: in grams; read: in rows), empty,
    duplicate and non-ASCII texts: the bulk build finds exactly what one `put`
    per row finds, and what brute force finds."""
    _chunked_build_answers_like_puts(texts, chunk, read, probes)


@pytest.mark.parametrize("past", [0, 1])
def test_a_build_of_exactly_one_chunk_and_of_one_row_past_it(past):
    """30 rows: posted in one chunk of grams and read in one chunk of rows, then
    with the last row one past each chunk."""
    texts = [f"{VOCAB[i % 20]} {VOCAB[(3 * i) % 20]} row{i}" for i in range(30)]
    total = sum(len(trigrams(t)) for t in texts)
    chunk = total - past * len(trigrams(texts[-1]))  # past: the last row is a chunk alone
    lens = np.array([len(trigrams(t)) for t in texts])
    assert gram_index.row_chunks(lens, chunk) == ([(0, 30)] if not past else [(0, 29), (29, 30)])
    bulk = _chunked_build_answers_like_puts(texts, chunk, 30 - past, ["deploy row7"])
    assert bulk.postings == GramIndex.build(enumerate(texts, 1), floor=0.65).postings
    assert bulk.similar(trigrams(texts[-1]), 1.0) == {30: 1.0}


def test_row_chunks_end_where_their_grams_reach_the_size_and_cover_every_row():
    lens = np.array([3, 0, 4, 2, 5])  # running totals 3, 3, 7, 9, 14
    assert gram_index.row_chunks(lens, 7) == [(0, 3), (3, 5)]  # 7 reached at row 2
    assert gram_index.row_chunks(lens, 8) == [(0, 4), (4, 5)]  # 8 first passed at row 3
    assert gram_index.row_chunks(lens, 14) == [(0, 5)]
    assert gram_index.row_chunks(lens, 100) == [(0, 5)]
    assert gram_index.row_chunks(lens, 1) == [(0, 1), (1, 3), (3, 4), (4, 5)]
    assert gram_index.row_chunks(np.array([], dtype=np.int64), 5) == []
    assert gram_index.row_chunks(np.array([0, 0]), 5) == [(0, 2)]


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(max_size=40) | text_st, max_size=12))
@example(texts=["", "   ", "a", "ΑΣ ΟΔΟΣ", "x\ud800y z", "😀😀😀 𝔘𝔘", "İI", "ǅ"])
def test_gram_codes_are_the_trigrams_of_each_text(texts):
    """The build's numpy gram finder agrees with `trigrams` on any text: every
    code point (astral, combining, lone surrogate), every case rule."""
    rows, codes = gram_index.gram_codes(texts)
    assert rows.shape == codes.shape
    found: list[set[str]] = [set() for _ in texts]
    for r, c in zip(rows.tolist(), codes.tolist(), strict=True):
        found[r].add(gram_index.code_gram(c))
    assert found == [set(trigrams(t)) for t in texts]
