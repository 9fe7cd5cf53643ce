"""The Postgres store plans each recall for its own scope (#36).

psycopg prepares a statement after its 5th run, and the server may then keep
one generic plan for every scope: after the exact recalls of a big scope, a
1 %-scope's recall scanned the whole table (at 1M rows, ~225 ms against
~15 ms). Observed without timing, as the rows the server read for the table
(`pg_stat_user_tables`), flushed by closing the store's connection: a
backend writes its pending statistics on exit, before it leaves
`pg_stat_activity`."""

from __future__ import annotations

import time
import uuid

import numpy as np
import psycopg
from test_store_helpers import Clock, TableEmbedder

from memkit.params import RecallParams
from memkit.store import PostgresStore

DIM = 256
BIG, SMALL = 20_000, 200
"""The small scope holds 1 % of the table: its own btree range, never a scan."""
BIG_RECALLS = 16
"""Past psycopg's 5 runs before preparing and the server's 5 custom plans before
it may settle on a generic one."""
SMALL_RECALLS = 4


def _rows_read(admin: psycopg.Connection, schema: str) -> int:
    """Rows the server has read from the schema's memories table, by scans and index fetches."""
    row = admin.execute(
        "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
        "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'memories'",
        (schema,),
    ).fetchone()
    assert row is not None, f"no statistics for {schema}.memories"
    return int(row[0])


def _gone(admin: psycopg.Connection, app: str, wait: float = 30.0) -> None:
    """Wait until the sessions named `app` have exited (their statistics then flushed)."""
    deadline = time.monotonic() + wait
    while admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchone()[0]:
        assert time.monotonic() < deadline, f"session {app} still alive after {wait} s"
        time.sleep(0.05)


def _session_rows(pg_dsn: str, admin, schema: str, clock, queries, scopes) -> int:
    """Rows read while one store connection recalls each of `scopes` in turn, exactly."""
    app = f"memkit-plan-{uuid.uuid4().hex[:8]}"
    before = _rows_read(admin, schema)
    with PostgresStore.open(
        f"{pg_dsn}&application_name={app}", embedder=TableEmbedder(dim=DIM), clock=clock
    ) as s:
        for scope, n in scopes:
            for q in queries[:n]:
                s.recall(scope, "zzz", 8, RecallParams(), query_embedding=q)
    _gone(admin, app)
    return _rows_read(admin, schema) - before


def test_a_small_scopes_exact_recall_after_a_big_scopes_reads_its_own_rows(pg_dsn):
    rng = np.random.default_rng(3)
    clock = Clock()
    with PostgresStore.open(pg_dsn, embedder=TableEmbedder(dim=DIM), clock=clock) as s:
        s.bulk_load("big", [f"b{i}" for i in range(BIG)], rng.normal(size=(BIG, DIM)))
        s.bulk_load("small", [f"s{i}" for i in range(SMALL)], rng.normal(size=(SMALL, DIM)))
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        (schema,) = admin.execute("SELECT current_schema()").fetchone()
        queries = rng.normal(size=(BIG_RECALLS, DIM)).astype(np.float32)
        big_only = _session_rows(pg_dsn, admin, schema, clock, queries, [("big", BIG_RECALLS)])
        both = _session_rows(
            pg_dsn, admin, schema, clock, queries, [("big", BIG_RECALLS), ("small", SMALL_RECALLS)]
        )
    assert big_only >= BIG_RECALLS * BIG  # the counters see the big scope's scans
    small = both - big_only
    # Its own rows a few times over per recall (the page, the bound aggregate, the
    # keyword index's first load); a generic plan scans the whole table (81,000 rows
    # read with the setting removed).
    assert 0 < small <= 4 * SMALL * SMALL_RECALLS < BIG, (
        f"{SMALL_RECALLS} recalls of a {SMALL}-row scope read {small} rows"
    )
