"""Shared test doubles for the store tests (no tests here): a clock and an embedder."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

T0 = 1_750_000_000.0


class Clock:
    """An injectable clock the test moves by hand."""

    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class TableEmbedder:
    """Embeds by lookup; unknown texts get a zero vector (cosine 0 with everything).

    `fail=True` makes every call raise, to exercise the fall-through paths.
    """

    def __init__(self, table: dict[str, Sequence[float]] | None = None, dim: int = 4):
        self.table = dict(table or {})
        self.dim = dim
        self.name = f"table-{dim}"
        self.fail = False
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise RuntimeError("embedder down")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            if t in self.table:
                v = np.asarray(self.table[t], dtype=np.float32)
                n = np.linalg.norm(v)
                out[i] = v / n if n else v
        return out


def remember_unfolded(store, scope_id: str, texts: Sequence[str], **fields) -> list[str]:
    """Write every text as its own row (fold-in off for these writes), through the
    public API: `store.fold` is the store's fold tunables, read at each write."""
    from dataclasses import replace

    kept = store.fold
    store.fold = replace(kept, threshold=2.0)  # above 1 nothing folds (SPEC §3.3)
    try:
        return [
            r.id for r in store.remember_many(scope_id, [{"content": t, **fields} for t in texts])
        ]
    finally:
        store.fold = kept


def _raw_connection(path):
    """A plain connection of another program to the store: sqlite3 on the file, or
    psycopg on a Postgres DSN (whose statements then take `?` as `%s`)."""
    if str(path).startswith(("postgresql://", "postgres://")):
        import psycopg

        class _Pg:
            def __init__(self):
                self.c = psycopg.connect(path, autocommit=True)

            def execute(self, sql, args=()):
                return self.c.execute(sql.replace("?", "%s"), args)

            def close(self):
                self.c.close()

        return _Pg()
    import sqlite3

    return sqlite3.connect(path, isolation_level=None)


def foreign_write(path, sql: str, args: Sequence = ()) -> None:
    """A write by another program: a plain connection to the store, one statement."""
    c = _raw_connection(path)
    try:
        c.execute(sql, args)
    finally:
        c.close()


def dump(path) -> tuple[list, list]:
    """Every row of both tables, read by a separate connection."""
    c = _raw_connection(path)
    try:
        return (
            c.execute("SELECT * FROM memories ORDER BY rowid").fetchall(),
            c.execute("SELECT * FROM rollouts ORDER BY seq").fetchall(),
        )
    finally:
        c.close()
