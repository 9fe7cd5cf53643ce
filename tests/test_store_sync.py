"""In-memory indexes follow other connections' writes (change_seq) on both backends,
and SQLite's migrations 2-3."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_store_helpers import T0, Clock, TableEmbedder, _raw_connection

import memkit.store.index as store_index
from memkit.params import RecallParams
from memkit.store import SQLiteStore, open_store
from memkit.store.gram_index import GramIndex
from memkit.store.schema import MIGRATIONS, SCHEMA_VERSION

W1 = "The staging deploy runs ./deploy.sh --env staging from the ops box"
W2 = "The staging deploy runs ./deploy.sh --env staging from the ops box."
W3 = "the staging deploy runs ./deploy.sh --env staging from the ops box!"


def count_builds(monkeypatch, cls=GramIndex, name: str = "build") -> list:
    """From now on, one item per index `cls.name` builds from the table (by
    default: per trigram index built)."""
    builds: list = []
    real = getattr(cls, name).__func__
    monkeypatch.setattr(
        cls, name, classmethod(lambda c, *x, **k: builds.append(1) or real(c, *x, **k))
    )
    return builds


@pytest.fixture
def pair(store_url):
    """Two connections to one store of the test's backend."""
    clock = Clock()
    emb = TableEmbedder({W1: [1, 0, 0, 0], W2: [1, 0, 0, 0], "other": [0, 1, 0, 0]})
    a = open_store(store_url, embedder=emb, clock=clock)
    b = open_store(store_url, embedder=emb, clock=clock)
    yield a, b
    a.close()
    b.close()


def test_fold_in_sees_a_row_another_connection_wrote_after_the_index_loaded(pair):
    a, b = pair
    a.remember("s", "unrelated warm-up fact about invoices")  # a's trigram index is built
    first = b.remember("s", W1)
    again = a.remember("s", W2)
    assert again.folded and again.id == first.id
    assert a.get("s", first.id).seen_count == 2


def test_fold_in_never_targets_a_row_another_connection_retracted(pair):
    a, b = pair
    r = a.remember("s", W1)
    b.retract("s", r.id)
    again = a.remember("s", W2)
    assert not again.folded and again.id != r.id


def test_fold_in_follows_another_connections_rewording(pair):
    a, b = pair
    r = a.remember("s", "weekly budget review happens on monday mornings")
    b_id = b.update("s", r.id, W1)  # successor with new words; a's index knew the old ones
    assert a.remember("s", "weekly budget review happens on monday mornings!").folded is False
    folded = a.remember("s", W3)
    assert folded.folded and folded.id == b_id


def test_vector_recall_drops_a_row_another_connection_retracted(pair):
    a, b = pair
    r = a.remember("s", W1)
    assert [h.id for h in a.recall("s", W1)] == [r.id]  # vector cache loaded
    b.retract("s", r.id)
    assert a.recall("s", W1) == []


def test_many_foreign_changes_reload_the_indexes_instead(pair, monkeypatch):
    monkeypatch.setattr(store_index, "SYNC_MAX", 3)
    a, b = pair
    a.remember("s", "warm-up fact about invoices")
    a.recall("s", W1)
    for i in range(5):
        b.remember("s", f"distinct fact number {i} about region eu-west-{i}")
    first = b.remember("s", W1)
    again = a.remember("s", W2)
    assert again.folded and again.id == first.id
    assert [h.id for h in a.recall("s", W1)][:1] == [first.id]


@pytest.mark.parametrize("extra", [0, 1])
def test_a_keyword_index_is_dropped_once_its_queue_outgrows_it(pair, monkeypatch, extra):
    """A keyword index queues writes until its next query. At BACKLOG
    queued writes (more than its rows) it is kept; one more and it is dropped,
    to load again on the next keyword query. Either way that query answers
    every write."""
    from memkit.store.keyword_index import KeywordIndex

    monkeypatch.setattr(store_index, "BACKLOG", 4)
    a, _ = pair
    a.embedder = None  # recall takes the keyword path
    a.remember("s", "warm-up fact about invoices")
    assert [h.path for h in a.recall("s", "invoices")] == ["keyword"]
    builds = count_builds(monkeypatch, KeywordIndex)
    words = ["alpha", "bravo", "charlie", "delta", "echo"][: 4 + extra]
    for w in words:
        a.remember("s", f"{w} {w[::-1]} {w.upper()}x ledgers")
    hits = a.recall("s", "ledgers", limit=10)
    assert len(hits) == 4 + extra and {h.path for h in hits} == {"keyword"}
    assert len(builds) == extra  # kept and caught up, or dropped and loaded again


