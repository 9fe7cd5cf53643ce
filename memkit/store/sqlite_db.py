"""The SQL edge both stores share: one small connection interface, two engines.

`memkit.store.SQLStore` holds every SPEC rule and writes each statement once,
with `?` placeholders, in the SQL that SQLite (3.35+) and Postgres both
accept (`RETURNING`, `ON CONFLICT ... DO NOTHING`, `NULLS LAST`, `FILTER`,
`IN (?, ...)`). A connection (`SQLiteDb` here, `memkit.store.postgres.PgDb` there)
adds only what differs between the engines:

* **Where a write's lock and change number come from** (`begin_write`).
  SQLite takes the file's write lock (`BEGIN IMMEDIATE`) and numbers changes
  across the whole file, so `top` ignores the scope; Postgres locks the
  scope's row in `scopes` and numbers each scope's changes on their own
  (`per_scope`), so writers of other scopes never wait. Either way a write
  first learns the highest committed number, catches its indexes up to it,
  and stamps its rows with the next one. `begin_write(None)` takes the
  store-wide lock (recording the embedder).
* **How a batch of statements travels** (`reserve_rowids`, `batch`,
  `take_changes`, `take_read`): Postgres sends the lock, the catch-up's read,
  the rowid reservation and the write's own read (`begin_write`'s `read`: the
  fold-in candidates' facts) in one round trip and pipelines its inserts (a
  read waits for them, in order); SQLite runs in-process and needs none of it.
* **How an embedding is stored** (`vec` to write, `unvec` / `matrix` to
  read): a float32 blob, or a pgvector `vector`.
* **How a long result is read** (`stream`, a scope's texts for its fold-in
  index): SQLite's cursor steps through it already; Postgres fetches it in
  chunks through a server-side cursor, not whole into the client.

`SQLiteDb` is a `sqlite3.Connection` (`sqlite3.connect(..., factory=SQLiteDb)`),
so `execute` is SQLite's own: nothing is added on the hot path. Leaves out
every rule, index and transaction policy (`memkit.store`, `memkit.store.index`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memkit.store.index import Statement, TopAndChanges, changes_since


class SQLiteDb(sqlite3.Connection):
    """A SQLite connection with the engine-specific parts the store needs."""

    per_scope = False
    """Change numbers count across the file: one write lock serves every scope."""

    _read: Sequence[tuple[Any, ...]] = ()
    """The rows `begin_write` read for its `read` statement (`take_read`)."""

    def begin_write(
        self,
        scope_id: str | None,
        since: int | None = None,
        reserve: int = 0,
        vectors: bool = True,
        read: Statement | None = None,
        list_kinds: frozenset[str] = frozenset(),
    ) -> int:
        """Start a write holding the file's write lock; the highest committed
        change number (the write stamps the next one). The rows of the statement
        `read` are read under the lock (`take_read`). `since`, `reserve`, `vectors`
        and `list_kinds` are for a connection with round trips to save or fold-in
        postings to keep (Postgres); unused here."""
        self.execute("BEGIN IMMEDIATE")
        try:
            top = self.top(scope_id)
            self._read = [] if read is None else self.execute(*read).fetchall()
            return top
        except BaseException:
            self.execute("ROLLBACK")
            raise

    def take_read(self) -> list[tuple[Any, ...]]:
        """The rows of `begin_write`'s `read` statement ([] without one)."""
        out, self._read = self._read, ()
        return list(out)

    def end_write(self, commit: bool) -> None:
        self.execute("COMMIT" if commit else "ROLLBACK")

    @staticmethod
    def take_changes() -> None:
        """None: a catch-up reads its rows itself (in-process, nothing to save)."""

    @staticmethod
    def reserve_rowids(n: int) -> list[int]:
        """[]: SQLite assigns each insert's rowid in-process (no round trip to save)."""
        return []

    def stream(self, sql: str, args: Sequence[Any] = ()) -> Iterable[tuple[Any, ...]]:
        """The rows of `sql` as they are read: a SQLite cursor steps through the
        result, so a reader holds one row at a time (`Indexes.grams_of`)."""
        return self.execute(sql, args)

    @staticmethod
    def batch() -> contextlib.AbstractContextManager[None]:
        """Statements run one by one (a no-op context)."""
        return contextlib.nullcontext()

    @staticmethod
    def drop_ann_indexes() -> None:
        """Nothing: SQLite has no ANN index (Postgres drops its HNSW indexes)."""

    def integrity_problems(self) -> list[str]:
        """What `PRAGMA integrity_check` finds wrong with the file ([] when sound)."""
        found = [r[0] for r in self.execute("PRAGMA integrity_check").fetchall()]
        return [] if found == ["ok"] else found

    def top_and_changes(self, scope_id: str | None, since: int, vectors: bool) -> TopAndChanges:
        """`top`, then the rows of `changes_since`: a round trip saves nothing here."""
        top = self.top(scope_id)
        return top, self.execute(*changes_since(None, since, vectors)).fetchall()

    def top(self, scope_id: str | None) -> int:
        """The highest committed change number (of the file: `scope_id` is unused)."""
        return int(self.execute("SELECT COALESCE(MAX(change_seq), 0) FROM memories").fetchone()[0])

    @staticmethod
    def vec(v: np.ndarray | None) -> bytes | None:
        return None if v is None else np.asarray(v, dtype=np.float32).tobytes()

    @staticmethod
    def unvec(value: Any) -> np.ndarray:
        return np.frombuffer(value, dtype=np.float32)

    @staticmethod
    def matrix(values: Sequence[Any], dim: int) -> np.ndarray | None:
        """The stored vectors as one (n, dim) float32 array; None unless all have `dim`."""
        if not all(len(b) == 4 * dim for b in values):
            return None
        return np.frombuffer(b"".join(values), dtype=np.float32).reshape(len(values), dim)
