"""What only the Postgres backend has (the shared behaviour is the conformance suite:
the store tests run on both backends): store URLs, the optional HNSW index and its
exact fallback, schema migrations on Postgres."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import psycopg
import pytest
from test_store_helpers import Clock, TableEmbedder

from memkit.errors import ConfigError, EmbedderMismatch
from memkit.params import DAY, RecallParams
from memkit.store import PostgresStore, SQLiteStore, open_store, sqlite_path
from memkit.store.pg_schema import MIGRATIONS, SCHEMA_VERSION

DIM = 16


def test_store_urls_pick_the_backend(tmp_path, pg_dsn):
    assert sqlite_path("sqlite:///rel/m.db") == "rel/m.db"
    assert sqlite_path("sqlite:////abs/m.db") == "/abs/m.db"
    assert sqlite_path("sqlite://") == ":memory:"
    assert sqlite_path(str(tmp_path / "m.db")) == str(tmp_path / "m.db")
    for bad in ("mysql://x/y", "sqlite://host/m.db"):
        with pytest.raises(ConfigError, match="URL"):
            sqlite_path(bad)
    with open_store(f"sqlite:///{tmp_path}/m.db", embedder=None) as s:
        assert isinstance(s, SQLiteStore) and s.path == f"{tmp_path}/m.db"
    with open_store(pg_dsn, embedder=None) as s:
        assert isinstance(s, PostgresStore)


def test_unreachable_server_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot connect"):
        PostgresStore.open("postgresql://nobody:secret@/none?host=/nonexistent", embedder=None)


PG_PINNED = {
    1: "d75b203be103c7ce87c9c6af966eb9bce626fece183672130c18bb3173239f74",
    2: "1a116337248aa5d045ec8b88ba57a26524087e5aa40eb26b41c959de68f5e7ff",
    3: "c7d1df039094fe865621bdb7e05f8081fc120749839f9a50240b723ef26f46cf",
    4: "f468bd55b505748c1c48bcbcdbc47375a3966ab60c0ca28481666d2d2c469914",
    5: "479daafa106fc59cb44561a064e0f4ee4039ca7b5dee665b50f03eb7ea016ec6",
    6: "83a19c025709704c6aa93fd82d3b4f791012d8345ea3b02d979b89f9cff88d79",
    7: "0ec4e4bdadc9b988b0ee24bc3cb5287ea6d11a9d134d49ab01ec38fe0e049573",
    8: "9d1fac0acaef8fbc6a5b9477d6c01524b4aa94292beadcba4090a27e35cfce25",
    9: "d51b1e8713e4e13c534c0b4bcaf0e246b9bba1e7d9a1b9f27a2ec8c5fe8202a5",
    10: "2acca788f3951677ff6300602de591127da2590f6874a213ccf42877527aa8f5",
}
"""sha256 of each shipped Postgres migration's DDL text: never edit one, append one
(and pin it here)."""


def test_shipped_postgres_migrations_never_change():
    import hashlib

    got = {v: hashlib.sha256(ddl.encode("utf-8")).hexdigest() for v, ddl in MIGRATIONS}
    assert got == PG_PINNED


def test_migrations_numbered_applied_once_newer_refused(pg_dsn):
    assert [v for v, _ in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    PostgresStore.open(pg_dsn, embedder=None).close()
    PostgresStore.open(pg_dsn, embedder=None).close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute("SELECT array_agg(version) FROM schema_version").fetchone()[0] == [
            v for v, _ in MIGRATIONS
        ]
        c.execute("INSERT INTO schema_version VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="newer"):
        PostgresStore.open(pg_dsn, embedder=None)


def test_embedder_recorded_and_mismatch_refused(pg_dsn):
    PostgresStore.open(pg_dsn, embedder="hashing").close()
    with pytest.raises(EmbedderMismatch, match=r"'hashing-256'.*'hashing-128'"):
        PostgresStore.open(pg_dsn, embedder="hashing-128")
    with PostgresStore.open(pg_dsn, embedder=None) as s:  # a keyword-only reader is allowed
        assert s.stats()["embedder"] == "hashing-256"


def test_unknown_ann_is_a_config_error(pg_dsn):
    with pytest.raises(ConfigError, match="'ivf'"):
        PostgresStore.open(pg_dsn, embedder=None, ann="ivf")


@pytest.mark.parametrize("ef", [0, 1_001, 1.5, True, "100"])
def test_an_ef_search_pgvector_refuses_is_a_config_error_at_open(ef):
    with pytest.raises(ConfigError, match="ef_search"):
        PostgresStore.open("postgresql://nowhere.invalid/x", embedder=None, ef_search=ef)


@pytest.mark.parametrize("ef", [1, 1_000])
def test_ef_search_at_pgvectors_bounds_answers(ann_table, ef):
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(
        dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=50, ef_search=ef
    ) as ann:
        got = ann.recall("big", "q", 8, RecallParams(floor=-1.0), query_embedding=queries[0])
        assert len(got) == 8 and ann.ann_counts["ann"] == 1


# --- HNSW: never silently short ------------------------------------------------------


@pytest.fixture
def ann_table(pg_dsn):
    """5,000 embedded rows: scope "big" holds 99 %, scope "small" 1 % (50 rows)."""
    rng = np.random.default_rng(7)
    clock = Clock()
    with PostgresStore.open(pg_dsn, embedder=TableEmbedder(dim=DIM), clock=clock) as s:
        s.bulk_load("big", [f"big {i}" for i in range(4950)], rng.normal(size=(4950, DIM)))
        s.bulk_load("small", [f"small {i}" for i in range(50)], rng.normal(size=(50, DIM)))
    return pg_dsn, rng.normal(size=(20, DIM)).astype(np.float32), clock


def _ids(hits):
    return [(h.id, h.score) for h in hits]


def test_a_scope_under_hnsw_min_rows_is_answered_exactly_and_counted(ann_table):
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    exact = PostgresStore.open(dsn, embedder=emb, clock=clock)
    ann = PostgresStore.open(dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=51)
    try:
        assert set(ann.hnsw_build["scopes"]) == {"big"}  # 50 rows in "small": under 51
        for n, q in enumerate(queries, start=1):
            assert _ids(ann.recall("small", "q", 8, query_embedding=q)) == _ids(
                exact.recall("small", "q", 8, query_embedding=q)
            )
            assert ann.ann_counts == {"ann": 0, "exact_fallback": n}
    finally:
        exact.close()
        ann.close()


def test_each_large_scope_is_served_by_its_own_index(ann_table):
    """A scope at hnsw_min_rows gets its index, so the 1 % scope's ANN answer is as
    full as the big one's (a whole-table index filtered after the scan came back short)."""
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    exact = PostgresStore.open(dsn, embedder=emb, clock=clock)
    ann = PostgresStore.open(dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=50)
    try:
        assert {k: v["rows"] for k, v in ann.hnsw_build["scopes"].items()} == {
            "big": 4950,
            "small": 50,
        }
        for scope in ("big", "small"):
            overlap = []
            for q in queries:
                got = ann.recall(scope, "q", 8, RecallParams(floor=-1.0), query_embedding=q)
                want = exact.recall(scope, "q", 8, RecallParams(floor=-1.0), query_embedding=q)
                assert len(got) == 8 and {h.memory.scope_id for h in got} == {scope}
                overlap.append(len({h.id for h in got} & {h.id for h in want}) / 8)
            assert np.mean(overlap) >= 0.9, scope
        assert ann.ann_counts == {"ann": 2 * len(queries), "exact_fallback": 0}
        with psycopg.connect(dsn) as c:  # the planner takes the scope's index
            from memkit.store.pg_ann import index_name, nearest_sql

            c.execute("SET enable_sort = off")  # as the store's ANN query runs
            plan = c.execute(
                "EXPLAIN " + nearest_sql(c, "small", DIM), (str(list(map(float, queries[0]))), 8)
            ).fetchall()
            assert index_name("small", DIM) in "\n".join(r[0] for r in plan)
        ann.drop_hnsw()  # every scope answered exactly from now on, counted
        ann.recall("big", "q", 8, query_embedding=queries[0])
        assert ann.ann_counts == {"ann": 2 * len(queries), "exact_fallback": 1}
    finally:
        exact.close()
        ann.close()


