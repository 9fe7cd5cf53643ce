"""Postgres `fold_search="server"` (issue #36, `memkit.store.fold_postings`): the
database finds fold-in's candidates from a postings table the writers keep,
and decides exactly as the in-memory index (client mode) and SQLite do.

The whole Postgres half runs in a new store's mode (server, each writer's cap:
`make test`) and again in server mode from the postings alone and in client
mode (MEMKIT_TEST_FOLD_SEARCH=server or client, tests/conftest.py; every
test's live rows' postings are checked after it)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import psycopg
import pytest
from test_store_helpers import Clock

from memkit.errors import ConfigError, NotFound
from memkit.params import DAY, FoldParams
from memkit.store import SQLiteStore, copy_store, fold_postings
from memkit.store.fold_postings import (
    GramOrder,
    Postings,
    common_list,
    length_bounds,
    probe_codes,
    read_mode,
    row_postings,
    split_probe,
)
from memkit.store.postgres import PostgresStore
from memkit.text import jaccard, trigrams

WORDS = (
    "deploy", "staging", "box", "db", "postgres", "dark", "mode", "Đức", "naïve",
    "😀", "𝔘𝔫𝔦", "tea", "four", "cache", "disk", "shared", "ticket", "runs",
)  # fmt: skip
NO_GRAM = ("!!!", "— … —", "😀 😀")  # texts without a trigram (symbols only)


def _text(rng: random.Random) -> str:
    if rng.random() < 0.06:
        return rng.choice(NO_GRAM)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))


def _ids():
    n = iter(range(10**9))
    return lambda: f"id{next(n):08d}"


def _script(rng: random.Random, n: int) -> list[tuple]:
    """Random writes: remember (often a reworded earlier text), remember_many, retract,
    update, fold_target, and clock moves across the 14-day window both ways."""
    ops: list[tuple] = []
    texts: list[str] = []
    for _ in range(n):
        x = rng.random()
        if texts and x < 0.35:  # an earlier text, one word changed or appended
            words = rng.choice(texts).split()
            if words and rng.random() < 0.5:
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            else:
                words.append(rng.choice(WORDS))
            t = " ".join(words)
        else:
            t = _text(rng)
        texts.append(t)
        kind = rng.choice(("fact", "fact", "preference"))
        if x < 0.55:
            ops.append(("remember", t, kind))
        elif x < 0.65:
            ops.append(("many", [t, *(_text(rng) for _ in range(rng.randint(0, 3))), t + " box"]))
        elif x < 0.72:
            ops.append(("retract", rng.randrange(10**6)))
        elif x < 0.78:
            ops.append(("update", rng.randrange(10**6), t))
        elif x < 0.88:
            ops.append(("target", t, kind))
        else:
            ops.append(("clock", rng.choice((-20, -13, -8, -1, 1, 6, 13, 15, 30)) * DAY))
    return ops


def _run(store, clock: Clock, ops: list[tuple], after=None) -> list:
    """Each op's outcome (ids are deterministic: `_ids`); `after(store)` after each op."""
    out: list = []
    live: list[str] = []
    for op in ops:
        if op[0] == "remember":
            r = store.remember("s", op[1], kind=op[2])
            live.append(r.id)
            out.append((r.id, r.folded))
        elif op[0] == "many":
            rs = store.remember_many("s", op[1])
            live += [r.id for r in rs]
            out.append([(r.id, r.folded) for r in rs])
        elif op[0] in ("retract", "update"):
            if not live:
                out.append(None)
                continue
            mid = live[op[1] % len(live)]
            try:
                if op[0] == "retract":
                    store.retract("s", mid)
                    out.append(("retracted", mid))
                else:
                    new = store.update("s", mid, op[2])
                    live.append(new)
                    out.append(("updated", mid, new))
            except NotFound:
                out.append(("gone", mid))
        elif op[0] == "target":
            m = store.fold_target("s", op[1], kind=op[2])
            out.append(None if m is None else m.id)
        else:
            clock.advance(op[1])
            out.append(clock.t)
        if after is not None:
            after(store)
    return out


