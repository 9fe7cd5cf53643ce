"""`copy_store(src, dst)`: move every row, history chain and rollout between stores.

Any backend to any backend (`memkit.store.backends` URLs: a SQLite path or
`sqlite:///...`, or `postgresql://...`). Lossless: ids, contents, tags,
confidences, timestamps, seen counts, `superseded_by` links (so every history
chain), embeddings (float32, bit for bit) and rollouts (evidence, staging,
consumption, parking and splits: failed passes, parked time, split sizes) arrive as they left, in
their original order. After the
copy, counts and content checksums of source and destination are compared;
any difference is an error. A destination that already holds rows is refused
unless `into_nonempty=True` (then the copied ids must be new to it).

Reads and writes the tables directly (one transaction on the destination),
so the in-memory indexes of stores open on the destination reload from the
change numbers the copy stamps. Leaves out: merging stores with colliding
ids, re-embedding (the destination must record the same embedder, or none).
"""

from __future__ import annotations

import abc
import hashlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from memkit.errors import EmbedderMismatch, MemkitError
from memkit.store import fold_listed, fold_local
from memkit.store.backends import is_postgres_url, open_store, sqlite_path
from memkit.store.fold_postings import Postings, read_mode, refresh
from memkit.text import trigrams

MEM_COLS = (
    "id", "scope_id", "kind", "content", "tags", "confidence", "source_run_id",
    "created_at", "seen_count", "last_seen_at", "superseded_by", "embedding",
)  # fmt: skip
ROLLOUT_COLS = (
    "id", "scope_id", "run_id", "messages", "final", "staged_at", "consumed_at",
    "failed_passes", "parked_at", "split_size", "parked_batch", "failed_as",
)  # fmt: skip


@dataclass(frozen=True)
class CopyReport:
    """What a copy moved and the checksums that proved it."""

    memories: int
    rollouts: int
    scopes: int
    memories_sha256: str
    rollouts_sha256: str


def _vec_bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    if hasattr(v, "to_numpy"):
        v = v.to_numpy()
    return np.asarray(v, dtype=np.float32).tobytes()


def _norm_mem(r: dict[str, Any]) -> dict[str, Any]:
    """One memory row in the backend-neutral form the checksum reads."""
    out = dict(r)
    out["tags"] = json.loads(r["tags"]) if isinstance(r["tags"], str) else list(r["tags"])
    out["embedding"] = _vec_bytes(r["embedding"])
    return out