def test_an_ann_answer_below_the_floor_is_complete_and_a_limit_above_ef_widens_the_scan(
    ann_table,
):
    """A full scan whose farthest row is below the floor already holds every row that
    clears it: its answer stands (here none, so the keyword path answers); a limit
    above ef_search scans `limit` rows."""
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(
        dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=50, ef_search=10
    ) as ann:
        got = ann.recall("big", "q", 20, RecallParams(floor=-1.0), query_embedding=queries[0])
        assert len(got) == 20 and ann.ann_counts == {"ann": 1, "exact_fallback": 0}
        got = ann.recall("big", "q", 8, RecallParams(floor=0.99), query_embedding=queries[0])
        assert {h.fallback for h in got} == {"below_floor"}
        assert ann.ann_counts == {"ann": 2, "exact_fallback": 0}


@pytest.mark.parametrize(
    "params",
    [RecallParams(floor=-1.0), RecallParams(floor=0.1, recency_share=1.0, half_life_days=0.5)],
)
def test_an_ann_scan_that_holds_the_scope_answers_the_exact_answer_to_the_bit(ann_table, params):
    """The index's rows come with pgvector's distances only; the rows `near_top` keeps
    are read with their vectors and ranked by their own cosines, so when the scan
    holds the whole 50-row scope the answer is the exact path's: ids, scores,
    cosines and weights, with 2 round trips."""
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    exact = PostgresStore.open(dsn, embedder=emb, clock=clock)
    ann = PostgresStore.open(
        dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=50, ef_search=100
    )
    try:
        for limit in (1, 8, 50):
            for q in queries:
                got = ann.recall("small", "q", limit, params, query_embedding=q)
                want = exact.recall("small", "q", limit, params, query_embedding=q)
                assert [dataclasses.replace(h, path="") for h in got] == [
                    dataclasses.replace(h, path="") for h in want
                ]
        assert ann.ann_counts["exact_fallback"] == 0 and ann.ann_counts["ann"] == 3 * 20
    finally:
        exact.close()
        ann.close()