class _Scrambled(Mapping[int, float]):
    """Every code "long", in an order of its own (a salted hash): `split_probe`
    then skips h - keep codes chosen with no regard to the real lists."""

    def __init__(self, salt: int):
        self.salt = salt

    def __getitem__(self, code: int) -> float:
        return 1e6 + hash((self.salt, code)) % 10**6

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.65, 0.4])
def test_server_mode_decides_as_client_mode_and_sqlite(schemas, monkeypatch, seed, threshold):
    """The "server-skip" store skips h - 1 of each probe's codes, chosen at random."""
    ops = _script(random.Random(seed), 70)
    fold = FoldParams(threshold=threshold)
    got = {}
    split = fold_postings.split_probe
    for name in ("sqlite", "client", "server", "server-skip"):
        if name == "server-skip":
            monkeypatch.setattr(
                fold_postings,
                "split_probe",
                lambda codes, h, lengths, keep=None, long=None: split(
                    codes, h, _Scrambled(seed), 1, 0.0
                ),
            )
        clock = Clock()
        if name == "sqlite":
            store = SQLiteStore.open(":memory:", embedder=None, clock=clock, fold=fold)
        else:
            mode = name.split("-")[0]
            store = PostgresStore.open(
                schemas(), embedder=None, clock=clock, fold=fold, fold_search=mode,
                fold_local_rows=0,  # the postings alone (tests/test_fold_local.py: the cap)
            )  # fmt: skip
            assert store.fold_search == mode
        store.new_id = _ids()
        with store:
            got[name] = _run(store, clock, ops)
            if name.startswith("server"):
                assert store.fold_postings_problems() == []
                assert not any(store.cache_stats()["scopes"].values())  # no index held
    assert got["server"] == got["server-skip"] == got["client"] == got["sqlite"]
    assert any(o[1] for o in got["server"] if isinstance(o, tuple) and len(o) == 2)  # folds


def test_rows_written_before_the_switch_and_by_any_client_are_found(schemas):
    """A client-mode store's rows are posted by the switch's backfill; after it, a
    writer opened without asking (None follows the database) keeps the postings,
    and a server-mode probe finds its rows."""
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="client") as a:
        first = a.remember("s", "the deploy runs on box one")
        a.remember("s", "tea at four in the staging room")
        with PostgresStore.open(dsn, embedder=None) as other:
            with pytest.raises(ConfigError, match="other clients have this store open"):
                a.set_fold_search("server")
            assert other.fold_search == a.fold_search == "client"
        a.set_fold_search("server")
        assert a.fold_search == "server"
        assert a.remember("s", "the deploy runs on box one!").id == first.id
    with PostgresStore.open(dsn, embedder=None) as b:  # follows the database
        assert b.fold_search == "server"
        later = b.remember("s", "the cache lives on the shared disk", kind="preference")
    with PostgresStore.open(dsn, embedder=None, fold_search="server") as c:
        got = c.remember("s", "the cache lives on the shared disk!", kind="preference")
        assert got.folded and got.id == later.id
        assert c.fold_postings_problems() == []
        c.set_fold_search("client")
        assert _postings(dsn) == 0
    with PostgresStore.open(dsn, embedder=None) as d:
        assert d.fold_search == "client"
        assert d.remember("s", "the cache lives on the shared disk!!", kind="preference").folded


def test_a_switch_waits_for_a_client_closing_and_refuses_one_that_stays(schemas, monkeypatch):
    """A client's shared hold goes when its server backend exits, just after its
    close returns: the switch waits up to SWITCH_WAIT_S for it (a client closed
    0.2 s into the wait does not refuse the switch), and refuses a client still
    open when the wait ends, not sooner."""
    import threading
    import time

    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None) as a:
        a.remember("s", "the deploy runs on box one")
        other = PostgresStore.open(dsn, embedder=None)
        closer = threading.Timer(0.2, other.close)
        closer.start()
        a.set_fold_search("server")
        closer.join()
        assert a.fold_search == "server"
        monkeypatch.setattr(fold_postings, "SWITCH_WAIT_S", 0.3)
        with PostgresStore.open(dsn, embedder=None) as stays:
            t = time.monotonic()
            with pytest.raises(ConfigError, match="other clients have this store open"):
                a.set_fold_search("client")
            assert time.monotonic() - t >= 0.3
            assert stays.fold_search == a.fold_search == "server"


