"""`memkit bench store --backend postgres`: its tables are well formed whatever a
row measured (a recall-only part, `--writes 0`, leaves the write cells empty)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from evals import bench_ann, bench_backends, bench_clients, bench_data, bench_writes
from memkit.errors import MemkitError


def _row(backend: str, writes: bool) -> dict:
    row = {
        "backend": backend,
        "rows": 1_000_000,
        "small_rows": 10_000,
        "exact_p50": 900.0,
        "exact_p95": 1200.0,
        "small_exact_p50": 12.0,
        "small_exact_p95": 15.0,
        "cold_first_s": 0.3,
        "client_rss_mb": 60.0,
        "writer_first_s": 4.5,
        "writer_rss_mb": 230.0,
        "load": "0.5/0.7/1.0",
    }
    if backend == "postgres":
        row |= {
            "hnsw_p50": 4.0,
            "hnsw_p95": 6.0,
            "hnsw_recall8": 0.99,
            "hnsw_fallbacks": 0,
            "small_hnsw_p50": 2.0,
            "small_hnsw_p95": 3.0,
            "small_hnsw_recall8": 1.0,
            "small_hnsw_fallbacks": 0,
            "hnsw_build_s": 300.0,
            "hnsw_index_mb": 1900.0,
        }
    if writes:
        row |= {"rem_1": 250.0, "rem_4": 300.0, "many_1": 2000.0}
    return row


def test_tables_have_as_many_cells_per_row_as_their_header_with_or_without_writes():
    rows = [_row("sqlite", True), _row("postgres", False)]
    # no ef sweep: two tables, then the recall baselines
    recall, writes, baselines = bench_backends.render(rows).split("\n\n")
    assert baselines == (
        "recall@8 baselines at 1,000,000 rows: the full ranking (exact) 1.000; a random "
        "ranking 8 / rows: 1,000,000 rows 0.000008, 1 % scope 10,000 rows 0.000800"
    )  # only the postgres row has a recall
    for table in (recall, writes):
        assert len({line.count("|") for line in table.splitlines()}) == 1
    assert (
        "| postgres | 1,000,000 | 900.00 / 1200.00 | 4.00 / 6.00 | 0.990 | 0 | 10,000 |" in recall
    )
    assert "| 300.0 / 1900 | 0.30 / 60 | 4.50 / 230 | – | 0.5/0.7/1.0 |" in recall
    assert writes.splitlines()[-1].startswith("| postgres | 1,000,000 | – | – | – | – |")
    assert writes.splitlines()[-2].startswith("| sqlite | 1,000,000 | 250 | 300 | – | 2,000 | – |")


def test_a_fresh_client_whose_peak_rss_is_unmeasurable_says_undefined_not_zero():
    row = _row("postgres", False) | {"client_rss_mb": None, "writer_rss_mb": None}
    recall = bench_backends.render([row]).split("\n\n")[0]
    assert len({line.count("|") for line in recall.splitlines()}) == 1
    assert "| 0.30 / undefined | 4.50 / undefined |" in recall
    del row["writer_first_s"], row["writer_rss_mb"]  # not measured: no cell
    assert "| 0.30 / undefined | – / – |" in bench_backends.render([row])


def test_peak_rss_is_vmhwm_in_mb_or_none_when_the_status_does_not_say():
    status = "Name:\tpython\nVmPeak:\t 9000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n"
    assert bench_clients.peak_rss_mb(status) == 50.0
    for bad in ("", "VmRSS:\t 40000 kB\n", "VmHWM:\n", "VmHWM:\t x kB\n"):
        assert bench_clients.peak_rss_mb(bad) is None
    here = bench_clients.peak_rss_mb()  # this process, on Linux
    assert here is not None and here > 1


def test_a_spawned_client_that_dies_without_an_answer_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match=r"bench client exit_without_answer exited 3"):
        bench_clients.spawned(exit_without_answer)


def exit_without_answer(out) -> None:
    """A spawned bench client that dies before it answers (module level: spawn pickles it)."""
    raise SystemExit(3)


def test_recall_with_ties_counts_a_tie_at_the_kth_score_and_nothing_below_it():
    want = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    assert bench_ann.recall_with_ties(want, want) == 1.0
    # "x" ties the last exact score: exact kept "c", the index "x", equally right
    assert bench_ann.recall_with_ties([("a", 0.9), ("b", 0.8), ("x", 0.7)], want) == 1.0
    # just below the last exact score: a miss
    assert bench_ann.recall_with_ties([("a", 0.9), ("b", 0.8), ("x", 0.6999)], want) == 2 / 3
    assert bench_ann.recall_with_ties([("a", 0.9)], want) == 1 / 3  # short
    assert bench_ann.recall_with_ties([], []) == 1.0
    assert bench_ann.recall_with_ties([("a", 0.9)], []) == 0.0


def test_recall_at_1_is_the_tie_rule_on_each_answers_first_hit():
    """recall@1 (`ann_recalls`): the answer's first hit against the exact first,
    with a tie at the exact best score counted, averaged over the queries."""

    class Answers:
        def __init__(self, answers):
            self.answers = iter(answers)
            self.ann_counts = {"exact_fallback": 0}

        def recall(self, scope, query, limit, query_embedding):
            return [type("Hit", (), {"id": i, "score": s}) for i, s in next(self.answers)]

    want = [[("a", 0.9), ("b", 0.8)], [("c", 0.7), ("d", 0.6)], [("e", 0.5), ("f", 0.4)]]
    got = [
        [("a", 0.9), ("x", 0.1)],  # the best found: 1
        [("y", 0.7), ("c", 0.7)],  # a tie at the best exact score: 1
        [("f", 0.4), ("e", 0.5)],  # the best row found, but second: 0
    ]
    out = bench_ann.ann_recalls(Answers(got), [("k", "s", [0, 1, 2], want)], 40, lambda _: None)
    assert out["k_recall1"] == pytest.approx(2 / 3)
    assert out["k_recall8"] == pytest.approx((1 / 2 + 1 + 1) / 3)


def test_mean_ci_is_the_normal_interval_over_queries_clipped_and_undefined_for_one():
    # [1, 1, 1, 0]: mean 0.75, sample sd 0.5, half-width 1.96 x 0.5 / 2 = 0.49
    m, lo, hi = bench_ann.mean_ci([1.0, 1.0, 1.0, 0.0])
    assert (m, lo, hi) == pytest.approx((0.75, 0.26, 1.0))  # 1.24 clipped to 1
    assert bench_ann.mean_ci([0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert bench_ann.mean_ci([0.875]) == (0.875, None, None)  # one query: undefined
    with pytest.raises(MemkitError, match="no values"):
        bench_ann.mean_ci([])


def test_two_exact_answers_agree_when_their_scores_match_place_by_place():
    a = [("x", 0.9), ("y", 0.5), ("z", 0.5)]
    assert bench_ann.agree(a, a)
    assert bench_ann.agree(a, [("x", 0.9), ("w", 0.5), ("y", 0.500004)])  # a tie kept otherwise
    assert not bench_ann.agree(a, [("x", 0.9), ("y", 0.5), ("w", 0.49998)])  # past SCORE_TOL
    assert not bench_ann.agree(a, a[:2])


def test_the_oracle_ranks_as_the_store_does_by_floor_and_recency():
    """Hand-computed: cosines 0.8 (rows a, dated 60 days ago), 0.7 (b, now), 0.05
    (c, under the floor 0.1), 0.6 (d, now). Undated: a, b, d by cosine x 0.7's
    weight; dated, a's weight is 0.7 + 0.3 x 0.25 (two half-lives) = 0.775, so
    a scores 0.62 x w against b's 0.70 x w and d's 0.60 x w: b, a, d (w, confidence
    0.7's weight, is 0.7)."""
    from memkit.params import DAY

    s = float(np.sqrt(1 - 0.8**2))
    vecs = np.array(
        [
            [0.8, s, 0, 0],
            [0.7, 0, float(np.sqrt(1 - 0.49)), 0],
            [0.05, 0, 0, float(np.sqrt(1 - 0.0025))],
            [0.6, -0.8, 0, 0],
        ]
    )
    texts = ["a", "b", "c", "d"]
    q = np.array([1.0, 0, 0, 0])
    undated = bench_ann.Oracle(texts, vecs, 0.1, None, 0.7)
    assert [i for i, _ in undated.answer(q, 8)] == [0, 1, 3]  # c under the floor
    w = 0.7  # confidence 0.7's weight: clamp(0.7, 0.6, 1.0)
    got = undated.answer(q, 2)
    assert [i for i, _ in got] == [0, 1] and got[0][1] == pytest.approx(0.8 * w, rel=1e-6)
    import time

    now = time.time()
    dated = bench_ann.Oracle(texts, vecs, 0.1, [now - 60 * DAY, now, now, now], 0.7)
    got = dated.answer(q, 3)
    assert [i for i, _ in got] == [1, 0, 3]
    assert got[1][1] == pytest.approx(0.8 * w * 0.775, rel=1e-4)
    with pytest.raises(MemkitError, match="repeat"):
        bench_ann.Oracle(["a", "a"], vecs[:2], 0.1, None, 0.7)
    # rescored at the oracle's instant: the store's scores (a later clock) do not matter
    assert dated.rescore(q, [(3, 0.1), (2, 0.9), (1, 0.2)]) == [
        (3, pytest.approx(0.6 * w)), (2, float("-inf")), (1, pytest.approx(0.7 * w)),
    ]  # fmt: skip
    dated.check(q[None, :], [[(i, s * 0.999) for i, s in got]])
    with pytest.raises(MemkitError, match="disagrees"):
        dated.check(q[None, :], [undated.answer(q, 3)])


def test_held_out_queries_count_in_every_figure_beside_the_timed_ones():
    """`ann_recalls` with held-out queries: recall@8, recall@1 and the interval over
    both sets, the timed set's own recall@8 kept."""

    class Hit:
        def __init__(self, i, s):
            self.id, self.score = i, s
            self.memory = type("M", (), {"content": i})

    class Answers:
        def __init__(self, answers):
            self.answers = iter(answers)
            self.ann_counts = {"exact_fallback": 0}

        def recall(self, scope, query, limit, query_embedding):
            return [Hit(i, s) for i, s in next(self.answers)]

    oracle = type(
        "O", (), {"key": staticmethod(lambda h: h.memory.content),
                  "rescore": staticmethod(lambda q, hits: hits)},
    )  # fmt: skip
    timed_want = [[("a", 0.9), ("b", 0.8)]]
    held_want = [[("c", 0.7), ("d", 0.6)], [("e", 0.5), ("f", 0.4)]]
    got = [[("a", 0.9), ("b", 0.8)], [("c", 0.7), ("x", 0.1)], [("y", 0.3), ("z", 0.2)]]
    scopes = [("k", "s", [0], timed_want, (oracle, [1, 2], held_want))]
    out = bench_ann.ann_recalls(Answers(got), scopes, 40, lambda _: None)
    assert out["k_recall8_timed"] == 1.0 and out["k_queries"] == 3
    assert out["k_recall8"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert out["k_recall1"] == pytest.approx(2 / 3)
    lo, hi = out["k_recall8_ci"]
    half = 1.96 * float(np.std([1, 0.5, 0], ddof=1)) / np.sqrt(3)
    assert lo == pytest.approx(max(0.0, 0.5 - half)) and hi == pytest.approx(min(1.0, 0.5 + half))


def test_a_perturbed_text_is_a_one_word_rewording():
    rng = random.Random(3)
    for text in [*bench_data.synthetic_texts(random.Random(1), 200), "one"]:
        q = bench_data.perturbed(rng, text)
        a, b = text.split(), q.split()
        assert q != text
        assert len(b) == len(a) - 1 or (
            len(b) == len(a) and sum(x != y for x, y in zip(a, b, strict=True)) == 1
        )


def test_corpus_stats_count_distinct_texts_and_vectors():
    texts = ["a b", "b a", "a b", "c"]
    vecs = bench_data.embedded(texts)  # WordLlama averages tokens: "a b" and "b a" agree
    assert vecs.shape == (4, bench_data.DIM) and vecs.dtype == np.float32
    assert bench_data.corpus_stats(texts, vecs) == {"distinct_texts": 3, "distinct_vectors": 2}


def _sweep_row() -> dict:
    e = {"ef_search": 40, "hnsw_p50": 1.5, "hnsw_p95": 2.0, "hnsw_recall8": 0.96}
    e |= {"hnsw_recall1": 0.98}
    e |= {"hnsw_fallbacks": 0, "small_hnsw_p50": 1.0, "small_hnsw_p95": 1.2}
    e |= {"small_hnsw_recall8": 1.0, "small_hnsw_fallbacks": 3}
    row = _row("postgres", False) | {"vectors": "wordllama", "hnsw_build_mode": "plain"}
    row |= {"distinct_texts": 999_990, "distinct_vectors": 999_000}
    return row | {"ef_sweep": [e, e | {"ef_search": 100}]}


def test_the_ef_sweep_table_has_a_row_per_ef_search():
    tables = bench_backends.render([_row("sqlite", True), _sweep_row()]).split("\n\n")
    assert len(tables) == 4
    sweep = tables[2]
    assert tables[3].startswith("recall@8 baselines at 1,000,000 rows:")  # once a size
    lines = sweep.splitlines()
    assert len({line.count("|") for line in lines}) == 1 and len(lines) == 4
    assert lines[2].startswith(
        "| 1,000,000 | wordllama / synthetic | 999,990 / 999,000 | plain | 300.0 / 1900 | 40 "
        "| 1.50 / 2.00 "
        "| 0.960 | 0.980 | 0 | 1.00 / 1.20 | 1.000 | 3 |"
    )
    assert "| 100 |" in lines[3]
    graphed = bench_backends.render_sweep([_sweep_row() | {"hnsw_graph": [24, 48]}])
    assert "| 999,990 / 999,000 | plain, m 24 / 48 | 300.0 / 1900 | 40 |" in graphed


@pytest.mark.parametrize(
    "graph, says",
    [("16", "want two ints"), ("16,31", "31 < 2 x hnsw_m=16"), ("101,300", "hnsw_m=101")],
)
def test_a_graph_pgvector_refuses_is_refused_before_the_corpus_is_built(graph, says, capsys):
    with pytest.raises(SystemExit) as e:
        bench_backends.main(["--hnsw-graph", graph, "--sizes", "100"])
    assert e.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["", "40,x", ","])
def test_ef_search_list_refuses_what_is_not_integers(bad):
    with pytest.raises(SystemExit):
        bench_backends.main(["--ef-search", bad, "--sizes", ""])


def test_the_wordllama_corpus_bench_runs_at_a_tiny_size(pg_dsn):
    """The bench end to end on Postgres with embedded texts, reworded queries, two
    ef_search values and a plain build (recall only): every recall number is in range."""
    logged: list[str] = []
    row = bench_backends.bench_backend(
        "postgres", pg_dsn, 300, 5, 0, logged.append, [40, 100], None, "wordllama", "plain",
        held=20,
    )  # fmt: skip
    assert row["vectors"] == "wordllama" and row["distinct_texts"] == 300
    assert row["hnsw_build_mode"] == "plain" and [e["ef_search"] for e in row["ef_sweep"]] == [
        40,
        100,
    ]
    for e in row["ef_sweep"]:  # 300 rows: under hnsw_min_rows, answered exactly, counted
        # the held-out queries' oracle gives the store's exact answer: its ceiling, 1.000
        assert e["hnsw_recall8"] == 1.0 and e["hnsw_recall1"] == 1.0
        assert e["hnsw_recall8_timed"] == 1.0 and e["hnsw_recall8_ci"] == [1.0, 1.0]
        assert e["hnsw_queries"] == 25 and e["hnsw_fallbacks"] == 25
    assert any("20 held-out queries" in line for line in logged)
    assert "1.000 (95 % 1.000-1.000, 25 q)" in bench_backends.render([row])
    assert any("wordllama vectors for 300 rows" in line for line in logged)


def test_machine_busy_seconds_are_every_cpu_field_but_idle_and_iowait():
    tick = __import__("os").sysconf("SC_CLK_TCK")
    #            user nice system idle iowait irq softirq steal guest guest_nice
    stat = "cpu  100 20 30 400 50 6 7 8 9 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    assert bench_writes.machine_busy_s(stat) == pytest.approx(171 / tick)
    for bad in ("", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu a b c d e f g h\n"):
        assert bench_writes.machine_busy_s(bad) is None


def test_cpu_cells_are_per_write_and_cores_busy_or_undefined():
    race = bench_writes.Race(wall=2.0, client_cpu=1.5, machine_cpu=3.0)
    assert bench_writes.cpu_cells(race, 1000) == pytest.approx(
        {"client_ms": 1.5, "machine_ms": 3.0, "cores": 1.5}
    )
    blind = bench_writes.cpu_cells(
        bench_writes.Race(wall=2.0, client_cpu=1.5, machine_cpu=None), 1000
    )
    assert blind["client_ms"] == pytest.approx(1.5)
    assert blind["machine_ms"] is None and blind["cores"] is None


def test_the_cpu_table_has_a_row_per_write_race_and_says_undefined():
    row = _row("postgres", True)
    row["cpu"] = {
        "rem_1": {"client_ms": 1.25, "machine_ms": 2.5, "cores": 0.62},
        "rem_4": {"client_ms": 1.5, "machine_ms": None, "cores": None},
    }
    tables = bench_backends.render([row]).split("\n\n")
    assert len(tables) == 4 and tables[3].startswith("recall@8 baselines")
    lines = tables[2].splitlines()
    assert len({line.count("|") for line in lines}) == 1 and len(lines) == 4
    assert lines[2].startswith(
        "| postgres | 1,000,000 | remember, 1 process | 250 | 1.25 | 2.50 | 0.62 |"
    )
    assert lines[3].startswith(
        "| postgres | 1,000,000 | remember, 4 processes | 300 | 1.50 | undefined | undefined |"
    )


def test_the_write_races_run_at_a_tiny_size_with_their_cpu(pg_dsn):
    """The writes half end to end on Postgres: every race has a rate and CPU cells."""
    logged: list[str] = []
    row = bench_backends.bench_backend(
        "postgres", pg_dsn, 300, 5, 12, logged.append, None, None, "random", "plain", False
    )
    assert set(row["cpu"]) == set(bench_writes.WRITE_KINDS)
    assert row["writer_first_s"] > 0 and row["writer_rss_mb"] > 10  # a fresh writer, spawned
    from memkit.store import open_store

    with open_store(pg_dsn, embedder=None) as store:  # each writer wrote its own scope
        for scope in bench_writes.OWN_SCOPES:
            seen = sum(m.seen_count for m in store.live(scope))
            assert seen == 300 + 12  # the copy's rows, then its batch (first write included)
    assert any(line.startswith("  fresh writer: first remember") for line in logged)
    for key, cells in row["cpu"].items():
        assert row[key] > 0 and cells["client_ms"] > 0
        assert cells["machine_ms"] is not None and cells["machine_ms"] >= 0
        assert cells["cores"] is not None and cells["cores"] >= 0


@pytest.mark.parametrize("mode", ["client", "server", "server:local=0"])
def test_writes_only_with_no_writes_measures_the_fresh_writer_alone(pg_dsn, mode):
    """`--skip-recall --writes 0` (the 1M-row writer part): the fresh writer is
    measured and no write race runs (none would have a batch to write); with
    `--fold-search server` the new store is in that mode and the fold-in probe is
    timed in it; `server:local=N`: every client's `fold_local_rows`."""
    from memkit.store import open_store

    logged: list[str] = []
    row = bench_backends.bench_backend(
        "postgres", pg_dsn, 300, 5, 0, logged.append, None, None, "random", "plain", False,
        fold_search=mode,
    )  # fmt: skip
    assert row["writer_first_s"] > 0 and row["writer_rss_mb"] > 10
    assert "cpu" not in row and "rem_4" not in row
    assert not any("remembers/s" in line for line in logged)
    db_mode = mode.split(":")[0]
    assert row["fold_search"] == db_mode
    assert row.get("fold_local_rows") == {"client": None, "server": 200_000}.get(mode, 0)
    assert any(f"fold-in probe ({db_mode})" in line for line in logged)
    with open_store(pg_dsn, embedder=None) as store:  # the database kept the mode
        assert store.fold_search == db_mode


def test_a_fold_search_mode_is_parsed_or_refused():
    from memkit.errors import ConfigError

    assert bench_writes.parse_fold_search("client") == ("client", {})
    assert bench_writes.parse_fold_search("server") == ("server", {})
    assert bench_writes.parse_fold_search("server:local=0") == ("server", {"fold_local_rows": 0})
    for bad in ("hybrid", "client:local=5", "server:local=-1", "server:rows=5", "server:local="):
        with pytest.raises(ConfigError, match="want"):
            bench_writes.parse_fold_search(bad)


def test_a_text_pool_is_cut_disjoint_at_its_size_and_refused_one_past_it():
    from memkit.errors import ConfigError

    pool = [f"text {i}" for i in range(10)]
    big, small, fresh = bench_data.pool_split(pool, 6, 1, 3)  # 10 of 10: at the bound
    assert (big, small, fresh) == (pool[:6], pool[6:7], pool[7:])
    with pytest.raises(ConfigError, match=r"holds 10 texts.*need 11"):
        bench_data.pool_split(pool, 6, 1, 4)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--texts", "longmemeval:/nowhere"], "need --vectors wordllama"),
        (["--texts", "wiki", "--vectors", "wordllama"], "want 'synthetic', 'longmemeval"),
        (["--texts", "file:/nowhere"], "need --vectors wordllama"),
        (["--texts", "file:/nowhere/x.txt", "--vectors", "wordllama"], "cannot read it"),
        (["--rows-per-day", "0"], "want a positive number"),
        (["--rows-per-day", "-1"], "want a positive number"),
        (["--rows-per-day", "inf"], "want a positive number"),
    ],
)
def test_text_sources_the_bench_cannot_use_are_refused(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        bench_backends.main([*argv, "--sizes", ""])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_corpus_file_fills_the_split_at_its_size_and_is_refused_one_past_it(tmp_path):
    """`--texts file:` texts go through the same cut as LongMemEval's: a size the
    file cannot fill is a ConfigError naming both counts."""
    from memkit.errors import ConfigError

    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"Sentence number {i} of the corpus.\n" for i in range(12)))
    pool = bench_data.file_sentences(str(path))
    big, small, fresh = bench_data.pool_split(pool, 10, 0, 2)  # 12 of 12
    assert small == []
    assert big[0] == "Sentence number 0 of the corpus." and fresh[-1] == pool[11]
    with pytest.raises(ConfigError, match=r"holds 12 texts.*need 13"):
        bench_data.pool_split(pool, 10, 1, 2)