def test_a_scratch_store_is_empty_and_gone_after_close(pg_server_dsn):
    from memkit.store import open_scratch_store

    def schemas() -> set[str]:
        with psycopg.connect(pg_server_dsn, autocommit=True) as c:
            q = "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'memkit_scratch%'"
            return {r[0] for r in c.execute(q)}

    before = schemas()
    a = open_scratch_store(pg_server_dsn, embedder=None)
    b = open_scratch_store(pg_server_dsn, embedder=None)
    a.remember("s", "only in a")
    assert b.live("s") == [] and len(schemas() - before) == 2  # one schema each
    a.close()
    b.close()
    assert schemas() == before
    with pytest.raises(ConfigError, match="URL"):
        open_scratch_store("mysql://x/y", embedder=None)
    with open_scratch_store(None, embedder=None) as s:  # in memory
        assert isinstance(s, SQLiteStore)


# --- exact recall in the database: the SQLite store's answers, candidates read in pages ---


@pytest.fixture
def twin_stores(tmp_path, pg_dsn):
    """The same rows in a SQLite and a Postgres store (same rowids), built so the
    best scores lie beyond the nearest rows: 150 near rows with low confidence
    and a year old, 100 farther rows confident and fresh, 20 zero vectors and
    130 random rows; `q` points at the near rows."""
    rng = np.random.default_rng(11)
    q = np.eye(DIM, dtype=np.float32)[0]
    near = q + 0.15 * rng.normal(size=(150, DIM))
    far = q + 0.9 * rng.normal(size=(100, DIM))
    groups = [
        ("near", near, 0.0, -365 * DAY),
        ("far", far, 1.0, 0.0),
        ("zero", np.zeros((20, DIM)), 0.9, -DAY),
        ("rand", rng.normal(size=(130, DIM)), 0.7, -10 * DAY),
    ]
    clock = Clock()
    stores = []
    for url in (str(tmp_path / "twin.db"), pg_dsn):
        s = open_store(url, embedder=TableEmbedder(dim=DIM), clock=clock)
        for name, vecs, conf, age in groups:
            texts = [f"{name} {i}" for i in range(len(vecs))]
            stamps = [clock() + age + i for i in range(len(vecs))]
            s.bulk_load("s", texts, vecs, confidence=conf, timestamps=stamps)
        stores.append(s)
    yield (*stores, q, rng)
    for s in stores:
        s.close()


