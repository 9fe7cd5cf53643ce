"""The bound on what one store's in-memory indexes hold (issue #36, `index_cache_mb`).

The indexes' own estimates (`nbytes`) are checked against tracemalloc, so the
constants cannot rot; the cap evicts the least recently used scope between
operations, and a capped store answers exactly as an uncapped one.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing as mp
import random
import tracemalloc

import numpy as np
import pytest

from memkit.errors import ConfigError
from memkit.store import open_store
from memkit.store.gram_index import GramIndex
from memkit.store.index_bound import MB, cap_bytes
from memkit.store.keyword_index import KeywordIndex
from memkit.store.vectors import ScopeVectors

ROWS = 10_000
SCOPES = ("a", "b", "c")


def _sentences(n: int, seed: int = 1) -> list[str]:
    """Sentences of a Zipf-ish vocabulary, one unique word each (as memories have)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(4000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [
        " ".join(rng.choices(words, weights, k=rng.randint(8, 20))) + f" note{i}" for i in range(n)
    ]


def _traced(build):
    """(what `build()` returned, bytes it still holds as tracemalloc sees them)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = build()
        gc.collect()
        return out, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _within(estimate: int, traced: int, tolerance: float = 0.3) -> None:
    assert traced > 0
    assert abs(estimate - traced) <= tolerance * traced, (estimate, traced, estimate / traced)


def test_gram_index_estimate_tracks_traced_memory():
    texts = _sentences(ROWS)
    GramIndex.build(enumerate(texts), floor=0.65)  # one-time allocations stay out of the count
    rows = ((1000 + i, t) for i, t in enumerate(texts))
    gi, traced = _traced(lambda: GramIndex.build(rows, floor=0.65))
    _within(gi.nbytes, traced)


def test_keyword_index_estimate_tracks_traced_memory():
    texts = _sentences(ROWS)
    ki, traced = _traced(
        lambda: KeywordIndex.build((1000 + i, t, ("tag",), 1.0) for i, t in enumerate(texts))
    )
    _within(ki.nbytes, traced)
    # queued writes count too, and leave the count once applied
    before = ki.nbytes
    for i, t in enumerate(texts[:100]):
        ki.put(50_000 + i, t, (), 2.0)
    assert ki.nbytes > before
    len(ki)  # applies the queue
    assert ki.backlog[0] == 0


def test_vector_estimate_tracks_traced_memory():
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((ROWS, 64)).astype(np.float32)

    def build() -> ScopeVectors:
        sv = ScopeVectors(dim=64)
        sv.grow(ROWS + ROWS // 4)
        for i in range(ROWS):
            sv.queue.append((1000 + i, vecs[i], 0.5, 1.0, 1.0))
        sv.flush()
        return sv

    sv, traced = _traced(build)
    _within(sv.nbytes, traced)


# --- the cap at open -------------------------------------------------------------------


def test_cap_bytes_bounds():
    assert cap_bytes(None) is None
    assert cap_bytes(0) == 0  # the bound: only the scope in use is kept
    assert cap_bytes(1) == MB
    assert cap_bytes(0.5) == MB // 2
    for bad in (-1e-9, -1, float("nan"), float("inf"), "1", True, [1]):
        with pytest.raises(ConfigError, match="index_cache_mb"):
            cap_bytes(bad)


def test_open_checks_the_cap(make_store):
    assert make_store(embedder=None, index_cache_mb=0).cache_stats()["cap_bytes"] == 0
    assert make_store(embedder=None, index_cache_mb=None).cache_stats()["cap_bytes"] is None
    with pytest.raises(ConfigError, match=r"index_cache_mb=-1"):
        make_store(embedder=None, index_cache_mb=-1)


# --- eviction, and answers identical to an uncapped store ---------------------------------


def _opened(make_store, url=None, **options):
    s = make_store(url, embedder="hashing-64", clock=lambda: 1_000_000.0, **options)
    ids = itertools.count()
    s.new_id = lambda: f"{next(ids):016x}"
    return s


def _round(store, texts: dict[str, list[str]], r: int) -> list:
    """One round over the scopes: write a batch and a single write (some fold), then
    ask every kind of question; returns every answer."""
    out: list = []
    for scope in SCOPES:
        batch = texts[scope][r * 20 : r * 20 + 20]
        out.append([x.folded for x in store.remember_many(scope, batch)])
        out.append(store.remember(scope, batch[0] + " again").folded)  # folds into batch[0]
        probe = texts[scope][r * 7]
        got = store.fold_target(scope, probe + " once more")
        out.append(None if got is None else got.id)
        for q in (probe, probe.split()[0]):
            out.append([(h.id, h.path, h.score) for h in store.recall(scope, q)])
        # a zero query vector clears no floor: the keyword path answers
        got = store.recall(scope, " ".join(probe.split()[:3]), query_embedding=np.zeros(64))
        out.append([(h.id, h.path, h.score) for h in got])
    return out


def _texts() -> dict[str, list[str]]:
    return {s: _sentences(100, seed=i) for i, s in enumerate(SCOPES)}


def test_capped_store_evicts_lru_and_answers_as_uncapped(make_store):
    texts = _texts()
    free = _opened(make_store, index_cache_mb=None)
    first = _round(free, texts, 0)
    sizes = free.cache_stats()["scopes"]
    assert list(sizes) == list(SCOPES)  # least recently used first
    assert free.cache_stats()["bytes"] == sum(sizes.values())
    # room for about two scopes: each operation on the third drops the least recent
    cap = (sizes["b"] + sizes["c"] + min(sizes.values()) // 2) / MB
    tight = _opened(make_store, index_cache_mb=cap)
    assert _round(tight, texts, 0) == first
    stats = tight.cache_stats()
    assert list(stats["scopes"]) == ["b", "c"]
    assert stats["evicted"] >= 1
    assert stats["bytes"] <= stats["cap_bytes"]
    for r in range(1, 4):
        assert _round(tight, texts, r) == _round(free, texts, r)
        held = tight.cache_stats()
        # the scopes grow each round: at last the one in use alone outgrows the cap
        assert list(held["scopes"]) in (["b", "c"], ["c"])
        assert held["bytes"] <= held["cap_bytes"] or list(held["scopes"]) == ["c"]
    assert tight.cache_stats()["evicted"] > stats["evicted"]  # every round reloads
    assert free.cache_stats()["evicted"] == 0


def test_cap_at_the_bound_and_one_byte_past(make_store):
    texts = _texts()
    free = _opened(make_store, index_cache_mb=None)
    _needs_fold_index(free, 30)
    for scope in SCOPES:
        free.remember_many(scope, texts[scope][:30])
    total = free.cache_stats()["bytes"]
    at = _opened(make_store, index_cache_mb=total / MB)
    past = _opened(make_store, index_cache_mb=(total - 1) / MB)
    for s in (at, past):
        for scope in SCOPES:
            s.remember_many(scope, texts[scope][:30])
    assert at.cache_stats()["cap_bytes"] == total
    assert at.cache_stats()["bytes"] == total
    assert at.cache_stats()["evicted"] == 0
    assert list(past.cache_stats()["scopes"]) == ["b", "c"]
    assert past.cache_stats()["evicted"] == 1


def test_zero_cap_keeps_only_the_scope_in_use(make_store):
    texts = _texts()
    s = _opened(make_store, index_cache_mb=0)
    _needs_fold_index(s, 30)
    for scope in SCOPES:
        s.remember_many(scope, texts[scope][:30])
        assert list(s.cache_stats()["scopes"]) == [scope]  # bigger than the cap, in use
    # the scope in use stays even beyond the cap; it is the first dropped after
    s.fold_target("a", texts["a"][0])
    assert list(s.cache_stats()["scopes"]) == ["a"]
    assert s.cache_stats()["evicted"] == 3


def reader_holds_nothing(store, rows: int) -> bool:
    """A Postgres store in `fold_search="server"` mode whose client loads no index for
    a scope of `rows` rows: its writer's cap `fold_local_rows` is below them (0 in
    `make test-fold-server`, MEMKIT_TEST_FOLD_LOCAL_ROWS in a run that names one)."""
    return getattr(store, "fold_search", "client") == "server" and store.fold_local_rows < rows


def _needs_fold_index(store, rows: int) -> None:
    if reader_holds_nothing(store, rows):
        pytest.skip(
            f"fold_search='server', cap {store.fold_local_rows} < {rows} rows: a writer holds"
            " no index to bound (test_fold_server, test_fold_local)"
        )


def _other_process_writes(url: str, out) -> None:
    """Another process: a row in the evicted scope a, one in the loaded scope c, and
    a's first row retracted; sends their ids."""
    with open_store(url, embedder="hashing-64", clock=lambda: 1_000_000.0) as s:
        new_a = s.remember("a", "zebra crossing under the aqueduct").id
        new_c = s.remember("c", "quartz clock above the fireplace").id
        gone = s.live("a")[-1].id
        s.retract("a", gone)
    out.put((new_a, new_c, gone))


