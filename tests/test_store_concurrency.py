"""SPEC §3.7: fold detection and insert are one transaction across processes."""

from __future__ import annotations

import multiprocessing as mp

from memkit.store import SQLiteStore

FACT = "The staging database is reachable at db.staging.internal:5432"
N = 500


def _writer(path: str, start) -> None:
    store = SQLiteStore.open(path, embedder=None)
    start.wait()
    for _ in range(N):
        store.remember("scope", FACT)
    store.close()


def test_two_processes_remembering_one_fact_leave_one_row(tmp_path):
    path = str(tmp_path / "shared.db")
    SQLiteStore.open(path, embedder=None).close()  # create and migrate once
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(path, start)) for _ in range(2)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with SQLiteStore.open(path, embedder=None) as store:
        live = store.live("scope")
        assert len(live) == 1
        assert live[0].seen_count == 2 * N
        assert store.stats("scope")["rows"] == 1