def _answer(hits):
    return [(h.memory.content, h.score, h.cosine, h.confidence_weight, h.decay) for h in hits]


@pytest.mark.parametrize("limit", [1, 8, 70, 0, -1])
@pytest.mark.parametrize(
    "params",
    [
        RecallParams(),
        RecallParams(floor=0.0),
        RecallParams(floor=-1.0, recency_share=1.0),
        RecallParams(candidate_cap=50),
        RecallParams(candidate_cap=0),
        RecallParams(recency_share=0.0, confidence_min=1.0),
    ],
)
def test_postgres_exact_recall_is_the_sqlite_answer(twin_stores, limit, params):
    lite, pg, q, rng = twin_stores
    for query in (q, rng.normal(size=DIM), -q, np.zeros(DIM), np.ones(DIM + 1)):
        want = lite.recall("s", "zzz", limit, params, query_embedding=query)
        got = pg.recall("s", "zzz", limit, params, query_embedding=query)
        assert _answer(got) == _answer(want)


@pytest.fixture
def crowded_twins(tmp_path, pg_dsn):
    """SQLite and Postgres with 600 rows all near `q` (cosines ~0.85-1.0), every one
    at confidence 0.7 or below and of several ages: the page of nearest rows never
    settles the answer alone, and the scope's own weight bound decides what is read."""
    rng = np.random.default_rng(5)
    q = np.eye(DIM, dtype=np.float32)[0]
    vecs = q + rng.uniform(0.05, 0.6, (600, 1)) * rng.normal(size=(600, DIM)) / np.sqrt(DIM)
    clock = Clock()
    stores = []
    for url in (str(tmp_path / "crowd.db"), pg_dsn):
        s = open_store(url, embedder=TableEmbedder(dim=DIM), clock=clock)
        for k, conf in enumerate((0.7, 0.5, 0.65)):
            part = vecs[k * 200 : (k + 1) * 200]
            stamps = [clock() - (k * 40 + i % 7) * DAY for i in range(200)]
            s.bulk_load(
                "s", [f"c{k} {i}" for i in range(200)], part, confidence=conf, timestamps=stamps
            )
        stores.append(s)
    yield (*stores, q, rng)
    for s in stores:
        s.close()


@pytest.mark.parametrize("limit", [1, 8, 70])
@pytest.mark.parametrize(
    "params",
    [
        RecallParams(),
        RecallParams(recency_share=1.0),
        RecallParams(recency_share=0.0),
        RecallParams(floor=-1.0),
    ],
)
def test_exact_recall_bounded_by_the_scopes_own_weights_is_the_sqlite_answer(
    crowded_twins, limit, params
):
    lite, pg, q, rng = crowded_twins
    for query in (q, q + 0.02 * rng.normal(size=DIM), q + 0.1 * rng.normal(size=DIM)):
        want = lite.recall("s", "zzz", limit, params, query_embedding=query)
        got = pg.recall("s", "zzz", limit, params, query_embedding=query)
        assert _answer(got) == _answer(want)