def test_the_real_text_corpus_bench_runs_at_a_tiny_size(pg_dsn, shared_datasets):
    """LongMemEval's sentences stored and embedded, reworded queries: the row says
    which texts it stored and every recall number is in range."""
    pool = bench_data.longmemeval_sentences(str(shared_datasets))
    logged: list[str] = []
    row = bench_backends.bench_backend(
        "postgres",
        pg_dsn,
        300,
        5,
        0,
        logged.append,
        [40],
        None,
        "wordllama",
        "plain",
        pool=("longmemeval", pool),
    )
    assert row["texts"] == "longmemeval" and row["distinct_texts"] == 300
    assert row["ef_sweep"][0]["hnsw_recall8"] == 1.0  # under hnsw_min_rows: exact
    assert "/ longmemeval |" in bench_backends.render_sweep([row])


def test_recall_baselines_name_each_scope_a_recall_was_measured_on():
    big = {"rows": 200_000, "ops_sweep": [{"ops": "ip"}]}  # the ops sweep: the big scope only
    assert bench_ann.recall_baselines([big]) == (
        "recall@8 baselines at 200,000 rows: the full ranking (exact) 1.000; "
        "a random ranking 8 / rows: 200,000 rows 0.000040"
    )
    assert bench_ann.recall_baselines([{"rows": 10, "rem_1": 5.0}]) == ""  # writes only