def test_a_mode_the_database_does_not_have_is_refused(schemas):
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="client") as s:
        s.remember("s", "a row: the store is no longer new")
    with pytest.raises(ConfigError, match="is in 'client' mode"):
        PostgresStore.open(dsn, embedder=None, fold_search="server")
    with pytest.raises(ConfigError, match="fold_search='hybrid'"):
        PostgresStore.open(dsn, embedder=None, fold_search="hybrid")
    fresh = schemas()
    PostgresStore.open(fresh, embedder=None).close()  # new: the new store's mode, server
    with pytest.raises(ConfigError, match="is in 'server' mode"):
        PostgresStore.open(fresh, embedder=None, fold_search="client")


def test_the_floor_bounds_the_thresholds_served(schemas):
    """Postings posted for a floor serve thresholds at and above it; below it is
    refused at open and at a write (the threshold may change after the open)."""
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="server") as s:
        s.set_fold_search("server", floor=0.5)
    PostgresStore.open(dsn, embedder=None, fold=FoldParams(threshold=0.5)).close()  # at it
    with pytest.raises(ConfigError, match=r"threshold 0.49 is below .* floor 0.5"):
        PostgresStore.open(dsn, embedder=None, fold=FoldParams(threshold=0.49))
    with PostgresStore.open(dsn, embedder=None, fold=FoldParams(threshold=0.0)) as s:
        assert not s.remember("s", "a scan needs no postings").folded  # <= 0: the SQL scan
        s.fold = FoldParams(threshold=0.49)
        with pytest.raises(ConfigError, match="below"):
            s.remember("s", "a scan needs no postings")
        for bad in (0, 0.0, 1.01, True, "0.5"):
            with pytest.raises(ConfigError, match="floor"):
                s.set_fold_search("server", floor=bad)
        s.fold = FoldParams(threshold=1.0)
        s.set_fold_search("server", floor=1.0)  # the top of the range


def test_postings_of_another_gram_order_are_refused(schemas):
    dsn = schemas()
    PostgresStore.open(dsn, embedder=None, fold_search="server").close()
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE meta SET value = 'common2048-0000' WHERE key = 'fold_order'")
    with pytest.raises(ConfigError, match="gram order 'common2048-0000'"):
        PostgresStore.open(dsn, embedder=None)


def test_a_fold_reposts_and_a_retraction_is_filtered(schemas):
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=0) as s:
        r = s.remember("s", "the staging db is db.staging.internal")
        assert s.remember("s", "the staging db is db.staging.internal now").id == r.id
        assert s.fold_postings_problems() == []
        assert _postings(dsn, "count(DISTINCT m)") == 1  # the old text's postings are gone
        s.retract("s", r.id)
        assert s.fold_target("s", "the staging db is db.staging.internal now") is None
        assert not s.remember("s", "the staging db is db.staging.internal now").folded


def test_copy_store_posts_into_a_server_mode_destination(schemas, tmp_path):
    src = str(tmp_path / "src.db")
    with SQLiteStore.open(src, embedder=None) as s:
        kept = s.remember("s", "the deploy runs on box one").id
        s.remember_many("t", ["tea at four", "Đức likes 😀 naïve tea"])
    dst = schemas()
    PostgresStore.open(dst, embedder=None, fold_search="server").close()
    copy_store(src, dst)
    with PostgresStore.open(dst, embedder=None) as d:
        assert d.fold_search == "server"
        assert d.fold_postings_problems() == []
        assert d.remember("s", "the deploy runs on box one!").id == kept
    back = schemas()  # a server-mode source's mode does not travel: the destination's own
    PostgresStore.open(back, embedder=None, fold_search="client").close()
    copy_store(dst, back)
    with PostgresStore.open(back, embedder=None) as b:
        assert b.fold_search == "client"


