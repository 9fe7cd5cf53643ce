"""A Postgres write's lock round trip as one statement: `memkit_write_begin`.

A `remember` used to send three statements in its lock's round trip: the lock
(`memkit_lock_scope`: the scope's number, its rowid, the rows other writers
changed), the fold-in candidates' facts by rowid and, in server mode, the
scope's listed kinds (`memkit_kept`). Each statement costs the client psycopg's
per-statement work and the server a Bind and an Execute, which on 2 cores
shared by writers and their backends is throughput (issue #36). The server's
function `memkit_write_begin` (`memkit.store.pg_schema`, migration 10) runs the
three as one, each part read after the lock with its own snapshot as before;
`split` hands each part back in the shape its old statement gave.

Leaves out: the lock's rules and when a write asks each part
(`memkit.store.postgres.PgDb.begin_write`), what the listed kinds mean
(`memkit.store.fold_listed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from memkit.errors import SchemaError
from memkit.store.fold_listed import KINDS_SQL, kind_keys
from memkit.store.fold_postings import bigint_array

_SQL = (
    "SELECT * FROM memkit_write_begin(?::text, ?::bigint, ?::int, ?::boolean, ?::int, "
    "?::text::bigint[], {kinds}, ?::text::bigint[], ?::int)"
)
KEPT_SQL = _SQL.format(kinds=KINDS_SQL)
"""The statement reading the listed kinds too: the kinds a literal of its text
(a list parameter costs the client more to adapt), their keys a text literal."""
LOCK_SQL = _SQL.format(kinds="NULL::text[]")
"""The statement without them (client mode)."""

HEAD, FACTS, KEPT = 0, 1, 2
"""The `part` column: the lock's rows (the head, then the changed rows), the
candidates' facts, the listed kinds."""


def statement(
    scope_id: str,
    since: int | None,
    reserve: int,
    vectors: bool,
    limit: int,
    rowids: Sequence[int] | None,
    step: int | None,
) -> tuple[str, tuple[Any, ...]]:
    """The lock's arguments (`memkit_lock_scope`'s), then the rowids whose facts
    to read (None: none) and, with `step` (None: none), the scope's listed kinds,
    up to `step` pending rows a key (`memkit.store.fold_listed.kept_sql`)."""
    ids = None if rowids is None else bigint_array(int(r) for r in rowids)
    head = (scope_id, since, max(int(reserve), 0), vectors, limit, ids)
    if step is None:
        return LOCK_SQL, (*head, None, None)
    return KEPT_SQL, (*head, kind_keys(scope_id), int(step))


class Parts(NamedTuple):
    """`memkit_write_begin`'s rows, each part as its own statement gave it."""

    head: tuple[Any, ...]
    """(seq, ids): the number the write took and the rowids it reserved."""
    changed: list[tuple[Any, ...]]
    """The changed rows as `memkit.store.index.changes_since` reads them (from
    change_seq to the embedding), in change order."""
    facts: list[tuple[Any, ...]]
    """The candidates' rows in `memkit.store.rows.COLS` order."""
    kept: list[tuple[Any, ...]] | None
    """(kind, lo, hi, rowid, content), as `memkit_kept` gives them; None: not read."""


def split(rows: Sequence[Sequence[Any]], listed: bool) -> Parts:
    """The parts of `memkit_write_begin`'s rows (the head first among the lock's);
    `listed`: the statement read the listed kinds."""
    lock = [r for r in rows if r[0] == HEAD]
    if not lock or lock[0][1] is None:
        raise SchemaError("memkit_write_begin answered without the lock's head row")
    head = (lock[0][1], lock[0][2])
    changed = [tuple(r[3:17]) for r in lock[1:]]
    facts = [tuple(r[4:16]) for r in rows if r[0] == FACTS]
    kept = [(r[7], r[17], r[18], r[4], r[8]) for r in rows if r[0] == KEPT]
    return Parts(head, changed, facts, kept if listed else None)
