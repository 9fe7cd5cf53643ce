"""Server-mode postings kept only for the (scope, kind)s a writer needed them for
(issue #36, `memkit.store.fold_listed`): none under the writer's cap, a key
listed (all its live rows posted) once one is past it, kept by every writer
after, and listed by a bulk load, a switch of mode and a copy past the cap.
These pin `fold_list_at=1` (nothing listed ahead of the cap) unless a test says
otherwise; the listing ahead is `tests/test_fold_ahead.py`."""

from __future__ import annotations

import random

import psycopg
import pytest
from test_store_helpers import Clock

from memkit.errors import MemkitError
from memkit.store import SQLiteStore, copy_store, fold_listed, fold_local, fold_postings
from memkit.store.fold_postings import scope_key
from memkit.store.postgres import PgDb, PostgresStore

WORDS = ("deploy", "staging", "cache", "ticket", "shared", "naïve", "Đức", "disk", "tea")


def _text(rng: random.Random, i: int) -> str:
    return f"note {i} " + " ".join(rng.choice(WORDS) + str(rng.randrange(999)) for _ in range(6))


def _open(dsn: str, rows: int, **kw) -> PostgresStore:
    kw.setdefault("fold_list_at", 1.0)
    return PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=rows, **kw)


def _listed(dsn: str) -> set[int]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {int(r[0]) for r in c.execute("SELECT sk FROM fold_posted")}


def _posted_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return int(c.execute("SELECT count(DISTINCT rowid) FROM fold_postings").fetchone()[0])


def test_a_key_is_listed_by_the_first_write_past_the_cap_not_at_it(schemas):
    """Cap 20: a decision over a window of 20 rows answers from the writer's index
    (the 21st row is written unposted); the next one, over 21, lists the key and
    posts all 21 rows first, then its own row posts with it."""
    dsn = schemas()
    rng = random.Random(1)
    with _open(dsn, 20) as s:
        for i in range(21):
            assert not s.remember("s", _text(rng, i)).folded
        assert _listed(dsn) == set() and _posted_rows(dsn) == 0
        assert not s.remember("s", _text(rng, 21)).folded
        assert _listed(dsn) == {scope_key("s", "fact")}
        assert _posted_rows(dsn) == 22
        assert s.fold_postings_problems() == []
        s.remember("t", "another scope, under the cap")  # unlisted: nothing posted
        assert _posted_rows(dsn) == 22


def test_writers_under_their_own_cap_keep_a_listed_keys_postings(schemas):
    """Listed by one writer (cap 0), the key's postings follow every write of a
    writer that decides from its own index (inserts, folds, updates, retractions),
    and both decide as SQLite does."""
    dsn = schemas()
    clock = Clock()
    want = SQLiteStore.open(":memory:", embedder=None, clock=clock)
    lister, local = _open(dsn, 0, clock=clock), _open(dsn, 10_000, clock=clock)
    rng = random.Random(2)
    texts = [_text(rng, i) for i in range(30)]
    try:
        for i, text in enumerate(texts):
            store = lister if i % 3 == 0 else local
            got = store.remember("s", text + ("!" if i % 5 == 0 else ""))
            expect = want.remember("s", text + ("!" if i % 5 == 0 else ""))
            assert got.folded == expect.folded
            again = local.remember("s", text + " again")  # a fold in the local writer
            assert again.folded == want.remember("s", text + " again").folded
        mid = local.remember("s", "a row to reword and retract").id
        new = local.update("s", mid, "a row reworded by the local writer")
        local.retract("s", new)
        assert local.fold_local_stats()["held"]  # it decided from its own index
        assert _listed(dsn) == {scope_key("s", "fact")}
        assert local.fold_postings_problems() == []
    finally:
        lister.close()
        local.close()
        want.close()


def test_bulk_load_lists_a_key_past_the_loaders_cap(schemas):
    dsn = schemas()
    rng = random.Random(3)
    with _open(dsn, 50) as s:
        s.bulk_load("s", [_text(rng, i) for i in range(50)])  # at the cap: not listed
        assert _listed(dsn) == set() and _posted_rows(dsn) == 0
        s.bulk_load("s", [_text(rng, 50)])  # one past it
        assert _listed(dsn) == {scope_key("s", "fact")}
        assert _posted_rows(dsn) == 51
        s.bulk_load("s", [_text(rng, 51)])  # a listed key: its rows post
        assert _posted_rows(dsn) == 52
        assert s.fold_postings_problems() == []


def test_a_switch_to_server_mode_lists_the_keys_past_the_cap(schemas):
    dsn = schemas()
    rng = random.Random(4)
    with PostgresStore.open(dsn, embedder=None, fold_local_rows=30, fold_list_at=1.0) as s:
        s.bulk_load("a", [_text(rng, i) for i in range(30)])
        s.bulk_load("b", [_text(rng, i) for i in range(31)])
        s.bulk_load("b", [_text(rng, i) for i in range(5)], kind="preference")
        s.set_fold_search("server")
        assert _listed(dsn) == {scope_key("b", "fact")}
        assert _posted_rows(dsn) == 31
        assert s.fold_postings_problems() == []
        s.set_fold_search("client")
        assert _listed(dsn) == set() and _posted_rows(dsn) == 0


