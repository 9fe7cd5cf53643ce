"""`remember` reads its fold-in candidates before the scope's write lock and brings
them up to date under it (docs/postgres-scale.md, "Writes"). Another client's write
that lands in between must decide exactly as if `remember` had read everything
under the lock: these tests put one there, on both backends (`store_url`)."""

from __future__ import annotations

import pytest

from memkit.params import FoldParams
from memkit.store import open_store
from memkit.store.write_txn import Write
from memkit.text import jaccard, trigrams

SCOPE = "scope"
FACT = "The staging database is reachable at db.staging.internal:5432 from the office network"
OTHER = "record 1f3a9c0e5b7d2468ace13579bdf02468ace1"
# At THRESHOLD 0.9: NEAR and NEARER both fold FACT (0.923 and 0.946) but not each
# other (0.875); FAR folds into NEAR (0.963) but not FACT into it (0.889).
THRESHOLD = 0.9
NEAR = "Our staging database is reachable at db.staging.internal:5432 from the office network now"
NEARER = "The staging database is reachable at db.staging.internal:5433 from the office network"
FAR = (
    "Our staging database is reachable at db.staging.internal:5432 from the office network now too"
)


def test_the_texts_are_as_the_tests_need_them():
    sim = lambda x, y: jaccard(trigrams(x), trigrams(y))  # noqa: E731
    assert THRESHOLD <= sim(FACT, NEAR) < sim(FACT, NEARER)
    assert sim(NEAR, NEARER) < THRESHOLD <= sim(NEAR, FAR)
    assert sim(FACT, FAR) < THRESHOLD


@pytest.fixture
def stores(store_url):
    """Two clients of one store: `a` writes, `b` writes in between."""
    fold = FoldParams(threshold=THRESHOLD)
    a = open_store(store_url, embedder=None, fold=fold)
    b = open_store(store_url, embedder=None, fold=fold)
    a.remember(SCOPE, OTHER)  # both load their fold-in indexes first
    b.remember(SCOPE, OTHER)
    yield a, b
    a.close()
    b.close()


@pytest.fixture
def between(monkeypatch):
    """`between(action)`: the next write transaction runs `action` (another client's
    write) first, after `remember` read its candidates and before it takes the lock."""
    pending: list = []
    enter = Write.__enter__

    def entering(self):
        while pending:
            pending.pop()()
        return enter(self)

    monkeypatch.setattr(Write, "__enter__", entering)
    return pending.append


def _live(store, content):
    return [m for m in store.live(SCOPE) if m.content == content]


def test_a_row_written_in_between_is_folded_into(stores, between):
    a, b = stores
    written = []
    between(lambda: written.append(b.remember(SCOPE, FACT)))
    got = a.remember(SCOPE, FACT)
    assert written and not written[0].folded
    assert got.folded and got.id == written[0].id
    (row,) = _live(a, FACT)
    assert row.seen_count == 2


def test_a_more_similar_row_written_in_between_wins_over_the_one_read_ahead(stores, between):
    a, b = stores
    near = a.remember(SCOPE, NEAR)
    written = []
    between(lambda: written.append(b.remember(SCOPE, NEARER)))
    got = a.remember(SCOPE, FACT)
    assert not written[0].folded
    assert got.folded and got.id == written[0].id != near.id
    assert sorted(m.content for m in a.live(SCOPE)) == sorted([OTHER, NEAR, FACT])


def test_the_target_read_ahead_retracted_in_between_is_not_folded_into(stores, between):
    a, b = stores
    first = a.remember(SCOPE, FACT)
    between(lambda: b.retract(SCOPE, first.id))
    got = a.remember(SCOPE, FACT)
    assert not got.folded and got.id != first.id
    assert [m.id for m in _live(a, FACT)] == [got.id]


def test_the_target_read_ahead_folded_into_in_between_keeps_its_new_facts(stores, between):
    a, b = stores
    first = a.remember(SCOPE, FACT, confidence=0.5)
    between(lambda: b.remember(SCOPE, FACT, confidence=0.9))
    got = a.remember(SCOPE, FACT, confidence=0.6)
    assert got.folded and got.id == first.id
    (row,) = _live(a, FACT)
    assert row.seen_count == 3
    assert row.confidence == pytest.approx(0.9)  # max over all three, not the 0.5 read ahead


def test_the_target_read_ahead_restated_far_from_the_text_in_between_is_not_folded_into(
    stores, between
):
    a, b = stores
    near = a.remember(SCOPE, NEAR)
    written = []
    between(lambda: written.append(b.remember(SCOPE, FAR)))
    got = a.remember(SCOPE, FACT)
    assert written[0].folded and written[0].id == near.id  # NEAR's row now says FAR
    assert not got.folded
    assert sorted(m.content for m in a.live(SCOPE)) == sorted([OTHER, FAR, FACT])


def test_a_client_that_caught_up_in_between_decides_under_the_lock(stores, between):
    a, b = stores

    def b_writes_and_a_catches_up():
        b.remember(SCOPE, FACT)
        a.fold_target(SCOPE, "anything")  # moves a's indexes past what it read ahead

    between(b_writes_and_a_catches_up)
    got = a.remember(SCOPE, FACT)
    assert got.folded
    assert len(_live(a, FACT)) == 1


