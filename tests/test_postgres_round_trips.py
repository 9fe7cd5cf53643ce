"""A `remember` on Postgres makes two round trips to the server, both under the
scope's lock (docs/postgres-scale.md, "Writes"): the lock's, which also brings the
candidates' facts and the rows other writers changed, and the commit's. They are
counted in a libpq trace of the store's connection: each time the client, having
sent messages, reads the server's answer is one round trip (the server answers only
at a Sync or a Flush, so what the client sends together counts once).

And the decision follows what was read under the lock: another client changes a
candidate after the trigram index answered and before the lock, and `remember`
decides as `fold_target` (reading the committed rows) does at that moment."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memkit.params import FoldParams
from memkit.store import open_store
from memkit.store.write_txn import Write

SCOPE = "scope"
THRESHOLD = 0.9
# The texts of tests/test_store_read_ahead.py, at THRESHOLD 0.9: NEAR folds FACT
# (0.923); FAR folds into NEAR (0.963) but FACT does not fold into FAR (0.889).
FACT = "The staging database is reachable at db.staging.internal:5432 from the office network"
NEAR = "Our staging database is reachable at db.staging.internal:5432 from the office network now"
FAR = (
    "Our staging database is reachable at db.staging.internal:5432 from the office network now too"
)
OTHER = "record 1f3a9c0e5b7d2468ace13579bdf02468ace1"
UNLIKE = "lunch is at noon on Fridays in the small kitchen"


def round_trips(trace: str) -> int:
    """Round trips in a libpq trace written without timestamps: the runs of the
    client's messages (F) that the server's (B) answer."""
    n, last = 0, ""
    for line in trace.splitlines():
        side = line.split("\t", 1)[0]
        if side == "B" and last == "F":
            n += 1
        if side in ("F", "B"):
            last = side
    return n


def statements(trace: str) -> list[int]:
    """The statements the client sent in each round trip of a libpq trace: one
    Bind message each (extended protocol, prepared or not)."""
    out, last = [], ""
    for line in trace.splitlines():
        side, _, kind = [*line.split("\t"), "", ""][:3]
        if side == "F" and last != "F":
            out.append(0)
        if side == "F" and kind.strip() == "Bind":
            out[-1] += 1
        if side in ("F", "B"):
            last = side
    return out


def test_round_trips_counts_each_answer_to_what_was_sent():
    trace = "F\t9\tParse\nF\t4\tFlush\nB\t4\tParseComplete\nB\t5\tX\nF\t4\tSync\nB\t5\tReady\n"
    assert round_trips(trace) == 2
    assert round_trips("F\t4\tSync\nF\t4\tSync\n") == 0  # nothing answered yet
    assert round_trips("B\t5\tNotice\nF\t4\tSync\nB\t5\tReady\n") == 1


@contextmanager
def traced(conn, text: list[str] | None = None) -> Iterator[list[int]]:
    """The round trips the psycopg connection `conn` makes in the block (appended
    at its end; none counted without one), and the trace into `text`: libpq traces
    every message of the connection to a file."""
    from psycopg import pq

    got: list[int] = []
    if conn is None:
        yield got
        return
    pgconn = conn.pgconn
    with tempfile.TemporaryFile("w+") as f:
        pgconn.trace(os.dup(f.fileno()))  # libpq's FILE is closed by untrace
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield got
        finally:
            pgconn.untrace()
            f.seek(0)
            trace = f.read()
            got.append(round_trips(trace))
            if text is not None:
                text.append(trace)


@pytest.fixture
def clients(store_url, backend, monkeypatch):
    """Two clients of one store whose fold-in indexes of SCOPE are loaded: `a`
    writes, `b` is another client; and `a`'s psycopg connection (None on SQLite)."""
    fold = FoldParams(threshold=THRESHOLD)
    opened: list = []
    with monkeypatch.context() as m:
        if backend == "postgres":
            import psycopg

            connect = psycopg.connect
            m.setattr(
                psycopg, "connect", lambda *a, **k: opened.append(connect(*a, **k)) or opened[-1]
            )
        a = open_store(store_url, embedder="hashing", fold=fold)
    b = open_store(store_url, embedder="hashing", fold=fold)
    a.remember(SCOPE, OTHER)
    b.remember(SCOPE, OTHER)
    yield a, b, (opened[0] if opened else None)
    a.close()
    b.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("case", ["insert", "fold", "fold after another client wrote"])
def test_a_remember_makes_two_round_trips(clients, case):
    a, b, conn = clients
    first = a.remember(SCOPE, FACT)
    if case == "fold after another client wrote":
        b.remember(SCOPE, NEAR)  # folds into FACT's row: a's lock reads it back
    with traced(conn) as n:
        got = a.remember(SCOPE, UNLIKE if case == "insert" else FACT)
    assert got.folded == (case != "insert")
    assert got.folded is False or got.id == first.id
    assert n == [2]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("case", ["insert", "fold", "fold after another client wrote"])
