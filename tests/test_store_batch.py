"""`remember_many`: one transaction, one embedding call, and exactly the fold-in
decisions of `remember` called item by item (SPEC §3), folds within the batch included."""

from __future__ import annotations

import itertools
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_helpers import Clock, TableEmbedder

from memkit.errors import ConfigError
from memkit.params import DAY, FoldParams
from memkit.store import SQLiteStore, open_store

WORDS = ("deploy", "staging", "make", "ops", "box", "db", "postgres", "dark", "mode", "Đức")
COLUMNS = (
    "rowid, id, scope_id, kind, content, tags, confidence, source_run_id, created_at, "
    "seen_count, last_seen_at, superseded_by, embedding, ngrams"
)


class TickingClock(Clock):
    """Every read moves time on: each write gets its own `now`."""

    def __init__(self, step: float):
        super().__init__()
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def counter_ids():
    n = itertools.count()
    return lambda: f"m{next(n):05d}"


def rows(path: str) -> list[tuple]:
    c = sqlite3.connect(path)
    try:
        return c.execute(f"SELECT {COLUMNS} FROM memories ORDER BY rowid").fetchall()
    finally:
        c.close()


item = st.fixed_dictionaries(
    {"content": st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)},
    optional={
        "kind": st.sampled_from(["fact", "preference"]),
        "confidence": st.sampled_from([0.1, 0.6, 0.7, 1.0]),
        "tags": st.lists(st.sampled_from(["ops", "db"]), max_size=2),
        "source_run_id": st.sampled_from(["run-1", "run-2"]),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(item, max_size=6),
    items=st.lists(st.one_of(item, item.map(lambda d: d["content"])), min_size=1, max_size=14),
    cuts=st.lists(st.integers(0, 14), max_size=3),
    step=st.sampled_from([1.0, 5 * DAY]),
    threshold=st.sampled_from([0.0, 0.3, 0.65]),
)
def test_batches_end_exactly_where_one_by_one_writes_end(before, items, cuts, step, threshold):
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(Path(tmp) / "one.db"), str(Path(tmp) / "many.db")]
        stores = [
            SQLiteStore.open(
                p,
                embedder="hashing",
                clock=TickingClock(step),
                fold=FoldParams(threshold=threshold),
            )
            for p in paths
        ]
        for s in stores:
            s.new_id = counter_ids()
            for it in before:
                s.remember("s", **it)
        one, many = stores
        want = [one.remember("s", **it) if isinstance(it, dict) else one.remember("s", it)
                for it in items]  # fmt: skip
        got = []
        bounds = sorted({0, len(items), *[c for c in cuts if c <= len(items)]})
        for lo, hi in itertools.pairwise(bounds):
            got += many.remember_many("s", items[lo:hi])
        assert got == want
        assert rows(paths[1]) == rows(paths[0])
        for s in stores:
            s.close()


def test_a_batch_is_one_embedding_call_and_folds_into_its_own_rows(make_store):
    emb = TableEmbedder({"the deploy runs on box one": [1, 0, 0, 0]})
    s = make_store(embedder=emb, clock=Clock())
    res = s.remember_many(
        "s",
        [
            "the deploy runs on box one",
            {"content": "the deploy runs on box one!", "confidence": 0.9, "tags": ["ops"]},
            {"content": "prefers dark mode", "kind": "preference"},
        ],
    )
    assert emb.calls == 1
    assert [r.folded for r in res] == [False, True, False]
    assert res[1].id == res[0].id
    m = s.get("s", res[0].id)
    assert (m.content, m.seen_count, m.confidence, m.tags) == (
        "the deploy runs on box one!",
        2,
        0.9,
        ("ops",),
    )
    assert s.remember_many("s", []) == []


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"content": "ok", "kind": "memo"}, "item 1: unknown kind 'memo'"),
        ({"content": "  "}, "item 1: content must be a non-blank"),
        ({"content": "ok", "confidence": 1.5}, r"item 1: confidence 1.5 outside \[0, 1\]"),
        ({"content": "ok", "colour": "red"}, r"item 1: unknown field\(s\) colour"),
        ({"kind": "fact"}, "item 1: no 'content'"),
        (42, "item 1: want a string or a mapping"),
    ],
)
def test_a_bad_item_is_named_and_nothing_is_written(make_store, bad, match):
    s = make_store(embedder=None, clock=Clock())
    with pytest.raises(ConfigError, match=match):
        s.remember_many("s", ["a good fact about deploys", bad])
    assert s.stats("s")["rows"] == 0


def test_a_failing_embedder_stores_the_batch_without_vectors(make_store):
    emb = TableEmbedder()
    emb.fail = True
    s = make_store(embedder=emb, clock=Clock())
    res = s.remember_many("s", ["first fact about deploys", "second fact about the db"])
    assert s.stats("s")["embedded"] == 0 and len(res) == 2
    assert [h.id for h in s.recall("s", "deploys")] == [res[0].id]


