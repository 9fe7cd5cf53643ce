"""PostgresStore: the store's rules (`memkit.store.SQLStore`) on Postgres + pgvector.

For a store that many processes and hosts share. Every SPEC rule and every
statement lives once, in `memkit.store` (over `memkit.store.rows` and
`memkit.store.index`); this module is the Postgres edge: connecting, the
connection that speaks Postgres (`PgDb`), and what only Postgres has (the
optional HNSW index). It does not use `pg_trgm`: fold-in runs memkit's own
trigram rule on the same in-memory index as the SQLite store, so both
backends make exactly the same decisions; or, on a database in
`fold_search="server"` mode, on candidates the database finds from postings
every writer keeps (`memkit.store.fold_postings`), scored the same way.

* **One writer per scope at a time.** Every write transaction first bumps
  its scope's row in `scopes` (`UPDATE ... RETURNING seq`); the row lock is
  held to commit, so fold detection and the write it decides are one
  transaction across hosts (SPEC §3.7), and writers of other scopes never
  wait. The returned number stamps every row the transaction touches.
* **In-memory indexes follow other writers** through that per-scope change
  number: a connection reads only the rows of a scope changed since it last
  looked (rows are never deleted). Numbers of one scope are handed out under
  its lock, so a committed number implies every lower one is committed.
* **Recall is searched in the database** and exact by default: the server
  orders the scope's rows by pgvector's cosine distance and sends only the
  candidates that can reach the top `limit` (`_recall_exact`); the client
  recomputes their cosines in the SQLite store's float32 arithmetic and ranks
  them with the same function, so both backends give the same answer,
  ties and score breakdowns included. No client holds a scope's vectors: it
  caches only the fold-in trigram index per (scope, kind) and the keyword
  index per scope (`memkit.store.index`; texts, never vectors).
  `ann="hnsw"` serves recall from an HNSW index per large scope
  (`memkit.store.pg_ann`: pgvector 0.6 filters a whole-table index's answer after
  the scan, so a small scope's answer came back short); a scope without one,
  or an answer that may be short, is answered exactly, and counted.

Why over 600 lines: the whole Postgres edge (connecting, the dialect, search
in SQL and the HNSW build) is one class today; the store package (#35) gives
search and index building modules of their own.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memkit.embed import Embedder, get_embedder
from memkit.errors import ConfigError
from memkit.params import FoldParams, RecallParams, RedactionParams
from memkit.store import fold_listed, fold_local, pg_ann, pg_write, rank
from memkit.store.fold_local import LocalCap, check_rows
from memkit.store.fold_postings import (
    MODE_LOCK,
    NEW_STORE_MODE,
    Postings,
    check_floor,
    check_mode,
    read_mode,
    write_mode,
)
from memkit.store.fold_postings import refresh as refresh_postings
from memkit.store.fold_postings import set_mode as set_fold_mode
from memkit.store.index import SYNC_MAX, Statement, TopAndChanges, changes_since
from memkit.store.index_bound import CACHE_MB, cap_bytes
from memkit.store.pg_schema import SCHEMA_VERSION, migrate
from memkit.store.pg_search import (
    COSINE_SLACK,
    LIVE,
    PAGE_MIN,
    SCORE_SLACK,
    build_session,
    candidate_arrays,
    row_arrays,
    to_numpy,
)
from memkit.store.rows import COLS, ByRowid, Row, nan
from memkit.store.rules import SQLStore, check_recorded_embedder, record_embedder
from memkit.types import Recalled

_ANN_KINDS = (None, "hnsw")
_STORE_LOCK = 0x6D656D656D62  # advisory key of the store-wide write (recording the embedder)
_NEXTVAL = (
    "SELECT nextval(pg_get_serial_sequence('memories', 'rowid')) "
    "FROM generate_series(1, ?) ORDER BY 1"
)
"""`?` rowids from the table's identity sequence, ascending."""


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


@functools.lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    """The store's `?` statement in psycopg's placeholder style."""
    return sql.replace("%", "%%").replace("?", "%s")


@contextmanager
def _text_errors() -> Iterator[None]:
    """A text argument Postgres cannot store as a ConfigError (SQLite keeps U+0000
    in text; Postgres text cannot)."""
    import psycopg

    try:
        yield
    except psycopg.DataError as e:
        if "NUL" in str(e):
            raise ConfigError(
                "a text argument holds a NUL (U+0000) character, which Postgres text cannot store"
            ) from None
        raise


@contextmanager
def _pipeline(conn: Any) -> Iterator[Any]:
    """A psycopg pipeline (yielded) whose text errors are ConfigErrors."""
    with _text_errors(), conn.pipeline() as p:
        yield p


STREAM_ROWS = 2_000
"""Rows a `PgDb.stream` receives at once: ~200 KB of a scope's texts."""