def test_a_remember_runs_two_statements(clients, case, monkeypatch):
    """The lock's round trip is one statement (`memkit_write_begin`: the lock, the
    candidates' facts and, in server mode, the listed kinds; memkit.store.pg_write).
    A write whose candidates come from the server's postings (server mode past
    the writer's cap: `make test-fold-server`) sends the postings' probe as one more."""
    from memkit.store.postgres import PgDb
    from memkit.store.rows import ByRowid

    a, b, conn = clients
    texts = [f"record {uuid.uuid4().hex} {k}" if case == "insert" else FACT for k in range(7)]
    a.remember(SCOPE, FACT)
    if case == "fold after another client wrote":
        b.remember(SCOPE, NEAR)
    for text in texts[:6]:  # the statements are prepared by now: Binds without a Parse
        a.remember(SCOPE, text)
    reads: list = []
    begin = PgDb.begin_write

    def begin_write(self, scope_id, since, reserve, vectors, read, *more):
        reads.append(read)
        return begin(self, scope_id, since, reserve, vectors, read, *more)

    monkeypatch.setattr(PgDb, "begin_write", begin_write)
    parsed: list[str] = []
    with traced(conn, parsed) as n:
        got = a.remember(SCOPE, texts[6])
    assert got.folded == (case != "insert") and n == [2]
    (read,) = reads
    probe = read is not None and not isinstance(read, ByRowid)
    if os.environ.get("MEMKIT_TEST_FOLD_SEARCH", "default") == "default":
        assert not probe and (read is not None) == (case != "insert")  # the facts, folded in
    assert statements(parsed[0])[0] == 1 + probe, parsed[0]  # the lock's round trip


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_the_facts_read_as_a_statement_of_its_own_counts_three(clients, monkeypatch):
    """The count is not blind: with the candidates' facts read as a statement of
    their own (as the postings' probe is), the lock's round trip counts 2."""
    import memkit.store.postgres as pg

    a, _, conn = clients
    for _ in range(6):
        a.remember(SCOPE, FACT)
    monkeypatch.setattr(pg, "ByRowid", type("NotARowidRead", (), {}))
    parsed: list[str] = []
    with traced(conn, parsed) as n:
        assert a.remember(SCOPE, FACT).folded
    assert n == [2] and statements(parsed[0])[0] == 2, parsed[0]


def test_statements_counts_each_bind_a_round_trip():
    trace = (
        'F\t20\tParse\t"" "SELECT 1" 0\nF\t12\tBind\t"" "" 0 0 1 0\n'
        'F\t9\tBind\t"" "_pg3_0" 0 0\nF\t4\tFlush\nB\t4\tBindComplete\n'
        'B\t5\tBind\nF\t9\tBind\t"" "_pg3_1" 0 0\nF\t4\tSync\nB\t5\tReadyForQuery\t I\n'
    )
    assert statements(trace) == [2, 1]  # the server's lines are not counted
    assert statements("F\t4\tSync\n") == [0]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_one_more_read_before_the_lock_counts_three(clients, monkeypatch):
    """The count is not blind to one more: reading the scope's number before the
    lock (the `remember` before 2026-12-06 read the changed rows there) counts 3."""
    a, _, conn = clients
    a.remember(SCOPE, FACT)
    enter = Write.__enter__

    def reading_first(self):
        self.conn.top(self.scope_id)
        return enter(self)

    monkeypatch.setattr(Write, "__enter__", reading_first)
    with traced(conn) as n:
        assert a.remember(SCOPE, FACT).folded
    assert n == [3]


# --- the facts decided on are those read under the lock -----------------------------------


def _restate(b, near):  # NEAR's row now says FAR, which FACT does not fold into
    assert b.remember(SCOPE, FAR).id == near.id


CHANGES = {
    "nothing": lambda b, row: None,
    "retracted": lambda b, row: b.retract(SCOPE, row.id),
    "reworded away": _restate,
    "folded into": lambda b, row: b.remember(SCOPE, NEAR, confidence=0.95),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_candidate_changed_after_the_index_answered_decides_as_committed(
    clients, store_url, monkeypatch, change
):
    """`b` changes the candidate `a`'s trigram index gave after it answered and
    before `a` takes the scope's lock (`Write.__enter__`); `a` decides as a fresh
    client's `fold_target` does then, with the candidate's facts read under the
    lock, in the lock's round trip."""
    a, b, conn = clients
    candidate = a.remember(SCOPE, NEAR, confidence=0.5)
    b.remember(SCOPE, OTHER)  # b catches up with NEAR's row
    expected: list = []
    armed = [True]
    enter = Write.__enter__

    def entering(self):
        if armed:  # a's write: the index answered, nothing read yet
            armed.clear()
            assert self.read is not None  # the candidate's facts come with the lock
            CHANGES[change](b, candidate)
            with open_store(store_url, embedder="hashing", fold=FoldParams(THRESHOLD)) as c:
                expected.append(c.fold_target(SCOPE, FACT))
        return enter(self)

    monkeypatch.setattr(Write, "__enter__", entering)
    with traced(conn) as n:
        got = a.remember(SCOPE, FACT, confidence=0.6)
    (target,) = expected
    assert got.folded == (target is not None) == (change in ("nothing", "folded into"))
    if target is not None:
        assert got.id == target.id == candidate.id
        (row,) = [m for m in a.live(SCOPE) if m.id == candidate.id]
        # the confidence b wrote (0.95), read under the lock, not the 0.5 the index saw
        assert row.confidence == pytest.approx(0.95 if change == "folded into" else 0.6)
        assert row.content == FACT
    else:
        assert [m.content for m in a.live(SCOPE) if m.id == got.id] == [FACT]
    assert n == ([2] if conn is not None else [])