def test_a_copy_lists_the_keys_past_the_default_cap(schemas, tmp_path, monkeypatch):
    src = str(tmp_path / "src.db")
    rng = random.Random(5)
    with SQLiteStore.open(src, embedder=None) as s:
        s.bulk_load("a", [_text(rng, i) for i in range(12)])
        s.bulk_load("b", [_text(rng, i) for i in range(13)])
    dst = schemas()
    _open(dst, 0).close()
    monkeypatch.setattr("memkit.store.fold_local.LOCAL_ROWS", 12)
    monkeypatch.setattr("memkit.store.fold_local.LIST_AT", 1.0)
    copy_store(src, dst)
    assert _listed(dst) == {scope_key("b", "fact")}
    with _open(dst, 12) as d:
        assert d.fold_postings_problems() == []


def test_fold_target_past_the_cap_of_an_unlisted_key_scores_the_window(schemas):
    """A read-only question over a key no writer listed yet (loaded under the
    loader's cap, past the reader's) reads the window's rows: SQLite's answer."""
    dsn = schemas()
    rng = random.Random(6)
    texts = [_text(rng, i) for i in range(40)]
    want = SQLiteStore.open(":memory:", embedder=None)
    want.bulk_load("s", texts)
    with _open(dsn, 1_000) as loader:
        loader.bulk_load("s", texts)
    with _open(dsn, 10) as s:
        for q in (texts[7] + " now", "nothing like any row at all"):
            got, expect = s.fold_target("s", q), want.fold_target("s", q)
            assert (got and got.content) == (expect and expect.content)
        assert _listed(dsn) == set()  # a read lists nothing
        assert s.remember("s", texts[7] + " now").folded
        assert _listed(dsn) == {scope_key("s", "fact")}
    want.close()


def test_a_listing_that_fails_leaves_nothing_listed_and_the_next_write_lists(schemas, monkeypatch):
    dsn = schemas()
    rng = random.Random(7)
    with _open(dsn, 0) as s:
        real = fold_postings.Postings.backfill

        def broken(self, db, where="", args=()):
            real(self, db, where, args)
            raise MemkitError("the listing's backfill failed")

        monkeypatch.setattr(fold_postings.Postings, "backfill", broken)
        with pytest.raises(MemkitError, match="backfill failed"):
            s.remember("s", _text(rng, 0))
        assert _listed(dsn) == set() and _posted_rows(dsn) == 0
        with psycopg.connect(dsn, autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
        monkeypatch.setattr(fold_postings.Postings, "backfill", real)
        s.remember("s", _text(rng, 0))
        assert _listed(dsn) == {scope_key("s", "fact")}
        assert s.fold_postings_problems() == []


def test_a_second_listing_of_a_key_is_a_no_op(schemas):
    dsn = schemas()
    with _open(dsn, 0) as s:
        s.remember("s", "the deploy runs on box one")
        with psycopg.connect(dsn, autocommit=True) as c:
            postings = fold_postings.read_mode(c)
            assert fold_listed.post_scope(PgDb(c), postings, "s", "fact") == 0


def test_the_migration_lists_every_key_a_server_mode_store_posted(schemas):
    """A store in server mode before the list kept every live row's postings: the
    migration lists each key that has postings."""
    dsn = schemas()
    with _open(dsn, 0) as s:
        s.remember("s", "the deploy runs on box one")
        s.remember("t", "tea at four", kind="preference")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE fold_posted")
        c.execute("DELETE FROM schema_version WHERE version >= 7")
    with _open(dsn, 0) as s:
        assert _listed(dsn) == {scope_key("s", "fact"), scope_key("t", "preference")}
        assert s.fold_postings_problems() == []


def test_a_new_store_is_in_server_mode_unless_its_creator_asks_otherwise(schemas):
    """The mode is written by the client that creates the store (in the migration's
    transaction), with its threshold as the floor (the default's when it scans);
    a store an older memkit created and left without a mode stays client."""
    from memkit.params import FoldParams
    from memkit.store.pg_schema import migrate

    new = schemas()
    with PostgresStore.open(new, embedder=None, fold=FoldParams(threshold=0.5)) as s:
        assert s.fold_search == "server" and s.fold_local_rows == fold_local.LOCAL_ROWS
    with psycopg.connect(new, autocommit=True) as c:
        assert fold_postings.read_mode(c).floor == 0.5
    scans = schemas()
    PostgresStore.open(scans, embedder=None, fold=FoldParams(threshold=0.0)).close()
    with psycopg.connect(scans, autocommit=True) as c:
        assert fold_postings.read_mode(c).floor == FoldParams().threshold
    asked = schemas()
    PostgresStore.open(asked, embedder=None, fold_search="client").close()
    with PostgresStore.open(asked, embedder=None) as s:
        assert s.fold_search == "client"
    old = schemas()
    with psycopg.connect(old, autocommit=True) as c:
        migrate(c)  # created without a mode, as before the default
    with PostgresStore.open(old, embedder=None) as s:
        assert s.fold_search == "client"