def test_an_hnsw_answer_that_holds_the_whole_scope_is_the_sqlite_answer(twin_stores, pg_dsn):
    """ef_search above the scope's rows: the index returns every row, and the scores
    (vectors read in binary, cosines in the client's float32) are SQLite's bits."""
    lite, pg, q, rng = twin_stores
    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(
        pg_dsn, embedder=emb, clock=pg.clock, ann="hnsw", hnsw_min_rows=1, ef_search=400
    ) as ann:
        for query in (q, rng.normal(size=DIM), -q):
            for limit in (1, 8, 70):
                params = RecallParams(floor=-1.0)
                want = lite.recall("s", "zzz", limit, params, query_embedding=query)
                got = ann.recall("s", "zzz", limit, params, query_embedding=query)
                assert _answer(got) == _answer(want)
        assert ann.ann_counts == {"ann": 9, "exact_fallback": 0}


# --- HNSW build settings, commit durability, batched writes --------------------------------


def test_hnsw_build_runs_under_its_settings_and_reports_them(pg_dsn):
    from memkit.store.pg_search import BUILD_SETTINGS

    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(pg_dsn, embedder=emb) as s:
        s.bulk_load("s", [f"row {i}" for i in range(50)], np.eye(DIM)[np.arange(50) % DIM])
    with PostgresStore.open(
        pg_dsn,
        embedder=emb,
        ann="hnsw",
        hnsw_min_rows=50,
        build_settings={"maintenance_work_mem": "128MB"},
    ) as s:
        b = s.hnsw_build
        assert b["built"] and b["seconds"] >= 0 and b["index_bytes"] > 0
        assert b["settings"] == {**BUILD_SETTINGS, "maintenance_work_mem": "128MB"}
    with PostgresStore.open(pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=50) as s:
        assert s.hnsw_build["built"] is False and s.hnsw_build["index_bytes"] > 0  # kept
    with PostgresStore.open(pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=51) as s:
        assert s.hnsw_build == {
            "built": False,
            "seconds": 0,
            "settings": {},
            "concurrently": True,
            "index_bytes": 0,
            "scopes": {},
        }  # 50 rows: under the bound, no index


@pytest.mark.parametrize(
    "m, efc, says",
    [
        (1, 64, "hnsw_m=1: want 2..100"),
        (101, 1_000, "hnsw_m=101: want 2..100"),
        (2, 3, "hnsw_ef_construction=3: want 4..1000"),
        (2, 1_001, "hnsw_ef_construction=1001: want 4..1000"),
        (16, 31, "hnsw_ef_construction=31 < 2 x hnsw_m=16"),
        (True, 64, "hnsw_m=True: want an int"),
        (16, "64", "hnsw_ef_construction='64': want an int"),
    ],
)
def test_a_graph_pgvector_refuses_is_a_config_error_at_open(m, efc, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        PostgresStore.open(
            "postgresql://nowhere.invalid/x", embedder=None, hnsw_m=m, hnsw_ef_construction=efc
        )


@pytest.mark.parametrize("m, efc", [(2, 4), (16, 32), (100, 1_000)])
def test_a_graph_at_pgvectors_bounds_is_built_as_asked_and_serves_recall(pg_dsn, m, efc):
    from memkit.store.pg_ann import index_name

    emb = TableEmbedder(dim=DIM)
    rng = np.random.default_rng(3)
    with PostgresStore.open(pg_dsn, embedder=emb) as s:
        s.bulk_load("s", [f"row {i}" for i in range(60)], rng.normal(size=(60, DIM)))
    with PostgresStore.open(
        pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=50, hnsw_m=m, hnsw_ef_construction=efc
    ) as s:
        assert s.hnsw_build["scopes"]["s"]["graph"] == (m, efc)
        q = rng.normal(size=DIM).astype(np.float32)
        got = s.recall("s", "q", 8, RecallParams(floor=-1.0), query_embedding=q)
        assert len(got) == 8 and s.ann_counts == {"ann": 1, "exact_fallback": 0}
    with psycopg.connect(pg_dsn) as c:
        (options,) = c.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s", (index_name("s", DIM),)
        ).fetchone()
        assert sorted(options) == [f"ef_construction={efc}", f"m={m}"]