def _norm_rollout(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["messages"] = json.loads(r["messages"]) if isinstance(r["messages"], str) else r["messages"]
    return out


def _digest(rows: Iterator[dict[str, Any]], cols: tuple[str, ...]) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for r in rows:
        vals = [r[c].hex() if isinstance(r[c], bytes) else r[c] for c in cols]
        h.update(json.dumps(vals, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
        n += 1
    return n, h.hexdigest()


# --- raw access to one backend's tables ------------------------------------------------


class _Raw(abc.ABC):
    """The tables of one store, read in their original order and written in one
    transaction. `ph` is the driver's placeholder."""

    ph = "?"
    conn: Any

    def execute(self, sql: str, args: tuple[Any, ...] | list[Any] = ()) -> Any:
        return self.conn.execute(sql.replace("?", self.ph), args)

    def meta(self) -> dict[str, str]:
        return dict(self.execute("SELECT key, value FROM meta").fetchall())

    def counts(self) -> tuple[int, int]:
        (m,) = self.execute("SELECT count(*) FROM memories").fetchone()
        (r,) = self.execute("SELECT count(*) FROM rollouts").fetchone()
        return int(m), int(r)

    def memories(self, ids: set[str] | None = None) -> Iterator[dict[str, Any]]:
        cur = self.execute(f"SELECT {', '.join(MEM_COLS)} FROM memories ORDER BY rowid")
        for row in cur:
            r = dict(zip(MEM_COLS, row, strict=True))
            if ids is None or r["id"] in ids:
                yield _norm_mem(r)

    def rollouts(self, ids: set[str] | None = None) -> Iterator[dict[str, Any]]:
        cur = self.execute(f"SELECT {', '.join(ROLLOUT_COLS)} FROM rollouts ORDER BY seq")
        for row in cur:
            r = dict(zip(ROLLOUT_COLS, row, strict=True))
            if ids is None or r["id"] in ids:
                yield _norm_rollout(r)

    def close(self) -> None:
        self.conn.close()

    @abc.abstractmethod
    def write(
        self, meta: dict[str, Any], mems: list[dict[str, Any]], rolls: list[dict[str, Any]]
    ) -> None:
        """Insert these rows (ids kept) in one transaction."""


class _SQLiteRaw(_Raw):
    def __init__(self, path: str):
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=60)

    def write(
        self, meta: dict[str, Any], mems: list[dict[str, Any]], rolls: list[dict[str, Any]]
    ) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for k, v in meta.items():
                c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", (k, v))
            seq = c.execute("SELECT COALESCE(MAX(change_seq), 0) FROM memories").fetchone()[0] + 1
            c.executemany(
                "INSERT INTO memories (id, scope_id, kind, content, tags, confidence, "
                "source_run_id, created_at, seen_count, last_seen_at, superseded_by, embedding, "
                "ngrams, change_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (
                        *(r[k] for k in MEM_COLS[:4]),
                        json.dumps(r["tags"], ensure_ascii=False),
                        *(r[k] for k in MEM_COLS[5:11]),
                        r["embedding"],
                        len(trigrams(r["content"])),
                        seq,
                    )
                    for r in mems
                ),
            )
            c.executemany(
                f"INSERT INTO rollouts ({', '.join(ROLLOUT_COLS)}) "
                f"VALUES ({', '.join('?' * len(ROLLOUT_COLS))})",
                (
                    (*(r[k] for k in ROLLOUT_COLS[:3]),
                     json.dumps(r["messages"], ensure_ascii=False),
                     *(r[k] for k in ROLLOUT_COLS[4:]))
                    for r in rolls
                ),
            )  # fmt: skip
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise


class _PostgresRaw(_Raw):
    ph = "%s"

    def __init__(self, dsn: str):
        import psycopg
        from pgvector.psycopg import register_vector

        self.conn = psycopg.connect(dsn, autocommit=True)
        register_vector(self.conn)

    def write(
        self, meta: dict[str, Any], mems: list[dict[str, Any]], rolls: list[dict[str, Any]]
    ) -> None:
        c = self.conn
        with c.transaction():
            for k, v in meta.items():
                c.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING", (k, v)
                )
            seqs: dict[str, int] = {}
            for scope in sorted({r["scope_id"] for r in mems}):
                seqs[scope] = c.execute(  # the scope's write lock and next change number
                    "INSERT INTO scopes (scope_id, seq) VALUES (%s, 1) ON CONFLICT (scope_id) "
                    "DO UPDATE SET seq = scopes.seq + 1 RETURNING seq",
                    (scope,),
                ).fetchone()[0]
            with c.cursor() as cur:
                cur.executemany(
                    "INSERT INTO memories (id, scope_id, kind, content, tags, confidence, "
                    "source_run_id, created_at, seen_count, last_seen_at, superseded_by, "
                    "embedding, change_seq) VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (
                            *(r[k] for k in MEM_COLS[:4]),
                            json.dumps(r["tags"], ensure_ascii=False),
                            *(r[k] for k in MEM_COLS[5:11]),
                            None
                            if r["embedding"] is None
                            else np.frombuffer(r["embedding"], dtype=np.float32),
                            seqs[r["scope_id"]],
                        )
                        for r in mems
                    ],
                )
                cur.executemany(
                    f"INSERT INTO rollouts ({', '.join(ROLLOUT_COLS)}) "
                    f"VALUES ({', '.join(['%s'] * len(ROLLOUT_COLS))})",
                    [
                        (*(r[k] for k in ROLLOUT_COLS[:3]),
                         json.dumps(r["messages"], ensure_ascii=False),
                         *(r[k] for k in ROLLOUT_COLS[4:]))
                        for r in rolls
                    ],
                )  # fmt: skip
            postings = self._post(seqs)
        if postings is not None:  # after the commit, as a bulk load's (index-only probes)
            refresh(self.conn, postings)

    def _post(self, seqs: dict[str, int]) -> Postings | None:
        """The copied rows' fold-in postings, when the destination keeps them
        (`fold_search="server"`: `memkit.store.fold_listed`), in the copy's
        transaction; the destination's postings, or None in client mode."""
        from memkit.store.postgres import PgDb

        postings = read_mode(self.conn)
        if postings is not None:  # rows of listed keys; keys past the default cap's share
            db = PgDb(self.conn)
            for scope, seq in seqs.items():
                fold_listed.post_written(db, postings, scope, seq)
            ahead = fold_local.ahead_rows(fold_local.LOCAL_ROWS, fold_local.LIST_AT)
            fold_listed.list_big(db, postings, ahead)
        return postings