@pytest.mark.parametrize("extra", [0, 1])
def test_a_vector_index_is_dropped_once_its_queue_outgrows_it(pair, monkeypatch, extra):
    """A scope's vectors queue writes until the next vector recall. At BACKLOG
    queued writes (more than its rows) they are kept; one more and they are
    dropped, to load again on the next recall. Either way that recall ranks
    every write."""
    from memkit.store.index import ScopeVectors

    monkeypatch.setattr(store_index, "BACKLOG", 4)
    a, _ = pair
    a.remember("s", "warm-up fact about invoices")
    everything = RecallParams(floor=-1.0)  # the table embedder gives unknown texts cosine 0
    assert [h.path for h in a.recall("s", "invoices", params=everything)] == ["vector"]
    loads = count_builds(monkeypatch, ScopeVectors, "load")
    words = ["alpha", "bravo", "charlie", "delta", "echo"][: 4 + extra]
    ids = [a.remember("s", f"{w} {w[::-1]} {w.upper()}x ledgers").id for w in words]
    hits = a.recall("s", "alpha ledgers", limit=10, params=everything)
    assert set(ids) < {h.id for h in hits} and {h.path for h in hits} == {"vector"}
    # kept and caught up, or dropped and loaded again; Postgres holds no vectors at all
    assert len(loads) == (0 if a.backend == "postgres" else extra)


@pytest.mark.parametrize("extra", [0, 1])
def test_a_vector_queue_may_reach_a_quarter_of_its_rows(pair, monkeypatch, extra):
    """Past BACKLOG the vectors' bound is a quarter of their rows (a queued write
    holds its vector): 12 rows keep 3 queued writes, and drop at a 4th."""
    from memkit.store.index import ScopeVectors

    monkeypatch.setattr(store_index, "BACKLOG", 1)
    a, _ = pair
    words = "amber birch cedar delta ember fjord grove harbor iris jade kelp lotus".split()
    assert not any(a.remember("s", f"{w} {w.upper()}x {w[::-1]} invoices").folded for w in words)
    everything = RecallParams(floor=-1.0)
    assert {h.path for h in a.recall("s", "invoices", params=everything)} == {"vector"}
    loads = count_builds(monkeypatch, ScopeVectors, "load")
    ids = [
        a.remember("s", f"queued fact {w} {w[::-1]}").id
        for w in ["ab", "cd", "ef", "gh"][: 3 + extra]
    ]
    hits = a.recall("s", "queued", limit=50, params=everything)
    assert set(ids) < {h.id for h in hits}
    assert len(loads) == (0 if a.backend == "postgres" else extra)  # Postgres: never loaded


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["put", "put", "drop", "short"])),
        max_size=40,
    ),
    start=st.integers(0, 5),
)
def test_queued_vector_writes_leave_the_matrix_as_writing_each_at_once(ops, start):
    """`flush` applies runs of puts in one pass; the matrix, its columns' order
    and every per-row array end exactly as applying each write when it came,
    and each live row holds its last write (a vector of the wrong length as
    zeros; recency is last_seen, else created)."""
    import numpy as np

    from memkit.store.index import ScopeVectors

    rng = np.random.default_rng(len(ops) * 10 + start)
    eager, lazy = ScopeVectors(dim=4), ScopeVectors(dim=4)
    want: dict[int, tuple] = {}  # rowid -> (vector, conf, last_seen, recency), by hand
    for sv in (eager, lazy):
        for r in range(start):
            sv.put(r, np.arange(4.0) + r, 0.5, float(r), 0.0)
    for r in range(start):
        want[r] = (np.arange(4.0) + r, 0.5, float(r), float(r))
    for k, (rowid, what) in enumerate(ops):
        if what == "drop":
            eager.drop(rowid)
            lazy.queue.append((rowid,))
            want.pop(rowid, None)
            continue
        vec = rng.standard_normal(3 if what == "short" else 4)  # short: a mismatched vector
        seen = None if k % 3 == 0 else float(k)
        eager.put(rowid, vec, k / 40, seen, float(-k))
        lazy.queue.append((rowid, vec, k / 40, seen, float(-k)))
        held = np.zeros(4) if what == "short" else vec
        want[rowid] = (
            held,
            k / 40,
            np.nan if seen is None else seen,
            float(-k) if seen is None else seen,
        )
    lazy.flush()
    assert set(lazy.pos) == set(want)
    for rowid, (vec, conf, seen, recency) in want.items():
        i = lazy.pos[rowid]
        assert np.array_equal(lazy.rows()[i], vec.astype(np.float32))
        assert lazy.rowid[i] == rowid and lazy.conf[i] == conf
        assert np.array_equal([lazy.last_seen[i], lazy.recency[i]], [seen, recency], equal_nan=True)
    assert lazy.queue == [] and lazy.n == eager.n and lazy.pos == eager.pos
    n = eager.n
    assert np.array_equal(lazy.rows(), eager.rows())
    for name in ("rowid", "conf", "last_seen", "recency"):
        assert np.array_equal(getattr(lazy, name)[:n], getattr(eager, name)[:n], equal_nan=True)


