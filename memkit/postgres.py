"""PostgresStore: the SQLite store's API and SPEC rules on Postgres + pgvector.

For a store that many processes and hosts share. Every SPEC rule keeps its
one home in the pure modules (`memkit.rank` ranks, `memkit.gram_index` and
`memkit.text` decide fold-in, `memkit.proposal` validates, `memkit.redact`
redacts); this module is the Postgres edge around them. It does not use
`pg_trgm`: fold-in runs memkit's own trigram rule on the same in-memory
index as the SQLite store, so both backends make exactly the same decisions.

* **One writer per scope at a time.** Every write transaction first bumps
  its scope's row in `scopes` (`UPDATE ... RETURNING seq`); the row lock is
  held to commit, so fold detection and the write it decides are one
  transaction across hosts (SPEC §3.7), and writers of other scopes never
  wait. The returned number stamps every row the transaction touches.
* **In-memory indexes follow other writers** through that per-scope change
  number: a connection reads only the rows of a scope changed since it last
  looked (rows are never deleted). Numbers of one scope are handed out under
  its lock, so a committed number implies every lower one is committed.
* **Recall is exact by default** (the per-scope float32 matrix the SQLite
  store uses: identical arithmetic, identical rankings). `ann="hnsw"` adds a
  pgvector HNSW index for large scopes; a filtered ANN answer with fewer
  than `limit` survivors while the scope holds more embedded rows is
  replaced by the exact answer (pgvector < 0.8 filters after the scan, so a
  small scope's ANN answer is short; it is never returned short).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memkit import checks as ck
from memkit import rank
from memkit.embed import Embedder, get_embedder, normalize_rows
from memkit.errors import (
    AlreadyConsumed,
    ConfigError,
    EmbedderMismatch,
    NotFound,
    ProposalError,
    StaleSnapshot,
)
from memkit.gram_index import GramIndex
from memkit.params import DAY, ConsolidationParams, FoldParams, RedactionParams
from memkit.pg_schema import SCHEMA_VERSION, migrate
from memkit.proposal import Proposal, validate_proposal
from memkit.store import SQLiteStore
from memkit.store_index import ScopeVectors
from memkit.store_rows import COLS, Row, nan
from memkit.text import jaccard, keywords, trigrams
from memkit.types import KINDS, Change, CommitResult, Memory, Recalled, RememberResult, Rollout

_SYNC_MAX = 5_000
"""Catching up on more changed rows than this drops the scope's indexes (they reload)."""
_ANN_KINDS = (None, "hnsw")
_EMBEDDER_LOCK = 0x6D656D656D62  # advisory key: first opener records the embedder


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _vec(vec: np.ndarray | None) -> np.ndarray | None:
    return None if vec is None else np.asarray(vec, dtype=np.float32).ravel()


