"""A server-mode writer's fold-in memory, capped (issue #36, `memkit.store.fold_local`):
its own trigram index for a (scope, kind) whose fold window holds at most
`fold_local_rows` live rows, the database's postings past it. Both exact: the
same decisions as SQLite, whatever the cap and however often a scope crosses it."""

from __future__ import annotations

import random
import re

import psycopg
import pytest
from test_fold_server import _ids, _run, _script
from test_postgres_round_trips import traced
from test_store_helpers import Clock

from memkit.errors import ConfigError
from memkit.params import DAY, FoldParams
from memkit.store import SQLiteStore
from memkit.store.fold_local import REMEMBERED, LocalCap, check_rows, count_sql
from memkit.store.postgres import PostgresStore

UNLIKE = (
    "the cache lives on the shared disk",
    "tea at four in the staging room",
    "prefers dark mode in every editor",
    "the deploy runs on box one",
)


def _open(dsn: str, rows: int, **kw) -> PostgresStore:
    return PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=rows, **kw)


def _held(store) -> dict[tuple[str, str], int]:
    """The (scope, kind) trigram indexes the writer holds, and their rows."""
    return store.fold_local_stats()["held"]


def _pending(dsn: str) -> int:
    """Keys listed ahead whose rows are not all posted yet."""
    with psycopg.connect(dsn, autocommit=True) as c:
        return int(c.execute("SELECT count(*) FROM fold_posted WHERE lo < hi").fetchone()[0])


def _counts(store) -> dict[str, int]:
    return store.fold_local_stats()["counts"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("threshold", [0.65, 0.4])
def test_every_cap_decides_as_sqlite_while_the_scope_crosses_it(
    schemas, monkeypatch, seed, threshold
):
    """Caps 0 (the postings alone), 1, a small N the script's (scope, kind)s cross in
    both directions (retractions and the clock moving rows out of and back into the
    window; `recheck_s` 0 so each decision counts again), and one no script reaches;
    N also with nothing listed ahead of the cap (`fold_list_at` 1) and with half
    of it (`memkit.store.fold_listed`: keys listed ahead a row a write)."""
    rng = random.Random(seed)  # a year on (past any move of the script): all rows age out
    ops = [*_script(rng, 70), ("clock", 365 * DAY), *_script(rng, 10)]
    fold = FoldParams(threshold=threshold)
    clock = Clock()
    want = SQLiteStore.open(":memory:", embedder=None, clock=clock, fold=fold)
    want.new_id = _ids()
    with want:
        expected = _run(want, clock, ops)
    monkeypatch.setattr("memkit.store.fold_local.RECHECK_S", 0.0)
    monkeypatch.setattr("memkit.store.fold_listed.LIST_STEP", 1)  # rows stay pending a while
    for cap, share in ((0, 0.75), (1, 0.75), (6, 0.75), (6, 1.0), (6, 0.5), (10**9, 0.75)):
        clock, dsn = Clock(), schemas()
        store = _open(dsn, cap, clock=clock, fold=fold, fold_list_at=share)
        store.new_id = _ids()
        seen: list[set] = []  # per op: the (scope, kind)s the writer held then
        pending: list[int] = []  # per op: keys listed ahead, rows still to post

        def after(s, cap=cap, seen=seen, pending=pending, dsn=dsn):
            held = _held(s)
            assert all(n <= cap for n in held.values()), (cap, held)  # within the cap
            seen.append(set(held))
            if cap == 6:  # pending rows unposted, the rest exact, after every op
                assert s.fold_postings_problems() == []
                pending.append(_pending(dsn))

        with store:
            got = _run(store, clock, ops, after)
            counts = _counts(store)
            assert store.fold_postings_problems() == []
        assert got == expected, cap
        if cap == 0:
            assert not any(seen) and counts["built"] == 0
        elif cap == 10**9:
            assert counts["over"] == 0 and counts["built"] >= 1
        if (cap, share) == (6, 0.5):
            assert max(pending) >= 1  # a key was listed ahead
        if share == 1.0 or cap in (0, 10**9):
            assert not any(pending) and _pending(dsn) == 0  # at 1 a key is listed only whole
        if cap == 6:  # a (scope, kind) crossed both ways: held, not, held again
            assert counts["over"] >= 1 and counts["rechecked"] >= 1
            assert any(_crossed([k in held for held in seen]) for k in set().union(*seen))
    assert any(o[1] for o in expected if isinstance(o, tuple) and len(o) == 2)  # folds


def _crossed(held: list[bool]) -> bool:
    """Held, then not, then held again."""
    return re.search(r"h\.+h", "".join("h" if h else "." for h in held)) is not None


def test_a_count_at_the_cap_builds_and_one_past_it_does_not(schemas):
    """The bound: a window of exactly `fold_local_rows` rows is held; one row more
    and the writer holds nothing for it, asks the postings, and says so."""
    dsn = schemas()
    texts = [f"note {i} about the deploy box {i * 7919}" for i in range(5)]
    with _open(dsn, 5) as s:
        s.bulk_load("s", texts)
        assert s.remember("s", texts[0] + "!").folded  # a fold into the 5th row's peer
        assert _held(s) == {("s", "fact"): 5}
        assert _counts(s) == {"over": 0, "rechecked": 0, "built": 1}
    with _open(dsn, 4) as s:
        assert s.remember("s", texts[1] + "!").folded
        assert _held(s) == {} and _counts(s)["over"] == 1
        assert s.fold_local_stats()["over"] == 1


def test_an_index_that_grows_past_the_cap_is_dropped(schemas):
    with _open(schemas(), 3) as s:
        for text in UNLIKE[:3]:
            assert not s.remember("s", text).folded
        assert _held(s) == {("s", "fact"): 3}
        got = s.remember("s", UNLIKE[3])
        assert not got.folded
        assert _held(s) == {}  # 4 rows: dropped after the write, the postings answer
        assert s.remember("s", UNLIKE[3] + "!").id == got.id


def test_the_count_reads_at_most_the_cap_plus_one_rows(schemas):
    dsn = schemas()
    with _open(dsn, 2) as s:
        s.bulk_load("s", [f"text {i} {i * 31337}" for i in range(50)])
    sql = "SELECT rowid FROM memories WHERE scope_id = %s"
    with psycopg.connect(dsn) as c:
        plan = c.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + count_sql(sql).replace("?", "%s"), ("s", 3)
        ).fetchone()[0][0]["Plan"]
    assert plan["Actual Rows"] == 1

    def nodes(p):
        yield p
        for q in p.get("Plans", ()):
            yield from nodes(q)

    scans = [p for p in nodes(plan) if "Scan" in p["Node Type"]]
    assert [p["Actual Rows"] for p in scans] == [3]  # stopped at the cap + 1, of 50


