"""Postgres schema of `PostgresStore` as numbered, append-only migrations.

The tables mirror `memkit.store.schema` (SQLite) column for column, so a store
copies between backends losslessly; what differs is Postgres's own: identity
columns, `double precision` timestamps, the pgvector `vector` type (no fixed
dimension, so one table serves any embedder; the optional HNSW index casts to
the recorded dimension), and a `scopes` table whose row is each scope's write
lock and change counter. `schema_version` records the migrations applied;
never edit a shipped migration: append a new one.

Tables live in the first schema of the connection's `search_path`: give a
store a database or a schema of its own (`?options=-csearch_path%3Dmine,public`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memkit.errors import SchemaError

# Fragments the migrations share: each shipped DDL text is the same byte for byte
# (tests/test_postgres.py pins every migration's sha256).
_TAKE_SEQ = """\
        #variable_conflict use_column
        DECLARE
            taken bigint;
        BEGIN
            INSERT INTO scopes AS s (scope_id, seq) VALUES (p_scope, 1)
                ON CONFLICT (scope_id) DO UPDATE SET seq = s.seq + 1
                RETURNING s.seq INTO taken;
"""
"""The scope's lock: its row bumped, the number taken (migrations 4, 5 and 10)."""

_ROW_COLS = """\
                           m.scope_id, m.kind, m.content, m.tags, m.confidence,
                           m.source_run_id, m.created_at, m.seen_count,
                           m.last_seen_at, m.superseded_by,
"""
"""A changed row's columns from its scope on, in the lock's read of the rows changed
(migrations 4, 5 and 10)."""

_CHANGED_FROM = """\
                    FROM memories m
                    WHERE m.scope_id = p_scope AND m.change_seq > p_since
                    ORDER BY m.change_seq LIMIT p_limit;
"""
"""The scope's rows changed after p_since, in order, at most p_limit (migrations 4, 5, 10)."""

_KEPT_FROM = """\
                FROM unnest(p_kinds, p_sks) AS k(kind, sk)
                JOIN fold_posted f ON f.sk = k.sk
                LEFT JOIN LATERAL (
                    SELECT m.rowid, m.content FROM memories m
                    WHERE f.lo < f.hi AND m.scope_id = p_scope AND m.kind = k.kind
                      AND m.rowid > f.lo AND m.rowid <= f.hi
                      AND m.superseded_by IS NULL
                    ORDER BY m.rowid LIMIT p_step
                ) c ON true
                ORDER BY k.kind, c.rowid;
"""
"""The scope's listed kinds, each with up to p_step of its pending live rows (migration 9;
migration 10 holds it one level deeper, `_KEPT_FROM_IN_IF`)."""

_KEPT_FROM_IN_IF = "".join("    " + line for line in _KEPT_FROM.splitlines(keepends=True))

_LOCK_SCOPE = (
    """\
        CREATE OR REPLACE FUNCTION memkit_lock_scope(
            p_scope text, p_since bigint, p_reserve integer, p_vectors boolean,
            p_limit integer
        ) RETURNS TABLE (
            seq bigint, ids bigint[], change_seq bigint, rowid bigint, id text,
            scope_id text, kind text, content text, tags text,
            confidence double precision, source_run_id text,
            created_at double precision, seen_count integer,
            last_seen_at double precision, superseded_by text, embedding vector
        ) LANGUAGE plpgsql AS $$
"""
    + _TAKE_SEQ
    + """\
            seq := taken;
{rowids}            RETURN NEXT;
            IF p_since IS NOT NULL AND taken - 1 <> p_since THEN
                RETURN QUERY
                    SELECT NULL::bigint, NULL::bigint[], m.change_seq, m.rowid, m.id,
"""
    + _ROW_COLS
    + """\
                           CASE WHEN p_vectors THEN m.embedding END
"""
    + _CHANGED_FROM
    + """\
            END IF;
        END
        $$
        """
)
"""`memkit_lock_scope` (a write's lock step, `memkit.store.postgres.PgDb.begin_write`)
with its rowid reservation left open: migrations 4 and 5 differ only there."""

