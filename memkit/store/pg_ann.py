"""HNSW on Postgres that serves scoped recall: one partial index per large scope.

pgvector 0.6 (what `pgserver` ships) has no iterative index scans: an index
over the whole table returns the `ef_search` nearest rows of every scope and
the scope filter runs afterwards, so a scope holding 1 % of the table gets
about 1 % of `ef_search` rows back and the answer is short. A partial index
per scope (`WHERE scope_id = '<scope>' AND superseded_by IS NULL AND
embedding IS NOT NULL`) holds only that scope's live rows, so its scan
returns `ef_search` rows of the scope whatever the table's size.

Measured against the alternatives (docs/postgres-scale.md): the whole-table
index fell back to exact on every query of a 1 %-scope; partitioning by scope
needs a partition per scope created ahead of writes (and a primary key that
includes the scope); pgvector >= 0.8's iterative scans are not in 0.6.2.
Only scopes with at least `HNSW_MIN_ROWS` embedded live rows get an index:
below that the exact scan over the scope's btree is as fast, and every
partial index costs the planner a predicate check on each query of the table
(so thousands of indexed scopes would want partitioning instead).

Indexes are named by the scope's hash and the dimension they cast to
(`index_name`); they are built `CONCURRENTLY` (writers of every scope go on
during a build) in a session under the build settings. The client caches
which scopes have an index (`AnnCache`: names only, at most `CACHE_MAX`
scopes; a scope found without one is asked again after `RECHECK_S`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any

from memkit.errors import ConfigError

HNSW_MIN_ROWS = 5_000
"""Embedded live rows from which a scope gets its own HNSW index (`open(hnsw_min_rows=)`)."""

EF_SEARCH = 160
"""The default `hnsw.ef_search`: the candidates an HNSW recall reads. Measured on a
1M-row scope of real text with the default graph (`M` 20) over 1,050 queries a
build (docs/postgres-scale.md, "Held-out queries"): recall@8 against exact 0.963
and 0.965 at 160 (p50 8.28 and 8.71 ms through the store), 0.969 and 0.970 at
200 (10.19 and 10.81 ms: past the 10 ms bound on 2 cores). pgvector's own
default, 40, is tuned for latency (0.86 at 1M rows)."""

EF_SEARCH_MAX = 1_000
"""pgvector's upper bound of `hnsw.ef_search` (its lower one is 1)."""

M = 20
"""The default graph degree (`open(hnsw_m=)`, pgvector's `m`; pgvector's own is 16).
Measured on a 1M-row scope of real text over 1,050 queries (docs/postgres-scale.md,
"Held-out queries"): m 16 scores recall@8 0.947 at ef_search 200, under 0.95;
m 20 0.960, its build 1.2x as long (506 against 425 s) and its index 5 % larger;
m 24 0.965, built in 730 s, past the 10 minutes a 1M-row build is allowed."""
EF_CONSTRUCTION = 64
"""The default build-time candidate list (`open(hnsw_ef_construction=)`): pgvector's own."""
PGVECTOR_GRAPH = (16, 64)
"""pgvector's own (m, ef_construction): the graph of an index built without options."""
M_BOUNDS = (2, 100)
EF_CONSTRUCTION_BOUNDS = (4, 1_000)
"""pgvector's bounds of `m` and `ef_construction` (which must also be >= 2 x m)."""


def check_ef_search(ef_search: Any) -> None:
    """ConfigError unless `ef_search` is an int pgvector accepts (1..`EF_SEARCH_MAX`):
    checked at open, not at the first recall's `SET LOCAL`."""
    if isinstance(ef_search, bool) or not isinstance(ef_search, int):
        raise ConfigError(f"ef_search={ef_search!r}: want an int")
    if not 1 <= ef_search <= EF_SEARCH_MAX:
        raise ConfigError(f"ef_search={ef_search}: want 1..{EF_SEARCH_MAX} (pgvector's bounds)")


def check_graph(m: Any, ef_construction: Any) -> None:
    """ConfigError unless (`m`, `ef_construction`) is a graph pgvector builds: ints in
    `M_BOUNDS` and `EF_CONSTRUCTION_BOUNDS`, ef_construction >= 2 x m (checked at
    open, not when a build fails after a scope has grown)."""
    for name, value, (lo, hi) in (
        ("hnsw_m", m, M_BOUNDS),
        ("hnsw_ef_construction", ef_construction, EF_CONSTRUCTION_BOUNDS),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}={value!r}: want an int")
        if not lo <= value <= hi:
            raise ConfigError(f"{name}={value}: want {lo}..{hi} (pgvector's bounds)")
    if ef_construction < 2 * m:
        raise ConfigError(
            f"hnsw_ef_construction={ef_construction} < 2 x hnsw_m={m}: pgvector refuses it"
        )


PREFIX = "memories_hnsw_"
CACHE_MAX = 10_000
"""Scopes whose index name a client remembers (the cache is cleared past it)."""
RECHECK_S = 30.0
"""Seconds before a scope found without an index is asked about again."""

LIVE_EMBEDDED = "superseded_by IS NULL AND embedding IS NOT NULL"