def _raw(url: str) -> _Raw:
    return _PostgresRaw(url) if is_postgres_url(url) else _SQLiteRaw(sqlite_path(url))


# --- the copy ------------------------------------------------------------------------------


def copy_store(src: str, dst: str, *, into_nonempty: bool = False) -> CopyReport:
    """Copy every memory and rollout of `src` into `dst` (created and migrated when
    new), then verify counts and content checksums. MemkitError on a non-empty
    destination (unless `into_nonempty`), colliding ids, another embedder, or
    any difference after the copy (the destination is then left as written, and
    the message says so)."""
    if str(src) == str(dst):
        raise MemkitError(f"store copy: source and destination are the same ({src!r})")
    open_store(src, embedder=None, read_only=True).close()  # a store of this version, or refused
    open_store(dst, embedder=None).close()  # create and migrate the destination
    s, d = _raw(src), _raw(dst)
    try:
        # the fold-in mode is the destination's own (its postings: `write`)
        meta = {k: v for k, v in s.meta().items() if not k.startswith("fold_")}
        mems = list(s.memories())
        rolls = list(s.rollouts())
        dmeta = d.meta()
        dm, dr = d.counts()
        if (dm or dr) and not into_nonempty:
            raise MemkitError(
                f"store copy: destination {dst!r} is not empty ({dm} memories, {dr} rollouts); "
                "pass --into-nonempty to add to it"
            )
        for key in ("embedder", "embedder_dim"):
            if key in meta and key in dmeta and meta[key] != dmeta[key]:
                raise EmbedderMismatch(
                    f"store copy: source {key} is {meta[key]!r}, destination's is {dmeta[key]!r}"
                )
        mem_ids = {r["id"] for r in mems}
        roll_ids = {r["id"] for r in rolls}
        if dm or dr:
            clash = {r["id"] for r in d.memories(mem_ids)} | {r["id"] for r in d.rollouts(roll_ids)}
            if clash:
                raise MemkitError(
                    f"store copy: {len(clash)} id(s) already in the destination, "
                    f"e.g. {sorted(clash)[0]!r}; nothing copied"
                )
        d.write(meta, mems, rolls)
        want_m = _digest(iter(mems), MEM_COLS)
        want_r = _digest(iter(rolls), ROLLOUT_COLS)
        got_m = _digest(d.memories(mem_ids), MEM_COLS)
        got_r = _digest(d.rollouts(roll_ids), ROLLOUT_COLS)
        if (got_m, got_r) != (want_m, want_r):
            raise MemkitError(
                f"store copy: verification failed: memories {got_m[0]}/{want_m[0]} "
                f"(sha256 {got_m[1][:12]} vs {want_m[1][:12]}), rollouts {got_r[0]}/{want_r[0]} "
                f"(sha256 {got_r[1][:12]} vs {want_r[1][:12]}); the destination holds what "
                "was written"
            )
        return CopyReport(
            memories=want_m[0],
            rollouts=want_r[0],
            scopes=len({r["scope_id"] for r in mems}),
            memories_sha256=want_m[1],
            rollouts_sha256=want_r[1],
        )
    finally:
        s.close()
        d.close()
