"""`memkit bench store`: recall latency and remember throughput of SQLiteStore.

For each size (live rows in one scope, 256-d vectors) the same run measures:
* store recall p50/p95 with a precomputed query embedding (`query_embedding=`),
  and including the WordLlama embedding of the query text;
* FAISS `IndexFlatIP` exact search of the same vectors (k = limit, 1 thread),
  query by query alternating with the store's recall on one BLAS thread;
* a row-by-row scan baseline (Python loop over SQLite rows, decode BLOB, cosine);
* a bare numpy baseline of vector recall (one matmul over the same vectors,
  argpartition top-k, the floor), query by query alternating with the
  store's recall, one BLAS thread each;
* keyword-path recall (the store with no embedder, the same query texts),
  beside the vector path's p50, with the one-time build of its index;
* `remember_many` end to end in batches of 1,000 (one WordLlama call per
  batch), beside single `remember` end to end, and beside its *ceiling*: the
  rate if batching saved everything but what each item must still do, one
  exact fold-in decision (`store.fold_target`, timed on the same batch just
  before) and its share of one WordLlama call on the batch (timed too);
* remember throughput with fold-in (half restatements of stored rows, half
  new), twice: end to end (WordLlama embeds each write) and store-only (the
  same embedder answering from vectors computed before the clock starts), so
  the store's own cost is not hidden behind the embedder's. Three interleaved
  rounds of 1,000 writes each, reported as all their writes over all their
  time (not a median of rounds: a round that pays a WAL checkpoint counts in
  full), with the rounds' min-max. The one-time build of the fold-in trigram
  index is timed apart, before either;
* a fold-in scan baseline: pg_trgm similarity of the write with every live
  row of its kind in the window, read from SQLite (what fold-in costs without
  the trigram index), on up to 200,000 / rows of the first batch's writes,
  each checked to find the same best similarity as the store's own fold-in
  decision. It times the search alone, no write, so store-only/scan
  understates the index's gain;
* a machine baseline in the same rounds: bare SQLite writes (one INSERT of
  the same text and vector and one COMMIT each, same pragmas, no index), the
  floor any SQLite-backed store pays per durable write. Absolute rates
  moved by up to 1.6x between runs of the same code on a shared machine;
  a baseline from the same rounds says which kind of run a table came from;
* the *ceiling* of each write rate, from the same rounds: the best rate the
  write path could reach if the store's own work (fold-in, indexes, row
  bookkeeping) cost nothing. Store-only: the bare SQLite write. End to end:
  one WordLlama call per text (timed alone on the round's texts) plus the
  bare write, 1 / (1/embed + 1/bare). "of ceiling" is the store's share of it.
  "embedding in remember" is what the embedder costs a write inside the
  write loop, 1/end-to-end - 1/store-only: more than the same call in a loop
  of calls, whose tokenizer tables stay in cache;

Rows are bulk-loaded through the store's `bulk_load` (no fold-in)
(random unit vectors; synthetic short texts, or with `--texts
longmemeval:<dir>` real chat sentences, which make fold-in work harder:
longer, with more common trigrams; `--texts file:<path>` a corpus file's texts,
one a line, such as `memkit bench corpus`'s). Queries are noisy copies of stored vectors, so a few
rows clear the relevance floor and recall stays on the vector path.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from evals.bench_data import (
    DIM,
    LIMIT,
    file_sentences,
    longmemeval_sentences,
    low_diversity_texts,
    percentiles,
    synthetic_texts,
    unit_vectors,
)
from memkit import redact
from memkit.errors import ConfigError
from memkit.params import DAY, RecallParams
from memkit.text import jaccard, trigrams

FLOOR = 0.25
"""The floor of every recall here, the store's and both baselines', whatever the
embedder's own default: the rows are random unit vectors (cosine with a query
~N(0, 1/dim)), so 0.25 keeps the query's noisy source row and almost nothing else,
while an embedder's calibrated floor (WordLlama 0.07) is for real texts' cosines and
would rank a tenth of the table. Like for like with `_numpy_recall` and `_row_scan`."""
BENCH_RECALL = RecallParams(floor=FLOOR)


def _row_scan(path: str, scope: str, q: np.ndarray, floor: float = FLOOR) -> list:
    """The naive baseline: every row from SQLite, decode, cosine, keep, sort."""
    conn = sqlite3.connect(path)
    hits = []
    for rid, blob in conn.execute(
        "SELECT id, embedding FROM memories WHERE scope_id = ? AND superseded_by IS NULL",
        (scope,),
    ):
        e = np.frombuffer(blob, dtype=np.float32)
        cos = float(e @ q) / (float(np.linalg.norm(e)) * float(np.linalg.norm(q)) or 1.0)
        if cos >= floor:
            hits.append((cos, rid))
    conn.close()
    hits.sort(reverse=True)
    return hits[:LIMIT]


class Precomputed:
    """The bench embedder, answering from a table filled before timing starts."""

    def __init__(self, inner, texts: list[str]):
        self.name, self.dim = inner.name, inner.dim
        self._table = dict(zip(texts, inner.embed(texts), strict=True))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._table[t] for t in texts])


_WRITES, _ROUNDS = 1000, 3
_WRITES_NEEDED = _ROUNDS * 3 * (_WRITES - _WRITES // 2)
"""Fresh texts the remember rounds take beyond the stored rows."""

TextSource = Callable[[random.Random, int], list[str]]
"""(rng, k) -> k new memory texts for the store (rows, then fresh writes)."""


def pool_source(pool: list[str]) -> TextSource:
    """Hands out the pool's texts in order, each once."""
    it = iter(pool)

    def take(rng: random.Random, k: int) -> list[str]:
        out = list(itertools.islice(it, k))
        if len(out) < k:
            raise SystemExit(f"the text pool ran out ({len(pool):,} texts)")
        return out

    return take


