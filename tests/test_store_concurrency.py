"""SPEC §3.7: fold detection and insert are one transaction across processes,
on both backends (conformance: `store_url`)."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import random
from collections import Counter

from memkit.store import open_store

FACT = "The staging database is reachable at db.staging.internal:5432"
N = 500
FACTS = [f"record {hashlib.sha256(str(i).encode()).hexdigest()[:40]}" for i in range(100)]
"""Distinct facts (trigram similarity far below the fold threshold between any two)."""
PROCS, WRITES = 4, 1_000


def _writer(url: str, start) -> None:
    store = open_store(url, embedder=None)
    start.wait()
    for _ in range(N):
        store.remember("scope", FACT)
    store.close()


def _run(url: str, target, args_of, n: int) -> None:
    open_store(url, embedder=None).close()  # create and migrate once
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(url, start, *args_of(i))) for i in range(n)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def test_two_processes_remembering_one_fact_leave_one_row(store_url):
    _run(store_url, _writer, lambda i: (), 2)
    with open_store(store_url, embedder=None) as store:
        live = store.live("scope")
        assert len(live) == 1
        assert live[0].seen_count == 2 * N
        assert store.stats("scope")["rows"] == 1


def _overlapping_writer(url: str, start, seed: int) -> None:
    writes = FACTS * (WRITES // len(FACTS))
    random.Random(seed).shuffle(writes)
    store = open_store(url, embedder=None)
    start.wait()
    for text in writes:
        store.remember("scope", text)
    store.close()


def test_four_processes_overlapping_writes_no_duplicate_no_lost_write(store_url):
    """4 x 1,000 remembers of 100 facts in shuffled orders: one live row per fact,
    and every write counted in exactly one row's seen_count."""
    _run(store_url, _overlapping_writer, lambda i: (i,), PROCS)
    with open_store(store_url, embedder=None) as store:
        live = store.live("scope")
        by_fact = Counter(m.content for m in live)
        assert sorted(by_fact) == sorted(FACTS)
        assert max(by_fact.values()) == 1  # 0 duplicate live rows for one fact
        assert sum(m.seen_count for m in live) == PROCS * WRITES  # 0 lost writes
        assert {m.seen_count for m in live} == {PROCS * WRITES // len(FACTS)}
        assert store.stats("scope")["rows"] == len(FACTS)
