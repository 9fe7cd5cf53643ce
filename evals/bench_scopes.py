"""`memkit bench scopes`: one process writing to many scopes, under each index cache bound.

What a long-lived store process holds when it serves many scopes (an API
server writing for many agents), and what its bound (`index_cache_mb`,
`memkit.store.index`) costs. For each cap (the default, the smaller ones
asked for, and none) a fresh process (spawned: nothing inherited) opens an
empty store and writes `--rows` rows to each of `--scopes` scopes
round-robin, `remember_many` of `--batch` synthetic texts a call (fold-in
decided exactly, as always), then recalls every scope once by vector and once
by keyword, round-robin. It reports the writes/s and recalls/s (reloads of
evicted scopes are in them), its RSS after open, at the end and at its peak
(VmHWM), and what the indexes said they held (`cache_stats`) and how many
scopes they dropped.

Vectors come from a seeded 256-d embedder (a text's vector is a function of
the text, ~10 us), so neither an embedder's weights nor its time hide the
store's. SQLite by default (a file in a temporary folder); `--backend postgres`
runs on `--pg-dsn` or a private pgserver (`evals.pg_local`), each cap in a
schema of its own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench_clients import peak_rss_mb, spawned, status_mb
from evals.bench_data import synthetic_texts

DIM = 256


class SeededEmbedder:
    """Each text's vector drawn from a generator seeded by the text's hash."""

    name = f"bench-seeded-{DIM}"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(DIM)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _texts(scope: int, part: int, n: int) -> list[str]:
    return synthetic_texts(random.Random(f"{scope}/{part}"), n)


def _run(url: str, cap: Any, scopes: int, rows: int, batch: int, out: Any) -> None:
    """One cap's run, in a process of its own (see the module docstring)."""
    from memkit.store import is_postgres_url, open_scratch_store, open_store

    opener = open_scratch_store if is_postgres_url(url) else open_store  # a file on SQLite
    store = opener(url, embedder=SeededEmbedder(), index_cache_mb=cap)
    names = [f"agent-{i:05d}" for i in range(scopes)]
    start_rss = status_mb("VmRSS")
    t = time.perf_counter()
    for part in range(rows // batch):
        for i, scope in enumerate(names):
            store.remember_many(scope, _texts(i, part, batch))
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    for i, scope in enumerate(names):
        store.recall(scope, _texts(i, 0, 1)[0])
    for i, scope in enumerate(names):
        store.recall(scope, _texts(i, 1, 1)[0].split()[0], query_embedding=np.zeros(DIM))
    recall_s = time.perf_counter() - t
    stats = store.cache_stats()
    rss, peak = status_mb("VmRSS"), peak_rss_mb()
    store.close()
    out.put(
        {
            "cap_mb": cap,
            "writes_per_s": scopes * (rows // batch) * batch / write_s,
            "recalls_per_s": 2 * scopes / recall_s,
            "rss_start_mb": start_rss,
            "rss_end_mb": rss,
            "rss_peak_mb": peak,
            "cache_mb": stats["bytes"] / 2**20,
            "scopes_held": len(stats["scopes"]),
            "evicted": stats["evicted"],
        }
    )


def run_cap(url: str, cap: Any, scopes: int, rows: int, batch: int) -> dict[str, Any]:
    """One cap's row, from a freshly spawned process (an error naming its exit code
    when it dies without one)."""
    return dict(spawned(_run, url, cap, scopes, rows, batch))


def _mb(value: float | None) -> str:
    """An RSS cell, "undefined" where /proc did not say it."""
    return "undefined" if value is None else f"{value:,.0f}"


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (
        f"{meta['scopes']} scopes x {meta['rows']} rows, remember_many of {meta['batch']}, "
        f"{meta['backend']} (load before: {meta['load']})\n\n"
        "| cap MB | writes/s | recalls/s | RSS start | RSS end | RSS peak | "
        "indexes MB | scopes held | evicted |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {'none' if r['cap_mb'] is None else r['cap_mb']} | {r['writes_per_s']:,.0f} | "
        f"{r['recalls_per_s']:,.0f} | {_mb(r['rss_start_mb'])} | {_mb(r['rss_end_mb'])} | "
        f"{_mb(r['rss_peak_mb'])} | {r['cache_mb']:,.0f} | {r['scopes_held']} | "
        f"{r['evicted']:,} |\n"
        for r in rows
    )
    return head + body


def _cap(text: str) -> Any:
    """An `index_cache_mb` value from `--caps` (MB, default or none), checked by a
    store's own open before any run."""
    from memkit.errors import ConfigError
    from memkit.store import INDEX_CACHE_MB, open_store

    named = {"none": None, "default": INDEX_CACHE_MB}
    try:
        value = named[text] if text in named else float(text)
    except ValueError:
        raise ConfigError(f"--caps {text!r}: want a number of MB, default or none") from None
    open_store(":memory:", embedder=None, index_cache_mb=value).close()
    return value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit bench scopes", description=__doc__.split("\n")[0])
    ap.add_argument("--scopes", type=int, default=200, help="scopes written round-robin")
    ap.add_argument("--rows", type=int, default=2000, help="rows written to each scope")
    ap.add_argument("--batch", type=int, default=50, help="items per remember_many")
    ap.add_argument(
        "--caps", default="default,256,none", help="index_cache_mb values: MB, default, none"
    )
    ap.add_argument(
        "--backend", choices=("sqlite", "postgres"), default="sqlite", help="the store's backend"
    )
    ap.add_argument("--pg-dsn", default=None, help="a Postgres server (default: a private one)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    from memkit.errors import ConfigError

    for name in ("scopes", "rows", "batch"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name} {getattr(args, name)}: must be >= 1")
    if args.rows % args.batch:
        raise ConfigError(f"--rows {args.rows}: must be a multiple of --batch {args.batch}")
    caps = [_cap(c.strip()) for c in args.caps.split(",")]
    meta = {
        "scopes": args.scopes,
        "rows": args.rows,
        "batch": args.batch,
        "backend": args.backend,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    rows = []
    if args.backend == "postgres":
        from evals.pg_local import local_postgres

        with local_postgres(args.pg_dsn) as dsn:
            for cap in caps:
                rows.append(run_cap(dsn, cap, args.scopes, args.rows, args.batch))
    else:
        with tempfile.TemporaryDirectory(prefix="memkit-bench-scopes-") as tmp:
            for k, cap in enumerate(caps):
                url = str(Path(tmp) / f"store-{k}.db")
                rows.append(run_cap(url, cap, args.scopes, args.rows, args.batch))
    meta["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(render(rows, meta))
    print(f"load after: {meta['load_after']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0