class PgDb:
    """A psycopg connection as the store's connection (see `memkit.store.sqlite_db`):
    `?` statements, writes locked and numbered per scope, pgvector vectors."""

    per_scope = True
    """Change numbers count per scope: each scope's row in `scopes` hands them out."""

    def __init__(self, conn: Any):
        self.conn = conn
        self._changes: list[tuple[Any, ...]] | None = None
        self._reserved: list[int] = []
        self._read: list[tuple[Any, ...]] = []
        self._batch: Any = None
        """The pipeline of the open `batch`, if any."""
        self._end_batch: Callable[[], None] | None = None
        """Ends the open `batch`'s pipeline now: its sync, awaited (`end_write`)."""
        self._implicit = False
        """The open write is its batch's implicit transaction (`begin_write`)."""
        self.postings: Postings | None = None
        """The database's fold-in postings when its mode is `fold_search="server"`
        (`memkit.store.fold_postings`): a write posts with them; else None."""
        self.listed_now: tuple[str, Mapping[str, tuple[int, int]]] | None = None
        """In a server-mode write: its scope and {kind: (lo, hi)} of the kinds whose
        keys were listed as it took the scope's lock, rows lo < rowid <= hi still
        pending (`memkit.store.fold_listed`: only a write holding that lock lists
        one or raises lo), so its rows of other kinds, and pending rows, skip
        their postings (`memkit.store.rows.repost`); None: not known."""

    def execute(
        self, sql: str, args: Sequence[Any] = (), binary: bool = False, per_run: bool = False
    ) -> Any:
        """`sql` with `?` placeholders; `binary`: results in Postgres's binary form
        (what vector reads want: a vector arrives as its float32 bytes, not text
        for the client to parse, ~60 us a 256-d row). `per_run`: never prepared,
        so the server plans each run for its arguments (`PostgresStore._scoped`);
        other statements are prepared after a few runs and keep a generic plan."""
        with _text_errors():
            return self.conn.execute(
                _pg_sql(sql), args, binary=binary, prepare=False if per_run else None
            )

    def stream(self, sql: str, args: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of `sql`, fetched `STREAM_ROWS` at a time through a server-side
        cursor: the client holds one chunk, not the whole result (a scope's texts,
        ~100 MB at 1M rows, for `Indexes.grams_of`). The cursor lives in the open
        transaction, else in one of its own; inside a `batch` (a pipeline) the
        result comes whole. (psycopg's `Cursor.stream` is not used: the next
        pipeline on the connection then fails, psycopg 3.3.9.)"""
        from psycopg import pq

        if self._batch is not None:
            yield from self.execute(sql, args)
            return
        idle = self.conn.info.transaction_status == pq.TransactionStatus.IDLE
        with (
            _text_errors(),
            self.conn.transaction() if idle else contextlib.nullcontext(),
            self.conn.cursor(name="memkit_stream") as cur,
        ):
            cur.itersize = STREAM_ROWS
            cur.execute(_pg_sql(sql), args)
            yield from cur

    def begin_write(
        self,
        scope_id: str | None,
        since: int | None = None,
        reserve: int = 0,
        vectors: bool = True,
        read: Statement | None = None,
        list_kinds: frozenset[str] = frozenset(),
    ) -> int:
        """Start a write holding the scope's row lock (None: the store-wide advisory
        lock); the scope's highest committed change number. `memkit_lock_scope`
        (`memkit.store.pg_schema`) takes the lock, reserves `reserve` rowids (for
        `reserve_rowids`) and then reads the scope's rows changed after `since`
        (for `take_changes`; with their vectors when `vectors`). The statement
        `read` is sent with the lock, in its round trip, and runs after it (READ
        COMMITTED: a snapshot taken once the lock is held; `take_read`). In
        server mode the lock's round trip also starts listing `list_kinds`
        ahead and reads the scope's listed kinds with a few pending rows of
        each (`memkit.store.fold_listed`), which the write posts (`listed_now`).

        Inside a `batch` that is the write's only statement so far: the write is
        the pipeline's implicit transaction (what is sent before the pipeline's
        next sync is one transaction, which that sync commits: `end_write`), and
        the lock's rows are fetched with a flush, not a sync. Outside one: BEGIN
        and the lock, one round trip."""
        self._changes, self._reserved, self._implicit, self._read = None, [], False, []
        self.listed_now = None
        step = fold_listed.LIST_STEP * max(int(reserve), 1)  # pending rows it posts
        try:
            with _text_errors():
                if self._batch is not None and scope_id is not None:
                    self._implicit = True  # no BEGIN, no COMMIT: two statements fewer
                    answer = self._lock_scope(
                        scope_id, since, reserve, vectors, read, step, list_kinds
                    )
                    parts = answer()  # a flush: the statements' results come back
                else:
                    with self.conn.pipeline():
                        self.conn.execute("BEGIN")
                        if scope_id is None:
                            self.execute("SELECT pg_advisory_xact_lock(?)", (_STORE_LOCK,))
                            return 0
                        answer = self._lock_scope(
                            scope_id, since, reserve, vectors, read, step, list_kinds
                        )
                    parts = answer()
                self._read = parts.facts
                if parts.kept is not None:
                    assert self.postings is not None
                    kept = fold_listed.advance(
                        self, self.postings, scope_id, parts.kept, step, list_kinds
                    )
                    self.listed_now = (scope_id, kept)
            seq, ids = parts.head
            if since is not None and int(seq) - 1 != since:
                self._changes = parts.changed
            self._reserved = [int(i) for i in ids]
            return int(seq) - 1
        except BaseException:
            self.end_write(False)
            raise

    def _lock_scope(
        self,
        scope_id: str,
        since: int | None,
        reserve: int,
        vectors: bool,
        read: Statement | None,
        step: int,
        list_kinds: frozenset[str],
    ) -> Callable[[], pg_write.Parts]:
        """Send a write's lock statements into the open pipeline; a function reading
        their answer. `memkit_write_begin` (`memkit.store.pg_write`): the lock, the
        listed kinds and, when `read` reads rows by rowid, that read, as one
        statement; any other `read` (the postings' probe) follows it. A write that
        lists kinds ahead sends the lock (`memkit_lock_scope`), `read` and the
        listing's statements (`_listed_keys`) one after another. All go in the
        same round trip."""
        listed = self.postings is not None
        limit = SYNC_MAX + 1
        if not list_kinds:
            rowids = read.args if isinstance(read, ByRowid) else None
            one = self.execute(
                *pg_write.statement(
                    scope_id, since, reserve, vectors, limit, rowids, step if listed else None
                )
            )
            then = None if read is None or rowids is not None else self.execute(*read)

            def merged() -> pg_write.Parts:
                parts = pg_write.split(one.fetchall(), listed)
                return parts if then is None else parts._replace(facts=then.fetchall())

            return merged
        cur = self.execute(
            "SELECT * FROM memkit_lock_scope(?::text, ?::bigint, ?::int, ?::boolean, ?::int)",
            (scope_id, since, max(int(reserve), 0), vectors, limit),
        )
        then = None if read is None else self.execute(*read)
        keys = self._listed_keys(scope_id, step, list_kinds)

        def answer() -> pg_write.Parts:
            head, *changed = cur.fetchall()
            return pg_write.Parts(
                (head[0], head[1]),
                [tuple(r[2:]) for r in changed],
                [] if then is None else then.fetchall(),
                None if keys is None else keys.fetchall(),
            )

        return answer

    def _listed_keys(self, scope_id: str, step: int, list_kinds: frozenset[str]) -> Any:
        """In server mode, the statements (sent after the lock, in its round trip)
        listing `list_kinds` ahead and reading the scope's listed keys with up to
        `step` pending rows each (`listed_now`: `fold_listed.kept_sql`); else None."""
        if self.postings is None:
            return None
        if list_kinds:
            self.execute(*fold_listed.start_sql(scope_id, list_kinds))
        return self.execute(*fold_listed.kept_sql(scope_id, step))

    def take_read(self) -> list[tuple[Any, ...]]:
        """The rows of `begin_write`'s `read` statement ([] without one)."""
        out, self._read = self._read, []
        return out

    def take_changes(self) -> list[tuple[Any, ...]] | None:
        """The rows `begin_write` read for the catch-up (None: it read none)."""
        out, self._changes = self._changes, None
        return out

    def _nextval(self, n: int) -> Any:
        return self.execute(_NEXTVAL, (n,))

    def reserve_rowids(self, n: int) -> list[int]:
        """`n` rowids from the table's identity sequence, ascending (as inserts one by
        one would take them): those `begin_write` reserved, else one query."""
        if len(self._reserved) == n:
            out, self._reserved = self._reserved, []
            return out
        return [int(r[0]) for r in self._nextval(n).fetchall()] if n > 0 else []

    @contextmanager
    def batch(self) -> Iterator[None]:
        """A pipeline: statements are sent without waiting for their results; a
        read (or the end of the batch) waits for everything sent before it. A
        write begun inside it is the pipeline's implicit transaction (`begin_write`),
        committed by `end_write`'s sync with the statements still queued, in one
        round trip; until then nothing inside it may sync (a nested pipeline
        does: it would commit the write half done). That sync is the pipeline's
        exit (psycopg's sends one, awaited, even when nothing is left): the
        batch ends there, and what follows in it runs outside a pipeline."""
        outer, outer_end = self._batch, self._end_batch
        with contextlib.ExitStack() as stack:
            self._batch = stack.enter_context(_pipeline(self.conn))
            self._end_batch = stack.close
            try:
                yield
            finally:
                self._batch, self._end_batch = outer, outer_end

    def end_write(self, commit: bool) -> None:
        """Commit or roll back, done when this returns: inside a `batch` the statements
        still queued go with it, in one round trip. A write begun in a batch
        commits by the pipeline's sync, and rolls back by a ROLLBACK before it
        (which aborts the implicit transaction; the server notes there was no
        transaction block); that sync ends the batch's pipeline, so leaving the
        batch costs no round trip more."""
        import psycopg

        implicit, self._implicit = self._implicit, False
        self.listed_now = None
        try:
            with _text_errors():
                if not implicit:
                    self.conn.execute("COMMIT" if commit else "ROLLBACK")
                elif not commit:
                    self.conn.execute("ROLLBACK")
                if self._end_batch is not None:
                    end, self._batch, self._end_batch = self._end_batch, None, None
                    end()
        except psycopg.errors.PipelineAborted:
            if commit:  # a rollback after a failed statement: aborted already
                raise
        except psycopg.OperationalError:
            if commit or not self.conn.broken:  # a dead connection has rolled back already
                raise

    def drop_ann_indexes(self) -> None:
        """Drop the HNSW indexes (`memkit.store.pg_ann`): they cast to the old dimension."""
        pg_ann.drop_all(self.conn)

    @staticmethod
    def integrity_problems() -> list[str]:
        """Always []: Postgres checks its own pages (no amcheck here)."""
        return []

    def top_and_changes(self, scope_id: str | None, since: int, vectors: bool) -> TopAndChanges:
        """`top` and the rows of `changes_since` in one statement (`read_ahead_sql`):
        one snapshot, in which a scope's committed number and its rows agree (both
        change in the transaction that takes the number), and one statement's
        client and server overhead where two cost two."""
        changes = changes_since(scope_id, since, vectors)
        rows = self.execute(*read_ahead_sql(scope_id, changes)).fetchall()
        top, changed = 0, []
        for r in rows:
            if r[0] == 0:
                top = int(r[1])
            else:
                changed.append(r[1:])
        changed.sort(key=lambda r: r[0])  # change order, whatever order UNION ALL kept
        return top, changed

    def top(self, scope_id: str | None) -> int:
        """The scope's highest committed change number."""
        row = self.execute("SELECT seq FROM scopes WHERE scope_id = ?", (scope_id,)).fetchone()
        return 0 if row is None else int(row[0])

    @staticmethod
    def vec(v: np.ndarray | None) -> np.ndarray | None:
        return None if v is None else np.asarray(v, dtype=np.float32).ravel()

    @staticmethod
    def unvec(value: Any) -> np.ndarray:
        return to_numpy(value)

    @staticmethod
    def matrix(values: Sequence[Any], dim: int) -> np.ndarray | None:
        vecs = [to_numpy(v) for v in values]
        if not all(v.shape == (dim,) for v in vecs):
            return None
        return np.stack(vecs)

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    def close(self) -> None:
        self.conn.close()


class PostgresStore(SQLStore):
    """The reference store on Postgres. Open with `PostgresStore.open(dsn)`.

    Thread-safe (one lock around the connection). Any number of processes and
    hosts may share one database; writes to one scope serialise on its row.
    """

    backend: str = "postgres"

    def __init__(
        self,
        conn: PgDb,
        *,
        dsn: str,
        embedder: Embedder | None,
        clock: Callable[[], float],
        fold: FoldParams,
        redaction: RedactionParams,
        ann: str | None,
        ef_search: int,
        hnsw_min_rows: int = pg_ann.HNSW_MIN_ROWS,
        hnsw_graph: tuple[int, int] = (pg_ann.M, pg_ann.EF_CONSTRUCTION),
        cache_cap: int | None = None,
    ):
        super().__init__(
            conn,
            path=dsn,
            embedder=embedder,
            clock=clock,
            fold=fold,
            redaction=redaction,
            cache_cap=cache_cap,
        )
        self.ann = ann
        self.ef_search = int(ef_search)
        self.hnsw_min_rows = int(hnsw_min_rows)
        self.hnsw_graph = hnsw_graph
        """(m, ef_construction) of the indexes this store builds (`open`)."""
        self.ann_counts = {"ann": 0, "exact_fallback": 0}
        """How often recall answered by ANN and how often exactly instead (a scope
        without its index, or an ANN answer that may be short)."""
        self._dim: int | None = None
        self._ann = pg_ann.AnnCache()
        self.hnsw_build: dict[str, Any] | None = None
        """What opening with `ann="hnsw"` did (`build_hnsw`'s report)."""
        self._build_settings: Mapping[str, str | int] | None = None
        """The open's `build_settings`: a reembed rebuilds the indexes under them."""
        self._scratch_schema: str | None = None
        """Set by `scratch`: the schema this store owns and drops on close."""

    @classmethod
    def scratch(cls, dsn: str, **options: Any) -> PostgresStore:
        """A new, empty store in a schema of its own in `dsn`'s database, dropped
        (with every row) when the store is closed: for evaluations and tests
        that want a fresh store per scope. `options` go to `open`."""
        import psycopg

        schema = f"memkit_scratch_{uuid.uuid4().hex[:16]}"
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"CREATE SCHEMA {schema}")
        except psycopg.Error as e:
            raise ConfigError(f"cannot create a scratch schema in {safe_dsn(dsn)!r}: {e}") from e
        try:
            store = cls.open(dsn_with_schema(dsn, schema), **options)
        except BaseException:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            raise
        store._scratch_schema = schema
        return store

    def close(self) -> None:
        with self._lock:
            schema, self._scratch_schema = self._scratch_schema, None
            if schema is not None and not self._conn.closed:
                self._conn.conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        super().close()

    def reembed(self, embedder: str | Embedder, **options: Any) -> Any:
        """`SQLStore.reembed`, then the HNSW indexes (dropped: they cast to the old dim) rebuilt."""
        report, self._dim = super().reembed(embedder, **options), None
        self._ann.forget()
        if self.ann == "hnsw":
            self.hnsw_build = self.build_hnsw(self._build_settings)
        return report

    # -- lifecycle --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dsn: str,
        *,
        embedder: str | Embedder | None = "wordllama",
        clock: Callable[[], float] = time.time,
        fold: FoldParams = FoldParams(),
        redaction: RedactionParams = RedactionParams(),
        ann: str | None = None,
        ef_search: int = pg_ann.EF_SEARCH,
        read_only: bool = False,
        build_settings: Mapping[str, str | int] | None = None,
        synchronous_commit: bool = True,
        hnsw_min_rows: int = pg_ann.HNSW_MIN_ROWS,
        build_concurrently: bool = True,
        hnsw_m: int = pg_ann.M,
        hnsw_ef_construction: int = pg_ann.EF_CONSTRUCTION,
        index_cache_mb: float | None = CACHE_MB,
        fold_search: str | None = None,
        fold_local_rows: int | None = None,
        fold_list_at: float = fold_local.LIST_AT,
    ) -> PostgresStore:
        """Connect (creating and migrating the tables) to a Postgres store.

        `dsn` is a libpq URI or key=value string. The database needs the
        pgvector extension (created when missing). The embedder is recorded
        and checked as in `SQLiteStore.open`. `ann="hnsw"` builds (once) an
        HNSW index per scope with at least `hnsw_min_rows` embedded live rows
        (`build_hnsw`) and serves those scopes' recall from it, falling back to
        the exact answer whenever the ANN answer may be short.
        `read_only=True` opens an existing store of this schema version in
        read-only transactions (nothing is created, migrated or recorded).
        `build_settings` are server settings for the session that builds the
        HNSW indexes, over `BUILD_SETTINGS` (a value of None drops a default).
        `build_concurrently=False` builds them with a plain CREATE INDEX, which
        blocks every writer of the store during the build (`build_hnsw`).
        `hnsw_m` and `hnsw_ef_construction` are the graph of the indexes it
        builds (pgvector's `m` and `ef_construction`; an index already built
        keeps its own: `drop_hnsw`, then `build_hnsw`, to rebuild).
        `synchronous_commit=False` sets it off for this connection: a commit
        returns before its WAL reaches disk (a server crash may lose the last
        commits, never consistency); the default keeps the server's setting.
        `index_cache_mb`: the bound on this client's in-memory indexes, as in
        `SQLiteStore.open`.
        `fold_search`: where fold-in candidates are found, a property of the
        database (`memkit.store.fold_postings`): "client" (an in-memory trigram
        index per scope and kind, growing with the rows in the fold window) or
        "server" (that index up to `fold_local_rows`, a postings table in the
        database past it). None (default) takes the database's mode; a store
        created now takes the mode asked, "server" for None (its postings serve
        fold thresholds >= this store's, or the default's when this one is <= 0;
        a store made by an older memkit and still empty is set to "server" when
        asked); asking a mode the database does not have is a ConfigError
        (`set_fold_search` switches).
        `fold_local_rows`: in server mode, this client still folds in from its
        own index for a (scope, kind) whose fold window holds at most this many
        live rows (its memory bounded by them, ~500 bytes a row), and from the
        postings past it (`memkit.store.fold_local`); 0: always the postings.
        `fold_list_at`: the share of that cap (in (0, 1]) past which this writer
        starts posting a (scope, kind)'s rows ahead, a few a write, so the write
        that crosses the cap has (nearly) none left to post under the scope's
        lock (`memkit.store.fold_listed`); 1: the crossing write posts them all.
        Client mode ignores both.
        """
        if ann not in _ANN_KINDS:
            raise ConfigError(f"unknown ann {ann!r} (want None or 'hnsw')")
        build_session(build_settings)  # checked before connecting
        pg_ann.check_ef_search(ef_search)
        cls.check_hnsw_graph(hnsw_m, hnsw_ef_construction)
        cap = cap_bytes(index_cache_mb)
        if isinstance(hnsw_min_rows, bool) or not isinstance(hnsw_min_rows, int):
            raise ConfigError(f"hnsw_min_rows={hnsw_min_rows!r}: want an int")
        if not isinstance(build_concurrently, bool):
            raise ConfigError(f"build_concurrently={build_concurrently!r}: want True or False")
        if not isinstance(synchronous_commit, bool):
            raise ConfigError(f"synchronous_commit={synchronous_commit!r}: want True or False")
        check_mode(fold_search)
        local = LocalCap(
            check_rows(fold_local.LOCAL_ROWS if fold_local_rows is None else fold_local_rows),
            list_at=fold_local.check_share(fold_list_at),
        )
        emb = get_embedder(embedder)
        try:
            import psycopg
            from pgvector.psycopg import register_vector
        except ImportError as e:  # pragma: no cover - the dev extra installs both
            raise ConfigError(
                "PostgresStore needs psycopg and pgvector (pip install 'psycopg[binary]' pgvector)"
            ) from e
        try:
            conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.Error as e:
            raise ConfigError(f"cannot connect to Postgres store {safe_dsn(dsn)!r}: {e}") from e
        try:
            db = PgDb(conn)
            if read_only:
                _check_readable(conn, dsn)
                conn.execute("SELECT pg_advisory_lock_shared(%s)", (MODE_LOCK,))
                conn.execute("SET default_transaction_read_only = on")
                register_vector(conn)
                if emb is not None:
                    check_recorded_embedder(db, emb, safe_dsn(dsn))
            else:
                if not synchronous_commit:
                    conn.execute("SET synchronous_commit = off")
                mode = NEW_STORE_MODE if fold_search is None else fold_search
                migrate(conn, on_create=lambda c: write_mode(c, mode, new_floor(fold)))
                conn.execute("SELECT pg_advisory_lock_shared(%s)", (MODE_LOCK,))
                register_vector(conn)
                record_embedder(db, emb, safe_dsn(dsn))
            db.postings = _fold_mode(db, fold_search, fold, dsn, read_only)
            store = cls(
                db,
                dsn=dsn,
                embedder=emb,
                clock=clock,
                fold=fold,
                redaction=redaction,
                ann=ann,
                ef_search=ef_search,
                hnsw_min_rows=hnsw_min_rows,
                hnsw_graph=(hnsw_m, hnsw_ef_construction),
                cache_cap=cap,
            )
            store._build_settings = build_settings
            store._ix.local = local
            if ann == "hnsw" and not read_only:
                store.hnsw_build = store.build_hnsw(build_settings, build_concurrently)
        except BaseException:
            conn.close()
            raise
        return store

    @staticmethod
    def check_hnsw_graph(m: Any, ef_construction: Any) -> None:
        """ConfigError unless `open` takes (`hnsw_m`, `hnsw_ef_construction`): for a
        caller that checks before long work (the store bench, before its corpus)."""
        pg_ann.check_graph(m, ef_construction)

    @property
    def fold_search(self) -> str:
        """Where fold-in candidates are found: "client" or "server" (`open`)."""
        return "client" if self._conn.postings is None else "server"

    @property
    def fold_local_rows(self) -> int:
        """In server mode, the most live rows of a (scope, kind)'s fold window this
        client folds in from its own index (`open`'s `fold_local_rows`)."""
        local = self._ix.local
        return 0 if local is None else local.rows

    @property
    def fold_list_at(self) -> float:
        """In server mode, the share of `fold_local_rows` past which this client
        lists a (scope, kind) ahead of it (`open`'s `fold_list_at`)."""
        local = self._ix.local
        return fold_local.LIST_AT if local is None else local.list_at

    def _ahead_rows(self) -> int:
        """Live rows past which this client's bulk writes list a key fully."""
        return fold_local.ahead_rows(self.fold_local_rows, self.fold_list_at)

    def fold_local_stats(self) -> dict[str, Any]:
        """(memkit) The server-mode cap on this client's fold-in indexes
        (`memkit.store.fold_local`): `rows` (the cap), `held` ({(scope, kind):
        live rows} of the indexes held now), `over` ((scope, kind)s remembered
        as over the cap now) and `counts` (since open: found over the cap,
        counted again, built under it). In client mode `held` is uncapped."""
        with self._lock:
            local = self._ix.local
            return {
                "rows": self.fold_local_rows,
                "held": {k: len(gi) for k, gi in self._ix.grams.items()},
                "over": 0 if local is None else local.held,
                "counts": {} if local is None else dict(local.counts),
            }

    def set_fold_search(self, mode: str, floor: float | None = None) -> None:
        """Switch the database's fold-in mode (`open`'s `fold_search`) in one
        transaction: to "server", the postings of every (scope, kind) with more
        live rows than this client's `fold_local_rows` are written (for fold
        thresholds >= `floor`, default this store's threshold, at most 1; the
        others' when a writer first needs them: `memkit.store.fold_listed`;
        "more than the cap" is past its `fold_list_at` share);
        to "client", they are dropped. ConfigError while another client has the
        store open: it would go on in the old mode (`memkit.store.fold_postings`)."""
        check_mode(mode)
        f = check_floor(min(self.fold.threshold, 1.0) if floor is None else floor)
        if mode == "server" and 0 < self.fold.threshold < f:
            raise ConfigError(f"floor {f!r} is above this store's fold threshold")
        with self._lock:
            cap = self._ahead_rows()
            self._conn.postings = set_fold_mode(
                self._conn, mode, f, lambda db, p: fold_listed.list_big(db, p, cap)
            )
            self._ix.forget()

    def bulk_load(
        self,
        scope_id: str,
        contents: Sequence[str],
        embeddings: np.ndarray | None = None,
        **kw: Any,
    ) -> None:
        """`SQLStore.bulk_load`; in server mode the postings then vacuumed and
        analysed after its commit (`fold_postings.refresh`: index-only probes
        and fresh length estimates)."""
        super().bulk_load(scope_id, contents, embeddings, **kw)
        with self._lock:
            if self._conn.postings is not None:
                self._conn.postings = refresh_postings(self._conn.conn, self._conn.postings)

    def fold_postings_problems(self) -> list[str]:
        """How the live rows' fold-in postings differ from what their texts post
        (`memkit.store.fold_listed.problems`): [] when right, or in client mode."""
        with self._lock:
            postings = self._conn.postings
            return [] if postings is None else fold_listed.problems(self._conn, postings)

    def _embedding_dim(self) -> int:
        if self._dim is None:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'embedder_dim'").fetchone()
            if row is None:
                raise ConfigError("ann='hnsw' needs a store with an embedder recorded")
            self._dim = int(row[0])
        return self._dim

    def build_hnsw(
        self, build_settings: Mapping[str, Any] | None = None, concurrently: bool = True
    ) -> dict[str, Any]:
        """Build the HNSW index of every scope that has `hnsw_min_rows` embedded live
        rows and none yet (`memkit.store.pg_ann`), under `BUILD_SETTINGS` with
        `build_settings` over them: concurrently (writers go on), or with
        `concurrently=False` a plain build that blocks every writer of the store
        until it is done (for a store nobody writes meanwhile, e.g. right after
        `bulk_load`: faster, docs/postgres-scale.md). What it did: `built` (any),
        total `seconds` and `index_bytes`, the `settings`, `concurrently`, and
        per scope its rows and its own report (with the `graph` its index has).
        Call again after a scope has grown."""
        if not isinstance(concurrently, bool):
            raise ConfigError(f"concurrently={concurrently!r}: want True or False")
        settings = build_session(build_settings)
        d = self._embedding_dim()
        c = self._conn.conn
        with self._lock:
            scopes = {
                scope: {
                    "rows": n,
                    **pg_ann.build(c, scope, d, settings, concurrently, self.hnsw_graph),
                }
                for scope, n in pg_ann.large_scopes(c, self.hnsw_min_rows)
            }
            self._ann.forget()
        built = any(r["built"] for r in scopes.values())
        return {
            "built": built,
            "seconds": sum(r["seconds"] for r in scopes.values()),
            "settings": dict(settings) if built else {},
            "concurrently": concurrently,
            "index_bytes": sum(r["index_bytes"] for r in scopes.values()),
            "scopes": scopes,
        }

    def drop_hnsw(self) -> None:
        """Drop every HNSW index of this store; recall answers exactly (counted)
        until `build_hnsw` builds them again."""
        with self._lock:
            self._conn.drop_ann_indexes()
            self._ann.forget()

    # -- recall: in the database -----------------------------------------------------------

    def _store_dim(self, q: np.ndarray) -> int:
        """The dimension recall compares in: the embedder's, else the recorded one,
        else the query's (a store without an embedder holds no vectors)."""
        if self._ix.dim:
            return self._ix.dim
        try:
            return self._embedding_dim()
        except ConfigError:
            return int(q.shape[0])

    def _recall_vector(
        self, scope_id: str, q: np.ndarray, limit: int, params: RecallParams
    ) -> list[Recalled]:
        """The SPEC §4.1 vector path, served by HNSW first when `ann="hnsw"`."""
        if self.ann is not None and limit > 0 and params.candidate_cap is None:
            hits = self._recall_ann(scope_id, q, limit, params)
            if hits is not None:
                self.ann_counts["ann"] += 1
                return hits
            self.ann_counts["exact_fallback"] += 1
        return self._recall_exact(scope_id, q, limit, params)

    def _recall_exact(
        self, scope_id: str, q: np.ndarray, limit: int, params: RecallParams
    ) -> list[Recalled]:
        """The exact answer, searched in the database: no client holds the scope's vectors.

        The server orders the scope's rows by pgvector's cosine distance and
        sends only candidates; the client recomputes their cosines in the
        SQLite store's float32 arithmetic and ranks them with the same
        function (`memkit.store.rank`), so both backends answer alike. With a limit,
        one page of the nearest rows usually settles it: a row beyond the page
        cannot outscore the page's limit-th score when its cosine is below
        `rank.cosine_needed` of that score (less `COSINE_SLACK`, the most the two
        arithmetics differ); otherwise every row down to that cosine is read.
        Rows whose cosine is 0 by definition (another dimension, a zero
        vector, or a query of another dimension or zero) are read apart, and
        only when the floor admits 0."""
        floor = params.floor
        assert floor is not None  # SQLStore.recall resolves None to the embedder's default
        d = self._store_dim(q)
        degenerate = q.shape[0] != d or not np.any(q)
        capped = self._capped(scope_id, params.candidate_cap)
        if capped is not None:
            return self._ranked(scope_id, *candidate_arrays(capped, q), limit, params)
        base, args = LIVE, (scope_id,)
        rows: list[tuple[Any, ...]] = []
        if floor <= 0:  # a cosine of 0 clears it (rank.rank_vector's cut)
            rows += self._zero_rows(base, args, d, degenerate, limit)
        if not degenerate:
            lo = max(float(floor), -1.0) - COSINE_SLACK
            if limit <= 0:
                rows += self._nearest(base, args, q, d, lo, None)
            else:
                page_size = max(4 * limit, PAGE_MIN)
                page = self._nearest(base, args, q, d, lo, page_size)
                if len(page) == page_size:
                    need = self._cosine_needed(q, [*rows, *page], limit, params)
                    last = 1.0 - float(page[-1][5])
                    if need is None:
                        page = self._nearest(base, args, q, d, lo, None)
                    elif last + COSINE_SLACK >= need:  # bound it by the scope's own weights
                        w = self._weight_max(base, args, params)
                        tight = self._cosine_needed(q, [*rows, *page], limit, params, w)
                        need = need if tight is None else max(need, tight)
                        if last + COSINE_SLACK >= need:
                            lowest = max(lo, need - COSINE_SLACK)
                            page = self._nearest(base, args, q, d, lowest, None)
                rows += page
        if not rows:
            return []
        return self._ranked(scope_id, *candidate_arrays(rows, q), limit, params)

    def _scoped(self, sql: str, args: Sequence[Any], binary: bool = False) -> Any:
        """A recall statement over one scope, planned for its own arguments. A scope's
        share of the table decides its plan (a 10,000-row scope: its btree; a
        1M-row scope: a scan); a prepared statement may keep one generic plan for
        every scope: after 50 exact recalls of a 1M-row scope, the 1 %-scope's
        bound aggregate scanned the whole table (~225 ms against ~15 ms). Only
        these statements: writes keep their prepared generic plans (planning
        each of a write's statements again cost the server CPU every write)."""
        return self._conn.execute(sql, args, binary, per_run=True)

    def _capped(self, scope_id: str, cap: int | None) -> list[tuple[Any, ...]] | None:
        """With a candidate cap below the scope's embedded live rows, the `cap` most
        recently confirmed of them in the SQLite store's order (SPEC §4.1; the
        client holds at most `cap` vectors, for this recall only); else None."""
        if cap is None:
            return None
        (n,) = self._scoped(f"SELECT count(*) FROM {LIVE}", (scope_id,)).fetchone()
        if cap >= n:
            return None
        rows: list[tuple[Any, ...]] = self._scoped(
            f"SELECT rowid, confidence, last_seen_at, created_at, embedding FROM {LIVE} "
            "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC LIMIT ?",
            (scope_id, max(int(cap), 0)),
            binary=True,
        ).fetchall()
        return rows

    def _cosine_needed(
        self,
        q: np.ndarray,
        rows: Sequence[tuple[Any, ...]],
        limit: int,
        params: RecallParams,
        weight: float | None = None,
    ) -> float | None:
        """`rank.cosine_needed` of the limit-th score among `rows` (None: fewer survive),
        for rows whose weights reach at most `weight` (None: any weights)."""
        cos, rowid, conf, last_seen, recency = candidate_arrays(rows, q)
        now = float(self.clock())
        ranked = rank.rank_vector(cos, conf, recency, last_seen, rowid, now, params, limit)
        if ranked.score.size < limit:
            return None
        kth = float(ranked.score[limit - 1])
        return rank.cosine_needed(kth - SCORE_SLACK * max(1.0, abs(kth)), params, weight)

    def _weight_max(self, base: str, args: tuple[Any, ...], params: RecallParams) -> float | None:
        """`rank.weight_max` of the candidates (their highest confidence and recency
        timestamp, one aggregate): a page of bench rows at confidence 0.7 no
        longer reads every row down to 0.7 of its limit-th cosine."""
        c_max, ts_max = self._scoped(
            f"SELECT max(confidence), max(coalesce(last_seen_at, created_at)) FROM {base}", args
        ).fetchone()
        if c_max is None or (ts_max is not None and np.isnan(ts_max)):
            return None  # no rows, or a NaN stamp that hides the others' maximum
        ts = float("nan") if ts_max is None else float(ts_max)
        return rank.weight_max(float(c_max), ts, float(self.clock()), params)

    def _nearest(
        self,
        base: str,
        args: tuple[Any, ...],
        q: np.ndarray,
        d: int,
        lowest: float,
        limit: int | None,
    ) -> list[tuple[Any, ...]]:
        """Candidates with pgvector cosine >= `lowest`, nearest first (`limit` of them,
        or all): (rowid, confidence, last_seen_at, created_at, embedding, distance).
        A zero stored vector's distance is NaN, which no bound admits."""
        rows: list[tuple[Any, ...]] = self._scoped(
            "SELECT rowid, confidence, last_seen_at, created_at, embedding, dist FROM ("
            "SELECT rowid, confidence, last_seen_at, created_at, embedding, CASE WHEN "
            f"vector_dims(embedding) = {int(d)} THEN embedding <=> ?::vector END AS dist "
            f"FROM {base} OFFSET 0) c WHERE dist <= ? ORDER BY dist, rowid"
            + ("" if limit is None else " LIMIT ?"),
            (q, *args, 1.0 - lowest, *(() if limit is None else (limit,))),
            binary=True,
        ).fetchall()
        return rows

    def _zero_rows(
        self, base: str, args: tuple[Any, ...], d: int, degenerate: bool, limit: int
    ) -> list[tuple[Any, ...]]:
        """Candidates whose cosine is 0 by definition; with a limit, the `limit`
        that rank first among equal scores (most recently confirmed, larger rowid)."""
        where = "" if degenerate else (
            f"WHERE vector_dims(embedding) <> {int(d)} OR vector_norm(embedding) = 0"
        )  # fmt: skip
        rows: list[tuple[Any, ...]] = self._scoped(
            "SELECT rowid, confidence, last_seen_at, created_at, NULL, NULL FROM ("
            f"SELECT * FROM {base} OFFSET 0) c {where} "
            "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC" + (" LIMIT ?" if limit > 0 else ""),
            (*args, *((limit,) if limit > 0 else ())),
        ).fetchall()
        return rows

    def _rows_with_vectors(self, rowids: np.ndarray) -> dict[int, tuple[Row, Any]]:
        """The rows with these rowids and their vectors (binary), one statement."""
        if rowids.size == 0:
            return {}
        ph = ",".join("?" * rowids.size)
        found = self._conn.execute(
            f"SELECT {COLS}, embedding FROM memories WHERE rowid IN ({ph})",
            [int(x) for x in rowids],
            binary=True,
        ).fetchall()
        return {int(r[0]): (Row._make(r[:-1]), r[-1]) for r in found}

    def _recall_ann(
        self, scope_id: str, q: np.ndarray, limit: int, params: RecallParams
    ) -> list[Recalled] | None:
        """The answer of the scope's HNSW index, or None (answer exactly): the scope
        has no index, or fewer than `limit` rows clear the floor while the scan
        came back full with its farthest row still above the floor (rows beyond
        it might clear it too). Two round trips: the index's `ef` nearest rows with
        pgvector's distances (no vectors), then the vectors and rows of those
        `rank.near_top` keeps within `COSINE_SLACK` of the floor or the limit-th
        score, ranked by their own cosines as the exact path ranks them."""
        d = self._embedding_dim()
        c = self._conn.conn
        if q.shape[0] != d or not self._ann.has_index(c, scope_id, d):
            return None
        ef = max(self.ef_search, limit)
        try:  # one round trip (psycopg's transaction() would wait on BEGIN and COMMIT)
            with _pipeline(c):
                c.execute("BEGIN")
                c.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                c.execute("SET LOCAL enable_sort = off")  # the scope's index, never a sort
                cur = c.execute(pg_ann.nearest_sql(c, scope_id, d), (q, ef), binary=True)
                c.execute("COMMIT")
        except BaseException:
            self._conn.end_write(False)  # a failed statement left the transaction open
            raise
        rows = cur.fetchall()
        floor = params.floor
        assert floor is not None  # SQLStore.recall resolves None to the embedder's default
        server = 1.0 - np.array([nan(r[4]) for r in rows], dtype=np.float64)
        rowid, conf, last_seen, recency = row_arrays(rows)
        now = float(self.clock())
        unknown = np.isnan(server)  # a zero vector's distance: scored by the client
        near = np.union1d(
            rank.near_top(
                np.where(unknown, -np.inf, server), conf, recency, now, params, limit, COSINE_SLACK
            ),
            np.flatnonzero(unknown),
        )
        found = self._rows_with_vectors(rowid[near])
        cos, *_ = candidate_arrays(
            [(*rows[i][:4], found[int(rowid[i])][1] if int(rowid[i]) in found else None)
             for i in near],
            q,
        )  # fmt: skip
        hits = self._ranked(
            scope_id, cos, rowid[near], conf[near], last_seen[near], recency[near], limit,
            params, now, {k: r for k, (r, _) in found.items()},
        )  # fmt: skip
        if len(hits) >= limit or len(rows) < ef or float(server[-1]) < float(floor) - COSINE_SLACK:
            return hits
        return None

    def _bulk_rows(self, w: Any, rows: Any) -> None:
        """`SQLStore.bulk_load`'s rows in one COPY, then ANALYZE: the planner's row
        counts (a scope's share of the table) are true from the first recall."""
        with self._conn.conn.cursor().copy(
            "COPY memories (id, scope_id, kind, content, tags, confidence, created_at, "
            "seen_count, last_seen_at, embedding, ngrams, change_seq) FROM STDIN"
        ) as cp:
            for mid, scope, kind, content, conf, ts, vec, grams in rows:
                emb = None if vec is None else _vec_text(vec)
                cp.write_row((mid, scope, kind, content, "[]", conf, ts, 1, ts, emb, grams, w.seq))
        postings = self._conn.postings
        if postings is not None:  # this write's rows of listed keys; its keys past the cap's
            fold_listed.post_written(self._conn, postings, w.scope_id, w.seq)  # share listed
            fold_listed.list_big(self._conn, postings, self._ahead_rows(), w.scope_id)
        self._conn.conn.execute("ANALYZE memories")