def test_own_writes_need_no_reload(pair, monkeypatch):
    a, _ = pair
    a.remember("s", "warm-up fact about invoices")
    builds = count_builds(monkeypatch)
    a.remember("s", W1)
    assert a.remember("s", W2).folded
    assert builds == []  # patched in place, never rebuilt


def test_a_write_that_changes_no_row_keeps_the_indexes(pair, monkeypatch):
    """A write of rollouts only (here: counting a failed pass) stamps no memory row;
    it must not look like a foreign change that forces the indexes to reload."""
    a, _ = pair
    a.remember("s", "warm-up fact about invoices")
    builds = count_builds(monkeypatch)
    a.record_failed_pass("s", ["f" * 64], "parse")
    a.remember("s", W1)
    assert a.remember("s", W2).folded
    assert builds == []


def test_a_rolled_back_write_leaves_the_indexes_consistent(pair):
    a, _ = pair
    r = a.remember("s", W1)
    snap = a.snapshot("s")
    a.retract("s", r.id)  # the snapshot is now stale: commit_pass rolls back
    with pytest.raises(Exception, match="no longer live"):
        a.commit_pass("s", [], snap, [{"op": "retract", "ids": [r.id]}])
    again = a.remember("s", W2)
    assert not again.folded  # the retracted row did not come back into the index


def test_a_batch_that_fails_after_writing_leaves_no_row_in_any_index(pair, monkeypatch):
    """The trigram index takes a batch's rows as it goes (so later items fold
    into earlier ones); a batch that fails after its first row must leave no
    trace of that row: not as a fold target (not even once SQLite hands its
    rowid to the next row), not in recall, not to another connection."""
    import memkit.store.rows as store_rows

    a, b = pair
    a.remember("s", "warm-up fact about invoices")  # the indexes are loaded
    a.recall("s", "invoices")
    real, calls = store_rows.insert, []

    def second_insert_fails(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args, **kw)

    monkeypatch.setattr(store_rows, "insert", second_insert_fails)
    with pytest.raises(OSError):
        a.remember_many("s", [W1, "other"])
    monkeypatch.setattr(store_rows, "insert", real)
    zebra = a.remember("s", "zebras graze quietly near the river bend")  # may reuse its rowid
    w2 = a.remember("s", W2)
    assert not w2.folded and w2.id != zebra.id  # W1's row was rolled back
    assert not b.remember("s", "the other connection never saw it: " + W1).folded
    assert [m.content for m in a.live("s")].count(W2) == 1
    assert W1 not in [h.memory.content for h in a.recall("s", W1, limit=10)]


