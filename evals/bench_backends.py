"""`memkit bench store --backend postgres`: the two backends side by side, one run.

For each size (live rows in one scope, synthetic texts as in
`evals.bench_store`, 256-d vectors from `--vectors`: random unit vectors, or
the texts embedded with WordLlama, `evals.bench_data.VECTOR_SOURCES`) and
each backend (SQLite file, Postgres).
Setup, not measured: the rows are bulk-loaded (`bulk_load`, one COPY on
Postgres), plus a second scope of 1 % as many rows in the same table (from
10,000 rows up), so a small scope inside a big table is measured too.
Measured:
* recall p50/p95 (ms) with a precomputed query embedding, exact (SQLite: the
  in-process matrix; Postgres: searched in the database), on the big scope
  and on the 1 % scope (after the big scope's, on the same connection, so a
  plan the server kept from them would show: docs/postgres-scale.md); on
  Postgres also through the HNSW indexes (`ann="hnsw"`: one per scope with
  `hnsw_min_rows` rows, `memkit.store.pg_ann`), each scope's
  recall@8 against the exact top 8 (a hit tied with the exact 8th score
  counts: `recall_with_ties`) at each `--ef-search` on the same indexes, over
  the timed queries and `--recall-queries` held-out ones (their exact answers
  from the bench's own vectors, `bench_ann.Oracle`, checked against the store's
  on every timed query) with its 95 % interval over the queries, and
  how many recalls were answered exactly instead (no index for the scope, or
  a possibly short answer); the build time (`--hnsw-build`: concurrent or
  plain) under `memkit.store.pg_search.BUILD_SETTINGS`, the graph built
  (`--hnsw-graph` m,ef_construction) and the indexes' size; with `--warm N`
  the sweep again after N other recalls, each pass with the blocks it read
  from outside shared_buffers; with `--hnsw-ops` pgvector's operator classes
  side by side on the big scope (`evals.bench_ops`);
* a freshly spawned client answering 20 recalls: the seconds from opening the
  store to its first answer (a cold open: SQLite maps the vector sidecar the
  setup's first recall left beside the file, `memkit.store.sidecar`, for a
  scope of 50,000+ rows, and loads smaller ones) and its peak RSS (SQLite
  holds the matrix or its mapped pages, beside the file's size; a Postgres
  client holds no vectors); and a freshly spawned writer's first `remember`
  (a new row, after the HNSW part): the seconds from opening the store to its
  return and its peak RSS, which hold the scope's fold-in trigram index (built
  from every live row's text on a writer's first write, on both backends);
* remembers/s with fold-in (half restatements of stored rows, half new;
  vectors precomputed, so the store's own cost is measured) from 1 process
  and from 4 processes writing at once into the same scope (all their
  writes over the wall time from a common start, after each process has
  loaded its fold-in index; on Postgres after the HNSW indexes are dropped,
  so an insert does not also insert into a graph), and from 4 processes each
  writing its own scope (as an agent's tools pin it; each scope a copy of the
  big one's rows, loaded as setup: no writer waits on another's lock or
  follows another's rows); then one process's batch in one
  `remember_many`, and on Postgres 1 and 4 processes with `synchronous_commit`
  off (restatements of rows already written: all fold);
* on Postgres, the bare-INSERT ceiling in the same run: one INSERT + COMMIT per
  row of the same text and vector into a plain table, durable, from 1 and 4
  processes, and from 4 processes that each first lock one shared row (what a
  scope's writers must do: fold-in decides and writes under the scope's lock,
  so their commits, each waiting for its WAL flush, cannot share a flush);
  and the *lock shape* from 4 processes: the shape of a `remember`, two round
  trips under the shared row's lock (the first locks it and returns the row,
  the second inserts and commits), no client work between, beside it the
  4-process remember rate as a share of it (`rem_4_of_shape`);
* for each of those write races (`evals.bench_writes`), the CPU a write took: the writer processes'
  own CPU (`time.process_time`, summed) and the whole machine's busy CPU over
  the race (`/proc/stat`: the writers, the server and anything else that
  ran), each per write, and the cores busy (machine CPU over wall time). When
  the cores are all busy, the machine's CPU, not a lock, bounds the rate
  (`--only postgres` on a machine whose cores the clients share with the server).
Every row carries the load average when it finished. Queries are noisy
copies of stored vectors (`random`) or embeddings of stored texts reworded by
one word (`wordllama`). Postgres runs on a private `pgserver` in a
temporary directory (`evals.pg_local`: stopped at the end, on an error or a
signal; `shared_buffers` raised to `--pg-shared-buffers`, as a server
holding these indexes would be configured) unless `--pg-dsn` names one; its commits are durable
(`synchronous_commit` on) while SQLite runs WAL with `synchronous = NORMAL`
(no fsync per commit), which is most of the gap in write rates. Absolute
numbers move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals import bench_ann, bench_clients, bench_ops, bench_writes
from evals.bench_data import (
    LIMIT,
    VECTOR_SOURCES,
    Table,
    corpus_stats,
    embedded,
    file_sentences,
    longmemeval_sentences,
    percentiles,
    pool_split,
    synthetic_texts,
    unit_vectors,
)
from evals.bench_writes import SCOPE
from evals.pg_local import fresh_schema, local_postgres
from memkit.embed import default_floor_of
from memkit.errors import ConfigError
from memkit.params import DAY
from memkit.store import PostgresStore

SMALL = "bench-1pct"
SMALL_FROM = 10_000
"""Sizes from which the table also holds a 1 % scope."""


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _corpus(vectors: str, n: int, writes: int, row: dict, log, pool: list[str] | None = None):
    """The bench's texts and vectors (setup, not measured): the big scope's, the 1 %
    scope's, the write batches', and the embedder answering from them. `pool`:
    real texts to take them from (`--texts longmemeval:`) instead of synthetic ones."""
    rng, nrng = random.Random(n), np.random.default_rng(n)
    m = n // 100 if n >= SMALL_FROM else 0
    if pool is None:
        texts, small_texts = synthetic_texts(rng, n), synthetic_texts(random.Random(-7 - n), m)
        new = synthetic_texts(random.Random(-n), 5 * writes)
    else:
        texts, small_texts, new = pool_split(pool, n, m, 5 * writes)
    pick = rng.sample(range(n), 5 * writes)
    batch_texts = [f"{texts[i]} again" if k % 2 else new[k] for k, i in enumerate(pick)]
    t = time.perf_counter()
    if vectors == "wordllama":
        vecs, small_vecs, batch_vecs = embedded(texts), embedded(small_texts), embedded(batch_texts)
        floor: float | None = _wordllama_floor()
    else:
        vecs, small_vecs = unit_vectors(nrng, n), unit_vectors(nrng, m)
        batch_vecs, floor = unit_vectors(nrng, len(batch_texts)), None
    row["setup_vectors_s"] = time.perf_counter() - t
    row |= corpus_stats(texts, vecs)
    log(
        f"  {vectors} vectors for {n:,} rows: {row['setup_vectors_s']:.1f} s (setup), "
        f"{row['distinct_texts']:,} distinct texts, {row['distinct_vectors']:,} distinct vectors"
    )
    emb = Table(texts + small_texts + batch_texts, np.vstack([vecs, small_vecs, batch_vecs]), floor)
    return texts, vecs, small_texts, small_vecs, batch_texts, emb, rng, nrng


def _wordllama_floor() -> float:
    from memkit.embed import WORDLLAMA_FLOOR

    return WORDLLAMA_FLOOR


def bench_backend(
    backend: str,
    url: str,
    n: int,
    queries: int,
    writes: int,
    log,
    ef_search: int | list[int] | None = None,
    build_settings: dict[str, str] | None = None,
    vectors: str = "random",
    hnsw_build: str = "concurrent",
    recall: bool = True,
    pool: tuple[str, list[str]] | None = None,
    hnsw_graph: tuple[int, int] | None = None,
    rows_per_day: float | None = None,
    warm: int = 0,
    hnsw_ops: list[str] | None = None,
    fold_search: str = "client",
    held: int = 0,
) -> dict:
    """One backend at one size (see the module docstring); `recall=False` measures
    the writes only (`--skip-recall`: no recall, fresh recall client or HNSW build);
    `pool`: (its name, real texts) to store instead of synthetic ones;
    `hnsw_graph`: the indexes' (m, ef_construction), None for the store's default;
    `rows_per_day`: the big scope's rows stamped as written that many a day, the
    last now (None: all now), so a writer's fold-in index holds only its window's;
    `warm`: after the sweep, that many untimed recalls of other queries on each
    scope, then the sweep again (`ef_sweep_warm`), each pass with the blocks it
    read (`bench_ann.Pages`); `hnsw_ops`: pgvector operator classes measured
    side by side on the big scope after the store's indexes (`evals.bench_ops`);
    `fold_search`: the Postgres database's fold-in mode, every client following it
    ("server:local=N": and opening with `fold_local_rows` N, `bench_writes.fold_options`);
    with `--skip-recall` also the probe's time (`bench_writes.fold_probe_times`);
    `held`: held-out queries a scope's HNSW recall@8 is also measured on."""
    from memkit.store import open_store

    texts_name, pool_texts = pool if pool is not None else ("synthetic", None)
    row: dict = {"backend": backend, "rows": n, "vectors": vectors, "texts": texts_name}
    mode, opts = bench_writes.fold_options(backend, fold_search, row)
    texts, vecs, small_texts, small_vecs, batch_texts, emb, rng, nrng = _corpus(
        vectors, n, writes, row, log, pool_texts
    )
    m = row["small_rows"] = len(small_texts)
    store = open_store(url, embedder=emb, **opts)
    if mode == "server":
        row["fold_local_rows"] = bench_writes.local_rows(store)
    stamps = None
    if rows_per_day is not None:
        row["rows_per_day"] = rows_per_day
        now = time.time()
        stamps = [now - (n - 1 - i) * DAY / rows_per_day for i in range(n)]
        log(
            f"  rows stamped {rows_per_day:,.0f} a day: "
            f"the first {(n - 1) / rows_per_day:,.0f} days ago"
        )
    t = time.perf_counter()
    store.bulk_load(SCOPE, texts, vecs, timestamps=stamps)
    if m:
        store.bulk_load(SMALL, small_texts, small_vecs)
    row["setup_load_s"] = time.perf_counter() - t
    log(f"  {backend} {n:,}: setup (not measured): bulk load {row['setup_load_s']:.1f} s")
    if not recall:
        bench_writes.fold_probe_times(store, texts, row, log)
        store.close()
        _fresh_writer(url, n, row, log, opts)
        if writes > 0:  # (--skip-recall --writes 0: the fresh writer alone, e.g. at 1M rows)
            bench_writes.load_own_scopes(url, emb, texts, vecs, row, log)
            bench_writes.measure(backend, url, emb, batch_texts, writes, vecs[0], row, log, opts)
        row["load"] = _load()
        return row
    oracles = {}  # each scope's exact answers from the bench's vectors (bench_ann.Oracle)
    if held and backend == "postgres":
        fl, c = default_floor_of(emb), bench_ann.LOADED_CONFIDENCE
        oracles[SCOPE] = bench_ann.Oracle(texts, vecs, fl, stamps, c)
        if m:
            oracles[SMALL] = bench_ann.Oracle(small_texts, small_vecs, fl, None, c)
    qs = bench_ann.queries(vectors, texts, vecs, queries, rng, nrng)
    sq = bench_ann.queries(vectors, small_texts, small_vecs, queries, rng, nrng) if m else qs
    t = time.perf_counter()
    store.recall(SCOPE, "q", LIMIT, query_embedding=qs[0])  # loads the matrix
    row["index_load_s"] = time.perf_counter() - t
    exact, times = bench_ann.recalls(store, SCOPE, qs, _key(oracles, SCOPE))
    row["exact_p50"], row["exact_p95"] = percentiles(times)
    log(f"  {backend} {n:,}: exact recall p50 {row['exact_p50']:.2f} ms")
    small_exact: list[list[tuple[str, float]]] = []
    if m:  # after the big scope's, same connection: a plan kept from those would show
        small_exact, times = bench_ann.recalls(store, SMALL, sq, _key(oracles, SMALL))
        row["small_exact_p50"], row["small_exact_p95"] = percentiles(times)
        log(f"  1 % scope ({m:,} rows): exact recall p50 {row['small_exact_p50']:.2f} ms")
    store.close()
    row["cold_first_s"], row["client_rss_mb"] = bench_clients.fresh_recall(url, qs[:20], SCOPE)
    if backend == "sqlite":
        row["file_mb"] = Path(url).stat().st_size / 2**20
    log(
        f"  fresh client: first recall {row['cold_first_s']:.2f} s after open, "
        f"peak RSS {bench_clients.rss_cell(row['client_rss_mb'])}"
    )
    if backend == "postgres":
        efs = [ef_search] if isinstance(ef_search, int) else list(ef_search or [])
        ann: Any = open_store(  # a PostgresStore (None: the store's default ef_search)
            url,
            embedder=emb,
            ann="hnsw",
            **({"ef_search": efs[0]} if efs else {}),
            build_settings=build_settings,
            build_concurrently=hnsw_build == "concurrent",
            **(
                {}
                if hnsw_graph is None
                else {"hnsw_m": hnsw_graph[0], "hnsw_ef_construction": hnsw_graph[1]}
            ),
        )
        b = ann.hnsw_build
        row["hnsw_build_s"] = b["seconds"]
        row["hnsw_index_mb"] = b["index_bytes"] / 2**20
        row["hnsw_build_mode"] = hnsw_build
        if SCOPE in b["scopes"]:  # as built: (m, ef_construction); none under hnsw_min_rows
            row["hnsw_graph"] = list(b["scopes"][SCOPE]["graph"])
        log(
            f"  hnsw build ({hnsw_build}, m / ef_construction {row.get('hnsw_graph', '–')}) "
            f"{b['seconds']:.1f} s under {b['settings']}, {len(b['scopes'])} scope(s)"
        )
        scopes = [("hnsw", SCOPE, qs, exact)] + (
            [("small_hnsw", SMALL, sq, small_exact)] if m else []
        )
        if oracles:  # recall@8 over held-out queries too
            scopes = bench_ann.with_held_out(scopes, oracles, held, vectors, log)
        pages = bench_ann.Pages(url) if warm else None
        row["ef_sweep"], default_ef = [], ann.ef_search
        for ef in efs or [ann.ef_search]:
            ann.ef_search = ef
            row["ef_sweep"].append(bench_ann.ann_recalls(ann, scopes, ef, log, pages))
        row |= row["ef_sweep"][0]  # the first ef_search is the main table's
        if pages is not None:  # other queries (drawn last: no other draw moves)
            row["warm"], ann.ef_search = warm, max(efs or [ann.ef_search])
            wq = {SCOPE: bench_ann.queries(vectors, texts, vecs, warm, rng, nrng)}
            if m:
                wq[SMALL] = bench_ann.queries(vectors, small_texts, small_vecs, warm, rng, nrng)
            bench_ann.warm_up(ann, scopes, wq, log)
            pages.delta(1)  # the warm-up's reads are not a pass's
            row["ef_sweep_warm"] = []
            for ef in efs or [ann.ef_search]:
                ann.ef_search = ef
                row["ef_sweep_warm"].append(bench_ann.ann_recalls(ann, scopes, ef, log, pages))
            pages.close()
        ann.drop_hnsw()  # writes are measured as on a store without ANN (docstring)
        ann.close()
        if hnsw_ops:  # after the store's indexes are gone: no plan picks theirs
            # the store's graph as built; under hnsw_min_rows none: the store's default
            row["ops_graph"] = row.get("hnsw_graph") or list(hnsw_graph or ann.hnsw_graph)
            row["ops_sweep"] = bench_ops.ops_sweep(
                url, SCOPE, qs, efs or [default_ef], hnsw_ops, tuple(row["ops_graph"]),
                dict(b["settings"]), log,
            )  # fmt: skip
    _fresh_writer(url, n, row, log, opts)  # after the HNSW part: in no exact answer
    if writes > 0:  # (--writes 0: recall only, e.g. a 1M-row part)
        bench_writes.load_own_scopes(url, emb, texts, vecs, row, log)
        bench_writes.measure(backend, url, emb, batch_texts, writes, vecs[0], row, log, opts)
    row["load"] = _load()
    return row


