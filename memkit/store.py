"""SQLiteStore: the reference store (SPEC §1-4) and the store side of consolidation (§7).

The only sqlite3 user in memkit. Design choices, each for a measured reason:

* WAL, autocommit connection, explicit `BEGIN IMMEDIATE` for every write, so
  fold detection and the write it decides are one transaction even across
  processes (SPEC §3.7), and readers never block writers.
* Fold-in never compares against every row: an in-memory trigram index per
  (scope, kind) (`memkit.gram_index`, exact by l-prefix filtering) scores the
  few candidates exactly; SQLite then confirms they are live and in window.
* Vector recall scores a per-scope in-memory float32 matrix of live
  embeddings with one matrix-vector product.
* Both in-memory indexes load lazily and follow other connections' writes
  through `change_seq`: every write stamps the rows it touches with a number
  above all earlier ones, so catching up reads only the rows changed since.
  Own writes patch the indexes after they commit.
* Ranking itself is the pure code in `memkit.rank`.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
from memkit.params import (
    DAY,
    ConsolidationParams,
    FoldParams,
    RecallParams,
    RedactionParams,
)
from memkit.proposal import Proposal, validate_proposal
from memkit.redact import redact
from memkit.schema import migrate
from memkit.text import jaccard, keywords, trigrams
from memkit.types import KINDS, Change, CommitResult, Memory, Recalled, RememberResult, Rollout

_COLS = (
    "rowid, id, scope_id, kind, content, tags, confidence, source_run_id, "
    "created_at, seen_count, last_seen_at, superseded_by"
)
_BUSY_TIMEOUT_MS = 60_000
_WAL_PAGES = 16_000
"""Pages of WAL between automatic checkpoints (see `SQLiteStore.open`)."""
_SYNC_MAX = 5_000
"""Catching up on more changed rows than this drops the indexes instead (they reload)."""


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _row_to_memory(r: Sequence[Any], embedding: np.ndarray | None = None) -> Memory:
    return Memory(
        id=r[1],
        scope_id=r[2],
        kind=r[3],
        content=r[4],
        tags=tuple(json.loads(r[5]) if r[5] else ()),
        confidence=r[6],
        source_run_id=r[7],
        created_at=r[8],
        seen_count=r[9],
        last_seen_at=r[10],
        superseded_by=r[11],
        embedding=embedding,
    )


def _blob(vec: np.ndarray | None) -> bytes | None:
    return None if vec is None else np.asarray(vec, dtype=np.float32).tobytes()


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


# --- per-scope vector cache ----------------------------------------------------


@dataclass
class _ScopeVectors:
    """Live embedded rows of one scope: a growable float32 matrix plus row facts.

    Vectors are stored as columns (`cols` is dim x capacity): scoring all rows
    is then `q @ cols`, a BLAS gemv that streams each dimension's contiguous
    row, measured ~1.5x faster than a dot per stored row at 100k rows. Removal
    swaps the last column into the hole, so every operation is O(dim).
    """

    dim: int
    n: int = 0
    cols: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    rowid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    conf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0))
    recency: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """last_seen, else created_at (NaN when neither): kept, not derived per recall."""
    pos: dict[int, int] = field(default_factory=dict)

    def rows(self) -> np.ndarray:
        """The live vectors as an (n, dim) view (no copy)."""
        return self.cols[:, : self.n].T

    def _grow(self, need: int) -> None:
        cap = self.cols.shape[1]
        if need <= cap:
            return
        new = max(need, cap * 2, 64)
        cols = np.zeros((self.dim, new), dtype=np.float32)
        if self.n:
            cols[:, : self.n] = self.cols[:, : self.n]
        self.cols = cols
        for name in ("rowid", "conf", "last_seen", "recency"):
            old = getattr(self, name)
            arr = np.zeros(new, dtype=old.dtype)
            arr[: self.n] = old[: self.n]
            setattr(self, name, arr)

    def put(self, rowid: int, vec: np.ndarray, conf: float, last_seen, created) -> None:
        i = self.pos.get(rowid)
        if i is None:
            self._grow(self.n + 1)
            i = self.n
            self.n += 1
            self.pos[rowid] = i
        v = np.asarray(vec, dtype=np.float32).ravel()
        self.cols[:, i] = v if v.shape[0] == self.dim else 0.0  # mismatched length: cosine 0
        self.rowid[i] = rowid
        self.conf[i] = conf
        self.last_seen[i] = seen = _nan(last_seen)
        self.recency[i] = _nan(created) if math.isnan(seen) else seen

    def drop(self, rowid: int) -> None:
        i = self.pos.pop(rowid, None)
        if i is None:
            return
        last = self.n - 1
        if i != last:
            moved = int(self.rowid[last])
            self.cols[:, i] = self.cols[:, last]
            for name in ("rowid", "conf", "last_seen", "recency"):
                arr = getattr(self, name)
                arr[i] = arr[last]
            self.pos[moved] = i
        self.n = last


# --- the store -------------------------------------------------------------------


class SQLiteStore:
    """The reference memory store. Open with `SQLiteStore.open(path)`.

    Thread-safe (one lock around the connection). Several processes may share
    one database file; writes serialise on SQLite's write lock.
    """

    supports_curation: bool = True

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        path: str,
        embedder: Embedder | None,
        clock: Callable[[], float],
        fold: FoldParams,
        redaction: RedactionParams,
    ):
        self._conn = conn
        self.path = path
        self.embedder = embedder
        self.clock = clock
        self.fold = fold
        self.redaction = redaction
        self._lock = threading.RLock()
        self._vectors: dict[str, _ScopeVectors] = {}
        self._grams: dict[tuple[str, str], GramIndex] = {}
        self._seen_seq: int = conn.execute(
            "SELECT COALESCE(MAX(change_seq), 0) FROM memories"
        ).fetchone()[0]
        """Every change up to this change_seq is reflected in the in-memory indexes."""
        self.new_id: Callable[[], str] = _new_id
        """Row id factory; evaluations inject a deterministic one so replays reproduce."""

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
    ) -> SQLiteStore:
        """Open (creating and migrating) a store.

        The embedder's name and dimension are recorded on first use; opening
        with another one raises EmbedderMismatch. `embedder=None` opens any
        store keyword-only: nothing is embedded, new rows carry no vector.
        """
        emb = get_embedder(embedder)
        conn = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_MS / 1e3
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
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
        return cls(conn, path=str(path), embedder=emb, clock=clock, fold=fold, redaction=redaction)

    @staticmethod
    def _check_embedder(conn: sqlite3.Connection, emb: Embedder | None, path: str) -> None:
        if emb is None:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            name, dim = meta.get("embedder"), meta.get("embedder_dim")
            if name is None:
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?), "
                    "('embedder_dim', ?)",
                    (emb.name, str(int(emb.dim))),
                )
            elif name != emb.name or (int(dim or 0) and emb.dim and int(dim) != int(emb.dim)):
                raise EmbedderMismatch(
                    f"store {path!r} was built with embedder {name!r} (dim {dim}); "
                    f"refusing to open it with {emb.name!r} (dim {emb.dim})"
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._vectors.clear()
            self._grams.clear()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------

    def _embed_one(self, text: str) -> np.ndarray | None:
        """Embed for a write; failure is not an error (SPEC §3.2)."""
        if self.embedder is None:
            return None
        try:
            return normalize_rows(self.embedder.embed([text]))[0]
        except Exception:
            return None

    def _redact(self, content: str, tags: Iterable[str]) -> tuple[str, list[str]]:
        return redact(content, self.redaction), [redact(t, self.redaction) for t in tags]

    def _tx(self):
        return _Transaction(self._conn)

    def _insert(
        self,
        scope_id: str,
        kind: str,
        content: str,
        tags: Sequence[str],
        confidence: float,
        source_run_id: str | None,
        now: float,
        vec: np.ndarray | None,
        seq: int,
        grams: frozenset[str] | None = None,
    ) -> tuple[str, int]:
        if grams is None:
            grams = trigrams(content)
        mid = self.new_id()
        cur = self._conn.execute(
            "INSERT INTO memories (id, scope_id, kind, content, tags, confidence, source_run_id, "
            "created_at, seen_count, last_seen_at, superseded_by, embedding, ngrams, change_seq) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, NULL, ?, ?, ?)",
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
                _blob(vec),
                len(grams),
                seq,
            ),
        )
        return mid, int(cur.lastrowid)

    def _retire(self, rowid: int, successor: str, seq: int) -> None:
        self._conn.execute(
            "UPDATE memories SET superseded_by = ?, change_seq = ? WHERE rowid = ?",
            (successor, seq, rowid),
        )

    def _live_row(self, scope_id: str, memory_id: str) -> tuple | None:
        return self._conn.execute(
            f"SELECT {_COLS} FROM memories WHERE id = ? AND scope_id = ? AND superseded_by IS NULL",
            (memory_id, scope_id),
        ).fetchone()

    @staticmethod
    def _check_write(kind: str, content: str, confidence: float) -> None:
        if kind not in KINDS:
            raise ConfigError(f"unknown kind {kind!r} (want one of {', '.join(KINDS)})")
        if not isinstance(content, str) or not content.strip():
            raise ConfigError(f"content must be a non-blank string, got {content!r:.80}")
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0.0 <= confidence <= 1.0
        ):
            raise ConfigError(f"confidence {confidence!r} outside [0, 1]")

    # -- fold-in ----------------------------------------------------------------------

    def _fold_target(
        self, scope_id: str, kind: str, grams: frozenset[str], now: float
    ) -> tuple | None:
        """The single best live row to fold into, or None (SPEC §3.3). Inside a tx."""
        t = self.fold.threshold
        window = self.fold.window_days * DAY
        c = self._conn
        if not grams and t > 0:
            return None  # pg_trgm similarity of an empty set is 0
        cutoff = now - window - 1.0  # loose SQL bound; the exact test is below
        sims: dict[int, float] | None = None
        if t <= 0:
            rows = c.execute(
                f"SELECT {_COLS} FROM memories WHERE scope_id = ? AND kind = ? "
                "AND superseded_by IS NULL AND last_seen_at > ?",
                (scope_id, kind, cutoff),
            ).fetchall()
        else:
            sims = self._gram_index(scope_id, kind).similar(grams, t)
            cand = list(sims)
            rows = []
            for i in range(0, len(cand), 900):
                chunk = cand[i : i + 900]
                ph = ",".join("?" * len(chunk))
                # By rowid alone: with the scope/kind/live terms in SQL the planner
                # scans the memories_live index instead (every live row of the scope).
                rows += [
                    r
                    for r in c.execute(f"SELECT {_COLS} FROM memories WHERE rowid IN ({ph})", chunk)
                    if r[2] == scope_id and r[3] == kind and r[11] is None
                ]
        best, best_key = None, None
        for r in rows:
            last_seen = r[10]
            if last_seen is None or not (now - last_seen) < window:
                continue
            sim = jaccard(grams, trigrams(r[4])) if sims is None else sims[r[0]]
            if sim < t:
                continue
            key = (sim, last_seen, r[0])
            if best_key is None or key > best_key:
                best, best_key = r, key
        return best

    # -- public API: writes -----------------------------------------------------------

    def remember(
        self,
        scope_id: str,
        content: str,
        *,
        kind: str = "fact",
        confidence: float = 0.7,
        tags: Sequence[str] = (),
        source_run_id: str | None = None,
    ) -> RememberResult:
        """Write a memory, folding it into a near-identical live row (SPEC §3)."""
        self._check_write(kind, content, confidence)
        content, tag_list = self._redact(content, tags)
        vec = self._embed_one(content)
        grams = trigrams(content)
        tags_json = json.dumps(tag_list, ensure_ascii=False)
        with self._lock:
            with self._tx():
                seq = self._catch_up() + 1
                now = float(self.clock())
                target = self._fold_target(scope_id, kind, grams, now)
                if target is None:
                    mid, rowid = self._insert(
                        scope_id,
                        kind,
                        content,
                        tag_list,
                        confidence,
                        source_run_id,
                        now,
                        vec,
                        seq,
                        grams,
                    )
                    folded, conf, created = False, float(confidence), now
                else:
                    rowid, mid = target[0], target[1]
                    conf = max(float(target[6]), float(confidence))
                    created = target[8]
                    self._conn.execute(
                        "UPDATE memories SET seen_count = seen_count + 1, last_seen_at = ?, "
                        "confidence = ?, content = ?, tags = ?, embedding = ?, ngrams = ?, "
                        "source_run_id = COALESCE(?, source_run_id), change_seq = ? "
                        "WHERE rowid = ?",
                        (
                            now,
                            conf,
                            content,
                            tags_json,
                            _blob(vec),
                            len(grams),
                            source_run_id,
                            seq,
                            rowid,
                        ),
                    )
                    folded = True
            self._seen_seq = seq
            self._patch(scope_id, rowid, vec, conf, now, created)
            self._index(scope_id, kind, rowid, content, grams)
        return RememberResult(id=mid, folded=folded)

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
        if not isinstance(content, str) or not content.strip():
            raise ConfigError(f"update content must be a non-blank string, got {content!r:.80}")
        self._check_write("fact", content, confidence)
        content, tag_list = self._redact(content, tags or ())
        vec = self._embed_one(content)
        with self._lock:
            with self._tx():
                old = self._live_row(scope_id, memory_id)
                if old is None:
                    raise NotFound(memory_id, scope_id)
                if tags is None:
                    tag_list = list(json.loads(old[5]))
                now = float(self.clock())
                seq = self._catch_up() + 1
                new_id, rowid = self._insert(
                    scope_id, old[3], content, tag_list, confidence, None, now, vec, seq
                )
                self._retire(old[0], new_id, seq)
            self._seen_seq = seq
            self._drop(scope_id, old[3], old[0])
            self._patch(scope_id, rowid, vec, float(confidence), now, now)
            self._index(scope_id, old[3], rowid, content)
        return new_id

    def retract(self, scope_id: str, memory_id: str) -> None:
        """Soft-delete: superseded_by = own id. NotFound unless live in this scope."""
        with self._lock:
            with self._tx():
                old = self._live_row(scope_id, memory_id)
                if old is None:
                    raise NotFound(memory_id, scope_id)
                seq = self._catch_up() + 1
                self._retire(old[0], old[1], seq)
            self._seen_seq = seq
            self._drop(scope_id, old[3], old[0])

    # -- in-memory indexes ----------------------------------------------------------------

    def _patch(self, scope_id, rowid, vec, conf, last_seen, created) -> None:
        sv = self._vectors.get(scope_id)
        if sv is None:
            return
        if vec is None:
            sv.drop(rowid)
        else:
            sv.put(rowid, vec, conf, last_seen, created)

    def _index(
        self,
        scope_id: str,
        kind: str,
        rowid: int,
        content: str,
        grams: frozenset[str] | None = None,
    ) -> None:
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

    def _forget(self, scope_id: str | None = None) -> None:
        """Drop the in-memory indexes (of one scope, or all); they reload on use."""
        if scope_id is None:
            self._vectors.clear()
            self._grams.clear()
            return
        self._vectors.pop(scope_id, None)
        for key in [k for k in self._grams if k[0] == scope_id]:
            del self._grams[key]

    def _catch_up(self) -> int:
        """Apply rows other connections changed since we last looked; return the
        highest change_seq now reflected. Inside a write transaction this is every
        change, so the caller's own writes take the next number."""
        c = self._conn
        top = c.execute("SELECT COALESCE(MAX(change_seq), 0) FROM memories").fetchone()[0]
        if top == self._seen_seq:
            return top
        if top < self._seen_seq or not (self._vectors or self._grams):
            self._forget()
            self._seen_seq = top
            return top
        rows = c.execute(
            "SELECT change_seq, rowid, scope_id, kind, content, superseded_by, confidence, "
            "last_seen_at, created_at, embedding FROM memories WHERE change_seq > ? "
            "ORDER BY change_seq LIMIT ?",
            (self._seen_seq, _SYNC_MAX + 1),
        ).fetchall()
        if len(rows) > _SYNC_MAX:
            self._forget()
            self._seen_seq = top
            return top
        for _seq, rowid, scope_id, kind, content, successor, conf, seen, created, blob in rows:
            if successor is not None:
                self._drop(scope_id, kind, rowid)
                continue
            self._index(scope_id, kind, rowid, content)
            vec = (
                None if blob is None else normalize_rows(np.frombuffer(blob, np.float32).copy())[0]
            )
            self._patch(scope_id, rowid, vec, conf, seen, created)
        self._seen_seq = max([top, *(r[0] for r in rows)])
        return self._seen_seq

    def _gram_index(self, scope_id: str, kind: str) -> GramIndex:
        """The (scope, kind) trigram index, built from SQLite on first use. Call
        after `_catch_up`."""
        gi = self._grams.get((scope_id, kind))
        t = self.fold.threshold
        if gi is None or gi.floor > t:  # built for a higher threshold than fold has now
            gi = GramIndex.build(
                self._conn.execute(
                    "SELECT rowid, content FROM memories "
                    "WHERE scope_id = ? AND kind = ? AND superseded_by IS NULL",
                    (scope_id, kind),
                ),
                floor=min(t, 1.0),  # above 1 nothing folds; the index still answers
            )
            self._grams[(scope_id, kind)] = gi
        return gi

    def _scope_vectors(self, scope_id: str) -> _ScopeVectors:
        """The scope's live embedded rows, caught up with other connections' writes."""
        self._catch_up()
        sv = self._vectors.get(scope_id)
        if sv is None:
            dim = int(self.embedder.dim) if self.embedder is not None else 0
            rows = self._conn.execute(
                "SELECT rowid, confidence, last_seen_at, created_at, embedding FROM memories "
                "WHERE scope_id = ? AND superseded_by IS NULL AND embedding IS NOT NULL",
                (scope_id,),
            ).fetchall()
            if not dim and rows:
                dim = len(rows[0][4]) // 4
            sv = _ScopeVectors(dim=dim)
            sv._grow(len(rows) + len(rows) // 4)  # headroom: no 2x copy on the next write
            blobs = [r[4] for r in rows]
            if rows and all(len(b) == 4 * dim for b in blobs):
                mat = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), dim)
                sv.cols[:, : len(rows)] = normalize_rows(mat.copy()).T
                sv.n = len(rows)
                sv.rowid[: sv.n] = [r[0] for r in rows]
                sv.conf[: sv.n] = [r[1] for r in rows]
                sv.last_seen[: sv.n] = [_nan(r[2]) for r in rows]
                made = np.array([_nan(r[3]) for r in rows])
                seen = sv.last_seen[: sv.n]
                sv.recency[: sv.n] = np.where(np.isnan(seen), made, seen)
                sv.pos = {int(r[0]): i for i, r in enumerate(rows)}
            else:
                for r in rows:
                    v = np.frombuffer(r[4], dtype=np.float32)
                    sv.put(int(r[0]), normalize_rows(v.copy())[0], r[1], r[2], r[3])
            self._vectors[scope_id] = sv
        return sv

    # -- public API: reads --------------------------------------------------------------

    def _fetch_rowids(self, rowids: Sequence[int]) -> dict[int, Memory]:
        out: dict[int, Memory] = {}
        ids = [int(x) for x in rowids]
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            ph = ",".join("?" * len(chunk))
            for r in self._conn.execute(
                f"SELECT {_COLS} FROM memories WHERE rowid IN ({ph})", chunk
            ):
                out[int(r[0])] = _row_to_memory(r)
        return out

    def recall(
        self,
        scope_id: str,
        query: str,
        limit: int = 8,
        params: RecallParams = RecallParams(),
        *,
        query_embedding: np.ndarray | None = None,
    ) -> list[Recalled]:
        """Ranked live memories of one scope (SPEC §4), each with its score breakdown.

        Vector path first (when an embedder is set, or `query_embedding` is
        given, and the query is non-empty); if it fails or nothing clears the
        floor, the keyword path answers.
        """
        with self._lock:
            if (
                query
                and query.strip()
                and (self.embedder is not None or query_embedding is not None)
            ):
                hits = self._recall_vector(scope_id, query, limit, params, query_embedding)
                if hits:
                    return hits
            return self._recall_keyword(scope_id, query, limit, params)

    def _recall_vector(self, scope_id, query, limit, params, query_embedding) -> list[Recalled]:
        if query_embedding is None:
            try:
                q = normalize_rows(self.embedder.embed([query]))[0]
            except Exception:
                return []
        else:
            q = normalize_rows(np.array(query_embedding, dtype=np.float32))[0]
        sv = self._scope_vectors(scope_id)
        n = sv.n
        if n == 0:
            return []
        sel = slice(0, n)
        mat, rowid = sv.rows(), sv.rowid[sel]
        conf, last_seen, recency = sv.conf[sel], sv.last_seen[sel], sv.recency[sel]
        if params.candidate_cap is not None and params.candidate_cap < n:
            cap = max(params.candidate_cap, 0)
            ts = np.nan_to_num(last_seen, nan=-np.inf)
            keep = np.lexsort((-rowid, -ts))[:cap]
            mat, rowid, conf = mat[keep], rowid[keep], conf[keep]
            last_seen, recency = last_seen[keep], recency[keep]
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
            m = rows.get(int(top[j]))
            if m is None or not m.live or m.scope_id != scope_id:
                continue  # cache raced a foreign write; never return a non-live row
            out.append(
                Recalled(
                    memory=m,
                    path="vector",
                    score=float(ranked.score[j]),
                    cosine=float(ranked.cosine[j]),
                    confidence_weight=float(ranked.confidence_weight[j]),
                    decay=float(ranked.decay[j]),
                )
            )
        return out

    def _recall_keyword(self, scope_id, query, limit, params) -> list[Recalled]:
        lim = rank.keyword_limit(limit, params)
        kws = keywords(query or "")
        if not kws:
            rows = self._conn.execute(
                f"SELECT {_COLS} FROM memories WHERE scope_id = ? AND superseded_by IS NULL "
                "ORDER BY last_seen_at DESC, rowid DESC LIMIT ?",
                (scope_id, lim),
            ).fetchall()
            return [
                Recalled(memory=_row_to_memory(r), path="keyword", score=0.0, keywords_matched=0)
                for r in rows
            ]
        rows = self._conn.execute(
            "SELECT rowid, content, tags, last_seen_at FROM memories "
            "WHERE scope_id = ? AND superseded_by IS NULL",
            (scope_id,),
        ).fetchall()
        matched = [rank.keyword_matches(kws, r[1], json.loads(r[2]) if r[2] else ()) for r in rows]
        order = rank.keyword_order(matched, [r[3] for r in rows], [r[0] for r in rows])[:lim]
        mems = self._fetch_rowids([rows[i][0] for i in order])
        return [
            Recalled(
                memory=mems[rows[i][0]],
                path="keyword",
                score=float(matched[i]),
                keywords_matched=matched[i],
            )
            for i in order
        ]

    def get(self, scope_id: str, memory_id: str) -> Memory:
        """Any row of this scope, live or not (with its embedding); NotFound otherwise."""
        with self._lock:
            r = self._conn.execute(
                f"SELECT {_COLS}, embedding FROM memories WHERE id = ? AND scope_id = ?",
                (memory_id, scope_id),
            ).fetchone()
        if r is None:
            raise NotFound(memory_id, scope_id)
        emb = None if r[12] is None else np.frombuffer(r[12], dtype=np.float32).copy()
        return _row_to_memory(r, emb)

    def history(self, scope_id: str, memory_id: str) -> list[Memory]:
        """Every row linked to this one by update/merge (predecessors and successors,
        transitively), oldest first. NotFound if the id is missing or foreign."""
        with self._lock:
            c = self._conn
            start = c.execute(
                f"SELECT {_COLS} FROM memories WHERE id = ? AND scope_id = ?",
                (memory_id, scope_id),
            ).fetchone()
            if start is None:
                raise NotFound(memory_id, scope_id)
            seen = {start[1]: start}
            todo = [start]
            while todo:
                r = todo.pop()
                links = []
                if r[11] and r[11] != r[1]:
                    links += c.execute(
                        f"SELECT {_COLS} FROM memories WHERE id = ? AND scope_id = ?",
                        (r[11], scope_id),
                    ).fetchall()
                links += c.execute(
                    f"SELECT {_COLS} FROM memories WHERE superseded_by = ? AND scope_id = ? "
                    "AND id != ?",
                    (r[1], scope_id, r[1]),
                ).fetchall()
                for x in links:
                    if x[1] not in seen:
                        seen[x[1]] = x
                        todo.append(x)
        rows = sorted(seen.values(), key=lambda r: (_nan(r[8]) if r[8] is not None else -1, r[0]))
        return [_row_to_memory(r) for r in rows]

    def live(self, scope_id: str, *, limit: int | None = None) -> list[Memory]:
        """Live rows of a scope, most recently confirmed first."""
        sql = (
            f"SELECT {_COLS} FROM memories WHERE scope_id = ? AND superseded_by IS NULL "
            "ORDER BY last_seen_at DESC, rowid DESC"
        )
        args: tuple = (scope_id,)
        if limit is not None:
            sql += " LIMIT ?"
            args += (max(int(limit), 0),)
        with self._lock:
            return [_row_to_memory(r) for r in self._conn.execute(sql, args)]

    def stats(self, scope_id: str | None = None) -> dict[str, Any]:
        """Row counts (live, retired, retracted, embedded, per kind) and rollout counts."""
        where, args = ("WHERE scope_id = ?", (scope_id,)) if scope_id is not None else ("", ())
        with self._lock:
            c = self._conn
            total, live, retracted, embedded, scopes = c.execute(
                "SELECT COUNT(*), "
                "COALESCE(SUM(superseded_by IS NULL), 0), "
                "COALESCE(SUM(superseded_by = id), 0), "
                "COALESCE(SUM(superseded_by IS NULL AND embedding IS NOT NULL), 0), "
                f"COUNT(DISTINCT scope_id) FROM memories {where}",
                args,
            ).fetchone()
            by_kind = dict(
                c.execute(
                    f"SELECT kind, COUNT(*) FROM memories {where} "
                    f"{'AND' if where else 'WHERE'} superseded_by IS NULL GROUP BY kind",
                    args,
                ).fetchall()
            )
            pending, consumed = c.execute(
                "SELECT COALESCE(SUM(consumed_at IS NULL), 0), "
                f"COALESCE(SUM(consumed_at IS NOT NULL), 0) FROM rollouts {where}",
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
            "embedder": meta.get("embedder"),
            "embedder_dim": int(meta["embedder_dim"]) if "embedder_dim" in meta else None,
        }

    # -- consolidation, store side (SPEC §7) --------------------------------------------

    def stage_rollout(self, rollout: Rollout) -> bool:
        """Persist a rollout; False (no change) when that id is already staged."""
        with self._lock:
            staged_at = rollout.staged_at if rollout.staged_at is not None else float(self.clock())
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO rollouts (id, scope_id, run_id, messages, final, "
                "staged_at, consumed_at) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (
                    rollout.id,
                    rollout.scope_id,
                    rollout.run_id,
                    json.dumps(list(rollout.messages), ensure_ascii=False),
                    rollout.final,
                    staged_at,
                ),
            )
            return cur.rowcount == 1

    def pending_rollouts(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """Unconsumed rollouts of a scope, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, scope_id, messages, final, staged_at, consumed_at, run_id "
                "FROM rollouts WHERE scope_id = ? AND consumed_at IS NULL "
                "ORDER BY staged_at, seq LIMIT ?",
                (scope_id, max(int(limit), 0)),
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

    def snapshot(
        self, scope_id: str, limit: int = 32, *, policy: str = "recent", query: str = ""
    ) -> list[Memory]:
        """Live memories shown to a consolidator. "recent" (reference): the `limit`
        most recently confirmed. "relevant": recalled against `query`, padded with
        recent rows up to `limit`."""
        if policy not in ("recent", "relevant"):
            raise ConfigError(f"unknown snapshot policy {policy!r} (want 'recent' or 'relevant')")
        if policy == "recent" or not query.strip() or limit <= 0:
            return self.live(scope_id, limit=max(limit, 0))
        picked: dict[str, Memory] = {}
        for hit in self.recall(scope_id, query, limit=limit):
            picked.setdefault(hit.id, hit.memory)
        if len(picked) < limit:
            for m in self.live(scope_id, limit=limit + len(picked)):
                if len(picked) >= limit:
                    break
                picked.setdefault(m.id, m)
        return list(picked.values())[:limit]

    def commit_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        snapshot: Sequence[Memory],
        changes: Any,
        params: ConsolidationParams = ConsolidationParams(),
    ) -> CommitResult:
        """Apply one validated consolidation pass atomically (SPEC §7.7).

        `changes` is a `memkit.proposal.Proposal` validated for exactly this
        pass, or the raw parsed changes list (validated here, once, before the
        lock). In one BEGIN IMMEDIATE transaction: every rollout must exist in
        this scope unconsumed (else AlreadyConsumed), every snapshot row must
        still be live and unchanged (else StaleSnapshot), then a validation
        failure is raised (so its code ranks after these two, as before);
        adds insert (they do not fold, as in the reference), merges insert and
        retire the named rows to the new id, retracts point rows at
        themselves, and exactly these rollouts are marked consumed. Any
        failure mutates nothing. Returns what was applied, typed changes
        included.
        """
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
        vecs = self._embed_entries(typed)
        with self._lock:
            with self._tx():
                c = self._conn
                for rid in rollout_ids:
                    r = c.execute(
                        "SELECT consumed_at FROM rollouts WHERE id = ? AND scope_id = ?",
                        (rid, scope_id),
                    ).fetchone()
                    if r is None:
                        raise AlreadyConsumed(
                            f"rollout {rid!r} is not staged in scope {scope_id!r}"
                        )
                    if r[0] is not None:
                        raise AlreadyConsumed(f"rollout {rid!r} was already consumed")
                live_rows: dict[str, tuple] = {}
                for m in snapshot:
                    if m.scope_id != scope_id:
                        continue  # validation below rejects it as snapshot_scope
                    r = self._live_row(scope_id, m.id)
                    if r is None:
                        raise StaleSnapshot(f"snapshot memory {m.id!r} is no longer live")
                    if (
                        r[4] != m.content
                        or tuple(json.loads(r[5])) != tuple(m.tags)
                        or r[6] != m.confidence
                        or r[9] != m.seen_count
                        or r[10] != m.last_seen_at
                    ):
                        raise StaleSnapshot(f"snapshot memory {m.id!r} changed since the snapshot")
                    live_rows[m.id] = r
                if invalid is not None:
                    raise invalid
                now = float(self.clock())
                seq = self._catch_up() + 1
                added: list[str] = []
                retired: list[str] = []
                patches: list[tuple[int, np.ndarray | None, float, str, str]] = []
                drops: list[tuple[str, int]] = []
                for ch in typed:
                    new_id = None
                    if ch.entry is not None:
                        e = ch.entry
                        content, tag_list = self._redact(e.content, e.tags)
                        vec = vecs[e.content]
                        new_id, rowid = self._insert(
                            scope_id, e.kind, content, tag_list, e.confidence, None, now, vec, seq
                        )
                        added.append(new_id)
                        patches.append((rowid, vec, e.confidence, e.kind, content))
                    for mid in ch.ids:
                        r = live_rows[mid]
                        self._retire(r[0], new_id or mid, seq)
                        retired.append(mid)
                        drops.append((r[3], int(r[0])))
                if rollout_ids:
                    ph = ",".join("?" * len(rollout_ids))
                    c.execute(
                        f"UPDATE rollouts SET consumed_at = ? WHERE id IN ({ph})",
                        (now, *rollout_ids),
                    )
            self._seen_seq = seq
            for kind, rowid in drops:
                self._drop(scope_id, kind, rowid)
            for rowid, vec, conf, kind, content in patches:
                self._patch(scope_id, rowid, vec, conf, now, now)
                self._index(scope_id, kind, rowid, content)
        return CommitResult(
            added=tuple(added), retired=tuple(retired), consumed=tuple(rollout_ids), changes=typed
        )

    def _embed_entries(self, changes: Sequence[Change]) -> dict[str, np.ndarray | None]:
        texts = [ch.entry.content for ch in changes if ch.entry is not None]
        return {t: self._embed_one(redact(t, self.redaction)) for t in texts}

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
        """Insert many rows without fold-in, in one transaction (benchmarks and
        fixtures only). `embeddings` rows are normalised; `timestamps` sets
        created_at = last_seen_at per row (default: now)."""
        now = float(self.clock())
        if embeddings is not None:
            embeddings = normalize_rows(np.asarray(embeddings, dtype=np.float32))
        with self._lock:
            with self._tx():
                c = self._conn
                seq = self._catch_up() + 1
                start = c.execute("SELECT COALESCE(MAX(rowid), 0) FROM memories").fetchone()[0] + 1
                c.executemany(
                    "INSERT INTO memories (rowid, id, scope_id, kind, content, tags, confidence, "
                    "created_at, seen_count, last_seen_at, embedding, ngrams, change_seq) "
                    "VALUES (?, ?, ?, ?, ?, '[]', ?, ?, 1, ?, ?, ?, ?)",
                    (
                        (
                            start + i,
                            _new_id(),
                            scope_id,
                            kind,
                            content,
                            confidence,
                            ts,
                            ts,
                            None if embeddings is None else embeddings[i].tobytes(),
                            len(trigrams(content)),
                            seq,
                        )
                        for i, content in enumerate(contents)
                        for ts in [now if timestamps is None else float(timestamps[i])]
                    ),
                )
            self._seen_seq = seq
            self._forget(scope_id)


class _Transaction:
    """`BEGIN IMMEDIATE` ... `COMMIT`, rolled back on any exception."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        else:
            self._conn.execute("ROLLBACK")
