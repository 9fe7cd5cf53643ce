"""The base every layer of the store stands on (see `memkit.store.rules`).

A connection of either backend, its lock, the in-memory indexes
(`memkit.store.index`), the one write path that keeps them true
(`memkit.store.write_txn`), and the two
steps every write takes before that lock: embedding and redaction.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memkit.embed import Embedder, normalize_rows
from memkit.params import DAY, FoldParams, RedactionParams
from memkit.redact import redact
from memkit.store.index import Indexes, Statement
from memkit.store.sidecar import Sidecars
from memkit.store.write_txn import Write


def new_row_id() -> str:
    """A new memory id: 16 hex digits of a random UUID."""
    return uuid.uuid4().hex[:16]


class StoreBase:
    """What every layer of `SQLStore` shares: one connection of either backend,
    its lock, the in-memory indexes, the one write path, and embedding and
    redaction outside the lock. Thread-safe (one lock around the connection)."""

    supports_curation: bool = True
    backend: str = "sqlite"
    _bulk_rows: Callable[[Write, Iterable[tuple[Any, ...]]], None]
    """Each backend's bulk insert (`bulk_load`): SQLite and Postgres write rows differently."""

    def __init__(
        self,
        conn: Any,
        *,
        path: str,
        embedder: Embedder | None,
        clock: Callable[[], float],
        fold: FoldParams,
        redaction: RedactionParams,
        sidecars: Sidecars | None = None,
        cache_cap: int | None = None,
    ):
        self._conn = conn
        self.path = path
        self.embedder = embedder
        self.clock = clock
        self.fold = fold
        self.redaction = redaction
        self._lock = threading.RLock()
        self._closed = False
        dim = int(embedder.dim) if embedder is not None else 0
        self._ix = Indexes(conn, dim, sidecars, cache_cap, fold.window_days * DAY)
        self.new_id: Callable[[], str] = new_row_id
        """Row id factory; evaluations inject a deterministic one so replays reproduce."""

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._ix.forget()
            self._closed = True

    def cache_stats(self) -> dict[str, Any]:
        """(memkit) What this store's in-memory indexes hold (`index_cache_mb` at open
        bounds it between operations): `cap_bytes` (None: no bound), `bytes` (the
        indexes' own estimates, `nbytes`), `scopes` (their bytes, least recently used
        first) and `evicted` (scopes dropped to stay within the cap since open)."""
        with self._lock:
            held = self._ix.held
            total = held.measure(self._ix.scope_bytes)
            return {
                "cap_bytes": held.cap,
                "bytes": total,
                "scopes": dict(held.scopes),
                "evicted": held.evicted,
            }

    @contextmanager
    def _using(self, scope_id: str) -> Iterator[None]:
        """The store's lock around an operation on one scope's indexes; after it, the
        indexes are brought within their cap (`Indexes.trim`; writes do so in `Write`)."""
        with self._lock:
            try:
                yield
            finally:
                self._ix.trim(scope_id)

    @property
    def closed(self) -> bool:
        """True once `close` ran (closing again is harmless)."""
        return self._closed

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(
        self,
        scope_id: str,
        rows: int = 0,
        read: Statement | None = None,
        list_kinds: frozenset[str] = frozenset(),
    ) -> Write:
        """The one write path: every writer runs inside `with self._write(scope) as w`
        (`rows`: the most rows it inserts, whose rowids Postgres reserves at once;
        `read`: a statement read under the lock with it, `Write.read_rows`;
        `list_kinds`: kinds whose fold-in postings it starts listing ahead, Postgres
        server mode: `memkit.store.fold_listed`)."""
        return Write(self._lock, self._ix, scope_id, rows, read, list_kinds)

    def _embed(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Embed in one call, outside the lock; failure is not an error (SPEC §3.2):
        the rows are stored without vectors."""
        if self.embedder is None or not texts:
            return [None] * len(texts)
        try:
            mat = normalize_rows(self.embedder.embed(list(texts)))
        except Exception:
            return [None] * len(texts)
        if mat.shape[0] != len(texts):
            return [None] * len(texts)
        return list(mat)

    def _redact(self, content: str, tags: Iterable[str]) -> tuple[str, list[str]]:
        return redact(content, self.redaction), [redact(t, self.redaction) for t in tags]
