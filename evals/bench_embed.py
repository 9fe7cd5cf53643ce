"""`memkit bench embed`: each embedder's speed and quality, side by side in one run.

For every `--embedder` (default: wordllama, minilm, hashing) the same run measures:
* texts/s embedding one text per call and in batches of `--batch` (the
  texts: seeded synthetic memories, `evals.bench_data.synthetic_texts`);
* remember/s end to end (the embedder embeds each write inside `remember`)
  into a SQLite store already holding 10k and 100k rows (`--sizes`,
  bulk-loaded with random unit vectors of the embedder's dimension: the
  store's cost does not depend on what the vectors say), and the ratio to the
  first embedder's rate in the same run;
* STS-B dev Spearman correlation of cosine with the gold score (all 1,500
  pairs; published for all-MiniLM-L6-v2 by sentence-transformers: ~0.82);
* PAWS-Wiki (test, 8,000 pairs; adversarial word-order swaps) and MRPC (test,
  1,725 pairs) ROC-AUC of cosine for paraphrase vs not.

The pair sets are read in place from `--datasets` (default
`../shared/datasets`); without them the quality columns are "undefined".
Absolute rates move with the machine's load; compare embedders within a run.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memkit.errors import ConfigError

DEFAULT_EMBEDDERS = ("wordllama", "minilm", "hashing")


def texts_per_s(emb: Any, texts: Sequence[str], batch: int) -> float:
    """Texts embedded per second, `batch` texts per call (after one warm call)."""
    emb.embed([texts[0]])
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        emb.embed(list(texts[i : i + batch]))
    return len(texts) / (time.perf_counter() - t0)


def remember_per_s(emb: Any, rows: int, writes: Sequence[str], tmp: Path) -> float:
    """remember/s end to end into a store holding `rows` rows (indexes loaded first)."""
    from evals.bench_data import synthetic_texts
    from memkit.store import SQLiteStore

    rng = np.random.default_rng(rows)
    vecs = rng.standard_normal((rows, emb.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    path = tmp / f"{emb.name}-{rows}.db"
    with SQLiteStore.open(str(path), embedder=emb) as store:
        store.bulk_load("bench", synthetic_texts(random.Random(rows), rows), vecs)
        store.remember("bench", "warm the fold-in index and the embedder")
        t0 = time.perf_counter()
        for text in writes:
            store.remember("bench", text)
        rate = len(writes) / (time.perf_counter() - t0)
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    return rate


def cosines(emb: Any, pairs: Sequence[Any]) -> np.ndarray:
    """Cosine of each pair's two texts (rows are L2-normalised)."""
    a = emb.embed([p.a for p in pairs])
    b = emb.embed([p.b for p in pairs])
    return np.einsum("ij,ij->i", a, b)


def quality(emb: Any, sets: dict[str, list[Any]]) -> dict[str, float]:
    """STS-B Spearman and paraphrase ROC-AUC per set (NaN: set not found)."""
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    out = {}
    for name, pairs in sets.items():
        if not pairs:
            out[name] = float("nan")
        elif name == "stsb_spearman":
            out[name] = float(spearmanr(cosines(emb, pairs), [p.score for p in pairs]).statistic)
        else:
            labels = [p.label == "paraphrase" for p in pairs]
            out[name] = float(roc_auc_score(labels, cosines(emb, pairs)))
    return out


def load_sets(datasets: str) -> dict[str, list[Any]]:
    """The three pair sets; an empty list where the folder is missing."""
    from evals.adapters import load_mrpc, load_paws, load_stsb
    from memkit.errors import MemkitError

    def read(fn: Callable[[], list[Any]]) -> list[Any]:
        try:
            return fn()
        except (MemkitError, OSError):
            return []

    # every STS-B pair, graded: cut-offs that keep all of 0..5
    return {
        "stsb_spearman": read(lambda: load_stsb(datasets, paraphrase_at=0.0, distinct_at=-1.0)),
        "paws_auc": read(lambda: load_paws(datasets)),
        "mrpc_auc": read(lambda: load_mrpc(datasets)),
    }


def bench_embedder(spec: str, args: argparse.Namespace, sets: dict, tmp: Path, log) -> dict:
    from evals.bench_data import synthetic_texts
    from memkit.embed import get_embedder

    emb = get_embedder(spec)
    if emb is None:
        raise ConfigError(f"embedder {spec!r}: none to benchmark")
    texts = synthetic_texts(random.Random(7), args.texts)
    writes = [f"{t} #{i}" for i, t in enumerate(texts[: args.writes])]
    row: dict[str, Any] = {"embedder": emb.name, "dim": emb.dim}
    log(f"{emb.name}: texts/s")
    row["single_per_s"] = texts_per_s(emb, texts, 1)
    row["batched_per_s"] = texts_per_s(emb, texts, args.batch)
    for n in args.sizes:
        log(f"{emb.name}: remember/s at {n:,} rows")
        row[f"remember_per_s_{n}"] = remember_per_s(emb, n, writes, tmp)
    log(f"{emb.name}: STS-B, PAWS, MRPC")
    row.update(quality(emb, sets))
    return row


def _fmt(x: float, digits: int) -> str:
    return "undefined" if x != x else f"{x:,.{digits}f}"


def render(rows: list[dict], sizes: list[int], batch: int) -> str:
    head = ["embedder", "dim", "texts/s single", f"texts/s batch {batch}"]
    head += [f"remember/s @{n:,} rows (x first)" for n in sizes]
    head += ["STS-B Spearman", "PAWS AUC", "MRPC AUC"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = rows[0]
    for r in rows:
        cells = [r["embedder"], str(r["dim"]), _fmt(r["single_per_s"], 0)]
        cells.append(_fmt(r["batched_per_s"], 0))
        for n in sizes:
            k = f"remember_per_s_{n}"
            cells.append(f"{_fmt(r[k], 0)} ({r[k] / base[k]:.2f}x)")
        cells += [_fmt(r[k], 3) for k in ("stsb_spearman", "paws_auc", "mrpc_auc")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit bench embed", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--embedder",
        action="append",
        help=f"an embedder spec (repeatable; default {', '.join(DEFAULT_EMBEDDERS)})",
    )
    ap.add_argument("--sizes", default="10000,100000", help="store rows for remember/s")
    ap.add_argument("--texts", type=int, default=512, help="texts timed per rate (default 512)")
    ap.add_argument("--batch", type=int, default=256, help="texts per batched call (default 256)")
    ap.add_argument("--writes", type=int, default=200, help="remembers per size (default 200)")
    ap.add_argument(
        "--datasets",
        default="../shared/datasets",
        help="folder holding sts_b/, paws/ and mrpc/ (default ../shared/datasets)",
    )
    ap.add_argument("--quiet", action="store_true", help="only print the table")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: want comma-separated row counts")
    for name in ("texts", "batch", "writes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if any(n < 1 for n in args.sizes):
        ap.error("--sizes: every row count must be >= 1")

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    sets = load_sets(args.datasets)
    log(", ".join(f"{k}: {len(v):,} pairs" for k, v in sets.items()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="memkit-bench-embed-") as tmp:
        for spec in args.embedder or DEFAULT_EMBEDDERS:
            rows.append(bench_embedder(spec, args, sets, Path(tmp), log))
    print(render(rows, args.sizes, args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