_ROW_NULLS = ", ".join(["NULL"] * (len(COLS.split(",")) + 1))
"""The read-ahead's part 0 padded to its width: a `Row`'s columns and the embedding."""


def read_ahead_sql(scope_id: str | None, changes: Statement) -> Statement:
    """`PgDb.top_and_changes`'s one statement: a UNION ALL of the scope's number
    (part 0) and the `changes` rows (part 1: change_seq, the `Row`'s columns,
    embedding), each row led by its part; columns part 0 lacks are NULL."""
    sql = (
        f"SELECT 0, seq, {_ROW_NULLS} FROM scopes WHERE scope_id = ? "
        f"UNION ALL SELECT 1, c.* FROM ({changes[0]}) c"
    )
    return sql, [scope_id, *changes[1]]


def new_floor(fold: FoldParams) -> float:
    """The postings' floor a new server-mode store records: its creator's fold
    threshold (at most 1), or the default threshold when that one scans (<= 0)."""
    t = fold.threshold if fold.threshold > 0 else FoldParams().threshold
    return check_floor(min(t, 1.0))


def _fold_mode(
    db: PgDb, asked: str | None, fold: FoldParams, dsn: str, read_only: bool
) -> Postings | None:
    """The database's fold-in postings as `open` asked (module `memkit.store.fold_postings`)."""
    have = read_mode(db.conn)
    mode = "client" if have is None else "server"
    if asked is None or asked == mode:
        if have is not None:
            have.check(fold.threshold)
        return have
    (rows,) = db.conn.execute("SELECT count(*) FROM (SELECT 1 FROM memories LIMIT 1) x").fetchone()
    if asked == "server" and not rows and not read_only:
        return set_fold_mode(db, "server", new_floor(fold))
    raise ConfigError(
        f"fold_search={asked!r}, but store {safe_dsn(dsn)!r} is in {mode!r} mode: open it "
        f"with fold_search={mode!r} or None, or switch it (PostgresStore.set_fold_search)"
    )