class GatedEmbedder(TableEmbedder):
    """Holds any text starting with "slow" until released."""

    def __init__(self):
        super().__init__(dim=4)
        import threading

        self.entered = threading.Event()
        self.release = threading.Event()

    def embed(self, texts):
        if any(t.startswith("slow") for t in texts):
            self.entered.set()
            assert self.release.wait(10), "never released"
        return super().embed(texts)


@pytest.mark.parametrize("slow", ["recall", "remember"])
def test_embedding_never_holds_the_store_lock(make_store, slow):
    """A query (or write) still being embedded does not stop another thread's
    write and recall on the same store."""
    import threading

    emb = GatedEmbedder()
    s = make_store(embedder=emb, clock=Clock())
    s.remember("s", "a fact about deploys")
    call = (
        (lambda: s.recall("s", "slow query"))
        if slow == "recall"
        else (lambda: s.remember("s", "slow fact to embed"))
    )
    t = threading.Thread(target=call)
    t.start()
    try:
        assert emb.entered.wait(10)
        done = []
        other = threading.Thread(
            target=lambda: done.append((s.remember("s", "another fact"), s.recall("s", "deploys")))
        )
        other.start()
        other.join(10)
        assert done and not emb.release.is_set(), "the other thread waited for the embedder"
    finally:
        emb.release.set()
        t.join(10)
    s.close()


def test_keyword_tokenizing_never_holds_the_store_lock(make_store, monkeypatch):
    """A huge query's keywords are taken outside the lock (a 10 MB query takes
    ~1 s): another thread's write and recall go on meanwhile."""
    import threading

    import memkit.store.reads as store_module
    from memkit.text import keywords

    entered, release = threading.Event(), threading.Event()

    def gated(query):
        if query.startswith("slow"):
            entered.set()
            assert release.wait(10), "never released"
        return keywords(query)

    monkeypatch.setattr(store_module, "keywords", gated)
    s = make_store(embedder=None, clock=Clock())
    s.remember("s", "a fact about deploys")
    got = []
    t = threading.Thread(target=lambda: got.append(s.recall("s", "slow deploys")))
    t.start()
    try:
        assert entered.wait(10)
        done = []
        other = threading.Thread(
            target=lambda: done.append((s.remember("s", "another fact"), s.recall("s", "fact")))
        )
        other.start()
        other.join(10)
        assert done and not release.is_set(), "the other thread waited for the tokenizer"
    finally:
        release.set()
        t.join(10)
    assert [h.memory.content for h in got[0]] == ["a fact about deploys"]
    s.close()


DIM = 4


def test_bulk_load_bypasses_fold_in_and_checks_its_arguments_first(store_url):
    """`bulk_load` (benchmarks and fixtures), on both backends: near-duplicates
    stay separate rows, where `remember` folds them; a bad argument writes nothing."""
    clock = Clock()
    with open_store(store_url, embedder=TableEmbedder(dim=DIM), clock=clock) as s:
        texts = ["Deploy with make deploy.", "Deploy with make deploy!"]
        s.bulk_load("b", texts, np.eye(2, DIM), timestamps=[1.0, 2.0])
        assert sorted(m.content for m in s.live("b")) == sorted(texts)
        assert sorted(m.created_at for m in s.live("b")) == [1.0, 2.0]
        s.remember("r", texts[0])
        assert s.remember("r", texts[1]).folded  # remember folds them
        for bad, match in (
            ({"contents": "one string"}, "contents"),
            ({"contents": ["ok", 5]}, r"contents\[1\]"),
            ({"embeddings": np.eye(3, DIM)}, "one row per content"),
            ({"timestamps": [1.0]}, "one entry per content"),
            ({"kind": "nope"}, "kind"),
        ):
            args = {"contents": ["x", "y"], **bad}
            contents = args.pop("contents")
            with pytest.raises(ConfigError, match=match):
                s.bulk_load("c", contents, **args)
        assert s.live("c") == []


def test_a_write_failing_after_its_insert_was_sent_leaves_nothing(store_url, monkeypatch):
    """A remember that fails between its INSERT and its commit (Postgres: the
    pipeline's implicit transaction, `PgDb.begin_write`) rolls it back: no row,
    the scope's lock released, the next write as if it never ran."""
    from memkit.store import rows

    store = open_store(store_url, embedder=None)
    store.remember("s", "the first fact of this scope")
    insert = rows.insert

    def insert_then_fail(*args, **kwargs):
        insert(*args, **kwargs)
        raise RuntimeError("after the insert")

    monkeypatch.setattr(rows, "insert", insert_then_fail)
    for many in (False, True):
        with pytest.raises(RuntimeError, match="after the insert"):
            if many:
                store.remember_many("s", ["a second fact, in a batch", "and a third one"])
            else:
                store.remember("s", "a second fact, alone")
    monkeypatch.setattr(rows, "insert", insert)
    assert [m.content for m in store.live("s")] == ["the first fact of this scope"]
    with open_store(store_url, embedder=None) as other:  # the scope's lock is free
        assert not other.remember("s", "a second fact, alone").folded
    assert sorted(m.content for m in store.live("s")) == [
        "a second fact, alone",
        "the first fact of this scope",
    ]
    store.close()
