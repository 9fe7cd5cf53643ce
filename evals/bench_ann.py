"""The HNSW half of `memkit bench store --backend postgres` (`evals.bench_backends`):
query vectors by vector source, timed recalls, recall@8 against the exact answer
with ties counted, and one pass over the scopes at an ef_search (a sweep runs
it once per value on the same indexes), the server's page reads of a pass
(`Pages`: how many of a query's blocks came from outside shared_buffers),
and the sweep's table.

The baselines of those recalls: the exact answer (the full ranking) scores
1.000 by definition, and a random ranking of a scope of n rows k/n on
average (recall@8 at 1M rows: 0.000008), so every figure between is the index's.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evals.bench_data import LIMIT, embedded, percentiles, perturbed, unit_vectors
from memkit.errors import MemkitError


def recalls(
    store, scope: str, qs: np.ndarray, key: Callable[[Any], Any] | None = None
) -> tuple[list[list[tuple[Any, float]]], list[float]]:
    """Each query's (key, score) hits, and its seconds; the key is the hit's id,
    or `key(hit)` (an `Oracle`'s row index)."""
    hits, times = [], []
    for q in qs:
        t = time.perf_counter()
        got = store.recall(scope, "q", LIMIT, query_embedding=q)
        times.append(time.perf_counter() - t)
        hits.append([(h.id if key is None else key(h), h.score) for h in got])
    return hits, times


def recall_with_ties(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> float:
    """recall@k of `got` against the exact answer `want` ((id, score) each, best first):
    the share of `want` that `got` found, where a hit that is not in `want` but
    scores at least `want`'s last score counts (a tie at the k-th score: exact
    kept one of the tied rows, the index another, equally right). An empty
    exact answer is matched by an empty one (1.0) and by nothing else (0.0)."""
    if not want:
        return 1.0 if not got else 0.0
    ids, kth = {i for i, _ in want}, want[-1][1]
    found = sum(1 for i, score in got if i in ids or score >= kth)
    return min(found, len(want)) / len(want)


def queries(
    vectors: str, texts: list[str], vecs: np.ndarray, k: int, rng: random.Random, nrng
) -> np.ndarray:
    """`k` query vectors near stored rows: `random`, a stored vector plus noise;
    `wordllama`, the embedding of a stored text reworded (`perturbed`)."""
    if vectors == "wordllama":
        return embedded([perturbed(rng, texts[rng.randrange(len(texts))]) for _ in range(k)])
    return vecs[nrng.integers(0, len(vecs), k)] + 0.05 * unit_vectors(nrng, k)


HELD_OUT = 1_000
"""Held-out queries a scope's recall@8 is measured on besides the timed ones
(`--recall-queries`): 50 queries give recall@8 a standard error of ~0.02 at
1M rows (measured: docs/postgres-scale.md), as wide as the margin to 0.95."""


def note_ignored_recall_queries(only: str | None, n: int) -> str | None:
    """`--recall-queries` measures Postgres HNSW recall only: a SQLite-only run
    (`--only sqlite`) asked for a non-default count gets a note on stderr saying
    it is ignored (returned too); None otherwise."""
    if only != "sqlite" or n == HELD_OUT:
        return None
    note = (
        f"note: --recall-queries {n} is ignored: it measures Postgres HNSW recall only, "
        "and this run is SQLite-only (--only sqlite)"
    )
    print(note, file=sys.stderr, flush=True)
    return note


def held_out(vectors: str, texts: list[str], vecs: np.ndarray, k: int, n: int) -> np.ndarray:
    """`k` queries drawn as `queries` draws them, from generators of their own
    (seeded by the size `n`), so no other query of the run moves."""
    return queries(vectors, texts, vecs, k, random.Random(10**9 + n), np.random.default_rng([n, 2]))


class Oracle:
    """The exact answer to a query over a scope the bench loaded, computed from
    the bench's own vectors with the store's ranking (`rank.rank_vector`: the
    floor, confidence, recency; each row's key its index in `texts`), so a
    held-out query needs no exact scan of the store (1 s a query at 1M rows).
    Every score it gives is at one instant, `now` (fixed when it is made): a
    score moves with the clock (recency), so an answer the store gave minutes
    later is compared after `rescore`, never by the store's own scores. It
    stands in for the store's exact answer only where it gave the store's
    answer on every timed query (`check`); texts must be distinct (a hit is
    keyed by its text)."""

    def __init__(
        self, texts: list[str], vecs: np.ndarray, floor: float,
        stamps: Sequence[float] | None, confidence: float,
    ):  # fmt: skip
        from memkit.embed import normalize_rows

        self.texts, self.index = texts, {t: i for i, t in enumerate(texts)}
        if len(self.index) != len(texts):
            raise MemkitError(
                f"the oracle keys hits by text: {len(texts) - len(self.index):,} texts repeat"
            )
        self.mat = normalize_rows(np.asarray(vecs, dtype=np.float32))
        n = len(texts)
        self.conf = np.full(n, float(confidence))
        # undated rows were all stamped at their load: one decay for every row, so 1
        self.ts = np.zeros(n) if stamps is None else np.asarray(stamps, dtype=np.float64)
        self.now = 0.0 if stamps is None else time.time()
        self.floor = float(floor)

    def key(self, hit: Any) -> int:
        return self.index[hit.memory.content]

    def _ranked(self, cos: np.ndarray, rows: np.ndarray, limit: int) -> tuple[np.ndarray, ...]:
        from memkit.params import RecallParams
        from memkit.store.rank import rank_vector

        ts = self.ts[rows]
        r = rank_vector(
            cos, self.conf[rows], ts, ts, rows, self.now, RecallParams(floor=self.floor), limit
        )
        return rows[r.order], r.score

    def _scores(self, q: np.ndarray, rows: np.ndarray, limit: int) -> tuple[np.ndarray, ...]:
        q = np.asarray(q, dtype=np.float32)
        return self._ranked(
            self.mat[rows] @ (q / np.float32(np.linalg.norm(q) or 1.0)), rows, limit
        )

    def answer(self, q: np.ndarray, limit: int = LIMIT) -> list[tuple[int, float]]:
        return self.answers(np.asarray(q)[None, :], limit)[0]

    def answers(
        self, qs: np.ndarray, limit: int = LIMIT, log=None
    ) -> list[list[tuple[int, float]]]:
        """`answer` to each of `qs`, their cosines `BLOCK` queries a matrix product
        (at 1M rows one query's product reads the 1 GB matrix: ~0.4 s alone)."""
        qs = np.asarray(qs, dtype=np.float32)
        norms = np.linalg.norm(qs, axis=1, keepdims=True)
        qs = qs / np.where(norms > 0, norms, np.float32(1.0))
        rows, out, t = np.arange(len(self.mat)), [], time.perf_counter()
        for b in range(0, len(qs), BLOCK):
            cos = qs[b : b + BLOCK] @ self.mat.T
            for c in cos:
                got, score = self._ranked(c, rows, limit)
                out.append([(int(i), float(s)) for i, s in zip(got, score, strict=True)])
            if log is not None and time.perf_counter() - t > 30:
                log(f"    oracle: {len(out)}/{len(qs)} exact answers")
                t = time.perf_counter()
        return out

    def rescore(self, q: np.ndarray, hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """`hits` (row keys, in their order) with the oracle's scores at its `now`
        (-inf for a row under the floor, which no exact answer holds)."""
        keys = np.array([k for k, _ in hits], dtype=np.int64)
        rows, score = self._scores(q, keys, 0)
        by = dict(zip(rows.tolist(), score.tolist(), strict=True))
        return [(k, by.get(k, float("-inf"))) for k, _ in hits]

    def check(self, qs: np.ndarray, store_exact: list[list[tuple[int, float]]]) -> None:
        """MemkitError unless the oracle gives the store's exact answer to every
        query in `qs` (`agree`, the store's rows rescored): a held-out figure then
        measures the index, not the oracle."""
        answers = self.answers(qs, max((len(w) for w in store_exact), default=0) or LIMIT)
        for i, (q, want, got) in enumerate(zip(qs, store_exact, answers, strict=True)):
            got, rescored = got[: len(want) or LIMIT], self.rescore(q, want)
            if not agree(got, rescored):
                raise MemkitError(
                    f"the held-out oracle disagrees with the store's exact answer on timed "
                    f"query {i}: {got[:3]}... against {rescored[:3]}...; no held-out recall"
                )


BLOCK = 64
"""Queries an `Oracle` scores in one matrix product (64 x 1M float32 cosines: 256 MB)."""

LOADED_CONFIDENCE = 0.7
"""Every bench row's confidence: `bulk_load`'s default (`Oracle.check` would show another)."""


def with_held_out(
    scopes: list[tuple[Any, ...]], oracles: dict[str, Oracle], k: int, vectors: str, log
) -> list[tuple[Any, ...]]:
    """`scopes` (key, scope, timed queries, the store's exact hits keyed by
    `oracles[scope].key`) each with `k` held-out queries (`held_out`, seeded by
    the scope's rows) and its oracle's answers to them, after `Oracle.check`
    on the timed ones; the exact hits rescored at the oracle's instant."""
    out = []
    for key, scope, qq, want in scopes:
        t = time.perf_counter()
        oracle = oracles[scope]
        oracle.check(qq, want)
        want = [oracle.rescore(q, w) for q, w in zip(qq, want, strict=True)]
        hq = held_out(vectors, oracle.texts, oracle.mat, k, len(oracle.texts))
        held = (oracle, hq, oracle.answers(hq, LIMIT, log))
        out.append((key, scope, qq, want, held))
        log(
            f"  {scope}: {k} held-out queries, their exact answers from the bench's vectors "
            f"(agreeing with the store's on all {len(qq)} timed) in {time.perf_counter() - t:.1f} s"
        )
    return out


SCORE_TOL = 1e-5
"""How far two exact answers' scores may differ and still agree (float32
cosines summed in another order; the recency factor at another `now`)."""


def agree(a: list[tuple[Any, float]], b: list[tuple[Any, float]], tol: float = SCORE_TOL) -> bool:
    """Two exact answers agree when they are as long and score the same place by
    place within `tol`: their rows may differ only where scores tie."""
    return len(a) == len(b) and all(abs(x[1] - y[1]) <= tol for x, y in zip(a, b, strict=True))


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float | None, float | None]:
    """The mean of per-query values and its 95 % interval, mean +- z x sd / sqrt(n)
    (sample sd; the normal approximation), clipped to 0..1; (mean, None, None),
    undefined, for fewer than 2 values."""
    n = len(values)
    if n == 0:
        raise MemkitError("mean_ci: no values")
    m = float(np.mean(values))
    if n < 2:
        return m, None, None
    half = z * float(np.std(values, ddof=1)) / math.sqrt(n)
    return m, max(0.0, m - half), min(1.0, m + half)


PAGES_WAIT_S = 11.0
"""Seconds to wait before reading the I/O counters after a pass: a backend flushes
its counters when idle, at most once a second, else after PGSTAT_IDLE_INTERVAL
(10 s; Postgres 16's pgstat.c), so a read sooner would miss the pass's last ones."""


class Pages:
    """The `memories` table's block counters (pg_statio_user_tables: the heap and all
    its indexes), read on a connection of its own; `delta(queries)` is what the
    pass since the last call read per query: blocks read from outside
    shared_buffers (`idx_read`, `heap_read`: from the OS cache or the disk) and
    found in them (`idx_hit`, `heap_hit`)."""

    FIELDS = ("heap_blks_read", "heap_blks_hit", "idx_blks_read", "idx_blks_hit")

    def __init__(self, url: str, wait_s: float | None = None):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.wait_s = PAGES_WAIT_S if wait_s is None else wait_s
        self.last = self._read()

    def _read(self) -> dict[str, int]:
        time.sleep(self.wait_s)
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = self.conn.execute(
            f"SELECT {', '.join(self.FIELDS)} FROM pg_statio_user_tables "
            "WHERE relid = 'memories'::regclass"
        ).fetchone()
        if row is None:
            raise MemkitError("pg_statio_user_tables has no row for the table memories")
        return {k: int(v or 0) for k, v in zip(self.FIELDS, row, strict=True)}

    def delta(self, queries: int) -> dict[str, float]:
        now = self._read()
        out = {
            k.replace("_blks", ""): (now[k] - self.last[k]) / max(queries, 1) for k in self.FIELDS
        }
        self.last = now
        return out

    def close(self) -> None:
        self.conn.close()


def warm_up(ann: Any, scopes: list[tuple[Any, ...]], qs: dict[str, np.ndarray], log) -> None:
    """Untimed recalls of other queries on each scope (`qs` by scope), at the store's
    ef_search: the pages a long-running server's index would hold."""
    for entry in scopes:
        scope = entry[1]
        t = time.perf_counter()
        recalls(ann, scope, qs[scope])
        log(f"  warm-up: {len(qs[scope])} recalls on {scope} in {time.perf_counter() - t:.1f} s")


def ann_recalls(
    ann: Any, scopes: list[tuple[Any, ...]], ef: int, log, pages: Pages | None = None
) -> dict:
    """HNSW recall at one ef_search on each (key, scope, queries, exact hits[, held]):
    p50/p95, recall@8 against the exact hits (ties counted, `recall_with_ties`),
    recall@1 (the same rule on each answer's first hit: was the best row found,
    the one a reworded query is about), how many recalls were answered exactly
    instead and, with `pages`, the blocks a query read (`Pages.delta`).
    `held`: (an `Oracle`, held-out queries, its answers to them), recalled after
    the timed queries; every figure is then over both (`_queries` of them), with
    recall@8's 95 % interval (`mean_ci`) and the timed queries' own recall@8
    (`_recall8_timed`, the figure runs before held-out queries reported)."""
    out: dict = {"ef_search": ef}
    for key, scope, qq, want, *rest in scopes:
        held = rest[0] if rest else None
        before = ann.ann_counts["exact_fallback"]
        got, times = recalls(ann, scope, qq, None if held is None else held[0].key)
        if held is not None:  # scores at the oracle's instant, as `want`'s
            got = [held[0].rescore(q, g) for q, g in zip(qq, got, strict=True)]
        hit = [recall_with_ties(g, w) for g, w in zip(got, want, strict=True)]
        first = [recall_with_ties(g[:1], w[:1]) for g, w in zip(got, want, strict=True)]
        out[f"{key}_recall8_timed"] = float(np.mean(hit))
        if held is not None:
            oracle, hq, hwant = held
            hgot, htimes = recalls(ann, scope, hq, oracle.key)
            hgot = [oracle.rescore(q, g) for q, g in zip(hq, hgot, strict=True)]
            hit += [recall_with_ties(g, w) for g, w in zip(hgot, hwant, strict=True)]
            first += [recall_with_ties(g[:1], w[:1]) for g, w in zip(hgot, hwant, strict=True)]
            times += htimes
        if pages is not None:
            out |= {f"{key}_{k}": v for k, v in pages.delta(len(hit)).items()}
        out[f"{key}_p50"], out[f"{key}_p95"] = percentiles(times)
        r8, lo, hi = mean_ci(hit)
        out[f"{key}_recall8"], out[f"{key}_recall8_ci"] = r8, [lo, hi]
        out[f"{key}_recall1"] = float(np.mean(first))
        out[f"{key}_queries"] = len(hit)
        out[f"{key}_fallbacks"] = ann.ann_counts["exact_fallback"] - before
        ci = "undefined" if lo is None or hi is None else f"{lo:.3f}-{hi:.3f}"
        log(
            f"  hnsw {scope} ef_search {ef}: p50 {out[f'{key}_p50']:.2f} ms, recall@8 "
            f"{r8:.3f} (95 % {ci}, {len(hit)} queries), recall@1 {out[f'{key}_recall1']:.3f}, "
            f"exact instead {out[f'{key}_fallbacks']}/{len(hit)}"
        )
    return out


def recall_baselines(rows: list[dict]) -> str:
    """The baselines beside every recall@8 the tables show, one line a size that has
    one ('' when none does): the full ranking (exact) scores 1.000, a random ranking
    LIMIT / rows of the scope it ranks (the big scope's, and the 1 % scope's)."""
    out = []
    for r in rows:
        if r.get("hnsw_recall8") is None and not r.get("ef_sweep") and not r.get("ops_sweep"):
            continue
        scopes = [("", int(r["rows"]))]
        small = r.get("small_hnsw_recall8") is not None or any(
            "small_hnsw_recall8" in e for e in r.get("ef_sweep", [])
        )
        if small and r.get("small_rows"):
            scopes.append(("1 % scope ", int(r["small_rows"])))
        random_ = ", ".join(f"{name}{n:,} rows {LIMIT / n:.6f}" for name, n in scopes)
        out.append(
            f"recall@8 baselines at {int(r['rows']):,} rows: the full ranking (exact) 1.000; "
            f"a random ranking {LIMIT} / rows: {random_}"
        )
    return "\n".join(dict.fromkeys(out))


def pair(r: dict, key: str, fmt: str = ".2f") -> str:
    """'p50 / p95' of `key`, or – when the row has none."""
    if f"{key}_p50" not in r:
        return "–"
    return f"{r[f'{key}_p50']:{fmt}} / {r[f'{key}_p95']:{fmt}}"


def cell(r: dict, key: str, fmt: str) -> str:
    """A cell: – when the row has none, "undefined" when it is None (not measurable)."""
    if key not in r:
        return "–"
    return "undefined" if r[key] is None else format(r[key], fmt)


def recall_cell(r: dict, key: str) -> str:
    """recall@8 of `key` ('hnsw', 'small_hnsw'), with its 95 % interval and its
    queries when the row has them (`ann_recalls`); – when it has none."""
    if f"{key}_recall8" not in r:
        return "–"
    out = cell(r, f"{key}_recall8", ".3f")
    lo, hi = r.get(f"{key}_recall8_ci") or (None, None)
    if f"{key}_queries" in r:
        ci = "undefined" if lo is None or hi is None else f"{lo:.3f}-{hi:.3f}"
        out += f" (95 % {ci}, {r[f'{key}_queries']:,} q)"
    return out


def _reads(e: dict, key: str) -> str:
    """'index / heap' blocks a query read from outside shared_buffers, or –."""
    if f"{key}_idx_read" not in e:
        return "–"
    return f"{e[f'{key}_idx_read']:,.0f} / {e[f'{key}_heap_read']:,.0f}"


def render_sweep(rows: list[dict]) -> str:
    """The HNSW rows by vector source and ef_search, cold then warm ('' when no row has one)."""
    lines = [
        "| live rows | vectors / texts | distinct texts / vectors | build, m / ef_construction "
        "| build s / index MB "
        "| ef_search | HNSW p50 / p95 ms | recall@8 | recall@1 | exact instead "
        "| 1 % HNSW p50 / p95 ms | 1 % recall@8 | 1 % exact instead "
        "| pages | blocks read a query, index / heap | 1 %: index / heap | load 1/5/15 |",
        "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | ---: | ---: | --- |",
    ]
    for r in rows:
        graph = r.get("hnsw_graph")
        build = r.get("hnsw_build_mode", "–") + (f", m {graph[0]} / {graph[1]}" if graph else "")
        sweeps = [("cold", e) for e in r.get("ef_sweep", [])]
        sweeps += [(f"warm ({r.get('warm', 0):,} before)", e) for e in r.get("ef_sweep_warm", [])]
        for state, e in sweeps:
            lines.append(
                f"| {r['rows']:,} | {r.get('vectors', 'random')} / {r.get('texts', 'synthetic')} "
                f"| {cell(r, 'distinct_texts', ',d')} / {cell(r, 'distinct_vectors', ',d')} "
                f"| {build} | {r['hnsw_build_s']:.1f} / {r['hnsw_index_mb']:.0f} "
                f"| {e['ef_search']} "
                f"| {pair(e, 'hnsw')} | {recall_cell(e, 'hnsw')} "
                f"| {cell(e, 'hnsw_recall1', '.3f')} "
                f"| {cell(e, 'hnsw_fallbacks', 'd')} | {pair(e, 'small_hnsw')} "
                f"| {recall_cell(e, 'small_hnsw')} "
                f"| {cell(e, 'small_hnsw_fallbacks', 'd')} | {state} | {_reads(e, 'hnsw')} "
                f"| {_reads(e, 'small_hnsw')} | {r.get('load', '–')} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""