def _key(oracles: dict, scope: str):
    """How the scope's hits are keyed: by the oracle's row index where it has one."""
    return oracles[scope].key if scope in oracles else None


def _fresh_writer(url: str, n: int, row: dict, log, opts: dict | None = None) -> None:
    """A freshly spawned writer's first remember (a new row): seconds from open,
    peak RSS MB. Its embedder knows only that text, so the RSS is the store's."""
    vec = unit_vectors(np.random.default_rng([n, 1]), 1)[0]  # its own draws: none shift
    emb = Table([bench_clients.WRITER_TEXT], vec[None, :])
    row["writer_first_s"], row["writer_rss_mb"] = bench_clients.fresh_writer(url, emb, SCOPE, opts)
    log(
        f"  fresh writer: first remember {row['writer_first_s']:.2f} s after open, "
        f"peak RSS {bench_clients.rss_cell(row['writer_rss_mb'])}"
    )


_pair, _one, _backend = bench_ann.pair, bench_ann.cell, bench_writes.backend_cell


def _share(r: dict, key: str) -> str:
    """A ratio cell: – when the row has none, "undefined" when it is None."""
    if key not in r:
        return "–"
    return "undefined" if r[key] is None else f"{r[key]:.2f}"


def _rows_cell(r: dict) -> str:
    """The live rows, and how fast they were stamped as written when not all now."""
    per_day = r.get("rows_per_day")
    return f"{r['rows']:,}" + ("" if per_day is None else f" ({per_day:,.0f} a day)")