def _np(value: Any) -> np.ndarray:
    """A fetched pgvector value as a float32 array (the adapter gives numpy or Vector)."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


class PostgresStore:
    """The reference store on Postgres. Open with `PostgresStore.open(dsn)`.

    Thread-safe (one lock around the connection). Any number of processes and
    hosts may share one database; writes to one scope serialise on its row.
    """

    supports_curation: bool = True
    backend: str = "postgres"

    # The rules that touch no SQL have one home, SQLiteStore, and are borrowed from
    # it, not copied: checking and redacting writes and remember_many's items, the
    # embedding of writes and queries outside the lock, recall's choice of path
    # (vector, then keywords), and the snapshot policies.
    remember = SQLiteStore.remember
    remember_many = SQLiteStore.remember_many
    recall = SQLiteStore.recall
    snapshot = SQLiteStore.snapshot
    _item = SQLiteStore._item
    _check_write = staticmethod(SQLiteStore._check_write)
    _check_commit = staticmethod(SQLiteStore._check_commit)
    _check_rollout = SQLiteStore._check_rollout
    _redact = SQLiteStore._redact
    _embed = SQLiteStore._embed

    def __init__(
        self,
        conn: Any,
        *,
        dsn: str,
        embedder: Embedder | None,
        clock: Callable[[], float],
        fold: FoldParams,
        redaction: RedactionParams,
        ann: str | None,
        ef_search: int,
    ):
        self._conn = conn
        self.path = dsn
        self.embedder = embedder
        self.clock = clock
        self.fold = fold
        self.redaction = redaction
        self.ann = ann
        self.ef_search = int(ef_search)
        self.ann_counts = {"ann": 0, "exact_fallback": 0}
        """How often recall answered by ANN and how often it fell back to exact."""
        self._dim: int | None = None
        self._lock = threading.RLock()
        self._vectors: dict[str, ScopeVectors] = {}
        self._grams: dict[tuple[str, str], GramIndex] = {}
        self._seen: dict[str, int] = {}
        """Per scope: every change up to this number is in the in-memory indexes."""
        self.new_id: Callable[[], str] = _new_id
        """Row id factory; evaluations inject a deterministic one so replays reproduce."""

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
        ef_search: int = 100,
        read_only: bool = False,
    ) -> PostgresStore:
        """Connect (creating and migrating the tables) to a Postgres store.

        `dsn` is a libpq URI or key=value string. The database needs the
        pgvector extension (created when missing). The embedder is recorded
        and checked as in `SQLiteStore.open`. `ann="hnsw"` builds (once) an
        HNSW index over live embeddings and serves recall from it, falling
        back to the exact answer whenever the ANN answer is short.
        `read_only=True` opens an existing store of this schema version in
        read-only transactions (nothing is created, migrated or recorded).
        """
        if ann not in _ANN_KINDS:
            raise ConfigError(f"unknown ann {ann!r} (want None or 'hnsw')")
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
            raise ConfigError(f"cannot connect to Postgres store {_safe(dsn)!r}: {e}") from e
        try:
            if read_only:
                _check_readable(conn, dsn)
                conn.execute("SET default_transaction_read_only = on")
                register_vector(conn)
                if emb is not None:
                    _check_recorded(conn, emb, dsn)
            else:
                migrate(conn)
                register_vector(conn)
                cls._check_embedder(conn, emb, dsn)
            store = cls(
                conn,
                dsn=dsn,
                embedder=emb,
                clock=clock,
                fold=fold,
                redaction=redaction,
                ann=ann,
                ef_search=ef_search,
            )
            if ann == "hnsw" and not read_only:
                store._ensure_hnsw()
        except BaseException:
            conn.close()
            raise
        return store

    @staticmethod
    def _check_embedder(conn: Any, emb: Embedder | None, dsn: str) -> None:
        if emb is None:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_EMBEDDER_LOCK,))
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if meta.get("embedder") is None:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('embedder', %s), ('embedder_dim', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (emb.name, str(int(emb.dim))),
                )
            else:
                _check_recorded(conn, emb, dsn)

    def _embedding_dim(self) -> int:
        if self._dim is None:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'embedder_dim'").fetchone()
            if row is None:
                raise ConfigError("ann='hnsw' needs a store with an embedder recorded")
            self._dim = int(row[0])
        return self._dim

    def _ensure_hnsw(self) -> None:
        """Create the HNSW index on live embeddings (cast to the recorded dimension)."""
        d = self._embedding_dim()
        with self._lock:
            self._conn.execute(
                "CREATE INDEX IF NOT EXISTS memories_hnsw ON memories USING hnsw "
                f"((embedding::vector({d})) vector_cosine_ops) "
                "WHERE superseded_by IS NULL AND embedding IS NOT NULL"
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._vectors.clear()
            self._grams.clear()
            self._seen.clear()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------

    @contextmanager
    def _write(self, scope_id: str) -> Iterator[_Write]:
        """The one write path of a scope: the store lock, a transaction, the scope's
        row lock (its writers queue here, on every host), catching up with their
        changes, and the number this write stamps its rows with (`w.seq`).

        Index patches are applied as the write goes (a batch folds into rows it
        wrote itself); if the transaction does not commit, the scope's indexes
        are dropped instead (they reload from the table)."""
        with self._lock:
            w = _Write(self, scope_id)
            try:
                with self._conn.transaction():
                    seq = self._conn.execute(
                        "INSERT INTO scopes (scope_id, seq) VALUES (%s, 1) ON CONFLICT (scope_id) "
                        "DO UPDATE SET seq = scopes.seq + 1 RETURNING seq",
                        (scope_id,),
                    ).fetchone()[0]
                    self._catch_up(scope_id, seq - 1)
                    w.seq = int(seq)
                    yield w
            except BaseException:
                if w.patched:
                    self._forget(scope_id)
                raise
            self._seen[scope_id] = w.seq

    def _insert(
        self,
        mid: str,
        scope_id: str,
        kind: str,
        content: str,
        tags: Sequence[str],
        confidence: float,
        source_run_id: str | None,
        now: float,
        vec: np.ndarray | None,
        seq: int,
    ) -> int:
        """Insert a live row (seen_count 1, created = last seen = now); its rowid."""
        rowid = self._conn.execute(
            "INSERT INTO memories (id, scope_id, kind, content, tags, confidence, source_run_id, "
            "created_at, seen_count, last_seen_at, superseded_by, embedding, change_seq) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1, %s, NULL, %s, %s) RETURNING rowid",
            (
                mid,
                scope_id,
                kind,
                content,
                json.dumps(list(tags), ensure_ascii=False),
                float(confidence),
                source_run_id,
                now,
                now,
                _vec(vec),
                seq,
            ),
        ).fetchone()[0]
        return int(rowid)

    def _retire(self, rowid: int, successor: str, seq: int) -> None:
        self._conn.execute(
            "UPDATE memories SET superseded_by = %s, change_seq = %s WHERE rowid = %s",
            (successor, seq, rowid),
        )

    def _rows(self, where: str, args: Sequence = ()) -> list[Row]:
        return [
            Row._make(r) for r in self._conn.execute(f"SELECT {COLS} FROM memories {where}", args)
        ]

    def _live_row(self, scope_id: str, memory_id: str) -> Row | None:
        found = self._rows(
            "WHERE id = %s AND scope_id = %s AND superseded_by IS NULL", (memory_id, scope_id)
        )
        return found[0] if found else None

    # -- fold-in ----------------------------------------------------------------------

    def _fold_target(
        self, scope_id: str, kind: str, grams: frozenset[str], now: float
    ) -> Row | None:
        """The single best live row to fold into, or None (SPEC §3.3). Inside a write."""
        t = self.fold.threshold
        window = self.fold.window_days * DAY
        if not grams and t > 0:
            return None  # pg_trgm similarity of an empty set is 0
        sims: dict[int, float] | None = None
        if t <= 0:
            rows = self._rows(
                "WHERE scope_id = %s AND kind = %s AND superseded_by IS NULL AND last_seen_at > %s",
                (scope_id, kind, now - window - 1.0),
            )
        else:
            sims = self._gram_index(scope_id, kind).similar(grams, t)
            rows = [
                r
                for r in self._rows("WHERE rowid = ANY(%s)", (list(sims),))
                if r.scope_id == scope_id and r.kind == kind and r.live
            ]
        best: Row | None = None
        best_key = None
        for r in rows:
            if r.last_seen_at is None or not (now - r.last_seen_at) < window:
                continue
            sim = jaccard(grams, trigrams(r.content)) if sims is None else sims[r.rowid]
            if sim < t:
                continue
            key = (sim, r.last_seen_at, r.rowid)
            if best_key is None or key > best_key:
                best, best_key = r, key
        return best

    # -- remember (SPEC §3), update, retract ---------------------------------------------

    def _remember(self, scope_id: str, items: Sequence[Any]) -> list[RememberResult]:
        """The SQL half of `remember` / `remember_many` (both borrowed from
        SQLiteStore, which checks, redacts and prepares the items)."""
        vecs = self._embed([it.content for it in items])
        out: list[RememberResult] = []
        if not items:
            return out
        with self._write(scope_id) as w:
            for it, vec in zip(items, vecs, strict=True):
                now = float(self.clock())
                target = self._fold_target(scope_id, it.kind, it.grams, now)
                if target is None:
                    mid = self.new_id()
                    rowid = self._insert(
                        mid, scope_id, it.kind, it.content, it.tags, it.confidence,
                        it.source_run_id, now, vec, w.seq,
                    )  # fmt: skip
                    conf, created = it.confidence, now
                else:
                    mid, rowid, created = target.id, target.rowid, target.created_at
                    conf = max(float(target.confidence), it.confidence)
                    self._conn.execute(
                        "UPDATE memories SET seen_count = seen_count + 1, last_seen_at = %s, "
                        "confidence = %s, content = %s, tags = %s, embedding = %s, "
                        "source_run_id = COALESCE(%s, source_run_id), change_seq = %s "
                        "WHERE rowid = %s",
                        (
                            now,
                            conf,
                            it.content,
                            json.dumps(list(it.tags), ensure_ascii=False),
                            _vec(vec),
                            it.source_run_id,
                            w.seq,
                            rowid,
                        ),
                    )
                w.put(scope_id, it.kind, rowid, it.content, vec, conf, now, created, it.grams)
                out.append(RememberResult(id=mid, folded=target is not None))
        return out

    def update(
        self,
        scope_id: str,
        memory_id: str,
        content: str,
        *,
        tags: Sequence[str] | None = None,
        confidence: float = 0.7,
    ) -> str:
        """Insert a successor (same scope and kind, seen_count 1) and retire the old
        row to it, in one transaction. `tags=None` keeps the old tags. Returns the
        successor id; NotFound unless the id is live in this scope."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        self._check_write("fact", content, confidence)
        ck.check_optional_tags(tags)
        content, tag_list = self._redact(content, tags or ())
        (vec,) = self._embed([content])
        with self._write(scope_id) as w:
            old = self._live_row(scope_id, memory_id)
            if old is None:
                raise NotFound(memory_id, scope_id)
            if tags is None:
                tag_list = old.tag_list
            now = float(self.clock())
            new_id = self.new_id()
            rowid = self._insert(
                new_id, scope_id, old.kind, content, tag_list, confidence, None, now, vec, w.seq
            )
            self._retire(old.rowid, new_id, w.seq)
            w.drop(scope_id, old.kind, old.rowid)
            w.put(scope_id, old.kind, rowid, content, vec, float(confidence), now, now)
        return new_id

    def retract(self, scope_id: str, memory_id: str) -> None:
        """Soft-delete: superseded_by = own id. NotFound unless live in this scope."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._write(scope_id) as w:
            old = self._live_row(scope_id, memory_id)
            if old is None:
                raise NotFound(memory_id, scope_id)
            self._retire(old.rowid, old.id, w.seq)
            w.drop(scope_id, old.kind, old.rowid)

    # -- in-memory indexes ----------------------------------------------------------------

    def _put(self, scope_id, kind, rowid, content, vec, conf, last_seen, created, grams=None):
        """The indexes hold this row as live with these facts."""
        sv = self._vectors.get(scope_id)
        if sv is not None:
            if vec is None:
                sv.drop(rowid)
            else:
                sv.put(rowid, vec, conf, last_seen, created)
        gi = self._grams.get((scope_id, kind))
        if gi is not None:
            gi.put(rowid, content, grams)

    def _drop(self, scope_id: str, kind: str, rowid: int) -> None:
        sv = self._vectors.get(scope_id)
        if sv is not None:
            sv.drop(rowid)
        gi = self._grams.get((scope_id, kind))
        if gi is not None:
            gi.drop(rowid)

    def _forget(self, scope_id: str) -> None:
        """Drop one scope's in-memory indexes; they reload on use."""
        self._vectors.pop(scope_id, None)
        for key in [k for k in self._grams if k[0] == scope_id]:
            del self._grams[key]

    def _catch_up(self, scope_id: str, top: int | None = None) -> None:
        """Apply the scope's rows other connections changed since we last looked.
        `top` is the scope's highest committed change number (read when None)."""
        c = self._conn
        if top is None:
            row = c.execute("SELECT seq FROM scopes WHERE scope_id = %s", (scope_id,)).fetchone()
            top = 0 if row is None else int(row[0])
        seen = self._seen.get(scope_id, 0)
        if top == seen:
            return
        loaded = scope_id in self._vectors or any(k[0] == scope_id for k in self._grams)
        if top < seen or not loaded:
            self._forget(scope_id)
            self._seen[scope_id] = top
            return
        rows = c.execute(
            "SELECT change_seq, rowid, kind, content, superseded_by, confidence, "
            "last_seen_at, created_at, embedding FROM memories "
            "WHERE scope_id = %s AND change_seq > %s ORDER BY change_seq LIMIT %s",
            (scope_id, seen, _SYNC_MAX + 1),
        ).fetchall()
        if len(rows) > _SYNC_MAX:
            self._forget(scope_id)
            self._seen[scope_id] = top
            return
        for _seq, rowid, kind, content, successor, conf, seen_at, created, emb in rows:
            if successor is not None:
                self._drop(scope_id, kind, rowid)
                continue
            vec = None if emb is None else normalize_rows(_np(emb).copy())[0]
            self._put(scope_id, kind, rowid, content, vec, conf, seen_at, created)
        self._seen[scope_id] = max([top, *(r[0] for r in rows)])

    def _gram_index(self, scope_id: str, kind: str) -> GramIndex:
        """The (scope, kind) trigram index, built from the table on first use.
        Call inside a write."""
        gi = self._grams.get((scope_id, kind))
        t = self.fold.threshold
        if gi is None or gi.floor > t:
            gi = GramIndex.build(
                self._conn.execute(
                    "SELECT rowid, content FROM memories "
                    "WHERE scope_id = %s AND kind = %s AND superseded_by IS NULL",
                    (scope_id, kind),
                ),
                floor=min(t, 1.0),
            )
            self._grams[(scope_id, kind)] = gi
        return gi

    def _scope_vectors(self, scope_id: str) -> ScopeVectors:
        """The scope's live embedded rows, caught up with other writers. Laid out
        exactly as the SQLite store lays them out, so cosines are bit-identical."""
        self._catch_up(scope_id)
        sv = self._vectors.get(scope_id)
        if sv is None:
            dim = int(self.embedder.dim) if self.embedder is not None else 0
            rows = self._conn.execute(
                "SELECT rowid, confidence, last_seen_at, created_at, embedding FROM memories "
                "WHERE scope_id = %s AND superseded_by IS NULL AND embedding IS NOT NULL "
                "ORDER BY rowid",
                (scope_id,),
            ).fetchall()
            vecs = [_np(r[4]) for r in rows]
            if not dim and rows:
                dim = vecs[0].shape[0]
            sv = ScopeVectors(dim=dim)
            sv.grow(len(rows) + len(rows) // 4)  # headroom, as the SQLite store
            if rows and all(v.shape[0] == dim for v in vecs):
                sv.cols[:, : len(rows)] = normalize_rows(np.stack(vecs)).T
                sv.n = len(rows)
                sv.rowid[: sv.n] = [r[0] for r in rows]
                sv.conf[: sv.n] = [r[1] for r in rows]
                sv.last_seen[: sv.n] = [nan(r[2]) for r in rows]
                made = np.array([nan(r[3]) for r in rows])
                seen = sv.last_seen[: sv.n]
                sv.recency[: sv.n] = np.where(np.isnan(seen), made, seen)
                sv.pos = {int(r[0]): i for i, r in enumerate(rows)}
            else:
                for r, v in zip(rows, vecs, strict=True):
                    sv.put(int(r[0]), normalize_rows(v.copy())[0], r[1], r[2], r[3])
            self._vectors[scope_id] = sv
        return sv

    # -- public API: reads --------------------------------------------------------------

    def _fetch_rowids(self, rowids: Sequence[int]) -> dict[int, Row]:
        return {
            r.rowid: r for r in self._rows("WHERE rowid = ANY(%s)", ([int(x) for x in rowids],))
        }

    def _recall_vector(self, scope_id, q, limit, params) -> list[Recalled]:
        """Vector path of `recall` (borrowed from SQLiteStore) for an embedded query."""
        if self.ann is not None and limit > 0 and params.candidate_cap is None:
            hits = self._recall_ann(scope_id, q, limit, params)
            if hits is not None:
                self.ann_counts["ann"] += 1
                return hits
            self.ann_counts["exact_fallback"] += 1
        sv = self._scope_vectors(scope_id)
        if sv.n == 0:
            return []
        sel = slice(0, sv.n)
        mat, rowid = sv.rows(), sv.rowid[sel]
        conf, last_seen, recency = sv.conf[sel], sv.last_seen[sel], sv.recency[sel]
        if params.candidate_cap is not None and params.candidate_cap < sv.n:
            cap = max(params.candidate_cap, 0)
            ts = np.nan_to_num(last_seen, nan=-np.inf)
            keep = np.lexsort((-rowid, -ts))[:cap]
            mat, rowid, conf = mat[keep], rowid[keep], conf[keep]
            last_seen, recency = last_seen[keep], recency[keep]
        return self._ranked(scope_id, q, mat, rowid, conf, last_seen, recency, limit, params)

    def _ranked(self, scope_id, q, mat, rowid, conf, last_seen, recency, limit, params):
        cos = rank.cosine_scores(q, mat)
        now = float(self.clock())
        ranked = rank.rank_vector(cos, conf, recency, last_seen, rowid, now, params, max(limit, 0))
        if ranked.order.size == 0:
            return []
        k = ranked.order.size if limit <= 0 else min(limit, ranked.order.size)
        top = rowid[ranked.order[:k]]
        rows = self._fetch_rowids(top)
        out: list[Recalled] = []
        for j in range(k):
            r = rows.get(int(top[j]))
            if r is None or not r.live or r.scope_id != scope_id:
                continue  # cache raced a foreign write; never return a non-live row
            out.append(
                Recalled(
                    memory=r.memory(),
                    path="vector",
                    score=float(ranked.score[j]),
                    cosine=float(ranked.cosine[j]),
                    confidence_weight=float(ranked.confidence_weight[j]),
                    decay=float(ranked.decay[j]),
                )
            )
        return out

    def _recall_ann(self, scope_id, q, limit, params) -> list[Recalled] | None:
        """The HNSW answer, or None when it is short: fewer than `limit` survivors
        while the scope has more embedded live rows than the scan brought back.

        pgvector (< 0.8) scans `ef_search` nearest rows of the whole table and
        filters by scope afterwards, exactly as written here."""
        d = self._embedding_dim()
        if q.shape[0] != d:
            return None
        ef = max(self.ef_search, limit)
        with self._conn.transaction():
            self._conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
            rows = self._conn.execute(
                "SELECT rowid, confidence, last_seen_at, created_at, embedding FROM ("
                "SELECT rowid, scope_id, confidence, last_seen_at, created_at, embedding "
                "FROM memories WHERE superseded_by IS NULL AND embedding IS NOT NULL "
                f"ORDER BY embedding::vector({d}) <=> %s::vector({d}) LIMIT %s) nn "
                "WHERE scope_id = %s",
                (q, ef, scope_id),
            ).fetchall()
        if rows:
            mat = normalize_rows(np.stack([_np(r[4]) for r in rows]))
            rowid = np.array([r[0] for r in rows], dtype=np.int64)
            conf = np.array([r[1] for r in rows], dtype=np.float64)
            last_seen = np.array([nan(r[2]) for r in rows])
            made = np.array([nan(r[3]) for r in rows])
            recency = np.where(np.isnan(last_seen), made, last_seen)
            hits = self._ranked(scope_id, q, mat, rowid, conf, last_seen, recency, limit, params)
        else:
            hits = []
        if len(hits) >= limit:
            return hits
        (embedded,) = self._conn.execute(
            "SELECT count(*) FROM memories WHERE scope_id = %s AND superseded_by IS NULL "
            "AND embedding IS NOT NULL",
            (scope_id,),
        ).fetchone()
        return hits if embedded <= len(rows) else None

    def _recall_keyword(self, scope_id, query, limit, params) -> list[Recalled]:
        lim = rank.keyword_limit(limit, params)
        kws = keywords(query or "")
        c = self._conn
        if not kws:
            rows = self._rows(
                "WHERE scope_id = %s AND superseded_by IS NULL "
                "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC LIMIT %s",
                (scope_id, lim),
            )
            return [
                Recalled(memory=r.memory(), path="keyword", score=0.0, keywords_matched=0)
                for r in rows
            ]
        rows = c.execute(
            "SELECT rowid, content, tags, last_seen_at FROM memories "
            "WHERE scope_id = %s AND superseded_by IS NULL",
            (scope_id,),
        ).fetchall()
        matched = [rank.keyword_matches(kws, r[1], json.loads(r[2]) if r[2] else ()) for r in rows]
        order = rank.keyword_order(matched, [r[3] for r in rows], [r[0] for r in rows])[:lim]
        mems = self._fetch_rowids([rows[i][0] for i in order])
        return [
            Recalled(
                memory=mems[rows[i][0]].memory(),
                path="keyword",
                score=float(matched[i]),
                keywords_matched=matched[i],
            )
            for i in order
        ]

    def get(self, scope_id: str, memory_id: str) -> Memory:
        """Any row of this scope, live or not (with its embedding); NotFound otherwise."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._lock:
            r = self._conn.execute(
                f"SELECT {COLS}, embedding FROM memories WHERE id = %s AND scope_id = %s",
                (memory_id, scope_id),
            ).fetchone()
        if r is None:
            raise NotFound(memory_id, scope_id)
        emb = None if r[-1] is None else _np(r[-1]).copy()
        return Row._make(r[:-1]).memory(emb)

    def history(self, scope_id: str, memory_id: str) -> list[Memory]:
        """Every row linked to this one by update/merge (predecessors and successors,
        transitively), oldest first. NotFound if the id is missing or foreign."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._lock:
            c = self._conn
            start = c.execute(
                f"SELECT {COLS} FROM memories WHERE id = %s AND scope_id = %s",
                (memory_id, scope_id),
            ).fetchone()
            if start is None:
                raise NotFound(memory_id, scope_id)
            seen = {start[1]: start}
            todo = [start]
            while todo:
                r = todo.pop()
                links = c.execute(
                    f"SELECT {COLS} FROM memories WHERE scope_id = %s AND "
                    "((id = %s AND %s) OR (superseded_by = %s AND id != %s))",
                    (scope_id, r[11], bool(r[11] and r[11] != r[1]), r[1], r[1]),
                ).fetchall()
                for x in links:
                    if x[1] not in seen:
                        seen[x[1]] = x
                        todo.append(x)
        rows = sorted(seen.values(), key=lambda r: (nan(r[8]) if r[8] is not None else -1, r[0]))
        return [Row._make(r).memory() for r in rows]

    def scopes(self) -> list[str]:
        """Every scope id with at least one row, sorted."""
        with self._lock:
            rows = self._conn.execute(
                'SELECT DISTINCT scope_id COLLATE "C" FROM memories ORDER BY 1'
            )
            return [r[0] for r in rows]

    def live(self, scope_id: str, *, limit: int | None = None) -> list[Memory]:
        """Live rows of a scope, most recently confirmed first."""
        ck.check_scope(scope_id)
        ck.check_optional_int(limit, "limit")
        sql = (
            f"SELECT {COLS} FROM memories WHERE scope_id = %s AND superseded_by IS NULL "
            "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC"
        )
        args: tuple = (scope_id,)
        if limit is not None:
            sql += " LIMIT %s"
            args += (max(limit, 0),)
        with self._lock:
            return [Row._make(r).memory() for r in self._conn.execute(sql, args)]

    def stats(self, scope_id: str | None = None) -> dict[str, Any]:
        """Row counts (live, retired, retracted, embedded, per kind) and rollout counts."""
        if scope_id is not None:
            ck.check_scope(scope_id)
        where, args = ("WHERE scope_id = %s", (scope_id,)) if scope_id is not None else ("", ())
        live_where = f"{where} {'AND' if where else 'WHERE'} superseded_by IS NULL"
        with self._lock:
            c = self._conn
            total, live, retracted, embedded, scopes = c.execute(
                "SELECT count(*), count(*) FILTER (WHERE superseded_by IS NULL), "
                "count(*) FILTER (WHERE superseded_by = id), "
                "count(*) FILTER (WHERE superseded_by IS NULL AND embedding IS NOT NULL), "
                f"count(DISTINCT scope_id) FROM memories {where}",
                args,
            ).fetchone()
            by_kind = dict(
                c.execute(
                    f"SELECT kind, count(*) FROM memories {live_where} GROUP BY kind", args
                ).fetchall()
            )
            pending, consumed = c.execute(
                "SELECT count(*) FILTER (WHERE consumed_at IS NULL), "
                f"count(*) FILTER (WHERE consumed_at IS NOT NULL) FROM rollouts {where}",
                args,
            ).fetchone()
            meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
        return {
            "scope_id": scope_id,
            "scopes": scopes,
            "rows": total,
            "live": live,
            "superseded": total - live - retracted,
            "retracted": retracted,
            "embedded": embedded,
            "by_kind": {k: by_kind.get(k, 0) for k in KINDS},
            "rollouts_pending": pending,
            "rollouts_consumed": consumed,
            "rollouts_parked": 0,  # parking (memkit §7.8 extension) is SQLite-only so far
            "embedder": meta.get("embedder"),
            "embedder_dim": int(meta["embedder_dim"]) if "embedder_dim" in meta else None,
        }

    # -- consolidation, store side (SPEC §7) --------------------------------------------

    def stage_rollout(self, rollout: Rollout) -> bool:
        """Persist a rollout; False (no change) when that id is already staged (checked
        and redacted as in `SQLiteStore.stage_rollout`)."""
        messages_json, final = self._check_rollout(rollout)
        with self._lock:
            staged_at = rollout.staged_at if rollout.staged_at is not None else float(self.clock())
            cur = self._conn.execute(
                "INSERT INTO rollouts (id, scope_id, run_id, messages, final, staged_at, "
                "consumed_at) VALUES (%s, %s, %s, %s, %s, %s, NULL) ON CONFLICT (id) DO NOTHING",
                (
                    rollout.id,
                    rollout.scope_id,
                    rollout.run_id,
                    messages_json,
                    final,
                    staged_at,
                ),
            )
            return cur.rowcount == 1

    def pending_rollouts(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """Unconsumed rollouts of a scope, oldest first."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, scope_id, messages, final, staged_at, consumed_at, run_id "
                "FROM rollouts WHERE scope_id = %s AND consumed_at IS NULL "
                "ORDER BY staged_at, seq LIMIT %s",
                (scope_id, max(limit, 0)),
            ).fetchall()
        return [
            Rollout(
                id=r[0],
                scope_id=r[1],
                messages=tuple(json.loads(r[2])),
                final=r[3],
                staged_at=r[4],
                consumed_at=r[5],
                run_id=r[6],
            )
            for r in rows
        ]

    def commit_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        snapshot: Sequence[Memory],
        changes: Any,
        params: ConsolidationParams = ConsolidationParams(),
    ) -> CommitResult:
        """Apply one validated consolidation pass atomically (SPEC §7.7): the checks,
        their order and the changes of `SQLiteStore.commit_pass`, in one
        transaction holding the scope's lock (rollouts are locked FOR UPDATE)."""
        self._check_commit(scope_id, rollout_ids, snapshot, params)
        rollout_ids = list(rollout_ids)
        snapshot = list(snapshot)
        invalid: ProposalError | None = None
        typed: tuple[Change, ...] = ()
        if isinstance(changes, Proposal):
            if not changes.is_for(scope_id, rollout_ids, snapshot, params):
                raise ConfigError(
                    "commit_pass: the proposal was validated for another pass "
                    "(scope, rollouts, snapshot or params differ)"
                )
            typed = changes.changes
        else:
            try:
                typed = validate_proposal(scope_id, rollout_ids, snapshot, changes, params).changes
            except ProposalError as e:
                invalid = e
        entries = [
            (ch.entry, *self._redact(ch.entry.content, ch.entry.tags))
            for ch in typed
            if ch.entry is not None
        ]
        vecs = iter(self._embed([content for _e, content, _t in entries]))
        new_rows = iter(entries)
        with self._write(scope_id) as w:
            live_rows = self._check_pass(scope_id, rollout_ids, snapshot)
            if invalid is not None:
                raise invalid
            now = float(self.clock())
            added: list[str] = []
            retired: list[str] = []
            for ch in typed:
                new_id = None
                if ch.entry is not None:
                    e, content, tag_list = next(new_rows)
                    vec = next(vecs)
                    new_id = self.new_id()
                    rowid = self._insert(
                        new_id, scope_id, e.kind, content, tag_list, e.confidence, None, now,
                        vec, w.seq,
                    )  # fmt: skip
                    added.append(new_id)
                    w.put(scope_id, e.kind, rowid, content, vec, e.confidence, now, now)
                for mid in ch.ids:
                    r = live_rows[mid]
                    self._retire(r.rowid, new_id or mid, w.seq)
                    retired.append(mid)
                    w.drop(scope_id, r.kind, r.rowid)
            if rollout_ids:
                self._conn.execute(
                    "UPDATE rollouts SET consumed_at = %s WHERE id = ANY(%s)", (now, rollout_ids)
                )
        return CommitResult(
            added=tuple(added), retired=tuple(retired), consumed=tuple(rollout_ids), changes=typed
        )

    def _check_pass(self, scope_id: str, rollout_ids: list[str], snapshot: list[Memory]):
        """What can change under the lock: consumption, then snapshot currency.
        Returns the snapshot's live rows by id."""
        for rid in rollout_ids:
            r = self._conn.execute(
                "SELECT consumed_at FROM rollouts WHERE id = %s AND scope_id = %s FOR UPDATE",
                (rid, scope_id),
            ).fetchone()
            if r is None:
                raise AlreadyConsumed(f"rollout {rid!r} is not staged in scope {scope_id!r}")
            if r[0] is not None:
                raise AlreadyConsumed(f"rollout {rid!r} was already consumed")
        live_rows: dict[str, Row] = {}
        for m in snapshot:
            if m.scope_id != scope_id:
                continue  # validation rejects it as snapshot_scope
            r = self._live_row(scope_id, m.id)
            if r is None:
                raise StaleSnapshot(f"snapshot memory {m.id!r} is no longer live")
            if (
                r.content != m.content
                or tuple(r.tag_list) != tuple(m.tags)
                or r.confidence != m.confidence
                or r.seen_count != m.seen_count
                or r.last_seen_at != m.last_seen_at
            ):
                raise StaleSnapshot(f"snapshot memory {m.id!r} changed since the snapshot")
            live_rows[m.id] = r
        return live_rows

    # -- bulk load (benchmarks) ------------------------------------------------------------

    def _bulk_load(
        self,
        scope_id: str,
        contents: Sequence[str],
        embeddings: np.ndarray | None = None,
        *,
        kind: str = "fact",
        confidence: float = 0.7,
        timestamps: Sequence[float] | None = None,
    ) -> None:
        """Insert many rows without fold-in, in one COPY (benchmarks and fixtures
        only). `embeddings` rows are normalised; `timestamps` sets created_at =
        last_seen_at per row (default: now)."""
        now = float(self.clock())
        if embeddings is not None:
            embeddings = normalize_rows(np.asarray(embeddings, dtype=np.float32))
        with self._write(scope_id) as w:
            with self._conn.cursor().copy(
                "COPY memories (id, scope_id, kind, content, tags, confidence, created_at, "
                "seen_count, last_seen_at, embedding, change_seq) FROM STDIN"
            ) as cp:
                for i, content in enumerate(contents):
                    ts = now if timestamps is None else float(timestamps[i])
                    emb = None if embeddings is None else _vec_text(embeddings[i])
                    cp.write_row(
                        (
                            _new_id(),
                            scope_id,
                            kind,
                            content,
                            "[]",
                            confidence,
                            ts,
                            1,
                            ts,
                            emb,
                            w.seq,
                        )
                    )
            w.patched = True  # the scope's indexes reload: cheaper than patching every row
        self._forget(scope_id)


class _Write:
    """One write of a scope (see `PostgresStore._write`): its change number, and
    the index patches it applies as it goes."""

    def __init__(self, store: PostgresStore, scope_id: str):
        self.store, self.scope_id = store, scope_id
        self.seq = 0
        self.patched = False

    def put(self, scope_id, kind, rowid, content, vec, conf, last_seen, created, grams=None):
        self.patched = True
        self.store._put(scope_id, kind, rowid, content, vec, conf, last_seen, created, grams)

    def drop(self, scope_id: str, kind: str, rowid: int) -> None:
        self.patched = True
        self.store._drop(scope_id, kind, rowid)


def _check_recorded(conn: Any, emb: Embedder, dsn: str) -> None:
    """EmbedderMismatch when the store recorded another embedder than `emb`."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    name, dim = meta.get("embedder"), meta.get("embedder_dim")
    if name is not None and (
        name != emb.name or (int(dim or 0) and emb.dim and int(dim) != int(emb.dim))
    ):
        raise EmbedderMismatch(
            f"store {_safe(dsn)!r} was built with embedder {name!r} (dim {dim}); "
            f"refusing to open it with {emb.name!r} (dim {emb.dim})"
        )


def _check_readable(conn: Any, dsn: str) -> None:
    """ConfigError unless the database holds a memkit store of this schema version."""
    row = conn.execute("SELECT to_regclass('schema_version'), to_regclass('memories')").fetchone()
    if row[0] is None or row[1] is None:
        raise ConfigError(f"{_safe(dsn)!r} holds no memkit store (no memkit tables)")
    (version,) = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"store {_safe(dsn)!r} has schema version {version}, this memkit reads "
            f"{SCHEMA_VERSION}; open it read-write with this memkit to migrate"
        )


def _vec_text(v: np.ndarray) -> str:
    """pgvector's text form; repr of each float32 (as a double) parses back exactly."""
    return "[" + ",".join(map(repr, v.astype(np.float64).tolist())) + "]"


def _safe(dsn: str) -> str:
    """The DSN without a password, for error messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        d = conninfo_to_dict(dsn)
        if "password" in d:
            d["password"] = "***"
        return make_conninfo(**d)
    except Exception:
        return "<dsn>"
