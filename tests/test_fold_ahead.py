"""A key listed ahead of the writer's cap (issue #36, `memkit.store.fold_listed`):
once a writer's own index of a (scope, kind) would hold more than `fold_list_at`
of its cap, the key's rows are posted a few a write, so the write that crosses
the cap has none (or only what the listing had not reached) to post under the
scope's lock. Pending rows have no postings; every other live row of a listed
key has exactly its own (`fold_postings_problems`), and a fold-in answered from
the postings once the key is fully listed decides as the writer's index."""

from __future__ import annotations

import random

import psycopg
import pytest
from test_postgres_round_trips import traced

from memkit.errors import ConfigError, MemkitError
from memkit.store import fold_listed
from memkit.store.fold_local import LIST_AT, LOCAL_ROWS, ahead_rows, check_share
from memkit.store.fold_postings import scope_key
from memkit.store.postgres import PostgresStore
from memkit.types import KINDS

WORDS = ("deploy", "staging", "cache", "ticket", "shared", "naïve", "Đức", "disk", "tea")


def _text(rng: random.Random, i: int) -> str:
    return f"note {i} " + " ".join(rng.choice(WORDS) + str(rng.randrange(999)) for _ in range(6))


def _open(dsn: str, rows: int, share: float, **kw) -> PostgresStore:
    return PostgresStore.open(
        dsn, embedder=None, fold_search="server", fold_local_rows=rows, fold_list_at=share, **kw
    )


