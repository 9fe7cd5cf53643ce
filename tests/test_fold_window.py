"""A writer's trigram index holds the rows fold-in can reach, not the scope
(`memkit.store.index`: the fold window and a margin, SPEC §3.3), and decides
exactly as a scan of every live row would, whichever way the clock moves."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_helpers import Clock

from memkit.params import DAY, FoldParams
from memkit.store import SQLiteStore
from memkit.store.gram_index import GramIndex
from memkit.store.index import WINDOW_MARGIN
from memkit.store.write_txn import Write
from memkit.text import jaccard, trigrams

WINDOW = FoldParams().window_days * DAY
WORDS = ("deploy", "staging", "box", "db", "postgres", "dark", "mode", "Đức")


def test_a_writer_holds_the_rows_it_could_fold_into_not_the_scope(make_store):
    clock = Clock()
    s = make_store(clock=clock)
    texts = [f"note {i} on the {WORDS[i % 8]} service, ticket {i * 7919}" for i in range(2000)]
    s.bulk_load("old", texts, timestamps=[clock.t - 60 * DAY] * len(texts))
    s.bulk_load("new", texts)
    for scope in ("old", "new"):
        assert not s.remember(scope, "a fresh fact about the weather").folded
    held = s.cache_stats()["scopes"]
    if _server(s, len(texts)):  # past the writer's cap the postings decide: no index held
        assert not held.get("new")  # (the old scope's one row in the window may be)
    else:
        assert held["old"] * 20 < held["new"]  # the old scope's 2,000 rows are not held
    clock.advance(-50 * DAY)  # the old rows are 10 days old now: fold targets again
    r = s.remember("old", texts[5])
    assert r.folded and s.get("old", r.id).content == texts[5]
    if _server(s, len(texts)):
        assert not any(s.cache_stats()["scopes"].values())
    else:
        assert s.cache_stats()["scopes"]["old"] > held["new"] // 2  # read again, all in window


def _server(s, rows: int) -> bool:
    """A Postgres store in `fold_search="server"` mode whose writer holds no index for
    a scope of `rows` rows: its cap `fold_local_rows` is below them (0 in `make
    test-fold-server`, MEMKIT_TEST_FOLD_LOCAL_ROWS in a run that names one); under
    the cap it folds in as client mode does."""
    return getattr(s, "fold_search", "client") == "server" and s.fold_local_rows < rows


def test_a_row_back_in_the_window_when_the_clock_goes_back_is_folded_into(make_store):
    clock = Clock()
    s = make_store(clock=clock)
    s.bulk_load("s", ["the deploy runs on box one"], timestamps=[clock.t - 30 * DAY])
    old = s.live("s")[0].id
    assert not s.remember("s", "prefers dark mode").folded  # index built: the old row left out
    clock.advance(-16 * DAY)  # the old row is 14 days old: at the bound, not within
    assert s.fold_target("s", "the deploy runs on box one!") is None
    clock.advance(-1)  # a second less: within
    assert s.fold_target("s", "the deploy runs on box one!").id == old
    clock.advance(-3 * DAY)
    r = s.remember("s", "the deploy runs on box one!")
    assert r.folded and r.id == old


def _reference(rows, content, kind, now, threshold):
    """The rows fold-in may choose (SPEC §3.3) by a scan of every live row: the best
    (similarity, last seen) ties, or [] for an insert."""
    grams = trigrams(content)
    if not grams:
        return []
    scored = [
        ((jaccard(grams, trigrams(m.content)), m.last_seen_at), m.id)
        for m in rows
        if m.kind == kind and now - m.last_seen_at < WINDOW
    ]
    scored = [(k, i) for k, i in scored if k[0] >= threshold]
    if not scored:
        return []
    best = max(k for k, _ in scored)
    return [i for k, i in scored if k == best]


op = st.one_of(
    st.tuples(st.just("clock"), st.integers(-40, 40)),  # days, either way
    st.tuples(
        st.just("remember"),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
        st.sampled_from(["fact", "preference"]),
    ),
    st.tuples(
        st.just("old"),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
        st.integers(0, 60),
    ),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_every_fold_decision_is_a_scan_of_every_live_row_whatever_the_clock_does(ops):
    clock = Clock()
    s = SQLiteStore.open(":memory:", embedder=None, clock=clock)
    try:
        for o in ops:
            if o[0] == "clock":
                clock.advance(o[1] * DAY)
            elif o[0] == "old":  # a row written days ago (bulk, no fold-in)
                s.bulk_load("s", [o[1]], timestamps=[clock.t - o[2] * DAY])
            else:
                want = _reference(s.live("s"), o[1], o[2], clock.t, 0.65)
                got = s.remember("s", o[1], kind=o[2])
                assert got.folded == bool(want), (o, want)
                if want:
                    assert got.id in want
    finally:
        s.close()


# --- the index built again as the clock moves: before the write lock ---------------------

MARGIN = WINDOW_MARGIN * WINDOW  # 7 days: half the 14-day window


@pytest.fixture
def builds(monkeypatch):
    """(move, built): `move(seconds)` moves the store's clock and the monotonic time
    `memkit.store.index` reads by as much, as time moves a real clock; `built`
    lists, for each trigram index build since, whether a write held its lock."""
    ticks = [0.0]
    monkeypatch.setattr("memkit.store.index.monotonic", lambda: ticks[0])
    holding: list[bool] = []
    built: list[bool] = []
    enter, leave, build = Write.__enter__, Write.__exit__, GramIndex.build

    def entering(self):
        w = enter(self)
        holding.append(True)
        return w

    def leaving(self, *exc):
        try:
            return leave(self, *exc)
        finally:
            holding.pop()

    def building(cls, *args, **kwargs):
        built.append(bool(holding))
        return build(*args, **kwargs)

    monkeypatch.setattr(Write, "__enter__", entering)
    monkeypatch.setattr(Write, "__exit__", leaving)
    monkeypatch.setattr(GramIndex, "build", classmethod(building))
    clock = Clock()

    def move(seconds: float, ticks_too: bool = True) -> None:
        clock.advance(seconds)
        if ticks_too:
            ticks[0] += seconds

    return clock, move, built


def _aging(make_store, builds, by, ticks_too=True):
    """A writer whose index was built when the clock read T; the clock then moves
    `by` more: what its next writes decide, and where the index was built."""
    clock, move, built = builds
    s = make_store(clock=clock)
    s.bulk_load("s", ["the deploy runs on box one"], timestamps=[clock.t - DAY])
    s.remember("s", "prefers dark mode")  # the index, and the clock a decision read
    move(MARGIN + 1)
    staging = s.remember("s", "the staging db is db.staging.internal")  # built again: at T
    built.clear()
    move(by, ticks_too)
    got = [s.remember("s", "the staging db is db.staging.internal!"),
           s.remember("s", "the deploy runs on box one!")]  # fmt: skip
    # the staging row is `by` old (in the window), the deploy row a day and a margin more
    assert [r.folded for r in got] == [True, False]
    assert got[0].id == staging.id
    if _server(s, len(s.live("s"))):
        assert built == []  # the database finds the candidates: no index is ever built
        return None
    return list(built)


def test_an_index_at_the_margin_bound_is_not_built_again(make_store, builds):
    assert _aging(make_store, builds, MARGIN) in ([], None)


def test_an_index_past_the_margin_is_built_again_before_the_write_lock(make_store, builds):
    assert _aging(make_store, builds, MARGIN + 1) in ([False], None)  # once, no lock held


def test_a_clock_that_jumps_is_caught_under_the_lock(make_store, builds):
    """Before its lock a write sees the clock only as time moves (`window_start`:
    the store's clock is read once a decision, under the lock); a jump is seen by
    the decision's own check, which builds the index again there."""
    assert _aging(make_store, builds, MARGIN + 1, ticks_too=False) in ([True], None)
