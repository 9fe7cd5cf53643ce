"""`memkit bench store`: the table is well formed; a tiny run works when faiss is installed."""

from __future__ import annotations

import importlib.util

import pytest

from evals import bench_data, bench_store
from memkit.params import DAY
from memkit.text import trigrams


def fake_row(n: int) -> dict:
    return {
        "n": n,
        "recall": (1.0, 2.0),
        "recall_1t": (1.2, 2.2),
        "recall_embed": (1.5, 2.5),
        "faiss": (0.5, 0.6),
        "scan": (100.0, 120.0),
        "remember_per_s": 1500.0,
        "remember_store_per_s": 2500.0,
        "remember_store_range": (2400.0, 2600.0),
        "bare_sqlite_per_s": 10000.0,
        "embed_per_s": 5000.0,
        "ceiling_per_s": 1 / (1 / 5000 + 1 / 10000),
        "fold_scan_per_s": 2.5,
        "folded": 3000,
        "writes": 6000,
        "index_build_s": 0.5,
        "keyword": (2.0, 3.0),
        "keyword_build_s": 1.5,
        "numpy": (0.8, 0.9),
        "recall_vs_numpy": (1.0, 1.1),
        "remember_many_per_s": 15000.0,
        "decide_per_s": 4000.0,
        "embed_batch_per_s": 20000.0,
        "many_ceiling_per_s": 1 / (1 / 4000 + 1 / 20000),
    }


def test_table_rows_have_as_many_cells_as_the_header():
    tables = bench_store.render([fake_row(1000), fake_row(100_000)]).split("\n\n")
    assert len(tables) == 3
    for table in tables:
        assert len({line.count("|") for line in table.splitlines()}) == 1
    recall, writes, keyword = (t.splitlines() for t in tables)
    assert keyword[-1] == (
        "| 100,000 | 2.00 / 3.00 | 2.00x | 0.80 | 1.25x | 15,000 | 10.0x | 3,333 | 2.2x | 4.50 "
        "| 1.50 |"
    )
    assert "| 100,000 |" in recall[-1] and "2.40x" in recall[-1]
    assert writes[-1] == (
        "| 100,000 | 1,500 | 3,333 | 0.45 | 2,500 (2,400-2,600) | 10,000 | 0.25 | 267 "
        "| 2.5 | 1,000x | 3,000/6,000 | 0.50 |"
    )
    assert "ceiling: embed + bare write" in writes[0] and "ceiling: bare SQLite" in writes[0]
    assert "ceiling: fold-in decisions + batch embed" in keyword[0]
    assert "remember_many of ceiling" in keyword[0]


def test_the_low_diversity_corpus_draws_every_word_from_its_small_vocabulary():
    import random

    from evals.bench_data import LOW_DIVERSITY, low_diversity_texts

    texts = low_diversity_texts(random.Random(1), 500)
    words = [w for t in texts for w in t.split()]
    assert set(words) == set(LOW_DIVERSITY) and len(LOW_DIVERSITY) == 24
    assert all(6 <= len(t.split()) <= 12 for t in texts)
    assert low_diversity_texts(random.Random(1), 500) == texts


def test_a_ceiling_adds_the_times_of_the_steps_it_cannot_skip():
    assert bench_store.ceiling(5000.0, 10000.0) == pytest.approx(10000 / 3)
    assert bench_store.ceiling(10000.0) == pytest.approx(10000.0)
    assert bench_store.ceiling(1000.0, 1e12) == pytest.approx(1000.0)


def test_overall_rate_is_all_writes_over_all_time():
    # rounds of 1,000 writes taking 1 s, 1 s and 2 s: 3,000 writes in 4 s (the median says 1,000)
    assert bench_store.overall([1000.0, 1000.0, 500.0]) == pytest.approx(750.0)
    assert bench_store.overall([2000.0]) == 2000.0


def test_precomputed_embedder_answers_from_its_table_only():
    class Inner:
        name, dim = "inner-2", 2

        def embed(self, texts):
            import numpy as np

            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    pre = bench_store.Precomputed(Inner(), ["ab", "abc"])
    assert pre.name == "inner-2" and pre.embed(["abc"]).tolist() == [[3.0, 1.0]]
    with pytest.raises(KeyError):
        pre.embed(["never seen"])


@pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="faiss-cpu is a bench extra")
def test_tiny_run_folds_half_the_writes(tmp_path):
    row = bench_store.bench_size(300, 5, tmp_path, lambda msg: None)
    assert row["n"] == 300 and row["writes"] == 9000  # single, store-only, remember_many
    assert abs(row["folded"] - 4500) <= 45  # restatements fold, fresh texts rarely do
    assert row["remember_many_per_s"] > 0 and row["keyword"][0] > 0 and row["numpy"][0] > 0
    assert row["remember_store_per_s"] > 0 and row["index_build_s"] >= 0
    assert row["bare_sqlite_per_s"] > 0 and row["fold_scan_per_s"] > 0
    assert 0 < row["ceiling_per_s"] < min(row["embed_per_s"], row["bare_sqlite_per_s"])
    lo = min(row["decide_per_s"], row["embed_batch_per_s"])
    assert 0 < row["many_ceiling_per_s"] < lo


def _scan_store(tmp_path, clock):
    from memkit.embed import HashingEmbedder
    from memkit.store import SQLiteStore

    path = str(tmp_path / "scan.db")
    return path, SQLiteStore.open(path, embedder=HashingEmbedder(16), clock=clock)


def test_fold_scan_keeps_the_fold_in_rules_and_agrees_with_the_index(tmp_path):
    now = [1_000_000.0]
    path, store = _scan_store(tmp_path, lambda: now[0])
    old = store.remember("bench", "the staging database runs on host alpha")
    now[0] += 14 * DAY  # `old` is now exactly 14 days old: outside the window
    fresh = store.remember("bench", "the staging database runs on host bravo")
    store.remember("bench", "the staging database runs on host alpha", kind="preference")
    gone = store.remember("bench", "weekly backup runs at noon in region west")
    store.retract("bench", gone.id)
    conn = bench_store.sqlite3.connect(path)
    cutoff = now[0] - 14 * DAY
    text = "the staging database runs on host alpha"
    sim, mid = bench_store.fold_scan(conn, "bench", trigrams(text), 0.65, cutoff)
    assert mid == fresh.id and mid != old.id and 0.65 <= sim < 1.0
    retracted = "weekly backup runs at noon in region west"
    assert bench_store.fold_scan(conn, "bench", trigrams(retracted), 0.65, cutoff) is None
    assert bench_store.fold_scan(conn, "bench", trigrams(text), 0.999, cutoff) is None
    conn.close()
    store.clock = lambda: now[0]
    assert bench_store.fold_scan_rate(store, path, [text, "nothing like it at all"]) > 0


def test_fold_scan_rate_raises_when_the_store_misses_a_match(tmp_path, monkeypatch):
    path, store = _scan_store(tmp_path, lambda: 1_000_000.0)
    store.remember("bench", "the staging database runs on host alpha")
    monkeypatch.setattr(store, "fold_target", lambda *a, **k: None)
    with pytest.raises(AssertionError, match="disagree"):
        bench_store.fold_scan_rate(store, path, ["the staging database runs on host alpha"])


def test_pool_source_hands_out_each_text_once_and_says_when_it_runs_out():
    import random

    take = bench_store.pool_source(["a", "b", "c"])
    rng = random.Random(0)
    assert take(rng, 2) == ["a", "b"] and take(rng, 1) == ["c"]
    with pytest.raises(SystemExit, match="ran out"):
        take(rng, 1)


def test_unknown_text_source_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        bench_store.main(["--sizes", "10", "--texts", "poetry"])
    assert "'poetry'" in capsys.readouterr().err


def test_a_corpus_file_too_small_for_the_sizes_is_refused_naming_both_counts(tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"Stored sentence number {i}.\n" for i in range(50)))
    with pytest.raises(SystemExit) as e:
        bench_store.main(["--sizes", "10", "--texts", f"file:{path}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "holds 50 distinct texts" in err and "need " in err


def test_longmemeval_sentences_are_distinct_bounded_and_stable(shared_datasets):
    pool = bench_data.longmemeval_sentences(str(shared_datasets))
    assert len(pool) > 100_000 and len(set(pool)) == len(pool)
    assert all(30 <= len(s) <= 200 and s == " ".join(s.split()) for s in pool[:5000])
    assert pool[:50] == bench_data.longmemeval_sentences(str(shared_datasets))[:50]