def render(rows: list[dict]) -> str:
    """Two tables: recall (the big scope, then the 1 % scope) and writes."""
    lines = [
        "| backend | live rows | exact p50 / p95 ms | HNSW p50 / p95 ms | HNSW recall@8 "
        "| exact instead | 1 % scope rows | 1 % exact p50 / p95 ms | 1 % HNSW p50 / p95 ms "
        "| 1 % HNSW recall@8 | 1 % exact instead | HNSW build s / index MB "
        "| fresh client: first recall s / peak RSS MB "
        "| fresh writer: first remember s / peak RSS MB | SQLite file MB | load 1/5/15 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        build = (
            f"{r['hnsw_build_s']:.1f} / {r['hnsw_index_mb']:.0f}" if "hnsw_build_s" in r else "–"
        )
        lines.append(
            f"| {_backend(r)} | {_rows_cell(r)} | {_pair(r, 'exact')} | {_pair(r, 'hnsw')} "
            f"| {bench_ann.recall_cell(r, 'hnsw')} | {_one(r, 'hnsw_fallbacks', 'd')} "
            f"| {r.get('small_rows', 0):,} | {_pair(r, 'small_exact')} | {_pair(r, 'small_hnsw')} "
            f"| {bench_ann.recall_cell(r, 'small_hnsw')} | {_one(r, 'small_hnsw_fallbacks', 'd')} "
            f"| {build} | {_one(r, 'cold_first_s', '.2f')} / {_one(r, 'client_rss_mb', '.0f')} "
            f"| {_one(r, 'writer_first_s', '.2f')} / {_one(r, 'writer_rss_mb', '.0f')} "
            f"| {_one(r, 'file_mb', ',.0f')} | {r.get('load', '–')} |"
        )
    lines += [
        "",
        "| backend | live rows | remembers/s, 1 process | 4 processes | 4 processes, own scopes "
        "| remember_many "
        "| sync commit off, 1 process | 4 processes | bare INSERT/s, 1 process | 4 processes "
        "| 4 processes, one locked row | lock shape, 4 processes | 4 processes / lock shape "
        "| load 1/5/15 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {_backend(r)} | {_rows_cell(r)} | {_one(r, 'rem_1', ',.0f')} "
            f"| {_one(r, 'rem_4', ',.0f')} | {_one(r, 'rem_4_own', ',.0f')} "
            f"| {_one(r, 'many_1', ',.0f')} | {_one(r, 'rem_1_async', ',.0f')} "
            f"| {_one(r, 'rem_4_async', ',.0f')} | {_one(r, 'bare_1', ',.0f')} "
            f"| {_one(r, 'bare_4', ',.0f')} | {_one(r, 'bare_4_locked', ',.0f')} "
            f"| {_one(r, 'shape_4', ',.0f')} | {_share(r, 'rem_4_of_shape')} "
            f"| {r.get('load', '–')} |"
        )
    cpu = bench_writes.render_cpu(rows)
    recall = (render_sweep(rows), bench_ops.render_ops(rows), bench_ann.recall_baselines(rows))
    extra = [t for t in (cpu, *recall) if t]
    return "\n\n".join(["\n".join(lines), *extra])


