"""SQLite schema as numbered, append-only migrations.

`PRAGMA user_version` records how many migrations a database has applied;
opening a store applies the missing ones in order, each in its own
transaction. Never edit a shipped migration: append a new one (the next free
number when you merge), then pin its hash and refresh the schema snapshot
(`tests/test_schema.py` says how). Leaves out down-migrations: a database is
only ever moved forward.
"""

from __future__ import annotations

import sqlite3

from memkit.errors import ConfigError, SchemaError

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE memories (
            rowid         INTEGER PRIMARY KEY,
            id            TEXT NOT NULL UNIQUE,
            scope_id      TEXT NOT NULL,
            kind          TEXT NOT NULL,
            content       TEXT NOT NULL,
            tags          TEXT NOT NULL DEFAULT '[]',
            confidence    REAL NOT NULL,
            source_run_id TEXT,
            created_at    REAL,
            seen_count    INTEGER NOT NULL DEFAULT 1,
            last_seen_at  REAL,
            superseded_by TEXT,
            embedding     BLOB,
            ngrams        INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX memories_live
            ON memories (scope_id, last_seen_at) WHERE superseded_by IS NULL;
        CREATE INDEX memories_scope ON memories (scope_id);
        CREATE INDEX memories_successor ON memories (superseded_by);
        -- pg_trgm postings of live rows only (fold-in targets must be live).
        CREATE TABLE trigrams (
            gram TEXT NOT NULL,
            row  INTEGER NOT NULL,
            PRIMARY KEY (gram, row)
        ) WITHOUT ROWID;
        -- document frequency of each gram, to probe the rarest grams first.
        CREATE TABLE grams (
            gram TEXT PRIMARY KEY,
            df   INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE rollouts (
            seq         INTEGER PRIMARY KEY,
            id          TEXT NOT NULL UNIQUE,
            scope_id    TEXT NOT NULL,
            run_id      TEXT,
            messages    TEXT NOT NULL,
            final       TEXT NOT NULL,
            staged_at   REAL NOT NULL,
            consumed_at REAL
        );
        CREATE INDEX rollouts_pending
            ON rollouts (scope_id, staged_at, seq) WHERE consumed_at IS NULL;
        """,
    ),
    (
        2,
        """
        -- Trigram postings move into memory (memkit.gram_index): on disk they cost
        -- every write one B-tree page per trigram.
        DROP TABLE trigrams;
        DROP TABLE grams;
        -- Every write stamps the rows it touches with a number above every earlier
        -- one, so a connection brings its in-memory indexes up to date by reading
        -- just the rows changed since it last looked.
        ALTER TABLE memories ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX memories_change ON memories (change_seq);
        """,
    ),
    (
        3,
        """
        -- history() looks rows up by successor, and live rows have none: indexing
        -- only retired rows spares every insert one B-tree page (~7 -> ~6.5 WAL
        -- pages per remember, measured).
        DROP INDEX memories_successor;
        CREATE INDEX memories_successor ON memories (superseded_by)
            WHERE superseded_by IS NOT NULL;
        """,
    ),
    (
        4,
        """
        -- (memkit, SPEC §7.8 extension) A rollout that was part of `park_after`
        -- passes whose answer was invalid is parked: it leaves the pending queue
        -- (so one poison batch cannot block its scope) and keeps its evidence.
        ALTER TABLE rollouts ADD COLUMN failed_passes INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE rollouts ADD COLUMN parked_at REAL;
        DROP INDEX rollouts_pending;
        CREATE INDEX rollouts_pending ON rollouts (scope_id, staged_at, seq)
            WHERE consumed_at IS NULL AND parked_at IS NULL;
        """,
    ),
    (
        5,
        """
        -- (memkit, SPEC §7.8 extension, issue #37) A failing batch is split before
        -- anything is parked: `split_size` is the size of the sub-batch a rollout
        -- is retried in (NULL: not in a split), `parked_batch` the size of the
        -- batch whose failure parked it, `failed_as` the class of its counted
        -- failures ("answer", "bad_request", "timeout"), so only the same
        -- outcome adds up to parking.
        ALTER TABLE rollouts ADD COLUMN split_size INTEGER;
        ALTER TABLE rollouts ADD COLUMN parked_batch INTEGER;
        ALTER TABLE rollouts ADD COLUMN failed_as TEXT;
        """,
    ),
)
"""(version, DDL) pairs; version n is applied when user_version < n."""

SCHEMA_VERSION = MIGRATIONS[-1][0]
MEMKIT_TABLES = frozenset({"meta", "memories", "rollouts"})
"""Tables every memkit store holds from migration 1 on: how a memkit file is told apart."""


def check_own_file(conn: sqlite3.Connection, path: str, *, empty_ok: bool) -> None:
    """Refuse a database memkit did not make, reading only (the file stays as it was).

    A file with tables but not memkit's, a `user_version` without memkit's tables, or
    bytes that are not SQLite is a ConfigError naming the path; so is an empty
    database unless `empty_ok` (a read-write open creates the store in it). Was: the
    read-write open added memkit's tables to another application's database."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.DatabaseError as e:
        raise ConfigError(f"{path!r} is not a memkit store ({e})") from None
    tables = {r[0] for r in rows}
    if tables >= MEMKIT_TABLES or (empty_ok and not tables and version == 0):
        return
    if empty_ok and not tables and version > SCHEMA_VERSION:
        return  # `migrate` refuses it, naming the newer schema
    if not tables:
        raise ConfigError(f"{path!r} is not a memkit store (no memkit tables)")
    shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    raise ConfigError(
        f"{path!r} is not a memkit store (it holds other tables: {shown}); memkit opens "
        "its own files or an empty one, and leaves this one as it is"
    )


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the missing migrations in order, each in its own `BEGIN IMMEDIATE`
    transaction with the `user_version` bump that records it (connection in
    autocommit mode); return the schema version. A failing migration rolls
    back alone: the ones before it stay applied. Several processes may open a
    store at once: each transaction re-reads the version under the write lock."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = conn.execute("PRAGMA user_version").fetchone()[0]
            if current > SCHEMA_VERSION:
                raise SchemaError(
                    f"database schema version {current} is newer than this memkit "
                    f"({SCHEMA_VERSION})"
                )
            pending = [(v, ddl) for v, ddl in MIGRATIONS if v > current]
            if pending:
                version, ddl = pending[0]
                for stmt in ddl.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not pending:
            return SCHEMA_VERSION