def test_an_index_built_keeps_its_graph_and_one_without_options_reports_pgvectors(pg_dsn):
    """A later open asking for another graph keeps the index (its report says which
    graph it has: memkit's default m 20); an index built before memkit named the
    graph (no reloptions) reports pgvector's defaults, 16 and 64."""
    from memkit.store.pg_ann import index_name, scope_predicate

    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(pg_dsn, embedder=emb) as s:
        s.bulk_load("s", [f"row {i}" for i in range(50)], np.eye(DIM)[np.arange(50) % DIM])
    with PostgresStore.open(pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=50) as s:
        assert s.hnsw_build["built"] and s.hnsw_build["scopes"]["s"]["graph"] == (20, 64)
    with PostgresStore.open(
        pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=50, hnsw_m=24, hnsw_ef_construction=48
    ) as s:
        assert s.hnsw_build["built"] is False
        assert s.hnsw_build["scopes"]["s"]["graph"] == (20, 64)  # memkit's default, as built
        s.drop_hnsw()
        assert s.build_hnsw()["scopes"]["s"]["graph"] == (24, 48)  # rebuilt: the open's graph
        s.drop_hnsw()
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute(
                f"CREATE INDEX {index_name('s', DIM)} ON memories USING hnsw "
                f"((embedding::vector({DIM})) vector_cosine_ops) WHERE {scope_predicate(c, 's')}"
            )
        kept = s.build_hnsw()["scopes"]["s"]
        assert kept["built"] is False and kept["graph"] == (16, 64)


def test_a_plain_build_is_a_choice_that_serves_recall_like_a_concurrent_one(ann_table):
    dsn, queries, clock = ann_table
    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(
        dsn, embedder=emb, clock=clock, ann="hnsw", hnsw_min_rows=50, build_concurrently=False
    ) as ann:
        assert ann.hnsw_build["built"] and ann.hnsw_build["concurrently"] is False
        got = ann.recall("small", "q", 8, RecallParams(floor=-1.0), query_embedding=queries[0])
        assert len(got) == 8 and ann.ann_counts == {"ann": 1, "exact_fallback": 0}
        ann.drop_hnsw()
        assert ann.build_hnsw(concurrently=True)["concurrently"] is True
        with pytest.raises(ConfigError, match="concurrently='no'"):
            ann.build_hnsw(concurrently="no")


@pytest.mark.parametrize("bad", [0, "plain", None])
def test_build_concurrently_must_be_a_bool(bad):
    with pytest.raises(ConfigError, match="build_concurrently"):
        PostgresStore.open("postgresql://nowhere.invalid/x", embedder=None, build_concurrently=bad)


def test_reembed_of_an_hnsw_store_rebuilds_the_index_under_its_build_settings(pg_dsn):
    """Found by mypy: `reembed` on an HNSW store called the index build without its
    settings (a TypeError after every row had moved)."""
    from memkit.embed import HashingEmbedder

    texts = [f"note {i}: {'abcdefghij'[i % 10] * (i % 7 + 1)} {i * 7919}" for i in range(40)]
    with PostgresStore.open(pg_dsn, embedder=HashingEmbedder(64)) as s:
        s.remember_many("s", texts)
    settings = {"maintenance_work_mem": "96MB"}
    with PostgresStore.open(
        pg_dsn, embedder=HashingEmbedder(64), ann="hnsw", hnsw_min_rows=40, build_settings=settings
    ) as s:
        rep = s.reembed("hashing-32")
        assert rep.embedder == "hashing-32" and rep.embedded_now == len(texts)
        assert s.hnsw_build["built"] is True and set(s.hnsw_build["scopes"]) == {"s"}
        assert s.hnsw_build["settings"]["maintenance_work_mem"] == "96MB"
        assert s.recall("s", texts[5])[0].content == texts[5]
        assert s.ann_counts["ann"] == 1  # served by the rebuilt index
    from memkit.store.pg_ann import index_name

    with psycopg.connect(pg_dsn) as c:  # the 32-d index replaced the 64-d one
        names = [index_name("s", 64), index_name("s", 32)]
        assert [c.execute("SELECT to_regclass(%s)", (n,)).fetchone()[0] for n in names] == [
            None,
            names[1],
        ]


