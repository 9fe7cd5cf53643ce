"""The neighbourhood geometry of a bench corpus: why HNSW's recall@8 differs by corpus.

`memkit bench geometry [--texts SOURCE] [--sizes N,...] [--queries Q] [--seed S]
[--json PATH]` embeds a corpus with the default embedder (WordLlama, 256-d),
rewords Q stored texts as the store bench does (`bench_data.perturbed`) and
ranks every stored row by exact cosine for each query (a numpy scan in blocks,
no store, no index). Per size it reports, over the queries:

- `own_text_first`: queries whose own stored text ranks first;
- `median_first`, `median_gap_1_2`: the first cosine, and how far the second is below it;
- `median_8th`: the 8th cosine (recall@8's boundary);
- `median_gap_8_9`, `q25_gap_8_9`: how far the 9th is below the 8th;
- `median_ranks_9_40_within_001_of_8th`: rows ranked 9-40 within 0.01 of the 8th
  (near-ties an approximate walk must separate to score a full recall@8).

Fewer near-ties at the 8th place means fewer rows the graph walk must find;
docs/postgres-scale.md uses these numbers to explain why real text reaches
recall@8 0.95 at a quarter of the synthetic corpus's `ef_search`. Ties in a
ranking go to the lower row index (stable order). It measures the corpus, not
the store: no fold-in, no weights, no floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable, Sequence

import numpy as np

from evals.bench_data import (
    embedded,
    file_sentences,
    longmemeval_sentences,
    perturbed,
    synthetic_texts,
)
from memkit.errors import ConfigError

TOP = 40
"""Ranks kept per query (the near-tie count reads ranks 9-40)."""
BLOCK = 131_072
"""Rows scored at once (a block's scores for 100 queries: ~50 MB of float32)."""
NEAR = 0.01
"""How close to the 8th cosine a row ranked 9-40 counts as a near-tie."""


def top_ranks(vecs: np.ndarray, queries: np.ndarray, k: int = TOP) -> tuple[np.ndarray, np.ndarray]:
    """(indices, cosines) of each query's k best rows, best first, ties to the lower
    index; `vecs` and `queries` unit rows. Scanned `BLOCK` rows at a time; a block
    keeps every row at or above its k-th score, so a tie at the cut is kept too."""
    k = min(k, vecs.shape[0])
    best = [(np.empty(0, np.int64), np.empty(0, np.float32)) for _ in range(queries.shape[0])]
    for start in range(0, vecs.shape[0], BLOCK):
        scores = (queries @ vecs[start : start + BLOCK].T).astype(np.float32)
        kb = min(k, scores.shape[1])
        for q, row in enumerate(scores):
            cut = np.partition(row, row.size - kb)[row.size - kb]
            keep = np.flatnonzero(row >= cut)
            i = np.concatenate([best[q][0], keep + start])
            s = np.concatenate([best[q][1], row[keep]])
            order = np.lexsort((i, -s))[:k]
            best[q] = (i[order], s[order])
    return np.stack([b[0] for b in best]), np.stack([b[1] for b in best])


def geometry(ranked_i: np.ndarray, ranked_s: np.ndarray, own: Sequence[int]) -> dict[str, float]:
    """The module docstring's statistics of ranked rows (`top_ranks`), each query's
    own row index in `own`. A ConfigError when fewer than 9 rows are ranked (the
    8th-9th gap is undefined, not 0)."""
    if ranked_s.shape[1] < 9:
        raise ConfigError(f"geometry needs at least 9 ranked rows a query, got {ranked_s.shape[1]}")
    s = ranked_s.astype(np.float64)
    eighth = s[:, 7]
    gap89 = eighth - s[:, 8]
    near = (s[:, 8:TOP] >= (eighth - NEAR)[:, None]).sum(axis=1)
    return {
        "own_text_first": int((ranked_i[:, 0] == np.asarray(own)).sum()),
        "median_first": float(np.median(s[:, 0])),
        "median_gap_1_2": float(np.median(s[:, 0] - s[:, 1])),
        "median_8th": float(np.median(eighth)),
        "median_gap_8_9": float(np.median(gap89)),
        "q25_gap_8_9": float(np.percentile(gap89, 25)),
        "median_ranks_9_40_within_001_of_8th": float(np.median(near)),
    }


def reworded(texts: Sequence[str], queries: int, seed: int) -> tuple[list[int], list[str]]:
    """`queries` distinct stored rows, seeded, and each one's text reworded."""
    if not 0 < queries <= len(texts):
        raise ConfigError(f"--queries {queries}: want 1..{len(texts)} (the corpus's rows)")
    rng = random.Random(seed)
    own = rng.sample(range(len(texts)), queries)
    return own, [perturbed(rng, texts[i]) for i in own]


def text_source(spec: str) -> Callable[[int], list[str]]:
    """The texts of a size: synthetic ones made for it (as the store bench's), or a
    real pool's first n (a ConfigError when the pool is smaller)."""
    if spec == "synthetic":
        return lambda n: synthetic_texts(random.Random(n), n)
    if spec.startswith("longmemeval:"):
        pool = longmemeval_sentences(spec.split(":", 1)[1])
    elif spec.startswith("file:"):
        pool = file_sentences(spec.split(":", 1)[1])
    else:
        raise ConfigError(
            f"--texts {spec!r}: want 'synthetic', 'longmemeval:<dir>' or 'file:<path>'"
        )

    def take(n: int) -> list[str]:
        if n > len(pool):
            raise ConfigError(f"--texts {spec}: holds {len(pool):,} texts, fewer than {n:,}")
        return pool[:n]

    return take


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="memkit bench geometry", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument(
        "--texts", default="synthetic", help="synthetic, longmemeval:<dir> or file:<path>"
    )
    ap.add_argument("--sizes", default="100000", help="comma-separated row counts")
    ap.add_argument("--queries", type=int, default=100, help="reworded queries per size")
    ap.add_argument("--seed", type=int, default=12345, help="the queries' seed")
    ap.add_argument("--json", default=None, help="also write the result to this JSON file")
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: want comma-separated row counts")
    if not sizes or min(sizes) < 9:
        ap.error(f"--sizes {args.sizes!r}: want row counts of at least 9")
    try:
        texts_of = text_source(args.texts)
    except ConfigError as e:
        ap.error(str(e))
    out: dict = {"texts": args.texts, "queries": args.queries, "seed": args.seed, "sizes": {}}
    out["load_start"] = "/".join(f"{x:.1f}" for x in os.getloadavg())
    real = args.texts != "synthetic"
    pool_vecs = None
    t = time.perf_counter()
    if real:  # one embedding of the largest size; each size its first n rows
        pool_vecs = embedded(texts_of(max(sizes)))
    for n in sizes:
        texts = texts_of(n)
        vecs = pool_vecs[:n] if pool_vecs is not None else embedded(texts)
        own, qtexts = reworded(texts, args.queries, args.seed)
        ranked_i, ranked_s = top_ranks(vecs, embedded(qtexts))
        out["sizes"][str(n)] = stats = geometry(ranked_i, ranked_s, own)
        print(f"{n:>10,} rows: " + ", ".join(f"{k} {v:.4g}" for k, v in stats.items()), flush=True)
    out["seconds"] = time.perf_counter() - t
    out["load_end"] = "/".join(f"{x:.1f}" for x in os.getloadavg())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