def test_change_seq_rises_with_every_write(pair):
    a, b = pair
    r = a.remember("s", W1)
    b.remember("s", W2)  # fold: same row, new stamp

    def seq() -> int:
        c = _raw_connection(a.path)
        try:
            return c.execute("SELECT change_seq FROM memories WHERE id = ?", (r.id,)).fetchone()[0]
        finally:
            c.close()

    s1 = seq()
    a.retract("s", r.id)
    assert seq() > s1 > 0


def test_migration_2_drops_disk_postings_and_keeps_every_row(tmp_path):
    path = tmp_path / "v1.db"
    c = sqlite3.connect(path, isolation_level=None)
    for stmt in MIGRATIONS[0][1].split(";"):
        if stmt.strip():
            c.execute(stmt)
    c.execute("PRAGMA user_version = 1")
    c.execute(
        "INSERT INTO memories (id, scope_id, kind, content, confidence, created_at, "
        "seen_count, last_seen_at, ngrams) VALUES ('m1', 's', 'fact', ?, 0.7, ?, 1, ?, 0)",
        (W1, T0, T0),
    )
    c.execute("INSERT INTO trigrams (gram, row) VALUES ('abc', 1)")
    c.close()
    with SQLiteStore.open(str(path), embedder=None, clock=Clock()) as s:
        assert [m.id for m in s.live("s")] == ["m1"]
        again = s.remember("s", W2)  # the in-memory index loads the migrated row
        assert again.folded and again.id == "m1"
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "trigrams" not in tables and "grams" not in tables


def test_migration_3_indexes_only_retired_rows_by_successor(tmp_path):
    path = tmp_path / "v2.db"
    c = sqlite3.connect(path, isolation_level=None)
    for _version, ddl in MIGRATIONS[:2]:
        for stmt in ddl.split(";"):
            if stmt.strip():
                c.execute(stmt)
    c.execute("PRAGMA user_version = 2")
    c.execute(
        "INSERT INTO memories (id, scope_id, kind, content, confidence, created_at, "
        "seen_count, last_seen_at, superseded_by, ngrams) VALUES "
        "('m1', 's', 'fact', 'old wording', 0.7, ?, 1, ?, 'm2', 0), "
        "('m2', 's', 'fact', 'new wording', 0.7, ?, 1, ?, NULL, 0)",
        (T0, T0, T0, T0),
    )
    c.close()
    with SQLiteStore.open(str(path), embedder=None, clock=Clock()) as s:
        assert [m.id for m in s.history("s", "m2")] == ["m1", "m2"]
        r = s.remember("s", "a fresh fact about the deploy script")
        c = sqlite3.connect(path)  # the file as any reader sees it
        (sql,) = c.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'memories_successor'"
        ).fetchone()
        assert "WHERE superseded_by IS NOT NULL" in sql
        plan = c.execute(
            "EXPLAIN QUERY PLAN SELECT rowid FROM memories WHERE superseded_by = ? "
            "AND scope_id = ? AND id != ?",
            ("m2", "s", "m2"),
        ).fetchall()
        assert "memories_successor" in plan[0][3]
        # a live row is not in the partial index; a retired one is
        by_index = "SELECT id FROM memories INDEXED BY memories_successor WHERE superseded_by = ?"
        assert c.execute(by_index, ("m2",)).fetchall() == [("m1",)]
        s.retract("s", r.id)
        assert c.execute(by_index, (r.id,)).fetchall() == [(r.id,)]
        with pytest.raises(sqlite3.OperationalError, match="no query solution"):
            c.execute(
                "SELECT id FROM memories INDEXED BY memories_successor WHERE superseded_by IS NULL"
            ).fetchall()
    c = sqlite3.connect(path)
    assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 3


def test_file_stores_checkpoint_every_16000_pages(tmp_path):
    """Seen from outside: the -wal file grows past SQLite's default checkpoint
    (1,000 pages, ~4 MB) over many small writes, as README's ~64 MB promises."""
    import os
    import random

    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(5000)]
    path = str(tmp_path / "c.db")
    with SQLiteStore.open(path, embedder=None) as s:
        for _ in range(600):  # ~6 MB of content, one commit each
            s.remember("s", " ".join(rng.choices(vocab, k=2000)))
        assert os.path.getsize(path + "-wal") > 1_500 * 4096