render_sweep = bench_ann.render_sweep


def _ints(text: str) -> list[int]:
    """'40,100,200' -> [40, 100, 200] (an argparse type)."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want comma-separated integers") from None
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r}: want at least one integer")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="memkit bench store --backend postgres",
        description="SQLite and Postgres side by side: recall (exact, HNSW) and remembers/s",
    )
    ap.add_argument("--backend", choices=("postgres",), default="postgres")
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated row counts")
    ap.add_argument("--only", choices=("sqlite", "postgres"), help="run one backend (a part)")
    ap.add_argument("--queries", type=int, default=200, help="recalls per size (1M: a quarter)")
    ap.add_argument(
        "--recall-queries",
        type=int,
        default=bench_ann.HELD_OUT,
        help="Postgres HNSW only (a SQLite-only run ignores it): held-out queries a scope's "
        "HNSW recall@8 is also measured on, exact answers from the bench's own vectors "
        "(0: the timed queries alone)",
    )
    ap.add_argument(
        "--writes", type=int, default=500, help="remembers per process (0: recall only)"
    )
    ap.add_argument(
        "--skip-recall",
        action="store_true",
        help="measure the writes only (no recall, fresh recall client or HNSW build)",
    )
    ap.add_argument(
        "--ef-search",
        type=_ints,
        default=None,
        help="HNSW ef_search, or several (40,100,200) measured on the same indexes; "
        "the first is the main table's (default: the store's, 160)",
    )
    ap.add_argument(
        "--vectors",
        choices=VECTOR_SOURCES,
        default="random",
        help="random unit vectors, or the texts embedded with WordLlama (a real "
        "embedder's geometry; queries are reworded stored texts)",
    )
    ap.add_argument(
        "--texts",
        default="synthetic",
        help="the stored texts: 'synthetic' (common words mixed with random identifiers) "
        "or 'longmemeval:<datasets dir>' (LongMemEval's distinct chat sentences, read in "
        "place: about 115k, so sizes up to about 110k) or 'file:<path>' (one distinct "
        "text a line, e.g. `memkit bench corpus`'s 1M+ sentences); real texts need "
        "--vectors wordllama",
    )
    ap.add_argument(
        "--hnsw-build",
        choices=("concurrent", "plain"),
        default="concurrent",
        help="CREATE INDEX CONCURRENTLY (writers go on) or plain (blocks writers; faster)",
    )
    ap.add_argument(
        "--maintenance-work-mem",
        default=None,
        help="the HNSW build's maintenance_work_mem (default: BUILD_SETTINGS' 1GB)",
    )
    ap.add_argument(
        "--hnsw-graph",
        type=_ints,
        default=None,
        help="the HNSW indexes' m,ef_construction, e.g. 24,48 (default: the store's, 20,64)",
    )
    ap.add_argument(
        "--rows-per-day",
        type=float,
        default=None,
        help="stamp the loaded rows as written this many a day up to now (default: all now), "
        "so a fold-in index holds only the rows of its window",
    )
    ap.add_argument(
        "--warm",
        type=int,
        default=0,
        help="after the ef sweep, this many untimed recalls of other queries per scope, then "
        "the sweep again; each pass reports the blocks it read (waits 11 s a pass)",
    )
    ap.add_argument(
        "--hnsw-ops",
        default=None,
        help="pgvector operator classes to measure side by side on the big scope, e.g. "
        "cosine,ip (evals.bench_ops: the bench's own SQL, after the store's indexes)",
    )
    ap.add_argument("--pg-dsn", default=None, help="a Postgres server (default: a private one)")
    ap.add_argument(
        "--pg-shared-buffers", default="2GB", help="the private server's shared_buffers"
    )
    ap.add_argument(
        "--fold-search",
        type=bench_writes.fold_modes,  # a ConfigError (a ValueError): argparse's error
        default="server",
        help="the Postgres database's fold-in modes, each size in each: server (a new store's,"
        " the clients' default fold_local_rows), server:local=N (0: postings alone), client",
    )
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--quiet", action="store_true", help="only print the table")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    pool = None
    if args.texts.startswith(("longmemeval:", "file:")) and args.vectors != "wordllama":
        kind = args.texts.split(":", 1)[0]
        ap.error(f"--texts {kind}: stores real texts; their vectors need --vectors wordllama")
    if args.texts.startswith("longmemeval:"):
        pool = ("longmemeval", longmemeval_sentences(args.texts.split(":", 1)[1]))
        log(f"text pool: {len(pool[1]):,} distinct LongMemEval sentences")
    elif args.texts.startswith("file:"):
        path = args.texts.split(":", 1)[1]
        try:
            pool = (f"file:{os.path.basename(path)}", file_sentences(path))
        except ConfigError as e:
            ap.error(str(e))
        log(f"text pool: {len(pool[1]):,} distinct texts of {path}")
    elif args.texts != "synthetic":
        ap.error(
            f"--texts {args.texts!r}: want 'synthetic', 'longmemeval:<datasets dir>' "
            "or 'file:<path>'"
        )
    if args.rows_per_day is not None and not 0 < args.rows_per_day < float("inf"):
        ap.error(f"--rows-per-day {args.rows_per_day}: want a positive number")
    if args.hnsw_graph is not None and len(args.hnsw_graph) != 2:
        ap.error(f"--hnsw-graph {args.hnsw_graph}: want two ints, m,ef_construction")
    graph = None if args.hnsw_graph is None else (args.hnsw_graph[0], args.hnsw_graph[1])
    if args.recall_queries < 0:
        ap.error(f"--recall-queries {args.recall_queries}: want 0 or more")
    bench_ann.note_ignored_recall_queries(args.only, args.recall_queries)
    if args.warm < 0:
        ap.error(f"--warm {args.warm}: want 0 or more recalls")
    ops = None
    if args.hnsw_ops is not None:
        try:
            ops = bench_ops.check_ops([x.strip() for x in args.hnsw_ops.split(",")])
        except ConfigError as e:
            ap.error(str(e))
    if graph is not None:
        try:  # before the corpus and its load, not after them
            PostgresStore.check_hnsw_graph(*graph)
        except ConfigError as e:
            ap.error(f"--hnsw-graph: {e}")
    modes = {"sqlite": ["client"], "postgres": args.fold_search}
    backends = [(b, m) for b in ("sqlite", "postgres") if args.only in (None, b) for m in modes[b]]
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="memkit-bench-") as tmp,
        local_postgres(args.pg_dsn, args.pg_shared_buffers) as base,
    ):
        for n in [int(x) for x in args.sizes.split(",") if x.strip()]:
            q = args.queries if n < 1_000_000 else max(args.queries // 4, 10)
            for backend, mode in backends:
                url = f"{tmp}/s{n}.db" if backend == "sqlite" else fresh_schema(base)
                mwm = args.maintenance_work_mem
                build = None if mwm is None else {"maintenance_work_mem": mwm}
                recall = not args.skip_recall
                rows.append(
                    bench_backend(
                        backend,
                        url,
                        n,
                        q,
                        args.writes,
                        log,
                        args.ef_search,
                        build,
                        args.vectors,
                        args.hnsw_build,
                        recall,
                        pool,
                        graph,
                        args.rows_per_day,
                        args.warm,
                        ops,
                        mode,
                        args.recall_queries,
                    )
                )
                if args.json:
                    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