# Rows other clients committed before `remember` starts: its trigram index answers
# as it stands (behind them), and the catch-up read in the same round trip as the
# candidates' facts scores them again.


def test_a_row_committed_before_remember_starts_is_folded_into(stores):
    a, b = stores
    first = b.remember(SCOPE, FACT)  # a's index has not seen it
    got = a.remember(SCOPE, FACT)
    assert got.folded and got.id == first.id
    (row,) = _live(a, FACT)
    assert row.seen_count == 2


def test_a_candidate_retracted_before_remember_starts_is_not_folded_into(stores):
    a, b = stores
    first = a.remember(SCOPE, FACT)  # in a's index
    b.retract(SCOPE, first.id)
    got = a.remember(SCOPE, FACT)
    assert not got.folded and got.id != first.id


def test_a_candidate_restated_out_of_reach_before_remember_starts_is_not_folded_into(stores):
    a, b = stores
    near = a.remember(SCOPE, NEAR)  # a's index holds NEAR's wording
    assert b.remember(SCOPE, FAR).id == near.id  # the row now says FAR
    assert not a.remember(SCOPE, FACT).folded


def test_a_more_similar_row_committed_before_remember_starts_wins(stores):
    a, b = stores
    near = a.remember(SCOPE, NEAR)
    nearer = b.remember(SCOPE, NEARER)
    got = a.remember(SCOPE, FACT)
    assert got.folded and got.id == nearer.id != near.id


def test_a_catch_up_that_reloads_the_index_still_finds_the_row(stores):
    from memkit.store.index import SYNC_MAX

    a, b = stores
    b.bulk_load(SCOPE, [f"{OTHER} {i}" for i in range(SYNC_MAX + 1)])  # a's catch-up reloads
    first = b.remember(SCOPE, FACT)
    got = a.remember(SCOPE, FACT)
    assert got.folded and got.id == first.id


def test_a_row_committed_while_remember_waits_for_the_lock_is_folded_into(pg_dsn, monkeypatch):
    """The rows changed since the read-ahead are read AFTER the scope's lock is
    granted (Postgres: `memkit_lock_scope`'s later statement): the lock's holder
    commits a row while `remember` waits, and `remember` folds into it."""
    import threading
    import time

    import psycopg

    from memkit.store.postgres import PgDb

    fold = FoldParams(threshold=THRESHOLD)
    a = open_store(pg_dsn, embedder=None, fold=fold)
    b = open_store(pg_dsn, embedder=None, fold=fold)
    a.remember(SCOPE, OTHER)
    b.remember(SCOPE, OTHER)
    holding, go = threading.Event(), threading.Event()
    end_write = PgDb.end_write

    def pausing(self, commit):  # the first commit after this waits for `go`
        if commit and not holding.is_set():
            holding.set()
            assert go.wait(20)
        return end_write(self, commit)

    monkeypatch.setattr(PgDb, "end_write", pausing)
    got: dict = {}
    threads: list[threading.Thread] = []
    try:
        holder = threading.Thread(target=lambda: got.setdefault("b", b.remember(SCOPE, FACT)))
        threads.append(holder)
        holder.start()
        assert holding.wait(20)  # b holds the scope's lock, its row not committed
        waiter = threading.Thread(target=lambda: got.setdefault("a", a.remember(SCOPE, FACT)))
        threads.append(waiter)
        waiter.start()
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            for _ in range(400):  # until a's lock step waits on b's
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                if c.execute(waiting).fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("remember never waited for the scope's lock")
        go.set()
        holder.join(20)
        waiter.join(20)
        assert not got["b"].folded
        assert got["a"].folded and got["a"].id == got["b"].id
        (row,) = _live(a, FACT)
        assert row.seen_count == 2
    finally:  # a failure above still lets b commit, and leaves no thread or connection
        go.set()
        for t in threads:
            t.join(20)
        a.close()
        b.close()


def test_a_batch_folds_into_a_row_its_lock_caught_up(stores, between):
    """`remember_many` asks the trigram index under the lock: the rows the lock's
    catch-up read (held back from the index until then) are in it."""
    a, b = stores
    written = []
    between(lambda: written.append(b.remember(SCOPE, FACT)))
    got = a.remember_many(SCOPE, [FACT, "an unrelated note about lunch"])
    assert got[0].folded and got[0].id == written[0].id
    assert not got[1].folded


def test_the_index_holds_this_writes_version_of_a_row_restated_in_between(stores, between):
    """b restates the row between a's read-ahead and a's lock, then a folds into
    it: a's trigram index ends with a's wording (its own patch after the one its
    catch-up read), so a text near a's wording but not b's finds the row."""
    a, b = stores
    first = a.remember(SCOPE, FACT)
    b.remember(SCOPE, OTHER)  # b catches up with FACT
    between(lambda: b.remember(SCOPE, NEAR))  # folds into FACT's row
    got = a.remember(SCOPE, FAR)  # folds into NEAR's wording of it
    assert got.folded and got.id == first.id
    probe = FAR.replace("now too", "now too as well")
    assert jaccard(trigrams(probe), trigrams(FAR)) >= THRESHOLD
    assert jaccard(trigrams(probe), trigrams(NEAR)) < THRESHOLD
    target = a.fold_target(SCOPE, probe)
    assert target is not None and target.id == first.id
