"""`memkit bench store --backend postgres`: the two backends side by side, one run.

For each size (live rows in one scope, 256-d random unit vectors, synthetic
texts as in `evals.bench_store`) and each backend (SQLite file, Postgres):
* recall p50/p95 (ms) with a precomputed query embedding, exact (SQLite: the
  in-process matrix; Postgres: searched in the database), and on Postgres
  with the HNSW index (`ann="hnsw"`, ef_search 100) with HNSW's recall@8
  against the exact top 8 and how often it fell back to exact; the index
  build time (under `memkit.store.pg_search.BUILD_SETTINGS`) and its size;
* the peak RSS of a freshly spawned client answering 20 recalls (SQLite holds
  the scope's matrix; a Postgres client holds no vectors);
* remembers/s with fold-in (half restatements of stored rows, half new;
  vectors precomputed, so the store's own cost is measured) from 1 process
  and from 4 processes writing at once into the same scope (all their
  writes over the wall time from a common start, after each process has
  loaded its fold-in index); then one process's batch in one
  `remember_many`, and on Postgres one process with `synchronous_commit`
  off (restatements of rows already written: all fold).
Queries are noisy copies of stored vectors. Postgres runs on a private
`pgserver` in a temporary directory (stopped at the end) unless `--pg-dsn`
names one; its commits are durable (`synchronous_commit` on) while SQLite
runs WAL with `synchronous = NORMAL` (no fsync per commit), which is most of
the gap in write rates. Absolute numbers move with the machine's load.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench_data import DIM, LIMIT, percentiles, synthetic_texts, unit_vectors

SCOPE = "bench"


class _Table:
    """The bench embedder: answers from vectors computed before timing starts."""

    name, dim = f"bench-{DIM}", DIM

    def __init__(self, texts: list[str], vecs: np.ndarray):
        self._t = dict(zip(texts, vecs, strict=True))

    def embed(self, texts):
        return np.stack([self._t[t] for t in texts])


@contextmanager
def local_postgres(dsn: str | None) -> Iterator[str]:
    """`dsn`, or a private pgserver in a temporary directory, stopped afterwards."""
    if dsn:
        yield dsn
        return
    import pgserver
    import psycopg

    server = pgserver.get_server(tempfile.mkdtemp(prefix="memkit-pg-"), cleanup_mode="delete")
    try:
        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield uri
    finally:
        server.cleanup()


def _fresh_pg(base: str) -> str:
    from urllib.parse import quote

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={schema},public')}"


def _writer(url, emb, batch, ready, go, out, options, many) -> None:
    from memkit.store import open_store

    store = open_store(url, embedder=emb, **options)
    store.remember(SCOPE, batch[0])  # loads the fold-in index before the clock starts
    ready.release()
    go.wait()
    t = time.perf_counter()
    if many:
        store.remember_many(SCOPE, batch[1:])
    else:
        for text in batch[1:]:
            store.remember(SCOPE, text)
    out.put(time.perf_counter() - t)
    store.close()


def _write_rate(
    url: str, emb: _Table, batches: list[list[str]], options: dict | None = None, many=False
) -> float:
    """Remembers per second of len(batches) processes writing at once (`many`:
    each process's batch in one `remember_many`)."""
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    args = (ready, go, out, options or {}, many)
    procs = [ctx.Process(target=_writer, args=(url, emb, b, *args)) for b in batches]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    t = time.perf_counter()
    go.set()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"bench writer exited {p.exitcode}")
    wall = time.perf_counter() - t
    return sum(len(b) - 1 for b in batches) / wall


def _recall_client(url: str, qs: np.ndarray, out) -> None:
    """A fresh process's recalls (no embedder: query vectors given): its p50 and
    its peak RSS, which on SQLite includes the scope's matrix."""
    from memkit.store import open_store

    store = open_store(url, embedder=None, read_only=True)
    times = []
    for q in qs:
        t = time.perf_counter()
        store.recall(SCOPE, "q", LIMIT, query_embedding=q)
        times.append(time.perf_counter() - t)
    store.close()
    status = Path("/proc/self/status").read_text()
    peak_kb = int(next(x for x in status.splitlines() if x.startswith("VmHWM:")).split()[1])
    out.put((percentiles(times)[0], peak_kb / 1024))