def _write_batch(
    rng: random.Random,
    nrng: np.random.Generator,
    texts: list[str],
    writes: int,
    source: TextSource = synthetic_texts,
):
    restate = [texts[i] + " again" for i in nrng.integers(0, len(texts), writes // 2)]
    batch = restate + source(rng, writes - len(restate))
    rng.shuffle(batch)
    return batch


def overall(rates: list[float]) -> float:
    """Writes/s over equal-sized rounds: total writes over total time, so the
    occasional slow round (a checkpoint's fsyncs) weighs what it cost."""
    return len(rates) / sum(1 / r for r in rates)


def _remember_rate(store, batch: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    folded = sum(store.remember("bench", x).folded for x in batch)
    return len(batch) / (time.perf_counter() - t), folded


def fold_scan(conn: sqlite3.Connection, scope: str, grams, t: float, cutoff: float):
    """The naive fold-in search (the bench writes facts): every live fact of the
    scope in the window from SQLite, its trigrams, pg_trgm similarity with the
    write's; the best at or above the threshold as (similarity, id), else None."""
    best = None
    for mid, content in conn.execute(
        "SELECT id, content FROM memories WHERE scope_id = ? AND kind = 'fact' "
        "AND superseded_by IS NULL AND last_seen_at > ?",
        (scope, cutoff),
    ):
        sim = jaccard(grams, trigrams(content))
        if sim >= t and (best is None or sim > best[0]):
            best = (sim, mid)
    return best


def fold_scan_rate(store, path: str, batch: list[str]) -> float:
    """Searches/s of the scan baseline, each checked against the store's own
    fold-in decision: a target with the scan's best similarity, or
    AssertionError. Times the search only (no write), so store-only/scan
    understates the trigram index's gain."""
    t, now = store.fold.threshold, float(store.clock())
    cutoff = now - store.fold.window_days * DAY
    conn = sqlite3.connect(path)
    spent = 0.0
    for text in batch:
        grams = trigrams(redact(text, store.redaction))  # what remember would store
        t0 = time.perf_counter()
        best = fold_scan(conn, "bench", grams, t, cutoff)
        spent += time.perf_counter() - t0
        target = store.fold_target("bench", text)  # the store's own decision
        if (target and jaccard(grams, trigrams(target.content))) != (best and best[0]):
            raise AssertionError(f"fold-in index and scan disagree on {text!r}")
    conn.close()
    return len(batch) / spent


def _decide_rate(store, batch: list[str]) -> float:
    """Fold-in decisions/s: `store.fold_target` per text (checked and redacted as
    `remember` does, then the exact SPEC §3.3 search over the live rows), no
    write. Every item of a batch needs one, whatever else batching saves."""
    t = time.perf_counter()
    for x in batch:
        store.fold_target("bench", x)
    return len(batch) / (time.perf_counter() - t)


def _embed_rate(emb, batch: list[str]) -> float:
    """Texts/s of embedding one text per call, as `remember` does."""
    t = time.perf_counter()
    for x in batch:
        emb.embed([x])
    return len(batch) / (time.perf_counter() - t)


def ceiling(*rates: float) -> float:
    """The best rate of a path that must do each of these steps once per item (each
    at its own measured rate) and nothing else: 1 / the sum of their times."""
    return 1.0 / sum(1.0 / r for r in rates)


def _bare_rate(path: str, batch: list[str], vec: np.ndarray) -> float:
    """Writes/s of one INSERT + COMMIT per text into a plain table (WAL,
    synchronous NORMAL, as the store), with a vector BLOB like the store's."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS bare (content TEXT, embedding BLOB)")
    blob = vec.astype(np.float32).tobytes()
    t = time.perf_counter()
    for x in batch:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO bare VALUES (?, ?)", (x, blob))
        conn.execute("COMMIT")
    rate = len(batch) / (time.perf_counter() - t)
    conn.close()
    return rate


def bench_size(n: int, queries: int, tmp: Path, log, source: TextSource = synthetic_texts) -> dict:
    import faiss

    from memkit.embed import WordLlamaEmbedder
    from memkit.store import SQLiteStore

    faiss.omp_set_num_threads(1)
    rng, nrng = random.Random(n), np.random.default_rng(n)
    path = str(tmp / f"bench-{n}.db")
    emb = WordLlamaEmbedder(DIM)
    store = SQLiteStore.open(path, embedder=emb)
    texts, vecs = source(rng, n), unit_vectors(nrng, n)
    t = time.perf_counter()
    store.bulk_load("bench", texts, vecs)
    log(f"  {n:>7} rows loaded in {time.perf_counter() - t:.1f}s")

    src = nrng.integers(0, n, queries)
    qs = vecs[src] + nrng.normal(0, 0.04, (queries, DIM)).astype(np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    qtexts = [texts[i] for i in src]
    # build the in-memory matrix once
    store.recall("bench", "warm", query_embedding=qs[0], params=BENCH_RECALL)
    emb.embed(["warm"])

    rec: list[float] = []
    rec_emb: list[float] = []
    fai: list[float] = []
    scan: list[float] = []
    for i in range(queries):
        t = time.perf_counter()
        hits = store.recall("bench", qtexts[i], LIMIT, query_embedding=qs[i], params=BENCH_RECALL)
        rec.append(time.perf_counter() - t)
        assert hits and hits[0].path == "vector"
        if len(hits) != len(_numpy_recall(vecs, qs[i])):  # like for like, or no ratio
            raise RuntimeError(
                f"store recall kept {len(hits)} rows, the numpy baseline another count"
            )
        t = time.perf_counter()
        emb.embed([qtexts[i]])
        store.recall("bench", qtexts[i], LIMIT, query_embedding=qs[i], params=BENCH_RECALL)
        rec_emb.append(time.perf_counter() - t)
    index = faiss.IndexFlatIP(DIM)
    index.add(vecs)
    index.search(qs[:1], LIMIT)
    rec1: list[float] = []
    with _one_blas_thread():  # like for like with FAISS's one thread
        # Query by query, in alternating order, so drift on a shared machine and
        # the cache each scan leaves behind fall on both sides alike.
        sides: tuple[tuple[Callable[[int], object], list[float]], ...] = (
            (
                lambda i: store.recall(
                    "bench", qtexts[i], LIMIT, query_embedding=qs[i], params=BENCH_RECALL
                ),
                rec1,
            ),
            (lambda i: index.search(qs[i : i + 1], LIMIT), fai),
        )
        for i in range(queries):
            for run, times in sides if i % 2 else sides[::-1]:
                t = time.perf_counter()
                run(i)
                times.append(time.perf_counter() - t)

    npy: list[float] = []
    rec_np: list[float] = []
    sides = (  # typed where first assigned, above
        (
            lambda i: store.recall(
                "bench", qtexts[i], LIMIT, query_embedding=qs[i], params=BENCH_RECALL
            ),
            rec_np,
        ),
        (lambda i: _numpy_recall(vecs, qs[i]), npy),
    )
    with _one_blas_thread():  # alternating, one BLAS thread on both sides
        for i in range(queries):
            for run, times in sides if i % 2 else sides[::-1]:
                t = time.perf_counter()
                run(i)
                times.append(time.perf_counter() - t)

    store.embedder = None  # no query embedding: recall answers on the keyword path
    t = time.perf_counter()
    store.recall("bench", qtexts[0], LIMIT, params=BENCH_RECALL)  # builds the keyword index once
    kw_build = time.perf_counter() - t
    log(f"  {n:>7} keyword index built in {kw_build:.2f}s")
    kw = []
    for i in range(queries):
        t = time.perf_counter()
        hits = store.recall("bench", qtexts[i], LIMIT, params=BENCH_RECALL)
        kw.append(time.perf_counter() - t)
        assert hits and hits[0].path == "keyword"
    store.embedder = emb

    scan_q = max(3, min(queries, 2_000_000 // n))
    for i in range(scan_q):
        t = time.perf_counter()
        _row_scan(path, "bench", qs[i])
        scan.append(time.perf_counter() - t)

    t = time.perf_counter()
    store.remember("bench", texts[0])  # builds the fold-in trigram index once
    build = time.perf_counter() - t
    log(f"  {n:>7} fold-in index built in {build:.2f}s")
    writes, rounds = _WRITES, _ROUNDS
    batches = [_write_batch(rng, nrng, texts, writes, source) for _ in range(2 * rounds)]
    fold_scan = fold_scan_rate(store, path, batches[0][: max(3, min(writes, 200_000 // n))])
    log(f"  {n:>7} fold-in scan: {fold_scan:,.1f} searches/s, same best match as the index")
    e2e, own, bare, embed, folded = [], [], [], [], 0
    for r in range(rounds):  # interleaved, so drift on a shared machine hits both alike
        rate, f = _remember_rate(store, batches[2 * r])
        e2e.append(rate)
        folded += f
        embed.append(_embed_rate(emb, batches[2 * r]))
        batch = batches[2 * r + 1]
        store.embedder = Precomputed(emb, batch)
        rate, f = _remember_rate(store, batch)
        own.append(rate)
        folded += f
        store.embedder = emb
        bare.append(_bare_rate(str(tmp / f"bare-{n}.db"), batch, vecs[0]))
    many, decide, embed_many = [], [], []
    for _ in range(rounds):  # remember_many, end to end: one embedding call per batch
        batch = _write_batch(rng, nrng, texts, writes, source)
        decide.append(_decide_rate(store, batch))
        t = time.perf_counter()
        emb.embed(batch)
        embed_many.append(len(batch) / (time.perf_counter() - t))
        t = time.perf_counter()
        res = store.remember_many("bench", batch)
        many.append(len(batch) / (time.perf_counter() - t))
        folded += sum(r.folded for r in res)
    store.close()
    os.remove(path)

    r50, r95 = percentiles(rec)
    e50, e95 = percentiles(rec_emb)
    f50, f95 = percentiles(fai)
    s50, s95 = percentiles(scan)
    return {
        "n": n,
        "recall": (r50, r95),
        "recall_1t": percentiles(rec1),
        "recall_embed": (e50, e95),
        "faiss": (f50, f95),
        "scan": (s50, s95),
        "remember_per_s": overall(e2e),
        "remember_store_per_s": overall(own),
        "remember_store_range": (min(own), max(own)),
        "bare_sqlite_per_s": overall(bare),
        "embed_per_s": overall(embed),
        "ceiling_per_s": ceiling(overall(embed), overall(bare)),
        "fold_scan_per_s": fold_scan,
        "folded": folded,
        "writes": 3 * rounds * writes,
        "index_build_s": build,
        "keyword": percentiles(kw),
        "keyword_build_s": kw_build,
        "numpy": percentiles(npy),
        "recall_vs_numpy": percentiles(rec_np),
        "remember_many_per_s": overall(many),
        "decide_per_s": overall(decide),
        "embed_batch_per_s": overall(embed_many),
        "many_ceiling_per_s": ceiling(overall(decide), overall(embed_many)),
    }


def _numpy_recall(vecs: np.ndarray, q: np.ndarray, floor: float = FLOOR) -> np.ndarray:
    """The bare baseline of vector recall: one matmul, top-k by argpartition, floor."""
    s = vecs @ q
    k = min(LIMIT, s.size)
    top = np.argpartition(-s, k - 1)[:k]
    top = top[np.argsort(-s[top])]
    return top[s[top] >= floor]


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(1)
    except Exception:  # threadpoolctl comes with scikit-learn; stay useful without it
        import contextlib

        return contextlib.nullcontext()


def _threads_note() -> str:
    """Say how many threads each side used: the store's scoring is a numpy BLAS
    gemv (BLAS threads), FAISS answers one query on one thread."""
    try:
        from threadpoolctl import threadpool_info

        blas = max((i.get("num_threads", 1) for i in threadpool_info()), default=1)
    except Exception:  # threadpoolctl comes with scikit-learn; stay useful without it
        blas = "?"
    return (
        f"threads: store recall columns use numpy's BLAS ({blas}); recall/FAISS compares "
        "the store on 1 BLAS thread with FAISS-flat on 1; the row scan runs on 1."
    )


def render(rows: list[dict]) -> str:
    """Three tables: vector recall, writes (each rate beside its ceiling), and the
    keyword path / numpy baseline / batch writes."""
    lines = [
        "| live rows | recall p50/p95 ms | +embed p50/p95 ms | FAISS-flat p50/p95 ms "
        "| row scan p50 ms | recall/FAISS (p50, 1 thread each) | scan/recall (p50) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['recall'][0]:.2f} / {r['recall'][1]:.2f} "
            f"| {r['recall_embed'][0]:.2f} / {r['recall_embed'][1]:.2f} "
            f"| {r['faiss'][0]:.2f} / {r['faiss'][1]:.2f} | {r['scan'][0]:.1f} "
            f"| {r['recall_1t'][0] / r['faiss'][0]:.2f}x | {r['scan'][0] / r['recall'][0]:.0f}x |"
        )
    lines += [
        "",
        "| live rows | remembers/s end to end | ceiling: embed + bare write /s | of ceiling "
        "| remembers/s store-only (min-max) | ceiling: bare SQLite writes/s | of ceiling "
        "| embedding in remember µs | fold-in scan searches/s | store-only/scan | folded "
        "| fold index build s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lo, hi = r["remember_store_range"]
        lines.append(
            f"| {r['n']:,} | {r['remember_per_s']:,.0f} | {r['ceiling_per_s']:,.0f} "
            f"| {r['remember_per_s'] / r['ceiling_per_s']:.2f} "
            f"| {r['remember_store_per_s']:,.0f} ({lo:,.0f}-{hi:,.0f}) "
            f"| {r['bare_sqlite_per_s']:,.0f} "
            f"| {r['remember_store_per_s'] / r['bare_sqlite_per_s']:.2f} "
            f"| {1e6 / r['remember_per_s'] - 1e6 / r['remember_store_per_s']:,.0f} "
            f"| {r['fold_scan_per_s']:,.1f} "
            f"| {r['remember_store_per_s'] / r['fold_scan_per_s']:,.0f}x "
            f"| {r['folded']:,}/{r['writes']:,} "
            f"| {r['index_build_s']:.2f} |"
        )
    lines += [
        "",
        "| live rows | keyword recall p50/p95 ms | keyword/vector (p50) "
        "| bare numpy scan p50 ms | recall/numpy (p50) | remember_many/s end to end "
        "(batches of 1,000) | batch/single (end to end) "
        "| ceiling: fold-in decisions + batch embed /s | ceiling/single "
        "| remember_many of ceiling | keyword index build s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['keyword'][0]:.2f} / {r['keyword'][1]:.2f} "
            f"| {r['keyword'][0] / r['recall'][0]:.2f}x "
            f"| {r['numpy'][0]:.2f} | {r['recall_vs_numpy'][0] / r['numpy'][0]:.2f}x "
            f"| {r['remember_many_per_s']:,.0f} "
            f"| {r['remember_many_per_s'] / r['remember_per_s']:.1f}x "
            f"| {r['many_ceiling_per_s']:,.0f} "
            f"| {r['many_ceiling_per_s'] / r['remember_per_s']:.1f}x "
            f"| {r['remember_many_per_s'] / r['many_ceiling_per_s']:.2f} "
            f"| {r['keyword_build_s']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import sys

    args_in = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--backend" or a.startswith("--backend=") for a in args_in):
        from evals import bench_backends  # SQLite and Postgres side by side

        return bench_backends.main(args_in)
    ap = argparse.ArgumentParser(prog="memkit bench store", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="comma-separated row counts")
    ap.add_argument(
        "--queries", type=int, default=200, help="recall queries per size (default 200)"
    )
    ap.add_argument("--quiet", action="store_true", help="only print the table")
    ap.add_argument(
        "--texts",
        default="synthetic",
        help="memory texts: 'synthetic' (default: common words mixed with random "
        "identifiers), 'lowdiversity' (24 common words only: every trigram is common), "
        "'longmemeval:<datasets dir>' (real chat sentences, read in place) or "
        "'file:<path>' (one distinct text a line, e.g. `memkit bench corpus`'s)",
    )
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    pool: list[str] | None = None
    if args.texts.startswith(("longmemeval:", "file:")):
        kind, where = args.texts.split(":", 1)
        try:
            pool = longmemeval_sentences(where) if kind == "longmemeval" else file_sentences(where)
        except ConfigError as e:
            ap.error(str(e))
        need = max(sizes, default=0) + _WRITES_NEEDED
        if len(pool) < need:
            ap.error(
                f"--texts {kind}: holds {len(pool):,} distinct texts; --sizes up to "
                f"{max(sizes):,} need {need:,}"
            )
    elif args.texts not in ("synthetic", "lowdiversity"):
        ap.error(
            f"--texts {args.texts!r}: want 'synthetic', 'lowdiversity', 'longmemeval:<dir>' "
            "or 'file:<path>'"
        )
    log(f"texts: {args.texts}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="memkit-bench-") as tmp:
        for n in sizes:
            source = synthetic_texts if pool is None else pool_source(pool)
            if args.texts == "lowdiversity":
                source = low_diversity_texts
            rows.append(bench_size(n, args.queries, Path(tmp), log, source))
    print(render(rows))
    print(f"\n{_threads_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
