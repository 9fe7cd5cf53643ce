"""Re-embed a store in place with another embedder (`memkit store reembed`).

A store's vectors are only comparable with vectors of the embedder that made
them, so a store records its embedder (`memkit.embed.embedder_meta`) and
refuses another. This moves it to a new one, on either backend, through the
store connection interface (`memkit.store.sqlite_db`):

1. Under the store-wide write lock, `meta` records the target
   (`reembed_to`, `_dim`, `_fingerprint`) and a cursor: from then on the store
   opens with neither embedder until the move is finished.
2. Rows are taken in rowid order, `batch` at a time, embedded outside any
   lock, and written in one transaction together with the cursor (the last
   rowid done) and the running count: a kill loses at most the batch in
   flight, and a rerun goes on from the cursor.
3. When no row is left past the cursor, the count of rows re-embedded must
   equal the rows in the table and every row must hold a vector; only then
   does `meta` name the new embedder (same transaction) and drop the cursor.

Every row is re-embedded, retired ones too (their history keeps vectors of
one embedder). Processes that hold the store open keep the old vectors in
memory: stop them first (a new opener is refused while the move runs).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from memkit.embed import Embedder, embedder_meta, normalize_rows
from memkit.errors import ConfigError, MemkitError

BATCH = 256
"""Rows a transaction re-embeds (the embedder gets them in one call)."""

_KEYS = ("reembed_to", "reembed_to_dim", "reembed_to_fingerprint", "reembed_cursor", "reembed_done")


class ReembedFailed(MemkitError):
    """The final count did not add up: the store still names the old embedder."""


@dataclasses.dataclass(frozen=True)
class ReembedReport:
    """What a `reembed` did: `rows` is the verified count at the end."""

    embedder: str
    previous: str | None
    rows: int
    embedded_now: int
    resumed: bool
    batches: int


def _meta(conn: Any) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def _put(conn: Any, items: dict[str, str]) -> None:
    for key, value in items.items():
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )


def _locked(conn: Any, fn: Callable[[], Any]) -> Any:
    """Run `fn` in one store-wide write transaction."""
    conn.begin_write(None)
    try:
        out = fn()
    except BaseException:
        conn.end_write(False)
        raise
    conn.end_write(True)
    return out


def _start(conn: Any, target: dict[str, str], where: str) -> tuple[dict[str, str], bool]:
    """Record the target (or check it against an unfinished one); (meta, resumed)."""
    meta = _meta(conn)
    if "reembed_to" in meta:
        if meta["reembed_to_fingerprint"] != target["embedder_fingerprint"]:
            raise ConfigError(
                f"store {where!r} has an unfinished reembed to {meta['reembed_to']!r} "
                f"(fingerprint {meta['reembed_to_fingerprint']}); finish it with "
                f"--embedder {meta['reembed_to']} before moving to {target['embedder']!r}"
            )
        return meta, True
    # an HNSW index casts vectors to the old dimension (Postgres; a no-op on SQLite)
    conn.drop_ann_indexes()
    _put(
        conn,
        {
            "reembed_to": target["embedder"],
            "reembed_to_dim": target["embedder_dim"],
            "reembed_to_fingerprint": target["embedder_fingerprint"],
            "reembed_cursor": "0",
            "reembed_done": "0",
        },
    )
    return _meta(conn), False


def _write_batch(conn: Any, rowids: list[int], vectors: np.ndarray) -> int:
    """Store one batch's vectors and move the cursor past it (one transaction)."""
    meta = _meta(conn)
    cursor, done = int(meta["reembed_cursor"]), int(meta["reembed_done"])
    for rowid, v in zip(rowids, vectors, strict=True):
        if rowid > cursor:  # a batch already written by a run that died after commit
            conn.execute("UPDATE memories SET embedding = ? WHERE rowid = ?", (conn.vec(v), rowid))
            done += 1
    _put(conn, {"reembed_cursor": str(max(cursor, rowids[-1])), "reembed_done": str(done)})
    return done


def _finish(conn: Any, target: dict[str, str], where: str) -> int:
    """Verify the count and name the new embedder; the verified row count."""
    meta = _meta(conn)
    cursor, done = int(meta["reembed_cursor"]), int(meta["reembed_done"])
    total, embedded, past = conn.execute(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE embedding IS NOT NULL), "
        "COUNT(*) FILTER (WHERE rowid > ?) FROM memories",
        (cursor,),
    ).fetchone()
    if past:
        return -1  # rows written since the last batch was read: go on
    if done != total or embedded != total:
        raise ReembedFailed(
            f"store {where!r}: reembed counted {done} rows re-embedded, the table holds "
            f"{total} rows ({embedded} with a vector); the store still names "
            f"{meta.get('embedder')!r}"
        )
    _put(conn, target)
    for key in _KEYS:
        conn.execute("DELETE FROM meta WHERE key = ?", (key,))
    return int(total)


def reembed(
    conn: Any,
    emb: Embedder,
    *,
    where: str,
    batch: int = BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Move the store behind `conn` to `emb` (see the module docstring).
    `progress(done, total)` is called after every committed batch."""
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ConfigError(f"batch={batch!r}: must be an int >= 1")
    target = embedder_meta(emb)
    before = _meta(conn)
    previous = before.get("embedder")
    if "reembed_to" not in before and all(before.get(k) == v for k, v in target.items()):
        (rows,) = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
        return ReembedReport(emb.name, previous, int(rows), 0, False, 0)
    meta, resumed = _locked(conn, lambda: _start(conn, target, where))
    cursor, now, batches = int(meta["reembed_cursor"]), 0, 0
    while True:
        rows = conn.execute(
            "SELECT rowid, content FROM memories WHERE rowid > ? ORDER BY rowid LIMIT ?",
            (cursor, batch),
        ).fetchall()
        if not rows:
            total = _locked(conn, lambda: _finish(conn, target, where))
            if total >= 0:
                return ReembedReport(emb.name, previous, total, now, resumed, batches)
            continue
        vectors = normalize_rows(emb.embed([content for _, content in rows]))
        if vectors.shape != (len(rows), int(emb.dim)):
            raise ConfigError(
                f"embedder {emb.name!r} returned {vectors.shape} for {len(rows)} texts "
                f"(want dim {emb.dim}); nothing of this batch was written"
            )
        rowids = [int(r[0]) for r in rows]
        done = _locked(conn, functools.partial(_write_batch, conn, rowids, vectors))
        cursor, now, batches = rowids[-1], now + len(rows), batches + 1
        if progress is not None:
            (total,) = conn.execute("SELECT COUNT(*) FROM memories").fetchone()
            progress(done, int(total))
