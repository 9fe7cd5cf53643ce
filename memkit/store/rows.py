"""Rows of the `memories` table as a named record, and the statements the store's
rules share (insert, retire, look up).

Leaves out every rule: which row to fold into, what recall ranks, what a
pass may change are `memkit.store`'s. Leaves out transactions too: each
function runs on the connection it is given (a `memkit.store.sqlite_db` connection
of either backend: the SQL is written once), inside the caller's write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from memkit.types import Memory

COLS = (
    "rowid, id, scope_id, kind, content, tags, confidence, source_run_id, "
    "created_at, seen_count, last_seen_at, superseded_by"
)
"""The columns of a `Row`, in order (never the embedding: callers ask for it)."""

CHUNK = 900
"""Bound parameters per `IN (...)` (SQLite's default limit is 999)."""

Conn = Any
"""A `memkit.store.sqlite_db` connection: `SQLiteDb` or `memkit.store.postgres.PgDb`."""


class Row(NamedTuple):
    """One `memories` row as `SELECT {COLS}` returns it."""

    rowid: int
    id: str
    scope_id: str
    kind: str
    content: str
    tags: str
    """JSON array text, as stored; `tag_list` decodes it."""
    confidence: float
    source_run_id: str | None
    created_at: float | None
    seen_count: int
    last_seen_at: float | None
    superseded_by: str | None

    @property
    def live(self) -> bool:
        return self.superseded_by is None

    @property
    def tag_list(self) -> list[str]:
        return list(json.loads(self.tags)) if self.tags else []

    def memory(self, embedding: np.ndarray | None = None) -> Memory:
        return Memory(
            id=self.id,
            scope_id=self.scope_id,
            kind=self.kind,
            content=self.content,
            tags=tuple(self.tag_list),
            confidence=self.confidence,
            source_run_id=self.source_run_id,
            created_at=self.created_at,
            seen_count=self.seen_count,
            last_seen_at=self.last_seen_at,
            superseded_by=self.superseded_by,
            embedding=embedding,
        )


def rows(conn: Conn, where: str, args: Sequence[Any] = ()) -> list[Row]:
    """`SELECT {COLS} FROM memories {where}` as Rows."""
    return [Row._make(r) for r in conn.execute(f"SELECT {COLS} FROM memories {where}", args)]


def by_rowid(conn: Conn, rowids: Iterable[int]) -> dict[int, Row]:
    """The rows with these rowids (any scope, any state), by rowid alone: with
    scope/kind/live terms in SQL the planner scans the scope's live index instead."""
    ids = [int(x) for x in rowids]
    out: dict[int, Row] = {}
    for i in range(0, len(ids), CHUNK):
        for r in map(Row._make, conn.execute(*by_rowid_statement(ids[i : i + CHUNK]))):
            out[r.rowid] = r
    return out


class ByRowid(NamedTuple):
    """A statement reading rows by rowid (`by_rowid_statement`): a (sql, args)
    pair any connection runs, which Postgres may fold into a write's lock
    statement instead (`memkit.store.pg_write`); its args are the rowids."""

    sql: str
    args: tuple[int, ...]


def by_rowid_statement(rowids: Sequence[int]) -> ByRowid:
    """The statement of `by_rowid` for 1 to `CHUNK` rowids."""
    ph = ",".join("?" * len(rowids))
    return ByRowid(
        f"SELECT {COLS} FROM memories WHERE rowid IN ({ph})", tuple(int(x) for x in rowids)
    )


def live_row(conn: Conn, scope_id: str, memory_id: str) -> Row | None:
    found = rows(
        conn, "WHERE id = ? AND scope_id = ? AND superseded_by IS NULL", (memory_id, scope_id)
    )
    return found[0] if found else None


def nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def insert(
    conn: Conn,
    memory_id: str,
    scope_id: str,
    kind: str,
    content: str,
    tags: Sequence[str],
    confidence: float,
    source_run_id: str | None,
    now: float,
    vec: np.ndarray | None,
    n_grams: int,
    seq: int,
    rowid: int | None = None,
) -> int:
    """Insert a live row (`seen_count = 1`, created = last seen = now); its rowid.
    A `rowid` the connection reserved is written as given, and the statement
    returns nothing: on a pipelined connection it needs no round trip of its own."""
    args = (
        memory_id,
        scope_id,
        kind,
        content,
        json.dumps(list(tags), ensure_ascii=False),
        float(confidence),
        source_run_id,
        now,
        now,
        conn.vec(vec),
        n_grams,
        seq,
    )
    cols = (
        "id, scope_id, kind, content, tags, confidence, source_run_id, created_at, "
        "seen_count, last_seen_at, superseded_by, embedding, ngrams, change_seq"
    )
    values = "?, ?, ?, ?, ?, ?, ?, ?, 1, ?, NULL, ?, ?, ?"
    if rowid is not None:
        conn.execute(f"INSERT INTO memories (rowid, {cols}) VALUES (?, {values})", (rowid, *args))
    else:
        cur = conn.execute(f"INSERT INTO memories ({cols}) VALUES ({values}) RETURNING rowid", args)
        rowid = int(cur.fetchall()[0][0])
    repost(conn, scope_id, kind, rowid, None, content)
    return rowid


def repost(conn: Conn, scope_id: str, kind: str, rowid: int, old: str | None, content: str) -> None:
    """A live row's fold-in postings follow its text (`old`: the text it had, None
    for a new row), when the connection keeps them (Postgres `fold_search="server"`,
    `memkit.store.fold_postings`); sent with the write, no round trip of its own
    in a batch."""
    postings = getattr(conn, "postings", None)
    if postings is None or old == content:
        return
    listed = getattr(conn, "listed_now", None)  # known in a write: skip an unlisted key's
    if listed is not None and listed[0] == scope_id:  # rows, and a row listed ahead
        pending = listed[1].get(kind)  # but not posted yet (`memkit.store.fold_listed`)
        if pending is None or pending[0] < rowid <= pending[1]:
            return
    if old is not None:
        postings.unpost(conn, scope_id, kind, rowid, old)
    postings.post(conn, scope_id, kind, rowid, content)


def fold_into(
    conn: Conn,
    rowid: int,
    content: str,
    tags: Sequence[str],
    confidence: float,
    source_run_id: str | None,
    now: float,
    vec: np.ndarray | None,
    n_grams: int,
    seq: int,
) -> None:
    """The SPEC §3.4 in-place update (the caller computed `confidence`)."""
    conn.execute(
        "UPDATE memories SET seen_count = seen_count + 1, last_seen_at = ?, "
        "confidence = ?, content = ?, tags = ?, embedding = ?, ngrams = ?, "
        "source_run_id = COALESCE(?, source_run_id), change_seq = ? "
        "WHERE rowid = ?",
        (
            now,
            confidence,
            content,
            json.dumps(list(tags), ensure_ascii=False),
            conn.vec(vec),
            n_grams,
            source_run_id,
            seq,
            rowid,
        ),
    )


def retire(conn: Conn, rowid: int, successor: str, seq: int) -> None:
    """Point a row at its successor (itself: retracted)."""
    conn.execute(
        "UPDATE memories SET superseded_by = ?, change_seq = ? WHERE rowid = ?",
        (successor, seq, rowid),
    )
