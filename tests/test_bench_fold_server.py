"""The server-side fold-in prototype (issue #36): its fixed gram order keeps the
prefix filter exact, and `memkit bench fold-server` runs and can see a wrong answer."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evals.fold_prefix import PrefixPostings, common_trigrams
from memkit.errors import ConfigError
from memkit.store.fold_postings import (
    GramOrder,
    gram_code,
    prefix_len,
    probe_codes,
    row_postings,
)
from memkit.store.gram_index import GramIndex, gram_codes
from memkit.text import jaccard, trigrams

WORDS = ["deploy", "the", "staging", "cafe", "café", "straße", "中文字", "😀ok", "db", "x", "a1"]

texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join), min_size=1, max_size=25
)


def brute(rows: dict[int, str], grams: frozenset[str], t: float) -> dict[int, float]:
    out = {}
    for r, c in rows.items():
        sim = jaccard(grams, trigrams(c))
        if sim >= t:
            out[r] = sim
    return out


ORDERS = {
    "hash only": GramOrder(),
    "common list": GramOrder(common_trigrams(["the deploy staging", "the cafe", "the db"], 50)),
}


@pytest.mark.parametrize("order", list(ORDERS.values()), ids=list(ORDERS))
@settings(max_examples=60, deadline=None)
@given(texts=texts_strategy, data=st.data())
def test_prefix_postings_equal_brute_force_and_the_gram_index(order, texts, data):
    """Random texts (non-ASCII, astral, duplicates, empty): at the floor and above
    it, the prefix search finds exactly the rows brute force finds, and agrees
    with the in-memory index on every probe."""
    floor = data.draw(st.sampled_from([0.3, 0.5, 0.65]))
    hits = data.draw(st.sampled_from([1, 3, 10]))
    pp = PrefixPostings(order, floor, hits)
    rows = dict(enumerate(texts))
    for r, c in rows.items():
        pp.add(r, c)
    gi = GramIndex.build(rows.items(), floor=floor, hits=hits)
    for probe in [*texts, data.draw(st.lists(st.sampled_from(WORDS)).map(" ".join))]:
        grams = trigrams(probe)
        for t in (floor, min(1.0, floor + 0.1), 1.0):
            want = brute(rows, grams, t)
            assert pp.similar(grams, t) == want
            assert gi.similar(grams, t) == want if grams else True


def test_a_threshold_below_the_floor_is_refused():
    pp = PrefixPostings(GramOrder(), 0.65)
    pp.add(1, "the deploy script")
    assert pp.similar(trigrams("the deploy script"), 0.65) == {1: 1.0}
    with pytest.raises(ConfigError, match="below the postings' floor"):
        pp.similar(trigrams("the deploy script"), 0.6499)
    with pytest.raises(ConfigError, match="posted twice"):
        pp.add(1, "again")
    for bad in (0.0, 1.01):
        with pytest.raises(ConfigError, match="floor"):
            PrefixPostings(GramOrder(), bad)


def test_the_order_is_total_and_ranks_the_common_list_last_most_common_last():
    common = [gram_code(g) for g in ("  t", " th", "the")]  # most common first
    order = GramOrder(common)
    rare = [gram_code(g) for g in ("xyz", "qqq", "中文字")]
    s = order.sort(np.asarray(rare + common[::-1]))
    assert s[-3:].tolist() == common[::-1]  # "the" before " th" before "  t"
    assert sorted(s[:3].tolist()) == sorted(rare)
    assert order.sort(s[::-1]).tolist() == s.tolist()  # the same order from any start
    with pytest.raises(ConfigError, match="repeats"):
        GramOrder(common + common[:1])


def test_row_prefixes_post_prefix_len_grams_each_and_probe_codes_take_the_probe_prefix():
    texts = ["the deploy script runs", "", "x", "straße 中文字 😀"]
    r, codes, m = row_postings(texts, GramOrder(), 0.65, 10)
    assert m.tolist() == [len(trigrams(t)) for t in texts]
    assert np.bincount(r, minlength=4).tolist() == prefix_len(m, 0.65, 10).tolist()
    _, all_codes = gram_codes(texts[:1])
    assert set(codes[r == 0].tolist()) <= set(all_codes.tolist())
    grams = trigrams(texts[0])
    take, h = probe_codes(grams, GramOrder(), 0.65, 10)
    n = len(grams)
    assert len(take) == min(n, n - int(np.ceil(0.65 * n)) + 10) and h == 10
    assert probe_codes(frozenset(), GramOrder(), 0.65) == ([], 0)


def test_bench_runs_on_postgres_and_agrees(pg_server_dsn, tmp_path, capsys):
    from evals.commands import bench_main

    out = tmp_path / "rows.json"
    args = ["fold-server", "--sizes", "300", "--order", "scope", "--queries", "20"]
    args += ["--writes", "6", "--gin", "--pg-dsn", pg_server_dsn, "--json", str(out)]
    assert bench_main(args) == 0
    (row,) = json.loads(out.read_text())
    assert row["rows"] == 300 and row["postings_per_row"] > 0
    assert row["btree_disagree"] == row["btree_len_disagree"] == row["gin_disagree"] == 0
    assert {"write_row_per_s", "write_postings_per_s", "write_array_per_s"} <= set(row)
    table = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| ")]
    assert len(table) == 2 and "| synthetic | 300 | scope |" in table[1]


def test_the_agreement_check_sees_postings_of_another_order(pg_dsn):
    """Rows posted under one order and probed under its reverse miss rows (even a
    text's own row): the bench's check counts those probes (it can fail)."""
    import psycopg

    from evals import bench_fold_server as b
    from evals.bench_data import synthetic_texts
    from memkit.store import PostgresStore

    texts = [*synthetic_texts(random.Random(3), 200), "?! --"]  # one text without a gram
    with PostgresStore.open(pg_dsn, embedder=None) as s:
        s.bulk_load(b.SCOPE, texts)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = [(int(r), c) for r, c in conn.execute("SELECT rowid, content FROM memories")]
        common = common_trigrams(texts, 1 << 20)
        posted = GramOrder(common)
        b.backfill(conn, rows, posted, 10)
        gi = GramIndex.build(rows, floor=b.THRESHOLD)
        qs = texts[:40]

        def ref(grams):
            return gi.similar(grams, b.THRESHOLD)

        assert b.probe(conn, "btree", qs, posted, 10, ref)["btree_disagree"] == 0
        assert b.probe(conn, "btree", qs, GramOrder(common[::-1]), 10, ref)["btree_disagree"] > 0


@pytest.mark.parametrize(
    "bad", [["--sizes", "0"], ["--sizes", "x"], ["--writes", "-1"], ["--hits", "0"]]
)
def test_bench_refuses_bad_values(bad, capsys):
    from evals.commands import bench_main

    with pytest.raises(SystemExit) as e:
        bench_main(["fold-server", *bad])
    assert e.value.code == 2
    assert "memkit bench fold-server" in capsys.readouterr().err


def test_a_row_whose_server_answers_differ_is_named_and_fails_the_run():
    from evals import bench_fold_server as b

    ok = {"corpus": "synthetic", "rows": 1000, "btree_disagree": 0.0, "btree_len_disagree": 0.0}
    assert b.disagreements([ok]) == []
    assert b.disagreements([ok | {"gin_disagree": 0.0}]) == []
    bad = ok | {"btree_len_disagree": 2.0, "gin_disagree": 1.0}
    assert b.disagreements([bad]) == [
        "synthetic 1,000 rows, btree_len: 2 probes differ",
        "synthetic 1,000 rows, gin: 1 probes differ",
    ]
    unseen = {"corpus": "synthetic", "rows": 1000, "btree_disagree": 0.0}
    assert b.disagreements([unseen]) == ["synthetic 1,000 rows, btree_len: not compared"]