def test_a_build_setting_of_none_drops_the_default():
    from memkit.store.pg_search import build_session

    assert "max_parallel_maintenance_workers" not in build_session(
        {"max_parallel_maintenance_workers": None}
    )
    assert build_session({"work_mem": 65536})["work_mem"] == "65536"


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"maintenance_work_mem": "lots"}, "maintenance_work_mem='lots'"),
        ({"no_such_setting": "1"}, "no_such_setting"),
        ({"Robert'); DROP TABLE memories; --": "1"}, "not a server setting name"),
        ({"work_mem": 1.5}, "want a string or an int"),
        ({"work_mem": True}, "want a string or an int"),
        (["maintenance_work_mem"], "want a mapping"),
    ],
)
def test_bad_build_settings_are_config_errors_naming_them(pg_dsn, settings, match):
    emb = TableEmbedder(dim=DIM)
    with PostgresStore.open(pg_dsn, embedder=emb) as s:
        s.bulk_load("s", ["a", "b"], np.eye(DIM)[:2])
    with pytest.raises(ConfigError, match=match):
        PostgresStore.open(
            pg_dsn, embedder=emb, ann="hnsw", hnsw_min_rows=2, build_settings=settings
        )
    with psycopg.connect(pg_dsn) as c:  # nothing was built
        q = "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname ~ %s"
        assert c.execute(q, ("^memories_hnsw",)).fetchone()[0] == 0


def test_synchronous_commit_off_is_a_choice_and_writes_as_usual(pg_dsn):
    with pytest.raises(ConfigError, match="synchronous_commit='off'"):
        PostgresStore.open(pg_dsn, embedder=None, synchronous_commit="off")
    with PostgresStore.open(pg_dsn, embedder=None, synchronous_commit=False) as s:
        rid = s.remember("s", "written without waiting for the WAL flush").id
    with PostgresStore.open(pg_dsn, embedder=None) as s:
        assert [m.id for m in s.live("s")] == [rid]


def test_a_batch_whose_late_item_postgres_refuses_writes_nothing(pg_dsn):
    """remember_many's inserts are pipelined: an item the server refuses (text
    with U+0000) fails the whole batch after earlier items were sent."""
    with PostgresStore.open(pg_dsn, embedder=None) as s:
        s.remember("s", "already here")
        with pytest.raises(ConfigError, match="NUL"):
            s.remember_many("s", ["first new fact", "second new fact", "bad \x00 fact"])
        assert [m.content for m in s.live("s")] == ["already here"]
        # the connection is usable and the batch path writes after the failure
        out = s.remember_many("s", ["first new fact", "first new fact!", "third"])
        assert [r.folded for r in out] == [False, True, False]
        assert len(s.live("s")) == 3