def _check_readable(conn: Any, dsn: str) -> None:
    """ConfigError unless the database holds a memkit store of this schema version."""
    row = conn.execute("SELECT to_regclass('schema_version'), to_regclass('memories')").fetchone()
    if row[0] is None or row[1] is None:
        raise ConfigError(f"{safe_dsn(dsn)!r} holds no memkit store (no memkit tables)")
    (version,) = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"store {safe_dsn(dsn)!r} has schema version {version}, this memkit reads "
            f"{SCHEMA_VERSION}; open it read-write with this memkit to migrate"
        )


def dsn_with_schema(dsn: str, schema: str) -> str:
    """`dsn` (a URI) with `search_path` set to `schema`, then public (where pgvector is)."""
    from urllib.parse import quote

    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}options={quote(f'-csearch_path={schema},public')}"


def _vec_text(v: np.ndarray) -> str:
    """pgvector's text form; repr of each float32 (as a double) parses back exactly."""
    return "[" + ",".join(map(repr, v.astype(np.float64).tolist())) + "]"


def safe_dsn(dsn: str) -> str:
    """The DSN without a password, for error messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        d = conninfo_to_dict(dsn)
        if "password" in d:
            d["password"] = "***"
        return make_conninfo("", **d)
    except Exception:
        return "<dsn>"