_ROWIDS_4 = """\
            ids := ARRAY(
                SELECT nextval(pg_get_serial_sequence('memories', 'rowid'))
                FROM generate_series(1, p_reserve) ORDER BY 1
            );
"""
_ROWIDS_5 = """\
            IF p_reserve = 1 THEN
                ids := ARRAY[nextval(pg_get_serial_sequence('memories', 'rowid'))];
            ELSE
                ids := ARRAY(
                    SELECT nextval(pg_get_serial_sequence('memories', 'rowid'))
                    FROM generate_series(1, p_reserve) ORDER BY 1
                );
            END IF;
"""
"""One rowid (every `remember`) without the sorted subquery over generate_series:
~30 us less server CPU a write on one connection, spent under the scope's lock (issue #36)."""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE meta (
            key   text PRIMARY KEY,
            value text NOT NULL
        );
        -- One row per scope: every write transaction of the scope updates it first,
        -- which serialises the scope's writers (fold-in is decide-then-write) and
        -- hands out the scope's next change number.
        CREATE TABLE scopes (
            scope_id text PRIMARY KEY,
            seq      bigint NOT NULL DEFAULT 0
        );
        CREATE TABLE memories (
            rowid         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            id            text NOT NULL UNIQUE,
            scope_id      text NOT NULL,
            kind          text NOT NULL,
            content       text NOT NULL,
            tags          text NOT NULL DEFAULT '[]',
            confidence    double precision NOT NULL,
            source_run_id text,
            created_at    double precision,
            seen_count    integer NOT NULL DEFAULT 1,
            last_seen_at  double precision,
            superseded_by text,
            embedding     vector,
            change_seq    bigint NOT NULL DEFAULT 0
        );
        CREATE INDEX memories_live
            ON memories (scope_id, last_seen_at) WHERE superseded_by IS NULL;
        CREATE INDEX memories_change ON memories (scope_id, change_seq);
        CREATE INDEX memories_successor ON memories (superseded_by)
            WHERE superseded_by IS NOT NULL;
        CREATE TABLE rollouts (
            seq         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            id          text NOT NULL UNIQUE,
            scope_id    text NOT NULL,
            run_id      text,
            messages    text NOT NULL,
            final       text NOT NULL,
            staged_at   double precision NOT NULL,
            consumed_at double precision
        );
        CREATE INDEX rollouts_pending
            ON rollouts (scope_id, staged_at, seq) WHERE consumed_at IS NULL;
        """,
    ),
    (
        2,
        """
        -- (memkit, SPEC §7.8 extension, as SQLite migration 4) A rollout that was part
        -- of `park_after` passes whose answer was invalid is parked: it leaves the
        -- pending queue and keeps its evidence.
        ALTER TABLE rollouts ADD COLUMN failed_passes integer NOT NULL DEFAULT 0;
        ALTER TABLE rollouts ADD COLUMN parked_at double precision;
        DROP INDEX rollouts_pending;
        CREATE INDEX rollouts_pending ON rollouts (scope_id, staged_at, seq)
            WHERE consumed_at IS NULL AND parked_at IS NULL;
        -- The column SQLite's rows carry (a trigram count), so both backends'
        -- statements are one text (memkit.store_rows).
        ALTER TABLE memories ADD COLUMN ngrams integer NOT NULL DEFAULT 0;
        """,
    ),
    (
        3,
        """
        -- (memkit, SPEC §7.8 extension, issue #37, as SQLite migration 5) The split
        -- of a failing batch: split_size, parked_batch, failed_as.
        ALTER TABLE rollouts ADD COLUMN split_size integer;
        ALTER TABLE rollouts ADD COLUMN parked_batch integer;
        ALTER TABLE rollouts ADD COLUMN failed_as text;
        """,
    ),
    (
        4,
        """
        -- (issue #36) A write's lock step in one statement: take the scope's row
        -- lock (which hands out its next change number), reserve `reserve` rowids,
        -- then read the scope's rows changed after `since` (none when NULL). Each
        -- statement of a function sees a fresh snapshot under READ COMMITTED, so
        -- the rows are read after the lock: the rows its last holder committed
        -- are among them. The first row carries the number taken (`seq`, less 1
        -- is the highest committed) and the rowids; each next row, a changed
        -- row as `memkit.store.index.changes_since` reads it.
"""
        + _LOCK_SCOPE.format(rowids=_ROWIDS_4),
    ),
    (
        5,
        """
        -- (issue #36) memkit_lock_scope as in migration 4; one rowid is taken
        -- without a sorted subquery (`_ROWIDS_5`).
"""
        + _LOCK_SCOPE.format(rowids=_ROWIDS_5),
    ),
    (
        6,
        """
        -- (issue #36) fold_search='server' (memkit.store.fold_postings): each live
        -- row's trigram prefix under a fixed order, keyed by a hash of its scope and
        -- kind and its gram count, so a probe reads the postings of a possible length.
        -- Empty unless the store's meta says fold_search = 'server'.
        CREATE TABLE fold_postings (
            sk    bigint  NOT NULL,
            gram  bigint  NOT NULL,
            m     integer NOT NULL,
            rowid bigint  NOT NULL,
            PRIMARY KEY (sk, gram, m, rowid)
        );
        """,
    ),
    (
        7,
        """
        -- (issue #36) The (scope, kind)s whose postings are kept, by their key
        -- (memkit.store.fold_listed): listed when a writer first needs them. A
        -- store in server mode before this kept every row's: each key posted is
        -- listed.
        CREATE TABLE fold_posted (sk bigint PRIMARY KEY);
        INSERT INTO fold_posted (sk) SELECT DISTINCT sk FROM fold_postings;
        """,
    ),
    (
        8,
        """
        -- (issue #36) A key listed ahead of a writer's cap (memkit.store.fold_listed):
        -- its live rows with lo < rowid <= hi are still to be posted, a few a write;
        -- lo >= hi once every row is. A key listed before this has every row posted.
        ALTER TABLE fold_posted
            ADD COLUMN lo bigint NOT NULL DEFAULT 0,
            ADD COLUMN hi bigint NOT NULL DEFAULT 0;
        """,
    ),
    (
        9,
        """
        -- (issue #36) A write's read of its scope's listed kinds, each with up to
        -- p_step of its pending live rows, lowest rowid first
        -- (memkit.store.fold_listed.kept_sql), as a function kept on its generic
        -- plan: sent as a prepared statement, the server planned it afresh at
        -- every write (its custom plans looked cheaper), ~0.19 ms of server CPU
        -- a remember, which made every server-mode write slower.
        CREATE OR REPLACE FUNCTION memkit_kept(
            p_kinds text[], p_sks bigint[], p_scope text, p_step integer
        ) RETURNS TABLE (kind text, lo bigint, hi bigint, rowid bigint, content text)
        LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
        #variable_conflict use_column
        BEGIN
            RETURN QUERY
                SELECT k.kind, f.lo, f.hi, c.rowid, c.content
"""
        + _KEPT_FROM
        + """\
        END
        $$;
        """,
    ),
    (
        10,
        """
        -- (issue #36) A write's lock round trip as one statement
        -- (memkit.store.pg_write): memkit_lock_scope's rows (part 0: the number
        -- taken and the rowids reserved, then the rows changed after p_since),
        -- then, read after the lock, the fold-in candidates' facts by rowid
        -- (part 1, when p_rowids is not NULL) and memkit_kept's rows (part 2,
        -- when p_kinds is not NULL). Each query runs with a fresh snapshot under
        -- READ COMMITTED, as the three statements it replaces did: two statements
        -- fewer a remember. The bodies are written out, not called, and held on
        -- their generic plans (migration 9): a call in a query costs the server
        -- more than the statements it saves.
        CREATE OR REPLACE FUNCTION memkit_write_begin(
            p_scope text, p_since bigint, p_reserve integer, p_vectors boolean,
            p_limit integer, p_rowids bigint[], p_kinds text[], p_sks bigint[],
            p_step integer
        ) RETURNS TABLE (
            part integer, seq bigint, ids bigint[], change_seq bigint, rowid bigint,
            id text, scope_id text, kind text, content text, tags text,
            confidence double precision, source_run_id text,
            created_at double precision, seen_count integer,
            last_seen_at double precision, superseded_by text, embedding vector,
            lo bigint, hi bigint
        ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
"""
        + _TAKE_SEQ
        + """\
            part := 0;
            seq := taken;
"""
        + _ROWIDS_5
        + """\
            RETURN NEXT;
            IF p_since IS NOT NULL AND taken - 1 <> p_since THEN
                RETURN QUERY
                    SELECT 0, NULL::bigint, NULL::bigint[], m.change_seq, m.rowid, m.id,
"""
        + _ROW_COLS
        + """\
                           CASE WHEN p_vectors THEN m.embedding END,
                           NULL::bigint, NULL::bigint
"""
        + _CHANGED_FROM
        + """\
            END IF;
            IF p_rowids IS NOT NULL THEN
                RETURN QUERY
                    SELECT 1, NULL::bigint, NULL::bigint[], NULL::bigint, m.rowid, m.id,
                           m.scope_id, m.kind, m.content, m.tags, m.confidence,
                           m.source_run_id, m.created_at, m.seen_count,
                           m.last_seen_at, m.superseded_by, NULL::vector,
                           NULL::bigint, NULL::bigint
                    FROM memories m WHERE m.rowid = ANY (p_rowids);
            END IF;
            IF p_kinds IS NOT NULL THEN
                RETURN QUERY
                    SELECT 2, NULL::bigint, NULL::bigint[], NULL::bigint, c.rowid,
                           NULL::text, NULL::text, k.kind, c.content, NULL::text,
                           NULL::double precision, NULL::text, NULL::double precision,
                           NULL::integer, NULL::double precision, NULL::text,
                           NULL::vector, f.lo, f.hi
"""
        + _KEPT_FROM_IN_IF
        + """\
            END IF;
        END
        $$;
        """,
    ),
)
"""(version, DDL) pairs; version n is applied when schema_version < n."""

SCHEMA_VERSION = MIGRATIONS[-1][0]

_MIGRATE_LOCK = 0x6D656D6B6974  # "memkit": one advisory lock key for migrations


def migrate(conn: Any, on_create: Callable[[Any], object] | None = None) -> int:
    """Apply missing migrations (autocommit psycopg connection); return the version.

    Runs under a transaction-scoped advisory lock so concurrent openers
    migrate once. `on_create(conn)` runs in the same transaction when the store
    is created now (no schema version before): a new store's settings (its
    fold-in mode) are written by the one client that creates it."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)")
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        current = row[0] or 0
        if current > SCHEMA_VERSION:
            raise SchemaError(
                f"database schema version {current} is newer than this memkit ({SCHEMA_VERSION})"
            )
        for version, ddl in MIGRATIONS:
            if version > current:
                conn.execute(ddl)  # one script: a function's body holds semicolons
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
        if current == 0 and on_create is not None:
            on_create(conn)
    return SCHEMA_VERSION