def test_the_lock_shape_ceiling_and_the_share_of_it_are_cells_of_the_writes_table():
    row = _row("postgres", True) | {
        "bare_4_locked": 2200.0,
        "shape_4": 1200.0,
        "rem_4_of_shape": bench_writes.of_ceiling(300.0, 1200.0),
    }
    assert row["rem_4_of_shape"] == pytest.approx(0.25)  # 300 / 1,200, by hand
    writes = bench_backends.render([row]).split("\n\n")[1].splitlines()
    assert len({line.count("|") for line in writes}) == 1
    assert "| lock shape, 4 processes | 4 processes / lock shape |" in writes[0]
    assert writes[2].endswith("| 2,200 | 1,200 | 0.25 | 0.5/0.7/1.0 |")
    row["rem_4_of_shape"] = bench_writes.of_ceiling(300.0, 0.0)  # no ceiling: undefined
    assert row["rem_4_of_shape"] is None
    assert "| 1,200 | undefined |" in bench_backends.render([row])
    assert "| – | – | 0.5/0.7/1.0 |" in bench_backends.render([_row("postgres", True)])


def test_a_bare_rate_shape_it_does_not_know_is_refused_before_connecting():
    with pytest.raises(ValueError, match="two_trips"):
        bench_writes.bare_rate("postgresql://nowhere.invalid/x", [["a"]], "[1]", "twotrips")


def test_rows_stamped_a_day_apart_leave_a_writer_only_its_window(pg_dsn):
    """`--rows-per-day`: the big scope's rows are stamped as written at that rate up
    to now, so a fresh writer's fold-in index reads only the window's rows, and the
    table says how the rows were stamped."""
    from memkit.store import open_store

    logged: list[str] = []
    row = bench_backends.bench_backend(
        "postgres", pg_dsn, 300, 5, 0, logged.append, None, None, "random", "plain", False,
        None, None, 10.0,
    )  # fmt: skip
    assert row["rows_per_day"] == 10.0 and row["writer_first_s"] > 0
    with open_store(pg_dsn, embedder=None) as store:
        seen = sorted(m.last_seen_at for m in store.live(bench_writes.SCOPE))
    assert len(seen) >= 300
    assert seen[-1] - seen[0] >= 29.8 * 86400  # 300 rows at 10 a day: ~30 days
    assert "| 300 (10 a day) |" in bench_backends.render([row]).split("\n\n")[0]