def test_copy_store_vacuums_and_analyses_a_server_mode_destination(schemas, tmp_path, monkeypatch):
    """As a bulk load: the copied postings are vacuumed (so a probe's count can read
    the index only) and analysed (the list-length estimates) once the copy commits.
    (Whether VACUUM could mark the pages all-visible depends on other sessions'
    snapshots, an autovacuum's too: not asserted.)"""
    src = str(tmp_path / "src.db")
    with SQLiteStore.open(src, embedder=None) as s:
        s.bulk_load("s", [f"the deploy service runs box {i}" for i in range(1500)])
    dst = schemas()
    PostgresStore.open(dst, embedder=None, fold_search="server").close()
    monkeypatch.setattr("memkit.store.fold_local.LOCAL_ROWS", 1499)  # the copy lists "s"
    vacuums = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'fold_postings'::regclass"
    with psycopg.connect(dst, autocommit=True) as c:
        (before,) = c.execute(vacuums).fetchone()
    copy_store(src, dst)
    with psycopg.connect(dst, autocommit=True) as c:
        lengths = read_mode(c).lengths
        (after,) = c.execute(vacuums).fetchone()
    assert lengths and max(lengths.values()) > 1000  # "the", " de", ... in every row
    assert after == before + 1


def test_bulk_load_posts_its_rows(schemas):
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="server") as s:
        texts = [f"note {i} on the {WORDS[i % len(WORDS)]} service" for i in range(300)]
        s.bulk_load("s", texts)
        assert s.fold_postings_problems() == []
        assert s.fold_target("s", texts[7] + " again").content == texts[7]


def _postings(dsn: str, what: str = "count(*)") -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        return int(c.execute(f"SELECT {what} FROM fold_postings").fetchone()[0])


def _texts(rng: random.Random, n: int, reworded: int) -> list[str]:
    """`n` random texts, then the first `reworded` of them with their last word
    replaced (near copies a probe must find)."""
    texts = [_text(rng) for _ in range(n)]
    return texts + [" ".join(t_.split()[:-1]) + " tea" for t_ in texts[:reworded]]


def _posted(texts: list[str], order: GramOrder, floor: float) -> tuple[dict[int, set[int]], Any]:
    """The postings `texts` make in memory, {code: {text index}}, and each text's
    gram count (what `Postings.backfill` writes to the table)."""
    idx, codes, m = row_postings(texts, order, floor)
    post: dict[int, set[int]] = {}
    for i, c in zip(idx.tolist(), codes.tolist(), strict=True):
        post.setdefault(c, set()).add(i)
    return post, m


def _brute(rows: dict[int, str], grams: frozenset[str], t: float) -> set[int]:
    return {r for r, c in rows.items() if jaccard(grams, trigrams(c)) >= t}


@pytest.mark.parametrize("floor,t", [(0.65, 0.65), (0.65, 0.8), (0.65, 1.0), (0.3, 0.3)])
def test_the_prefix_filter_misses_nothing_under_the_shipped_order(floor, t):
    """The prefix search in memory (as the SQL runs it) against brute force on
    random texts: non-ASCII, astral, duplicates, texts without a gram."""
    rng = random.Random(7)
    order = GramOrder(common_list()[0])
    texts = _texts(rng, 400, 100)
    rows = dict(enumerate(texts))
    post, m = _posted(texts, order, floor)
    for q in texts[::3] + [_text(rng) for _ in range(100)]:
        grams = trigrams(q)
        pc, h = probe_codes(grams, order, t)
        lo, hi = length_bounds(len(grams), t)
        hits: dict[int, int] = {}
        for c in pc:
            for r in post.get(c, ()):
                if lo <= m[r] <= hi:
                    hits[r] = hits.get(r, 0) + 1
        found = {r for r, k in hits.items() if k >= h and jaccard(grams, trigrams(rows[r])) >= t}
        assert found == _brute(rows, grams, t), q


def test_split_probe_skips_the_longest_known_lists_up_to_h_minus_keep():
    codes = [10, 11, 12, 13, 14, 15]
    lengths = {11: 5e3, 13: 9e4, 14: 2e3, 15: 999.0}
    assert split_probe(codes, 4, lengths, keep=1) == ([10, 12, 15], [11, 13, 14])
    assert split_probe(codes, 4, lengths, keep=2) == ([10, 12, 14, 15], [11, 13])
    assert split_probe(codes, 4, lengths, keep=4) == (codes, [])  # nothing to spare
    assert split_probe(codes, 4, {}, keep=1) == (codes, [])  # no estimate: short
    assert split_probe(codes, 6, dict.fromkeys(codes, 1e4), keep=3) == ([10, 11, 12], [13, 14, 15])
    with pytest.raises(ConfigError, match="keep 0"):
        split_probe(codes, 4, lengths, keep=0)  # s = h: a row's hits could all be skipped