def test_per_run_statements_are_never_prepared_and_others_keep_a_generic_plan(pg_dsn):
    """Writes keep the server's prepared generic plans (planning a write's statements
    on every run cost server CPU); the exact recall's scoped statements (`per_run`)
    are planned for each scope's own arguments, never from a cached plan."""
    from memkit.store.postgres import PgDb

    with psycopg.connect(pg_dsn, autocommit=True) as c:
        db = PgDb(c)
        for i in range(20):  # psycopg prepares after 5 runs; the server goes generic after 5 more
            db.execute("SELECT ? + 1 AS written", (i,)).fetchall()
            db.execute("SELECT ? + 2 AS scoped", (i,), per_run=True).fetchall()
        prepared = c.execute(
            "SELECT statement, generic_plans FROM pg_prepared_statements"
        ).fetchall()
    assert not [s for s, _ in prepared if "scoped" in s]
    assert [g for s, g in prepared if "written" in s] and all(
        g > 0 for s, g in prepared if "written" in s
    )


def _store_at_migration(dsn: str, last: int) -> None:
    """`dsn`'s store emptied and rebuilt by the migrations up to `last` only."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "DROP TABLE IF EXISTS memories, rollouts, scopes, meta, schema_version, "
            "fold_postings, fold_posted"
        )
        c.execute("DROP FUNCTION IF EXISTS memkit_lock_scope, memkit_kept")
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        for version, ddl in MIGRATIONS[:last]:
            c.execute(ddl)
            c.execute("INSERT INTO schema_version VALUES (%s)", (version,))


def test_a_store_of_schema_3_migrates_to_the_lock_function_and_writes(pg_dsn):
    _store_at_migration(pg_dsn, 3)
    with pytest.raises(ConfigError, match="schema version 3"):
        PostgresStore.open(pg_dsn, embedder=None, read_only=True)
    with (
        PostgresStore.open(pg_dsn, embedder=None) as a,
        PostgresStore.open(pg_dsn, embedder=None) as b,
    ):
        first = a.remember("s", "the deploy key rotates every ninety days")
        again = b.remember("s", "the deploy key rotates every ninety days")
        assert again.folded and again.id == first.id
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert c.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        assert c.execute("SELECT to_regproc('memkit_lock_scope')").fetchone()[0] is not None


@pytest.mark.parametrize("reserve", [0, 1, 2, 3])
def test_the_lock_step_reserves_as_many_rowids_as_asked_ascending(pg_dsn, reserve):
    """Migration 5 takes one rowid (every `remember`) on a path of its own; 0, 1
    (the bound) and past it each reserve exactly that many fresh rowids, ascending."""
    with PostgresStore.open(pg_dsn, embedder=None) as s:
        s.remember("s", "a row so the sequence has moved")
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        (top_version,) = c.execute("SELECT max(version) FROM schema_version").fetchone()
        assert top_version >= 5  # 5 and later
        (top,) = c.execute("SELECT max(rowid) FROM memories").fetchone()
        got = [
            c.execute(
                "SELECT ids FROM memkit_lock_scope('s', NULL, %s, false, 10)", (reserve,)
            ).fetchone()[0]
            for _ in range(2)
        ]
    assert [len(ids) for ids in got] == [reserve, reserve]
    flat = [i for ids in got for i in ids]
    assert flat == sorted(flat) and len(set(flat)) == len(flat)
    assert all(i > top for i in flat)


def test_a_store_of_schema_4_migrates_to_5_and_writes_at_the_reserved_rowids(pg_dsn):
    _store_at_migration(pg_dsn, 4)
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert (
            "p_reserve = 1"
            not in c.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = 'memkit_lock_scope'"
            ).fetchone()[0]
        )
    with PostgresStore.open(pg_dsn, embedder=None) as s:
        one = s.remember("s", "the deploy key rotates every ninety days")
        many = s.remember_many("s", ["the build cache lives on the shared disk", "tea at four"])
        again = s.remember("s", "the deploy key rotates every ninety days")
        assert again.folded and again.id == one.id
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        assert (
            "p_reserve = 1"
            in c.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = 'memkit_lock_scope'"
            ).fetchone()[0]
        )
        ids = [r[0] for r in c.execute("SELECT id FROM memories ORDER BY rowid").fetchall()]
    assert ids == [one.id, *(m.id for m in many)]
