"""The store (SPEC §1-4) and the store side of consolidation (§7), on any backend.

This package reads as the SPEC's rules: what a write folds into (§3), how
recall chooses its path and ranks (§4, the arithmetic in `memkit.store.rank`),
and what a consolidation commit checks and applies (§7.7). They live once, in
`SQLStore`, whose SQL runs unchanged on both backends: `SQLiteStore`
(`memkit.store.sqlite`) and `memkit.store.postgres.PostgresStore` add only
how to connect, and a connection (`memkit.store.sqlite_db`) adds what differs
between the engines (write locks, change numbers, how a vector is stored).
The machinery is apart: the in-memory indexes and the one write path that
keeps them true across connections are `memkit.store.index` and
`memkit.store.write_txn`, the row record
and its SQL statements `memkit.store.rows`, the schema `memkit.store.schema`.

`SQLStore` is assembled from one layer per responsibility, each its own
module: `memkit.store.base` (the connection, lock, indexes and write path),
`memkit.store.writes` (fold-in, remember, curation), `memkit.store.reads`
(recall and the other reads) and `memkit.store.rollouts` (the rollout queue and
its commit); this module adds what spans them (re-embedding, the digest) and
the recorded embedder both backends check when they open.

Design choices, each for a measured reason:

* WAL, autocommit connection, an explicit write transaction for every write
  (`memkit.store.write_txn.Write`: `BEGIN IMMEDIATE` on SQLite, the scope's row lock on
  Postgres), so fold detection and the write it decides are one transaction
  even across processes (SPEC §3.7), and readers never block writers.
* Fold-in and recall use in-memory indexes (`memkit.store.writes`,
  `memkit.store.reads` say how); embedding happens before the store lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from memkit.embed import Embedder, embedder_meta, get_embedder
from memkit.errors import ConfigError, EmbedderMismatch
from memkit.store.index import Indexes
from memkit.store.rollouts import RolloutQueue
from memkit.store.writes import Writes


class SQLStore(RolloutQueue, Writes):
    """The memory store's rules over one connection of either backend (see the
    module docstring); open one with `SQLiteStore.open` or `PostgresStore.open`.

    Thread-safe (one lock around the connection).
    """

    def reembed(
        self,
        embedder: str | Embedder,
        *,
        batch: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> Any:
        """(memkit) Re-embed every row in place with `embedder`, batch by batch,
        resumable after a kill (`memkit.store.reembed`); afterwards the store records
        and uses it. Returns a `memkit.store.reembed.ReembedReport`. Open the store
        with `embedder=None` to move it off an embedder it refuses."""
        from memkit.store.reembed import reembed

        emb = get_embedder(embedder)
        if emb is None:
            raise ConfigError("reembed needs an embedder (got None)")
        with self._lock:
            report = reembed(self._conn, emb, where=self.path, batch=batch, progress=progress)
            self._ix.forget()
            old = self._ix
            self.embedder = emb
            self._ix = Indexes(self._conn, int(emb.dim), None, old.held.cap, old.window)
            self._ix.local = old.local
        return report

    def digest(self) -> dict[str, Any]:
        """What is stored, summarised: row counts and a SHA-256 over every column
        of every memory (embedding and change number included) and of every
        staged rollout, in insertion order, plus `problems`, the engine's own
        consistency check (SQLite's `PRAGMA integrity_check`; [] when sound).

        Read-only, on this store's own connection under its lock, so an
        in-memory store can be checked too. Two digests of one store are equal
        exactly when nothing stored changed in between: tests use it to show
        that a refused call changed nothing. (Not comparable across backends:
        each hashes its own column encodings; `memkit store copy` verifies a
        copy its own way.)"""
        with self._lock:
            c = self._conn
            out: dict[str, Any] = {"problems": c.integrity_problems()}
            for table, order in (("memories", "rowid"), ("rollouts", "seq")):
                h, n = hashlib.sha256(), 0
                cur = c.execute(f"SELECT * FROM {table} ORDER BY {order}")
                names = [d[0] for d in cur.description]
                for row in cur.fetchall():
                    vals = [
                        c.unvec(v).tobytes().hex() if k == "embedding" and v is not None else v
                        for k, v in zip(names, row, strict=True)
                    ]
                    h.update(repr(vals).encode("utf-8", "surrogatepass") + b"\n")
                    n += 1
                out[table], out[f"{table}_sha256"] = n, h.hexdigest()
        return out


def record_embedder(conn: Any, emb: Embedder | None, where: str) -> None:
    """Record `emb` as the store's embedder (name, dimension, fingerprint) on
    first use, under the store-wide write lock; EmbedderMismatch if another one
    is recorded or a reembed is unfinished (either backend's connection). A
    store that records a name and dimension but no fingerprint (written before
    memkit recorded one) adopts the opener's fingerprint when name and dimension
    agree: they were the whole identity it was written under."""
    if emb is None:
        return
    conn.begin_write(None)
    try:
        meta = check_recorded_embedder(conn, emb, where)
        want = embedder_meta(emb)
        missing = [(k, v) for k, v in want.items() if k not in meta]
        if missing:
            for key, value in missing:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, value),
                )
        conn.end_write(True)
    except BaseException:
        conn.end_write(False)
        raise


def describe_embedder(meta: Mapping[str, str], prefix: str = "embedder") -> str:
    """'name' (dim D, fingerprint F) from a store's meta rows (or an embedder's)."""
    fp = meta.get(f"{prefix}_fingerprint") or "not recorded"
    return f"{meta.get(prefix)!r} (dim {meta.get(f'{prefix}_dim')}, fingerprint {fp})"


def check_recorded_embedder(conn: Any, emb: Embedder, path: str) -> dict[str, str]:
    """The store's meta rows; EmbedderMismatch (naming both) unless the recorded
    embedder (if any) is `emb` by name, dimension and, when recorded, fingerprint,
    or while a `reembed` is unfinished."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    mine = embedder_meta(emb)
    how = f"memkit store reembed --db {path} --embedder {emb.name}"
    if "reembed_to" in meta:
        raise EmbedderMismatch(
            f"store {path!r} is being re-embedded from {describe_embedder(meta)} to "
            f"{describe_embedder(meta, 'reembed_to')}, unfinished; refusing to open it with "
            f"{describe_embedder(mine)}: run `memkit store reembed --db {path} --embedder "
            f"{meta['reembed_to']}` to finish"
        )
    if meta.get("embedder") is None:
        return meta
    differs = [
        k
        for k in mine
        if k in meta
        and meta[k] != mine[k]
        and not (k == "embedder_dim" and "0" in (meta[k], mine[k]))  # a dim learned later
    ]
    if differs:
        raise EmbedderMismatch(
            f"store {path!r} was built with embedder {describe_embedder(meta)}; refusing to "
            f"open it with {describe_embedder(mine)}; re-embed it first: `{how}`"
        )
    return meta