def _state(dsn: str) -> dict[int, tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        return {int(r[0]): (int(r[1]), int(r[2])) for r in c.execute("SELECT * FROM fold_posted")}


def _posted_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return int(c.execute("SELECT count(DISTINCT rowid) FROM fold_postings").fetchone()[0])


def _pending_rows(dsn: str, sk: int) -> int:
    """Live rows of the key inside its pending range."""
    with psycopg.connect(dsn, autocommit=True) as c:
        lo, hi = c.execute("SELECT lo, hi FROM fold_posted WHERE sk = %s", (sk,)).fetchone()
        return int(
            c.execute(
                "SELECT count(*) FROM memories WHERE rowid > %s AND rowid <= %s "
                "AND superseded_by IS NULL",
                (lo, hi),
            ).fetchone()[0]
        )


SK = scope_key("s", "fact")


def test_the_share_is_checked_at_its_bounds():
    assert check_share(1) == 1.0 and check_share(0.5) == 0.5 and check_share(1e-9) == 1e-9
    for bad in (0, 0.0, -0.5, 1.0000001, 2, True, "0.5", None):
        with pytest.raises(ConfigError, match="fold_list_at"):
            check_share(bad)
    assert ahead_rows(20, 0.5) == 10 and ahead_rows(20, 1.0) == 20
    assert ahead_rows(LOCAL_ROWS, LIST_AT) == 150_000  # the default: above the bench's 100k


def test_open_refuses_a_bad_share_and_reports_its_own(schemas):
    dsn = schemas()
    with pytest.raises(ConfigError, match="fold_list_at=0"):
        _open(dsn, 20, 0)
    with _open(dsn, 20, 0.5) as s:
        assert s.fold_list_at == 0.5
    with PostgresStore.open(dsn, embedder=None) as s:
        assert s.fold_list_at == LIST_AT


def test_a_key_is_listed_ahead_by_the_write_past_the_share_not_at_it(schemas):
    """Cap 20 at 0.5: the write that leaves the index at 10 rows lists nothing; the
    next (11) lists the key ahead and posts 8 of its 10 older rows (`LIST_STEP`) and
    its own; the next posts the last 2 and the key is fully listed; the write that
    crosses the cap then posts only its own row."""
    dsn = schemas()
    rng = random.Random(1)
    with _open(dsn, 20, 0.5) as s:
        for i in range(10):
            assert not s.remember("s", _text(rng, i)).folded
        assert _state(dsn) == {} and _posted_rows(dsn) == 0  # at the share: nothing
        s.remember("s", _text(rng, 10))
        (lo, hi) = _state(dsn)[SK]
        assert lo < hi and _pending_rows(dsn, SK) == 2
        assert _posted_rows(dsn) == 9  # 8 older rows and the write's own
        assert s.fold_postings_problems() == []
        s.remember("s", _text(rng, 11))
        (lo, hi) = _state(dsn)[SK]
        assert lo >= hi and _posted_rows(dsn) == 12
        for i in range(12, 21):
            s.remember("s", _text(rng, i))
        assert _posted_rows(dsn) == 21 and s.fold_local_stats()["held"] == {}  # dropped
        before = _posted_rows(dsn)
        s.remember("s", _text(rng, 21))  # decides over 21 rows: the postings answer
        assert s.fold_local_stats()["over"] == 1
        assert _posted_rows(dsn) == before + 1 == 22
        assert s.fold_postings_problems() == []


def test_a_crossing_posts_what_the_listing_ahead_had_not_reached(schemas, monkeypatch):
    """One pending row a write (`LIST_STEP` 1): 36 rows loaded at cap 40 and 0.9,
    five writes post five of them; the write that crosses the cap posts the other
    31 under the scope's lock and lists the key fully."""
    monkeypatch.setattr("memkit.store.fold_listed.LIST_STEP", 1)
    dsn = schemas()
    rng = random.Random(2)
    with _open(dsn, 40, 0.9) as s:
        s.bulk_load("s", [_text(rng, i) for i in range(36)])  # 36 rows: not past 0.9 x 40
        assert _state(dsn) == {}
        for i in range(36, 41):
            s.remember("s", _text(rng, i))
        assert _pending_rows(dsn, SK) == 36 - 5  # each write posts one, and its own row
        assert s.fold_postings_problems() == []
        s.remember("s", _text(rng, 41))  # over the cap: the rest posted, the key listed
        lo, hi = _state(dsn)[SK]
        assert lo >= hi and _posted_rows(dsn) == 42
        assert s.fold_postings_problems() == []


def test_pending_rows_folded_into_updated_or_retracted_stay_true(schemas, monkeypatch):
    """While a key is listed ahead, a fold into a pending row, an update of one (its
    successor is past the range: posted) and a retraction post nothing for it; the
    listing then posts the rows with their text now. Fully listed, a writer deciding
    from the postings alone folds as the writer holding its own index."""
    monkeypatch.setattr("memkit.store.fold_listed.LIST_STEP", 2)
    dsn = schemas()
    rng = random.Random(3)
    texts = [_text(rng, i) for i in range(50)]
    with _open(dsn, 100, 0.5) as s:
        s.bulk_load("s", texts)
        mids = {m.content: m.id for m in s.live("s")}
        s.remember("s", "a new text starts the listing ahead")
        assert _pending_rows(dsn, SK) == 48
        assert s.remember("s", texts[40] + " again").folded  # into a pending row
        s.update("s", mids[texts[45]], "the deploy moved to box two")
        s.retract("s", mids[texts[46]])
        assert s.fold_postings_problems() == []
        for i in range(30):
            s.remember("s", f"filler {i} " + _text(rng, 100 + i))
            assert s.fold_postings_problems() == []
        assert _state(dsn)[SK][0] >= _state(dsn)[SK][1]  # fully listed
        with _open(dsn, 0, 1.0) as postings_only:
            for probe in (texts[40] + " again!", texts[3] + " x", "the deploy moved to box 2", "z"):
                local = s.fold_target("s", probe)
                assert postings_only.fold_target("s", probe) == local
            assert postings_only.fold_target("s", texts[40] + " again!") is not None


def test_a_bulk_load_lists_a_key_past_the_share_fully(schemas):
    dsn = schemas()
    rng = random.Random(4)
    with _open(dsn, 20, 0.5) as s:
        s.bulk_load("s", [_text(rng, i) for i in range(10)])
        assert _state(dsn) == {}
        s.bulk_load("s", [_text(rng, 10)])
        lo, hi = _state(dsn)[SK]
        assert lo >= hi and _posted_rows(dsn) == 11
        assert s.fold_postings_problems() == []


def test_a_write_that_fails_while_starting_a_listing_leaves_nothing(schemas, monkeypatch):
    dsn = schemas()
    rng = random.Random(5)
    with _open(dsn, 20, 0.5) as s:
        for i in range(10):
            s.remember("s", _text(rng, i))
        with monkeypatch.context() as m:

            def boom(*a, **k):
                raise MemkitError("posting failed")

            m.setattr(fold_listed, "post_rows", boom)
            with pytest.raises(MemkitError, match="posting failed"):
                s.remember("s", _text(rng, 10))
        assert _state(dsn) == {} and _posted_rows(dsn) == 0
        assert len(s.live("s")) == 10
        s.remember("s", _text(rng, 11))  # this client starts it again
        assert SK in _state(dsn) and s.fold_postings_problems() == []


def test_a_remember_listing_ahead_makes_two_round_trips(schemas, monkeypatch):
    opened: list = []
    dsn, connect = schemas(), psycopg.connect
    with monkeypatch.context() as m:
        m.setattr(psycopg, "connect", lambda *a, **k: opened.append(connect(*a, **k)) or opened[-1])
        s = _open(dsn, 100, 0.5)
    rng = random.Random(6)
    with s:
        s.bulk_load("s", [_text(rng, i) for i in range(50)])
        s.remember("s", _text(rng, 50))  # builds the index, starts the listing
        for i in range(51, 54):
            with traced(opened[0]) as n:
                s.remember("s", _text(rng, i))
            assert n == [2]
        assert 0 < _pending_rows(dsn, SK) < 50 and s.fold_postings_problems() == []


def test_estimates_read_before_a_listing_ahead_are_refreshed_once_at_the_crossing(
    schemas, monkeypatch
):
    """The writer opened on an empty table: its length estimates (`split_probe`'s)
    are stale once the key is listed ahead, so its first probe of the key refreshes
    them, once; a client opened after reads them fresh and refreshes nothing."""
    monkeypatch.setattr("memkit.store.fold_listed.REFRESH_AT", 50)
    calls: list[float] = []
    real = fold_listed.refresh

    def spy(conn, postings):
        calls.append(postings.seen_bytes)
        return real(conn, postings)

    monkeypatch.setattr(fold_listed, "refresh", spy)
    dsn = schemas()
    rng = random.Random(7)
    with _open(dsn, 20, 0.5) as s:
        for i in range(20):
            s.remember("s", _text(rng, i))
        assert _state(dsn)[SK][0] >= _state(dsn)[SK][1] and calls == []  # listed ahead
        for i in range(20, 24):  # past the cap: the postings answer
            s.remember("s", _text(rng, i))
        assert s.fold_local_stats()["over"] == 1
        assert calls == [0.0]  # read on the empty table, refreshed once
        assert s.fold_postings_problems() == []
    with _open(dsn, 20, 0.5) as later:
        later.remember("s", _text(rng, 30))
        assert calls == [0.0]


def _counts(c) -> tuple[int, int, int]:
    """fold_postings' (vacuums, analyses, rows changed since the last analysis)."""
    sql = (
        "SELECT vacuum_count, analyze_count, n_mod_since_analyze FROM pg_stat_user_tables "
        "WHERE relid = 'fold_postings'::regclass"
    )
    return tuple(int(x) for x in c.execute(sql).fetchone())


def test_clients_refresh_in_turn_and_the_second_vacuums_without_analysing(schemas, monkeypatch):
    """Writers crossing the cap together each vacuumed and analysed the postings,
    one after the other (4 writers at 200k: their first writes past the cap
    1.28-4.54 s). Now they take turns (`REFRESH_LOCK`: a client waits while
    another refreshes), and one finding the table analysed since it grew only
    vacuums (the visibility map) and reads the same estimates."""
    import threading
    import time

    from memkit.store.fold_postings import read_mode

    monkeypatch.setattr("memkit.store.fold_listed.REFRESH_AT", 50)
    dsn = schemas()
    rng = random.Random(8)
    with _open(dsn, 0, 0.5) as s:  # cap 0: every row posted by its write
        for i in range(40):
            s.remember("s", _text(rng, i))
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        for _ in range(100):  # the closed writer's counts reach the statistics
            if _counts(a)[2] >= 50:
                break
            time.sleep(0.05)
        assert not fold_listed.analysed_since(a)  # ~1,000 postings since any analysis
        vacuums, analyses, _ = _counts(a)
        a.execute("SELECT pg_advisory_lock(%s)", (fold_listed.REFRESH_LOCK,))
        got: list = []
        waiting = threading.Thread(target=lambda: got.append(fold_listed.refresh(b, read_mode(b))))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and got == []  # another client holds the turn
        first = fold_listed.refresh(a, read_mode(a))  # (its own lock again: re-entrant)
        assert _counts(a)[:2] == (vacuums + 1, analyses + 1) and first.lengths
        a.execute("SELECT pg_advisory_unlock(%s)", (fold_listed.REFRESH_LOCK,))
        waiting.join(30)
        (second,) = got
        assert _counts(a)[:2] == (vacuums + 2, analyses + 1)  # vacuumed, not analysed
        assert second.lengths == first.lengths


INLINE_KEPT = (
    "SELECT k.kind, f.lo, f.hi, c.rowid, c.content "
    "FROM unnest(%s::text[], %s::bigint[]) AS k(kind, sk) "
    "JOIN fold_posted f ON f.sk = k.sk LEFT JOIN LATERAL (SELECT m.rowid, m.content "
    "FROM memories m WHERE f.lo < f.hi AND m.scope_id = %s AND m.kind = k.kind "
    "AND m.rowid > f.lo AND m.rowid <= f.hi AND m.superseded_by IS NULL "
    "ORDER BY m.rowid LIMIT %s) c ON true ORDER BY k.kind, c.rowid"
)
"""`memkit_kept`'s query as a plain statement (what a write sent before migration 9)."""


def test_the_kept_function_reads_what_the_plain_query_reads(schemas):
    """`memkit_kept` (migration 9, held on its generic plan) gives the inline query's
    rows in every state of a key: not listed, fully listed, listed ahead with fewer
    pending rows than the step, exactly the step, more, and with superseded rows
    inside its range; and for a scope with none listed, none."""
    dsn = schemas()
    rng = random.Random(5)
    with _open(dsn, 1000, 1.0) as s:
        for i in range(30):
            s.remember("s", _text(rng, i), kind="fact" if i % 3 else "procedure")
        s.remember("t", _text(rng, 99))
        gone = s.remember("s", _text(rng, 100))
        s.retract("s", gone.id)
    with psycopg.connect(dsn, autocommit=True) as c:
        rowids = [int(r[0]) for r in c.execute("SELECT rowid FROM memories ORDER BY rowid")]
        lo, hi = rowids[0] - 1, rowids[-1]

        def both(scope: str, step: int) -> list[tuple]:
            sql, args = fold_listed.kept_sql(scope, step)
            fn = c.execute(sql.replace("?", "%s"), args).fetchall()
            sks = [scope_key(scope, k) for k in KINDS]
            inline = c.execute(INLINE_KEPT, (list(KINDS), sks, scope, step)).fetchall()
            assert fn == inline
            return fn

        assert both("s", 8) == []
        proc = scope_key("s", "procedure")
        c.execute("INSERT INTO fold_posted (sk, lo, hi) VALUES (%s, %s, %s)", (SK, lo, hi))
        c.execute("INSERT INTO fold_posted (sk, lo, hi) VALUES (%s, %s, %s)", (proc, hi, hi))
        pending_facts = [
            r
            for (r,) in c.execute(
                "SELECT rowid FROM memories WHERE scope_id = 's' AND kind = 'fact' "
                "AND superseded_by IS NULL ORDER BY rowid"
            )
        ]
        for step in (1, 8, len(pending_facts), len(pending_facts) + 1):
            got = both("s", step)
            assert [r[3] for r in got if r[0] == "fact"] == pending_facts[:step]
            assert [r[:4] for r in got if r[0] == "procedure"] == [("procedure", hi, hi, None)]
        assert both("t", 8) == []
        (config,) = c.execute("SELECT proconfig FROM pg_proc WHERE oid = 'memkit_kept'::regproc")
        assert config == (["plan_cache_mode=force_generic_plan"],)  # never planned a write