@pytest.mark.parametrize("cap", [0, 10])
def test_a_remember_makes_two_round_trips_on_either_path(schemas, monkeypatch, cap):
    """Local (under the cap, its index built by an earlier write) or the postings."""
    opened: list = []
    dsn, connect = schemas(), psycopg.connect
    with monkeypatch.context() as m:
        m.setattr(psycopg, "connect", lambda *a, **k: opened.append(connect(*a, **k)) or opened[-1])
        s = _open(dsn, cap)
    with s:
        first = s.remember("s", "the staging database is reachable from the office")
        s.remember("s", "lunch is at noon on Fridays")
        for text, folds in (
            ("the staging database is reachable from the office!", True),
            ("the deploy runs on box one", False),
        ):
            with traced(opened[0]) as n:
                got = s.remember("s", text)
            assert got.folded == folds and (not folds or got.id == first.id)
            assert n == [2]
        assert bool(_held(s)) == (cap > 0)


def test_the_cap_is_checked_and_client_mode_ignores_it(schemas):
    for bad in (-1, 1.5, True, "10", None):
        with pytest.raises(ConfigError, match="fold_local_rows"):
            check_rows(bad)
    with pytest.raises(ConfigError, match="fold_local_rows=-1"):
        PostgresStore.open(schemas(), embedder=None, fold_local_rows=-1)
    with PostgresStore.open(
        schemas(), embedder=None, fold_search="client", fold_local_rows=0
    ) as s:  # client mode
        assert s.fold_search == "client"
        for text in UNLIKE[:3]:
            s.remember("s", text)
        assert _held(s) == {("s", "fact"): 3}


def test_what_is_remembered_over_the_cap_is_bounded_and_rechecked():
    now = [0.0]
    cap = LocalCap(10, recheck_s=60.0, remembered=3, clock=lambda: now[0])
    for i in range(5):
        cap.over(f"s{i}", "fact")
    assert cap.held == 3  # the oldest forgotten: only a count again
    assert cap.local("s0", "fact") and not cap.local("s4", "fact")
    now[0] = 59.9
    assert not cap.local("s2", "fact")
    now[0] = 60.0
    assert cap.local("s2", "fact") and cap.held == 2 and cap.counts["rechecked"] == 1
    assert not LocalCap(0).local("s", "fact")  # 0: never local
    assert REMEMBERED >= 1024


def test_over_the_cap_the_postings_answer_until_the_recheck(schemas, monkeypatch):
    """Over the cap the (scope, kind) is counted once, then answered by the postings
    without counting again until `RECHECK_S` has passed; then counted again."""
    monkeypatch.setattr("memkit.store.fold_local.RECHECK_S", 3600.0)
    with _open(schemas(), 2) as s:
        s.bulk_load("s", list(UNLIKE[:3]))
        assert s.remember("s", UNLIKE[0] + "!").folded
        assert s.remember("s", UNLIKE[1] + "!").folded
        assert _counts(s) == {"over": 1, "rechecked": 0, "built": 0} and _held(s) == {}
    monkeypatch.setattr("memkit.store.fold_local.RECHECK_S", 0.0)
    with _open(schemas(), 2) as s:
        s.bulk_load("s", list(UNLIKE[:3]))
        assert s.remember("s", UNLIKE[0] + "!").folded
        assert s.remember("s", UNLIKE[1] + "!").folded
        assert _counts(s) == {"over": 2, "rechecked": 1, "built": 0}