def index_name(scope_id: str, dim: int) -> str:
    """The scope's index: its hash (any scope text makes a valid name) and the dimension."""
    digest = hashlib.sha256(scope_id.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{PREFIX}{int(dim)}_{digest}"


def _literal(conn: Any, value: str) -> str:
    """A string as a quoted SQL literal: a partial index's predicate must name its
    scope, and a query must name it too (not as a parameter) for the planner to use it."""
    from psycopg import sql

    return sql.Literal(value).as_string(conn)


def scope_predicate(conn: Any, scope_id: str) -> str:
    return f"scope_id = {_literal(conn, scope_id)} AND {LIVE_EMBEDDED}"


def large_scopes(conn: Any, min_rows: int) -> list[tuple[str, int]]:
    """(scope, embedded live rows) of the scopes with at least `min_rows` of them."""
    return [
        (str(s), int(n))
        for s, n in conn.execute(
            f"SELECT scope_id, count(*) FROM memories WHERE {LIVE_EMBEDDED} "
            "GROUP BY scope_id HAVING count(*) >= %s ORDER BY scope_id",
            (max(int(min_rows), 1),),
        ).fetchall()
    ]


def _state(conn: Any, name: str) -> bool | None:
    """True: the index exists and is valid; False: a failed concurrent build left it
    invalid; None: there is none."""
    row = conn.execute(
        "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)", (name,)
    ).fetchone()
    return None if row is None else bool(row[0])


def build(
    conn: Any,
    scope_id: str,
    dim: int,
    settings: Mapping[str, str],
    concurrently: bool = True,
    graph: tuple[int, int] = (M, EF_CONSTRUCTION),
) -> dict[str, Any]:
    """Build the scope's index unless a valid one exists (an invalid leftover of a
    failed build is dropped first), in this session under `settings` (reset
    after); what happened: built, seconds, index_bytes. `conn` is an autocommit
    psycopg connection (CREATE INDEX CONCURRENTLY runs outside a transaction).
    `concurrently=False`: a plain CREATE INDEX, which blocks every writer of the
    table (all scopes) until it is done, for a store nobody writes meanwhile.
    `graph`: (m, ef_construction) of a new index; an existing one keeps the graph
    it was built with (its report says which: `graph`, read from the index)."""
    import psycopg

    name = index_name(scope_id, dim)
    state = _state(conn, name)
    t = time.perf_counter()
    if state is not True:
        if state is False:
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        done: list[str] = []
        try:
            for key, value in settings.items():
                try:
                    conn.execute("SELECT set_config(%s, %s, false)", (key, value))
                except psycopg.Error as e:
                    raise ConfigError(f"build_settings {key}={value!r}: {e}") from None
                done.append(key)
            how = "CONCURRENTLY " if concurrently else ""
            conn.execute(
                f"CREATE INDEX {how}IF NOT EXISTS {name} ON memories USING hnsw "
                f"((embedding::vector({int(dim)})) vector_cosine_ops) "
                f"WITH (m = {int(graph[0])}, ef_construction = {int(graph[1])}) "
                f"WHERE {scope_predicate(conn, scope_id)}"
            )
        finally:
            for key in done:  # names checked by `build_session`
                conn.execute(f"RESET {key}")
    size, options = conn.execute(
        "SELECT pg_relation_size(c.oid), c.reloptions FROM pg_class c WHERE c.oid = %s::regclass",
        (name,),
    ).fetchone()
    return {
        "built": state is not True,
        "seconds": time.perf_counter() - t if state is not True else 0.0,
        "index_bytes": int(size),
        "graph": _graph(options),
    }


def _graph(options: list[str] | None) -> tuple[int, int]:
    """(m, ef_construction) from an index's reloptions (pgvector's defaults where
    one is not set: an index built before memkit named them)."""
    given = dict(o.split("=", 1) for o in options or [])
    m, efc = PGVECTOR_GRAPH
    return int(given.get("m", m)), int(given.get("ef_construction", efc))


def drop_all(conn: Any) -> None:
    """Drop every scope index of this store (their cast names the old dimension),
    and the whole-table index of memkit before per-scope indexes."""
    names = [
        r[0]
        for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = 'memories' AND indexname LIKE %s",
            (PREFIX.replace("_", r"\_") + "%",),
        ).fetchall()
    ]
    for name in [*names, "memories_hnsw"]:
        conn.execute(f"DROP INDEX IF EXISTS {name}")


class AnnCache:
    """Which scopes have a valid index, as this client last saw (see the module docstring)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[bool, float]] = {}

    def has_index(self, conn: Any, scope_id: str, dim: int) -> bool:
        hit = self._seen.get(scope_id)
        now = time.monotonic()
        if hit is not None and (hit[0] or now - hit[1] < RECHECK_S):
            return hit[0]
        if len(self._seen) >= CACHE_MAX:
            self._seen.clear()
        found = _state(conn, index_name(scope_id, dim)) is True
        self._seen[scope_id] = (found, now)
        return found

    def forget(self) -> None:
        self._seen.clear()


def nearest_sql(conn: Any, scope_id: str, dim: int) -> str:
    """The ANN query for one scope's index: its `ef` nearest live rows, each with
    pgvector's cosine distance and without its vector (the limit is the one
    parameter besides the query vector): the store reads the vectors of the few
    rows that can rank (`PostgresStore._recall_ann`), not of all `ef`."""
    d = int(dim)
    return (
        "SELECT rowid, confidence, last_seen_at, created_at, "
        f"embedding::vector({d}) <=> %s::vector({d}) AS dist FROM memories "
        f"WHERE {scope_predicate(conn, scope_id)} ORDER BY dist LIMIT %s"
    )