def _client_rss(url: str, qs: np.ndarray) -> float:
    """Peak RSS (MB) of a freshly spawned client answering `qs` (nothing inherited)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_recall_client, args=(url, qs, out))
    p.start()
    got = out.get()
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"bench recall client exited {p.exitcode}")
    return got[1]


def bench_backend(backend: str, url: str, n: int, queries: int, writes: int, log) -> dict:
    from memkit.store import open_store

    rng, nrng = random.Random(n), np.random.default_rng(n)
    texts, vecs = synthetic_texts(rng, n), unit_vectors(nrng, n)
    new = synthetic_texts(random.Random(-n), 5 * writes)
    pick = rng.sample(range(n), 5 * writes)
    batch_texts = [f"{texts[i]} again" if k % 2 else new[k] for k, i in enumerate(pick)]
    emb = _Table(texts + batch_texts, np.vstack([vecs, unit_vectors(nrng, len(batch_texts))]))
    row: dict = {"backend": backend, "rows": n}
    store = open_store(url, embedder=emb)
    t = time.perf_counter()
    store.bulk_load(SCOPE, texts, vecs)
    row["load_s"] = time.perf_counter() - t
    qs = vecs[nrng.integers(0, n, queries)] + 0.05 * unit_vectors(nrng, queries)
    t = time.perf_counter()
    store.recall(SCOPE, "q", LIMIT, query_embedding=qs[0])  # loads the matrix
    row["index_load_s"] = time.perf_counter() - t
    exact, times = [], []
    for q in qs:
        t = time.perf_counter()
        exact.append([h.id for h in store.recall(SCOPE, "q", LIMIT, query_embedding=q)])
        times.append(time.perf_counter() - t)
    row["exact_p50"], row["exact_p95"] = percentiles(times)
    log(f"  {backend} {n:,}: exact recall p50 {row['exact_p50']:.2f} ms")
    store.close()
    row["client_rss_mb"] = _client_rss(url, qs[:20])
    log(f"  client peak RSS {row['client_rss_mb']:.0f} MB")
    if backend == "postgres":
        ann: Any = open_store(url, embedder=emb, ann="hnsw")  # a PostgresStore
        row["hnsw_build_s"] = ann.hnsw_build["seconds"]
        row["hnsw_index_mb"] = ann.hnsw_build["index_bytes"] / 2**20
        log(f"  hnsw build {row['hnsw_build_s']:.1f} s under {ann.hnsw_build['settings']}")
        times, hit = [], []
        for q, want in zip(qs, exact, strict=True):
            t = time.perf_counter()
            got = [h.id for h in ann.recall(SCOPE, "q", LIMIT, query_embedding=q)]
            times.append(time.perf_counter() - t)
            hit.append(len(set(got) & set(want)) / max(len(want), 1))
        row["hnsw_p50"], row["hnsw_p95"] = percentiles(times)
        row["hnsw_recall8"] = float(np.mean(hit))
        row["hnsw_fallbacks"] = ann.ann_counts["exact_fallback"]
        ann.close()
        log(f"  hnsw p50 {row['hnsw_p50']:.2f} ms, recall@8 {row['hnsw_recall8']:.3f}")
    row["rem_1"] = _write_rate(url, emb, [batch_texts[:writes]])
    log(f"  remembers/s, 1 process: {row['rem_1']:.0f}")
    row["rem_4"] = _write_rate(
        url, emb, [batch_texts[writes * (k + 1) : writes * (k + 2)] for k in range(4)]
    )
    log(f"  remembers/s, 4 processes: {row['rem_4']:.0f}")
    off = batch_texts[writes : 2 * writes]  # 4 processes wrote these: all fold now
    row["many_1"] = _write_rate(url, emb, [batch_texts[: writes // 2]], many=True)
    log(f"  remembers/s, remember_many: {row['many_1']:.0f}")
    if backend == "postgres":
        row["rem_1_async"] = _write_rate(url, emb, [off], {"synchronous_commit": False})
        log(f"  remembers/s, 1 process, synchronous_commit off: {row['rem_1_async']:.0f}")
    return row


def render(rows: list[dict]) -> str:
    def f(r, k, fmt):
        return format(r[k], fmt) if k in r else "–"

    lines = [
        "| backend | live rows | exact recall p50 / p95 ms | HNSW p50 / p95 ms | HNSW recall@8 "
        "| HNSW build s / index MB | client peak RSS MB | remembers/s, 1 process "
        "| 4 processes | remember_many | 1 process, sync commit off |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        hnsw = f"{f(r, 'hnsw_p50', '.2f')} / {f(r, 'hnsw_p95', '.2f')}" if "hnsw_p50" in r else "–"
        build = (
            f"{f(r, 'hnsw_build_s', '.1f')} / {f(r, 'hnsw_index_mb', '.0f')}"
            if "hnsw_build_s" in r
            else "–"
        )
        lines.append(
            f"| {r['backend']} | {r['rows']:,} | {r['exact_p50']:.2f} / {r['exact_p95']:.2f} "
            f"| {hnsw} | {f(r, 'hnsw_recall8', '.3f')} | {build} | {f(r, 'client_rss_mb', '.0f')} "
            f"| {r['rem_1']:.0f} | {r['rem_4']:.0f} | {f(r, 'many_1', '.0f')} "
            f"| {f(r, 'rem_1_async', '.0f')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="memkit bench store --backend postgres",
        description="SQLite and Postgres side by side: recall (exact, HNSW) and remembers/s",
    )
    ap.add_argument("--backend", choices=("postgres",), default="postgres")
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated row counts")
    ap.add_argument("--queries", type=int, default=200, help="recalls per size (1M: a quarter)")
    ap.add_argument("--writes", type=int, default=500, help="remembers per process")
    ap.add_argument("--pg-dsn", default=None, help="a Postgres server (default: a private one)")
    ap.add_argument("--quiet", action="store_true", help="only print the table")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="memkit-bench-") as tmp,
        local_postgres(args.pg_dsn) as base,
    ):
        for n in [int(x) for x in args.sizes.split(",") if x.strip()]:
            q = args.queries if n < 1_000_000 else max(args.queries // 4, 10)
            rows.append(bench_backend("sqlite", f"{tmp}/s{n}.db", n, q, args.writes, log))
            rows.append(bench_backend("postgres", _fresh_pg(base), n, q, args.writes, log))
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