def _skip_rule(post, m, pc, skipped, h, lo, hi) -> set[int]:
    """The skip statement's rows, in memory: >= h - s hits among the read lists,
    then the skipped lists' hits of those rows counted, >= h in all."""
    s = len(skipped)
    hits: dict[int, int] = {}
    for c in pc:
        if c not in skipped:
            for r in post.get(c, ()):
                if lo <= m[r] <= hi:
                    hits[r] = hits.get(r, 0) + 1
    return {
        r
        for r, k in hits.items()
        if k >= h - s and k + sum(r in post.get(c, ()) for c in skipped) >= h
    }


@pytest.mark.parametrize("t", [0.65, 0.4])
def test_the_skip_rule_finds_every_match_whatever_it_skips(t):
    """Adversarial: the skipped codes are the ones holding a true match's postings
    (h - 1 of them, then h - 1 at random): the rule's rows hold every row that
    reaches t. At s = h, skipping a match's h hits loses it (why it is refused)."""
    rng = random.Random(11)
    order = GramOrder(common_list()[0])
    texts = _texts(rng, 400, 100)
    rows = dict(enumerate(texts))
    post, m = _posted(texts, order, t)
    lost = 0
    for q in texts[::3] + [_text(rng) for _ in range(100)]:
        grams = trigrams(q)
        pc, h = probe_codes(grams, order, t)
        lo, hi = length_bounds(len(grams), t)
        want = _brute(rows, grams, t)
        for match in sorted(want)[:3]:
            held = [c for c in pc if match in post.get(c, ())]
            for skipped in (held[: h - 1], rng.sample(pc, min(h - 1, len(pc)))):
                got = _skip_rule(post, m, pc, set(skipped), h, lo, hi)
                assert {r for r in got if jaccard(grams, trigrams(rows[r])) >= t} == want, q
            if len(held) == h:  # exactly h hits: skipping all of them loses the row
                lost += match not in _skip_rule(post, m, pc, set(held), h, lo, hi)
    assert lost > 0


def test_the_skip_statement_returns_the_rows_of_the_full_one(schemas):
    """In Postgres: each probe with its match's lists skipped (h - 1 of them, as
    estimated the longest) returns the same rows as the probe that reads all."""
    dsn = schemas()
    rng = random.Random(5)
    texts = _texts(rng, 300, 80)
    with PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=0) as s:
        s.bulk_load("s", texts)
        with psycopg.connect(dsn, autocommit=True) as c:
            full = dataclasses.replace(read_mode(c), lengths={})
        order = full.order
        idx, codes, _ = row_postings(texts, order, full.floor)
        posted: dict[int, set[int]] = {}
        for i, c in zip(idx.tolist(), codes.tolist(), strict=True):
            posted.setdefault(i, set()).add(c)
        with psycopg.connect(dsn, autocommit=True) as c:
            rowid = dict(c.execute("SELECT content, rowid FROM memories").fetchall())

            def run(p: Postings, grams: frozenset[str]) -> set[int]:
                sql, args = p.probe("s", "fact", grams, 0.65)
                return {r[0] for r in c.execute(sql.replace("?", "%s"), args)}

            skipped_some = 0
            for q in texts[::4]:
                grams = trigrams(q)
                pc, h = probe_codes(grams, order, 0.65)
                if not pc:
                    continue
                want = run(full, grams)
                held = [g for g in pc if g in posted[texts.index(q)]][: h - 1]
                skip = dataclasses.replace(full, lengths=dict.fromkeys(held, 1e9), keep=1)
                assert run(skip, grams) == want, q
                assert rowid[q] in want or not held
                skipped_some += bool(held)
            assert skipped_some > 20