def test_evicted_scope_sees_another_processes_writes(make_store, store_url):
    texts = _texts()
    reader = _opened(make_store, store_url, index_cache_mb=0)
    writer = _opened(make_store, store_url, index_cache_mb=None)
    for scope in SCOPES:
        writer.remember_many(scope, texts[scope][:20])
    for scope in SCOPES:  # the reader loads each in turn, dropping the one before
        reader.recall(scope, texts[scope][0])
        reader.fold_target(scope, texts[scope][0])  # Postgres's recall loads no index
    held = [s for s, n in reader.cache_stats()["scopes"].items() if n]
    assert held == ([] if reader_holds_nothing(reader, 20) else ["c"])
    # another process changes an evicted scope (a) and the loaded one (c)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_other_process_writes, args=(store_url, out))
    p.start()
    new_a, new_c, gone = out.get(timeout=120)
    p.join(120)
    assert p.exitcode == 0
    assert reader.fold_target("c", "quartz clock above the fireplace!").id == new_c  # in place
    assert reader.fold_target("a", "zebra crossing under the aqueduct!").id == new_a  # reloaded
    assert gone not in {h.id for h in reader.recall("a", texts["a"][0], limit=100)}
    for scope in SCOPES:
        for q in (texts[scope][1], texts[scope][2].split()[1], "zebra clock"):
            mine = [(h.id, h.score) for h in reader.recall(scope, q)]
            assert mine == [(h.id, h.score) for h in writer.recall(scope, q)]
        probe = texts[scope][3] + " more"
        assert reader.fold_target(scope, probe) == writer.fold_target(scope, probe)
