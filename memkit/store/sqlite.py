"""`SQLiteStore`: the store's rules (`SQLStore`) on one SQLite file.

Opening (creating, migrating, checking the file is memkit's and its embedder
the recorded one), WAL and checkpoint settings, the read-only open, and the
SQLite bulk insert. What differs in the SQL itself is `memkit.store.sqlite_db`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from memkit import checks as ck
from memkit.embed import Embedder, get_embedder
from memkit.errors import ConfigError
from memkit.params import FoldParams, RedactionParams
from memkit.store import sidecar
from memkit.store.index_bound import CACHE_MB, cap_bytes
from memkit.store.rules import SQLStore, check_recorded_embedder, record_embedder
from memkit.store.schema import SCHEMA_VERSION, check_own_file, migrate
from memkit.store.sqlite_db import SQLiteDb
from memkit.store.write_txn import Write

_BUSY_TIMEOUT_MS = 60_000


_WAL_PAGES = 16_000
"""Pages of WAL between automatic checkpoints (see `SQLiteStore.open`)."""


class SQLiteStore(SQLStore):
    """The reference memory store on one SQLite file. Open with `SQLiteStore.open(path)`.

    Thread-safe (one lock around the connection). Several processes may share
    one database file; writes serialise on SQLite's write lock.
    """

    # -- lifecycle --------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str = ":memory:",
        *,
        embedder: str | Embedder | None = "wordllama",
        clock: Callable[[], float] = time.time,
        fold: FoldParams = FoldParams(),
        redaction: RedactionParams = RedactionParams(),
        read_only: bool = False,
        vector_sidecar: int | None = sidecar.MIN_ROWS,
        index_cache_mb: float | None = CACHE_MB,
    ) -> SQLiteStore:
        """Open (creating and migrating) a store.

        The embedder's name and dimension are recorded on first use; opening
        with another one raises EmbedderMismatch. `embedder=None` opens any
        store keyword-only: nothing is embedded, new rows carry no vector.
        `read_only=True` opens an existing store of this schema version and
        never writes to the file; anything else (missing, empty, foreign,
        corrupt, older or newer schema) is a ConfigError and the file is untouched.
        `vector_sidecar` (memkit): a scope with at least this many live embedded
        rows leaves its matrix in a file beside the database after a full load,
        and later opens map it (`memkit.store.sidecar`); a read-only open maps
        but never writes one; None: no sidecar is read or written.
        `index_cache_mb` (memkit): the bound, in MB, on what this store's in-memory
        indexes hold between operations, least recently used scopes dropped first
        (`memkit.store.index`, `cache_stats`); None: no bound.
        """
        if not isinstance(path, str | os.PathLike) or not str(path).strip():
            raise ConfigError(f"path={path!r:.80}: must be a non-blank str or path")
        ck.check_text(str(path), "path")
        if not callable(clock):
            raise ConfigError(f"clock={clock!r:.80}: must be callable")
        ck.check_type(fold, "fold", FoldParams)
        ck.check_type(redaction, "redaction", RedactionParams)
        ck.check_optional_int(vector_sidecar, "vector_sidecar", lo=1)
        cap = cap_bytes(index_cache_mb)
        emb = get_embedder(embedder)
        side = None
        if vector_sidecar is not None and str(path) != ":memory:":
            side = sidecar.Sidecars(str(path), writable=not read_only, min_rows=vector_sidecar)
        opts: dict[str, Any] = {"embedder": emb, "clock": clock, "fold": fold}
        opts.update(redaction=redaction, sidecars=side, cache_cap=cap)
        if read_only:
            return cls(_connect_read_only(str(path), emb), path=str(path), **opts)
        conn = sqlite3.connect(
            str(path),
            isolation_level=None,
            check_same_thread=False,
            timeout=_BUSY_TIMEOUT_MS / 1e3,
            factory=SQLiteDb,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            check_own_file(conn, str(path), empty_ok=True)  # before WAL mode rewrites the header
            if str(path) != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoint every ~64 MB of WAL, not SQLite's default ~4 MB. A checkpoint
            # takes ~35 ms, mostly two fsyncs; at 4000 pages (one per ~600 writes)
            # that was ~50 us of every remember. At 16000 the fsyncs come a quarter
            # as often and the hot index pages fold together: in one process
            # alternating with 4000 pages (and migration 3), +8% remembers/s at
            # 100k rows. The price is a WAL file of up to ~64 MB beside a busy
            # store. (A background checkpoint thread measured worse: it contends
            # for the disk.)
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_PAGES}")
            migrate(conn)
            cls._check_embedder(conn, emb, str(path))
        except BaseException:
            conn.close()
            raise
        return cls(conn, path=str(path), **opts)

    @property
    def sidecar_counts(self) -> dict[str, int]:
        """(memkit) What the vector sidecars did in this process: used, rejected,
        written, write_failed, removed, delta_rows (rows applied on top of a map)."""
        side = self._ix.sidecars
        return {} if side is None else dict(side.counts)

    def write_sidecar(self, scope_id: str) -> dict[str, Any]:
        """(memkit) Load the scope's matrix from the table and leave it in its vector
        sidecar now, replacing any file there (`memkit store sidecar`): e.g. before
        cold readers start, or after the file was deleted. ConfigError when this
        open writes no sidecar (read-only, `:memory:`, `vector_sidecar=None`), the
        scope is not in the store, it holds fewer live embedded rows than
        `vector_sidecar`, or a reembed is unfinished (the old file is then kept);
        SidecarWriteFailed when the file cannot be written. Returns the scope,
        path, rows, bytes and seconds."""
        ck.check_scope(scope_id)
        side = self._ix.sidecars
        if side is None:
            raise ConfigError(f"{self.path!r}: this open keeps no vector sidecars")
        if not side.writable:
            raise ConfigError(f"{self.path!r}: a read-only open writes no vector sidecar")
        with self._using(scope_id):
            if scope_id not in self.scopes():
                raise ConfigError(f"scope {scope_id!r} is not in {self.path!r}")
            t = time.perf_counter()
            sv = self._ix.rewrite_sidecar(scope_id)
            seconds = time.perf_counter() - t
        path = side.path(scope_id)
        return {
            "scope": scope_id,
            "path": path,
            "rows": sv.n,
            "bytes": os.path.getsize(path),
            "seconds": seconds,
        }

    @staticmethod
    def _check_embedder(conn: SQLiteDb, emb: Embedder | None, path: str) -> None:
        record_embedder(conn, emb, path)

    # -- bulk load (benchmarks) ------------------------------------------------------------

    def _bulk_rows(self, w: Write, rows: Iterable[tuple[Any, ...]]) -> None:
        """Insert bulk rows (id, scope, kind, content, confidence, time, vector, grams)."""
        c = w.conn
        start = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM memories").fetchone()[0] + 1
        c.executemany(
            "INSERT INTO memories (rowid, id, scope_id, kind, content, tags, confidence, "
            "created_at, seen_count, last_seen_at, embedding, ngrams, change_seq) "
            "VALUES (?, ?, ?, ?, ?, '[]', ?, ?, 1, ?, ?, ?, ?)",
            (
                (start + i, mid, scope, kind, content, conf, ts, ts, c.vec(vec), grams, w.seq)
                for i, (mid, scope, kind, content, conf, ts, vec, grams) in enumerate(rows)
            ),
        )


def _connect_read_only(path: str, emb: Embedder | None) -> sqlite3.Connection:
    """A `mode=ro` connection to an existing memkit store of this schema version."""
    from pathlib import Path

    if not Path(path).is_file():
        raise ConfigError(f"no store at {path!r}")
    # No -wal beside the file: nothing is uncommitted, so read it as immutable and
    # SQLite creates no -shm/-wal either. With a -wal (a live writer), read through it.
    live = Path(path + "-wal").exists()
    uri = Path(path).resolve().as_uri() + ("?mode=ro" if live else "?mode=ro&immutable=1")
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, factory=SQLiteDb
    )
    try:
        check_own_file(conn, path, empty_ok=False)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                f"store {path!r} has schema version {version}, this memkit reads "
                f"{SCHEMA_VERSION}; open it read-write with this memkit to migrate"
            )
        if emb is not None:
            check_recorded_embedder(conn, emb, path)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise ConfigError(f"{path!r} is not a memkit store ({e})") from None
    except BaseException:
        conn.close()
        raise
    return conn