def test_bulk_load_estimates_the_lists_and_probes_use_them(schemas, monkeypatch):
    seen: list[Mapping[int, float]] = []
    split = fold_postings.split_probe

    def spy(codes, h, lengths, keep=None, long=None):
        seen.append(lengths)
        return split(codes, h, lengths, keep, long)

    monkeypatch.setattr(fold_postings, "split_probe", spy)
    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=0) as s:
        s.bulk_load("s", [f"the deploy service runs box {i}" for i in range(2000)])
        with psycopg.connect(dsn, autocommit=True) as c:
            lengths = read_mode(c).lengths
        assert lengths and max(lengths.values()) > 1000  # "the", " de", ... in every row
        assert s.fold_target("s", "the deploy service runs box 7!") is not None
        assert seen[-1] == lengths  # the store's probe, after its load's ANALYZE
    with PostgresStore.open(dsn, embedder=None, fold_local_rows=0) as s:  # reads them at open
        s.fold_target("s", "the deploy service runs box 8!")
        assert seen[-1] == lengths


def test_the_shipped_order_is_the_list_it_says():
    codes, order_id = common_list()
    assert codes.size == 2048 and np.unique(codes).size == 2048
    assert order_id.startswith("common2048-")
    assert (
        Postings(0.65, order_id).order.keys(codes[:1])[0]
        > Postings(0.65, order_id).order.keys(codes[1:2])[0]
    )  # the most common gram goes last


BATCH = [
    "the deploy runs on box one",
    "tea at four in the staging room",
    "the deploy runs on box one!",  # folds into item 0 (a row the batch wrote)
    "the cache lives on the shared disk",  # folds into the stored row
    "the cache lives on the shared disk now",  # into that row as item 3 left it
    "😀 😀",  # no gram
]


@pytest.mark.parametrize("bound", [len(BATCH), len(BATCH) - 1])
def test_a_batch_probes_with_the_lock_up_to_its_bound_and_item_by_item_past_it(
    schemas, monkeypatch, bound
):
    """`remember_many` reads every item's candidates in one statement with the lock
    (2 round trips in all) while it has at most `BATCH_PROBES` items, and probes
    item by item inside its transaction past that: the same decisions as SQLite's."""
    from test_postgres_round_trips import traced

    monkeypatch.setattr("memkit.store.writes.BATCH_PROBES", bound)
    want = SQLiteStore.open(":memory:", embedder=None)
    opened: list = []
    dsn, connect = schemas(), psycopg.connect
    with monkeypatch.context() as m:  # the store's own connection, for its trace
        m.setattr(psycopg, "connect", lambda *a, **k: opened.append(connect(*a, **k)) or opened[-1])
        s = PostgresStore.open(dsn, embedder=None, fold_search="server", fold_local_rows=0)
    with s:
        for store in (want, s):
            store.new_id = _ids()
            store.remember("s", "the cache lives on a shared disk")
        with traced(opened[0]) as trips:
            got = s.remember_many("s", BATCH)
        assert s.fold_postings_problems() == []
    assert got == want.remember_many("s", BATCH)
    assert [r.folded for r in got] == [False, False, True, True, True, False]
    assert trips == ([2] if bound == len(BATCH) else [2 + 5])  # the batch; or 5 probes more


def test_the_store_command_switches_the_mode(schemas, tmp_path, capsys):
    from memkit.store.cli import main

    dsn = schemas()
    with PostgresStore.open(dsn, embedder=None, fold_search="client") as s:
        kept = s.remember("s", "the deploy runs on box one").id
    assert main(["fold-search", "--db", dsn, "server", "--floor", "0.5"]) == 0
    assert "client -> server (floor 0.5)" in capsys.readouterr().out
    with PostgresStore.open(dsn, embedder=None, fold=FoldParams(threshold=0.5)) as s:
        assert s.fold_search == "server" and s.fold_postings_problems() == []
        assert s.remember("s", "the deploy runs on box one!").id == kept
        assert main(["fold-search", "--db", dsn, "client"]) == 2  # s is open
        assert "other clients have this store open" in capsys.readouterr().err
    assert main(["fold-search", "--db", dsn, "client", "--json"]) == 0
    assert '"fold_search": "client"' in capsys.readouterr().out
    assert main(["fold-search", "--db", str(tmp_path / "x.db"), "server"]) == 2
    assert "Postgres store's mode" in capsys.readouterr().err
