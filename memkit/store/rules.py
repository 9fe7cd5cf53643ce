"""The store (SPEC §1-4) and the store side of consolidation (§7), on any backend.

This module reads as the SPEC's rules: what a write folds into (§3), how
recall chooses its path and ranks (§4, the arithmetic in `memkit.store.rank`), and
what a consolidation commit checks and applies (§7.7). They live once, in
`SQLStore`, whose SQL runs unchanged on both backends: `SQLiteStore` (here)
and `memkit.store.postgres.PostgresStore` add only how to connect, and a connection
(`memkit.store.sqlite_db`) adds what differs between the engines (write locks,
change numbers, how a vector is stored). It leaves out the machinery: the
in-memory indexes and the one write path that keeps them true across
connections are `memkit.store.index`, the row record and its SQL statements
`memkit.store.rows`, the schema `memkit.store.schema`.

Design choices, each for a measured reason:

* WAL, autocommit connection, an explicit write transaction for every write
  (`memkit.store.index.Write`: `BEGIN IMMEDIATE` on SQLite, the scope's row lock on
  Postgres), so fold detection and the write it decides are one transaction
  even across processes (SPEC §3.7), and readers never block writers.
* Fold-in never compares against every row: an in-memory trigram index per
  (scope, kind) (`memkit.store.gram_index`, exact by l-prefix filtering) scores the
  few candidates exactly; SQLite then confirms they are live and in window.
* Vector recall scores a per-scope in-memory float32 matrix of live
  embeddings with one matrix-vector product (exact; no ANN).
* Embedding (of writes and of queries) happens before the store lock is
  taken, so a slow embedder never stalls other readers and writers.

Why over 600 lines: one class, `SQLStore`, holds every store rule of the
SPEC (fold-in, both recall paths, curation, staging, the consolidation commit,
parking) so that each rule is written once for both backends. Issue #35 plans
the split into a `memkit/store/` package (memory rules, the rollout queue and
its commit, engine specifics).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from memkit import checks as ck
from memkit.embed import (
    Embedder,
    default_floor_of,
    embedder_meta,
    get_embedder,
    normalize_rows,
)
from memkit.errors import (
    ANSWER_CODES,
    AlreadyConsumed,
    ConfigError,
    EmbedderMismatch,
    NotFound,
    ProposalError,
    StaleSnapshot,
)
from memkit.params import (
    DAY,
    ConsolidationParams,
    FoldParams,
    RecallParams,
    RedactionParams,
)
from memkit.proposal import Proposal, validate_proposal
from memkit.redact import redact
from memkit.store import rank
from memkit.store import rows as sql
from memkit.store.index import Indexes, LiveRow, Write
from memkit.store.parking import PROVIDER_CODES, failure_class, plan
from memkit.store.rows import COLS, Row
from memkit.store.schema import SCHEMA_VERSION, check_own_file, migrate
from memkit.store.sqlite_db import SQLiteDb
from memkit.text import jaccard, keywords, trigrams
from memkit.types import KINDS, Change, CommitResult, Memory, Recalled, RememberResult, Rollout

_BUSY_TIMEOUT_MS = 60_000
KEYWORD_ALL = 1 << 62
"""A keyword search limit above any row count: hybrid recall fuses every match."""
_WAL_PAGES = 16_000
"""Pages of WAL between automatic checkpoints (see `SQLiteStore.open`)."""

_ROLLOUT_ID = re.compile(r"[0-9a-f]{64}")
ITEM_FIELDS: tuple[str, ...] = ("content", "kind", "confidence", "tags", "source_run_id")
"""The fields of one `remember_many` item (those of `remember`)."""


def _new_id() -> str:
    return uuid.uuid4().hex[:16]


def _query_vector(value: Any) -> np.ndarray:
    """A caller's query embedding as one finite float32 row, or ConfigError."""
    try:
        q = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        q = None
    if q is None or q.ndim != 1 or q.size == 0 or not np.isfinite(q).all():
        raise ConfigError(f"query_embedding={value!r:.80}: must be a non-empty finite vector")
    return q.copy()


class _Item(NamedTuple):
    """One checked, redacted write."""

    content: str
    kind: str
    confidence: float
    tags: list[str]
    source_run_id: str | None
    grams: frozenset[str]


class _Committed:
    """What `_fold_target` reads outside a write: the connection and the
    committed rows' trigram indexes (caught up by the caller)."""

    def __init__(self, conn: Any, indexes: Indexes):
        self.conn, self._ix = conn, indexes

    def similar(
        self, scope_id: str, kind: str, grams: frozenset[str], threshold: float
    ) -> dict[int, float]:
        return self._ix.grams_of(scope_id, kind, threshold).similar(grams, threshold)


class SQLStore:
    """The memory store's rules over one connection of either backend (see the
    module docstring); open one with `SQLiteStore.open` or `PostgresStore.open`.

    Thread-safe (one lock around the connection).
    """

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
    ):
        self._conn = conn
        self.path = path
        self.embedder = embedder
        self.clock = clock
        self.fold = fold
        self.redaction = redaction
        self._lock = threading.RLock()
        self._closed = False
        self._ix = Indexes(conn, int(embedder.dim) if embedder is not None else 0)
        self.new_id: Callable[[], str] = _new_id
        """Row id factory; evaluations inject a deterministic one so replays reproduce."""

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._ix.forget()
            self._closed = True

    @property
    def closed(self) -> bool:
        """True once `close` ran (closing again is harmless)."""
        return self._closed

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------

    def _write(self, scope_id: str, rows: int = 0) -> Write:
        """The one write path: every writer runs inside `with self._write(scope) as w`
        (`rows`: the most rows it inserts, whose rowids Postgres reserves at once)."""
        return Write(self._lock, self._ix, scope_id, rows)

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

    @staticmethod
    def _check_write(kind: str, content: str, confidence: float) -> None:
        ck.check_kind(kind)
        ck.check_content(content)
        ck.check_confidence(confidence)

    def _item(
        self,
        content: str,
        kind: str = "fact",
        confidence: float = 0.7,
        tags: Sequence[str] = (),
        source_run_id: str | None = None,
    ) -> _Item:
        self._check_write(kind, content, confidence)
        ck.check_tags(tags)
        ck.check_optional_id(source_run_id, "source_run_id")
        content, tag_list = self._redact(content, tags)
        return _Item(content, kind, float(confidence), tag_list, source_run_id, trigrams(content))

    # -- remember (SPEC §3) -------------------------------------------------------------

    def fold_target(self, scope_id: str, content: str, *, kind: str = "fact") -> Memory | None:
        """The live memory `remember(scope_id, content, kind=kind)` would fold into
        now (SPEC §3.3: same scope and kind, seen within the window, the best
        trigram similarity at or above the threshold), or None if it would insert.

        Reads only: the content is checked and redacted as `remember` does, and
        rows other connections committed are seen; nothing is written. For
        evaluations and benchmarks that check fold-in decisions."""
        ck.check_scope(scope_id)
        item = self._item(content, kind)
        with self._lock:
            self._ix.catch_up(scope_id)
            target = self._fold_target(
                _Committed(self._conn, self._ix), scope_id, kind, item.grams, float(self.clock())
            )
            return None if target is None else target.memory()

    def _fold_target(
        self, w: Write | _Committed, scope_id: str, kind: str, grams: frozenset[str], now: float
    ) -> Row | None:
        """The single best live row to fold into, or None (SPEC §3.3); `w` is the
        write that decides (its own rows included) or the committed rows."""
        t = self.fold.threshold
        window = self.fold.window_days * DAY
        if not grams and t > 0:
            return None  # pg_trgm similarity of an empty set is 0
        sims: dict[int, float] | None = None
        if t <= 0:
            cutoff = now - window - 1.0  # loose SQL bound; the exact test is below
            rows = sql.rows(
                w.conn,
                "WHERE scope_id = ? AND kind = ? AND superseded_by IS NULL AND last_seen_at > ?",
                (scope_id, kind, cutoff),
            )
        else:
            sims = w.similar(scope_id, kind, grams, t)
            rows = [
                r
                for r in sql.by_rowid(w.conn, sims).values()
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
        ck.check_scope(scope_id)
        item = self._item(content, kind, confidence, tags, source_run_id)
        return self._remember(scope_id, [item])[0]

    def remember_many(
        self, scope_id: str, items: Iterable[str | Mapping[str, Any]]
    ) -> list[RememberResult]:
        """`remember` for many items in one transaction, embedded in one call.

        Each item is the content string, or a mapping with `remember`'s fields
        (`content`, `kind`, `confidence`, `tags`, `source_run_id`). Fold-in
        decides exactly as `remember` called item by item in order would
        (an item may fold into a row an earlier item wrote). A bad item raises
        ConfigError naming its position, and nothing is written.
        """
        ck.check_scope(scope_id)
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise ConfigError(f"items={items!r:.80}: must be an iterable of items")
        prepared: list[_Item] = []
        for i, it in enumerate(items):
            fields = {"content": it} if isinstance(it, str) else it
            if not isinstance(fields, Mapping):
                raise ConfigError(
                    f"remember_many item {i}: want a string or a mapping, got {it!r:.80}"
                )
            extra = set(fields) - set(ITEM_FIELDS)
            if extra:
                raise ConfigError(
                    f"remember_many item {i}: unknown field(s) {', '.join(sorted(map(str, extra)))}"
                    f" (want {', '.join(ITEM_FIELDS)})"
                )
            if "content" not in fields:
                raise ConfigError(f"remember_many item {i}: no 'content'")
            try:
                prepared.append(self._item(**fields))
            except ConfigError as e:
                raise ConfigError(f"remember_many item {i}: {e}") from None
        return self._remember(scope_id, prepared)

    def _remember(self, scope_id: str, items: Sequence[_Item]) -> list[RememberResult]:
        vecs = self._embed([it.content for it in items])
        out: list[RememberResult] = []
        if not items:
            return out
        with self._lock:  # not under the write lock: other processes' writers go on
            self._ix.warm_grams(scope_id, {it.kind for it in items}, self.fold.threshold)
        with self._write(scope_id, len(items)) as w, w.conn.batch():
            reserved = iter(w.conn.reserve_rowids(len(items)))
            for it, vec in zip(items, vecs, strict=True):
                now = float(self.clock())
                target = self._fold_target(w, scope_id, it.kind, it.grams, now)
                created: float | None
                if target is None:
                    mid = self.new_id()
                    rowid = sql.insert(
                        w.conn, mid, scope_id, it.kind, it.content, it.tags, it.confidence,
                        it.source_run_id, now, vec, len(it.grams), w.seq, next(reserved, None),
                    )  # fmt: skip
                    conf, created = it.confidence, now
                else:
                    mid, rowid, created = target.id, target.rowid, target.created_at
                    conf = max(float(target.confidence), it.confidence)
                    sql.fold_into(
                        w.conn, rowid, it.content, it.tags, conf, it.source_run_id, now, vec,
                        len(it.grams), w.seq,
                    )  # fmt: skip
                w.put(
                    LiveRow(
                        scope_id,
                        it.kind,
                        rowid,
                        it.content,
                        it.tags,
                        vec,
                        conf,
                        now,
                        created,
                        it.grams,
                    )
                )
                out.append(RememberResult(id=mid, folded=target is not None))
        return out

    # -- curation: update and retract ----------------------------------------------------

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
        grams = trigrams(content)
        (vec,) = self._embed([content])
        with self._write(scope_id) as w:
            old = sql.live_row(w.conn, scope_id, memory_id)
            if old is None:
                raise NotFound(memory_id, scope_id)
            if tags is None:
                tag_list = old.tag_list
            now = float(self.clock())
            new_id = self.new_id()
            rowid = sql.insert(
                w.conn, new_id, scope_id, old.kind, content, tag_list, confidence, None, now,
                vec, len(grams), w.seq,
            )  # fmt: skip
            sql.retire(w.conn, old.rowid, new_id, w.seq)
            w.drop(scope_id, old.kind, old.rowid)
            w.put(
                LiveRow(
                    scope_id,
                    old.kind,
                    rowid,
                    content,
                    tag_list,
                    vec,
                    float(confidence),
                    now,
                    now,
                    grams,
                )
            )
        return new_id

    def retract(self, scope_id: str, memory_id: str) -> None:
        """Soft-delete: superseded_by = own id. NotFound unless live in this scope."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._write(scope_id) as w:
            old = sql.live_row(w.conn, scope_id, memory_id)
            if old is None:
                raise NotFound(memory_id, scope_id)
            sql.retire(w.conn, old.rowid, old.id, w.seq)
            w.drop(scope_id, old.kind, old.rowid)

    # -- recall (SPEC §4) ----------------------------------------------------------------

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
        given, and the query is non-empty); if embedding fails or nothing
        clears the floor, the keyword path answers. `params.floor=None` (the
        default) is the store's embedder's `default_floor` (memkit). With
        `params.hybrid="rrf"` (memkit) the vector path's ranking is fused with every
        keyword match (`_recall_hybrid`, path "hybrid"). The query is embedded before
        the store lock is taken.
        """
        ck.check_scope(scope_id)
        ck.check_query(query)
        ck.check_int(limit, "limit")
        ck.check_type(params, "params", RecallParams)
        given = None if query_embedding is None else _query_vector(query_embedding)
        if params.floor is None:
            params = dataclasses.replace(params, floor=default_floor_of(self.embedder))
        q: np.ndarray | None = None
        why: Literal["no_embedder", "embed_error", "below_floor", "empty_query"] | None = None
        if not query.strip():
            why = "empty_query"
        elif given is not None:
            q = normalize_rows(given)[0]
        elif self.embedder is None:
            why = "no_embedder"
        else:
            try:
                q = normalize_rows(self.embedder.embed([query]))[0]
            except Exception:
                why = "embed_error"  # fall through to the keyword path (SPEC §4.1)
        kws = keywords(query)  # outside the lock, like the embedding: a huge query stalls no one
        if q is not None:
            with self._lock:
                if params.hybrid == "rrf":
                    hits = self._recall_hybrid(scope_id, q, kws, limit, params)
                else:
                    hits = self._recall_vector(scope_id, q, limit, params)
            if hits:
                return hits
            why = "below_floor"
        with self._lock:
            hits = self._recall_keyword(scope_id, kws, limit, params)
        return [dataclasses.replace(h, fallback=why) for h in hits]

    def _recall_vector(
        self, scope_id: str, q: np.ndarray, limit: int, params: RecallParams
    ) -> list[Recalled]:
        sv = self._ix.vectors_of(scope_id)
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
        return self._ranked(scope_id, cos, rowid, conf, last_seen, recency, limit, params)

    def _ranked(
        self,
        scope_id: str,
        cos: np.ndarray,
        rowid: np.ndarray,
        conf: np.ndarray,
        last_seen: np.ndarray,
        recency: np.ndarray,
        limit: int,
        params: RecallParams,
    ) -> list[Recalled]:
        """The vector path's answer over these candidates and their cosines (SPEC §4.1)."""
        now = float(self.clock())
        ranked = rank.rank_vector(cos, conf, recency, last_seen, rowid, now, params, max(limit, 0))
        if ranked.order.size == 0:
            return []
        k = ranked.order.size if limit <= 0 else min(limit, ranked.order.size)
        top = rowid[ranked.order[:k]]
        rows = sql.by_rowid(self._conn, top)
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

    def _recall_hybrid(
        self, scope_id: str, q: np.ndarray, kws: list[str], limit: int, params: RecallParams
    ) -> list[Recalled]:
        """(memkit) The vector ranking above the floor and every keyword match, fused by
        `rank.rrf_fuse`; each hit keeps its cosine breakdown and/or keyword count, and
        `score` is the fused score. Both rankings are taken whole, so the cut at `limit`
        comes after fusion (a row deep in one ranking can rise on the other)."""
        vector = self._recall_vector(scope_id, q, 0, params)
        matched = self._ix.keywords_of(scope_id).search(kws, KEYWORD_ALL) if kws else []
        found = sql.by_rowid(self._conn, [rowid for rowid, _ in matched])
        by_kw = {
            r.id: (r, n)
            for rowid, n in matched
            if (r := found.get(rowid)) is not None and r.live and r.scope_id == scope_id
        }
        by_vec = {h.id: h for h in vector}
        fused = rank.rrf_fuse([list(by_vec), list(by_kw)])
        if limit > 0:
            fused = fused[:limit]
        out = []
        for mid, score in fused:
            n = by_kw[mid][1] if mid in by_kw else None
            if mid in by_vec:
                hit = dataclasses.replace(by_vec[mid], path="hybrid", score=score)
                out.append(dataclasses.replace(hit, keywords_matched=n))
            else:
                memory = by_kw[mid][0].memory()
                out.append(Recalled(memory, "hybrid", score, keywords_matched=n))
        return out

    def _recall_keyword(
        self, scope_id: str, kws: list[str], limit: int, params: RecallParams
    ) -> list[Recalled]:
        lim = rank.keyword_limit(limit, params)
        if not kws:
            rows = sql.rows(
                self._conn,
                "WHERE scope_id = ? AND superseded_by IS NULL "
                "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC LIMIT ?",
                (scope_id, lim),
            )
            return [
                Recalled(memory=r.memory(), path="keyword", score=0.0, keywords_matched=0)
                for r in rows
            ]
        top = self._ix.keywords_of(scope_id).search(kws, lim)
        found = sql.by_rowid(self._conn, [rowid for rowid, _ in top])
        return [
            Recalled(memory=r.memory(), path="keyword", score=float(n), keywords_matched=n)
            for rowid, n in top
            if (r := found.get(rowid)) is not None and r.live and r.scope_id == scope_id
        ]

    # -- reads ------------------------------------------------------------------------------

    def get(self, scope_id: str, memory_id: str) -> Memory:
        """Any row of this scope, live or not (with its embedding); NotFound otherwise."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._lock:
            r = self._conn.execute(
                f"SELECT {COLS}, embedding FROM memories WHERE id = ? AND scope_id = ?",
                (memory_id, scope_id),
            ).fetchone()
        if r is None:
            raise NotFound(memory_id, scope_id)
        emb = None if r[-1] is None else self._conn.unvec(r[-1]).copy()
        return Row._make(r[:-1]).memory(emb)

    def history(self, scope_id: str, memory_id: str) -> list[Memory]:
        """Every row linked to this one by update/merge (predecessors and successors,
        transitively), oldest first. NotFound if the id is missing or foreign."""
        ck.check_scope(scope_id)
        ck.check_id(memory_id)
        with self._lock:
            c = self._conn
            found = sql.rows(c, "WHERE id = ? AND scope_id = ?", (memory_id, scope_id))
            if not found:
                raise NotFound(memory_id, scope_id)
            seen = {found[0].id: found[0]}
            todo = [found[0]]
            while todo:
                r = todo.pop()
                links: list[Row] = []
                if r.superseded_by and r.superseded_by != r.id:
                    links += sql.rows(
                        c, "WHERE id = ? AND scope_id = ?", (r.superseded_by, scope_id)
                    )
                links += sql.rows(
                    c,
                    "WHERE superseded_by = ? AND scope_id = ? AND id != ?",
                    (r.id, scope_id, r.id),
                )
                for x in links:
                    if x.id not in seen:
                        seen[x.id] = x
                        todo.append(x)
        rows = sorted(
            seen.values(),
            key=lambda r: (sql.nan(r.created_at) if r.created_at is not None else -1, r.rowid),
        )
        return [r.memory() for r in rows]

    def live(self, scope_id: str, *, limit: int | None = None) -> list[Memory]:
        """Live rows of a scope, most recently confirmed first."""
        ck.check_scope(scope_id)
        ck.check_optional_int(limit, "limit")
        where = (
            "WHERE scope_id = ? AND superseded_by IS NULL "
            "ORDER BY last_seen_at DESC NULLS LAST, rowid DESC"
        )
        args: tuple[Any, ...] = (scope_id,)
        if limit is not None:
            where += " LIMIT ?"
            args += (max(limit, 0),)
        with self._lock:
            return [r.memory() for r in sql.rows(self._conn, where, args)]

    def scopes(self) -> list[str]:
        """Every scope id with at least one row, sorted (by code point on both backends)."""
        with self._lock:
            return sorted(
                r[0] for r in self._conn.execute("SELECT DISTINCT scope_id FROM memories")
            )

    def stats(self, scope_id: str | None = None) -> dict[str, Any]:
        """Row counts (live, retired, retracted, embedded, per kind) and rollout counts
        (pending, consumed, parked: each staged rollout is in exactly one; of the
        pending, those in the split of a failed batch; of the parked, those parked
        alone and those parked with others, which only `isolate=False` does)."""
        if scope_id is not None:
            ck.check_scope(scope_id)
        where, args = ("WHERE scope_id = ?", (scope_id,)) if scope_id is not None else ("", ())
        with self._lock:
            c = self._conn
            total, live, retracted, embedded, scopes = c.execute(
                "SELECT COUNT(*), "
                "COUNT(*) FILTER (WHERE superseded_by IS NULL), "
                "COUNT(*) FILTER (WHERE superseded_by = id), "
                "COUNT(*) FILTER (WHERE superseded_by IS NULL AND embedding IS NOT NULL), "
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
            pending, consumed, parked, isolating, alone = c.execute(
                "SELECT COUNT(*) FILTER (WHERE consumed_at IS NULL AND parked_at IS NULL), "
                "COUNT(*) FILTER (WHERE consumed_at IS NOT NULL), "
                "COUNT(*) FILTER (WHERE consumed_at IS NULL AND parked_at IS NOT NULL), "
                "COUNT(*) FILTER (WHERE consumed_at IS NULL AND parked_at IS NULL "
                "AND split_size IS NOT NULL), "
                "COUNT(*) FILTER (WHERE consumed_at IS NULL AND parked_at IS NOT NULL "
                "AND parked_batch = 1) "
                f"FROM rollouts {where}",
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
            "rollouts_parked": parked,
            "rollouts_isolating": isolating,
            "rollouts_parked_alone": alone,
            "rollouts_parked_with_others": parked - alone,
            "embedder": meta.get("embedder"),
            "embedder_dim": int(meta["embedder_dim"]) if "embedder_dim" in meta else None,
            "embedder_fingerprint": meta.get("embedder_fingerprint"),
            "reembed_to": meta.get("reembed_to"),
        }

    def reembed(
        self,
        embedder: str | Embedder,
        *,
        batch: int = 256,
        progress: Callable[[int, int], None] | None = None,
    ) -> Any:
        """(memkit) Re-embed every row in place with `embedder`, batch by batch,
        resumable after a kill (`memkit.store.reembed`); afterwards the store records
        and uses it. Returns a `memkit.store.reembed.ReembedReport`. Open the store
        with `embedder=None` to move it off an embedder it refuses."""
        from memkit.store.reembed import reembed

        emb = get_embedder(embedder)
        if emb is None:
            raise ConfigError("reembed needs an embedder (got None)")
        with self._lock:
            report = reembed(self._conn, emb, where=self.path, batch=batch, progress=progress)
            self._ix.forget()
            self.embedder, self._ix = emb, Indexes(self._conn, int(emb.dim))
        return report

    def digest(self) -> dict[str, Any]:
        """What is stored, summarised: row counts and a SHA-256 over every column
        of every memory (embedding and change number included) and of every
        staged rollout, in insertion order, plus `problems`, the engine's own
        consistency check (SQLite's `PRAGMA integrity_check`; [] when sound).

        Read-only, on this store's own connection under its lock, so an
        in-memory store can be checked too. Two digests of one store are equal
        exactly when nothing stored changed in between: tests use it to show
        that a refused call changed nothing. (Not comparable across backends:
        each hashes its own column encodings; `memkit store copy` verifies a
        copy its own way.)"""
        with self._lock:
            c = self._conn
            out: dict[str, Any] = {"problems": c.integrity_problems()}
            for table, order in (("memories", "rowid"), ("rollouts", "seq")):
                h, n = hashlib.sha256(), 0
                cur = c.execute(f"SELECT * FROM {table} ORDER BY {order}")
                names = [d[0] for d in cur.description]
                for row in cur.fetchall():
                    vals = [
                        c.unvec(v).tobytes().hex() if k == "embedding" and v is not None else v
                        for k, v in zip(names, row, strict=True)
                    ]
                    h.update(repr(vals).encode("utf-8", "surrogatepass") + b"\n")
                    n += 1
                out[table], out[f"{table}_sha256"] = n, h.hexdigest()
        return out

    # -- consolidation, store side (SPEC §7) --------------------------------------------

    def stage_rollout(self, rollout: Rollout) -> bool:
        """Persist a rollout; False (no change) when that id is already staged.

        Message contents and the final answer are redacted with the store's
        settings here too (idempotent after `stage_run`), so a rollout a host
        builds itself cannot bring a secret into the file. A rollout whose id
        is not 64 lowercase hex (SPEC §7 staging) is refused too: it could
        never pass validation, so it must never reach the queue (memkit).
        """
        messages_json, final = self._check_rollout(rollout)
        with self._lock:
            staged_at = rollout.staged_at if rollout.staged_at is not None else float(self.clock())
            cur = self._conn.execute(
                "INSERT INTO rollouts (id, scope_id, run_id, messages, final, staged_at, "
                "consumed_at) VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT (id) DO NOTHING",
                (
                    rollout.id,
                    rollout.scope_id,
                    rollout.run_id,
                    messages_json,
                    final,
                    staged_at,
                ),
            )
            return bool(cur.rowcount == 1)

    def _check_rollout(self, rollout: Rollout) -> tuple[str, str]:
        """The rollout's checked, redacted messages (as JSON) and final answer."""
        ck.check_type(rollout, "rollout", Rollout)
        ck.check_id(rollout.id, "rollout.id")
        if not _ROLLOUT_ID.fullmatch(rollout.id):
            raise ConfigError(
                f"rollout.id={rollout.id!r:.80}: must be 64 lowercase hex (a SHA-256 of "
                "the transcript, see memkit.consolidate.rollout_id)"
            )
        ck.check_scope(rollout.scope_id, "rollout.scope_id")
        ck.check_optional_id(rollout.run_id, "rollout.run_id")
        final = ck.check_text(rollout.final, "rollout.final", blank=True)
        st = rollout.staged_at
        if st is not None and (isinstance(st, bool) or not isinstance(st, int | float)):
            raise ConfigError(f"rollout.staged_at={st!r:.80}: must be a number or None")
        if not isinstance(rollout.messages, list | tuple):
            raise ConfigError(f"rollout.messages={rollout.messages!r:.80}: must be a list")
        messages = []
        for i, m in enumerate(rollout.messages):
            if not isinstance(m, Mapping):
                raise ConfigError(f"rollout.messages[{i}]={m!r:.80}: must be a mapping")
            m = dict(m)
            for key in ("content", "tool_calls"):  # text, or parts / calls holding text
                if key in m:
                    m[key] = self._redact_deep(m[key], f"rollout.messages[{i}].{key}")
            messages.append(m)
        try:
            text = json.dumps(messages, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise ConfigError(f"rollout.messages: not JSON-serialisable ({e})") from None
        ck.check_text(text, "rollout.messages", blank=True)
        return text, redact(final, self.redaction)

    def _redact_deep(self, value: Any, name: str) -> Any:
        """Every string inside `value` redacted (a hand-built rollout's content parts
        and tool-call arguments: `build_rollout` flattens them into text, a Rollout
        made by hand keeps them, and they reached the table unredacted)."""

        def walk(v: Any) -> Any:
            if isinstance(v, str):
                return redact(v, self.redaction)
            if isinstance(v, list | tuple):
                return [walk(x) for x in v]
            if isinstance(v, Mapping):
                return {k: walk(x) for k, x in v.items()}
            return v

        try:
            return walk(value)
        except RecursionError:
            raise ConfigError(f"{name}: nested too deeply") from None

    def _rollouts(self, where: str, args: Sequence[Any]) -> list[Rollout]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, scope_id, messages, final, staged_at, consumed_at, run_id, "
                f"failed_passes, parked_at, split_size, parked_batch FROM rollouts WHERE {where}",
                tuple(args),
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
                failed_passes=r[7],
                parked_at=r[8],
                split_size=r[9],
                parked_batch=r[10],
            )
            for r in rows
        ]

    def pending_rollouts(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """Unconsumed, unparked rollouts of a scope, oldest first."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        return self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL "
            "ORDER BY staged_at, seq LIMIT ?",
            (scope_id, max(limit, 0)),
        )

    def next_batch(self, scope_id: str, limit: int = 4) -> list[Rollout]:
        """(memkit) The rollouts the next pass takes: while a failed batch is being
        split, its next sub-batch (the oldest rollouts in the split, as many as
        the first one's `split_size`, at most `limit`); else `pending_rollouts`."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        split = self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL "
            "AND split_size IS NOT NULL ORDER BY staged_at, seq LIMIT ?",
            (scope_id, max(limit, 0)),
        )
        if split:
            return split[: max(1, split[0].split_size or 1)]
        return self.pending_rollouts(scope_id, limit)

    def parked_rollouts(self, scope_id: str) -> list[Rollout]:
        """(memkit) Rollouts parked after repeated invalid answers, oldest first."""
        ck.check_scope(scope_id)
        return self._rollouts(
            "scope_id = ? AND consumed_at IS NULL AND parked_at IS NOT NULL "
            "ORDER BY staged_at, seq",
            (scope_id,),
        )

    def requeue(self, scope_id: str, rollout_id: str) -> None:
        """(memkit) Put a parked rollout back in the pending queue, its failures forgotten.

        Raises ConfigError unless `rollout_id` is parked in `scope_id`.
        """
        ck.check_scope(scope_id)
        ck.check_id(rollout_id, "rollout_id")
        with self._write(scope_id) as w:
            cur = w.conn.execute(
                "UPDATE rollouts SET parked_at = NULL, failed_passes = 0, failed_as = NULL, "
                "parked_batch = NULL, split_size = NULL WHERE id = ? "
                "AND scope_id = ? AND consumed_at IS NULL AND parked_at IS NOT NULL",
                (rollout_id, scope_id),
            )
            if cur.rowcount != 1:
                raise ConfigError(f"rollout {rollout_id!r:.80} is not parked in scope {scope_id!r}")

    def record_failed_pass(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        code: str,
        params: ConsolidationParams = ConsolidationParams(),
    ) -> tuple[str, ...]:
        """(memkit) Count a failed pass against its rollouts; split the batch or park.

        `code` must count (`memkit.store.parking.failure_class`: a parse or
        validation code, or the provider's `bad_request` / `timeout`; a 5xx,
        a rate limit or a stale snapshot is not the evidence's fault). In one
        write transaction, every named rollout still pending in the scope gets
        one more failed pass (restarting at 1 when its last counted failure
        was of another class), then `memkit.store.parking.plan` decides: split the
        batch in halves, park a rollout that failed alone at `park_after`
        (releasing the rest of the split), or, with `params.isolate` off, park
        every rollout at `park_after`. So a crash records the failure with
        its consequence or neither. Returns the ids parked by this call, in
        batch order.
        """
        ck.check_scope(scope_id)
        ck.check_type(params, "params", ConsolidationParams)
        kind = failure_class(code)
        if kind is None:
            raise ConfigError(
                f"record_failed_pass: {code!r} does not count (want one of "
                f"{', '.join((*ANSWER_CODES, *PROVIDER_CODES))})"
            )
        ids = list(dict.fromkeys(rollout_ids))
        if not ids:
            return ()
        ph = ",".join("?" * len(ids))
        mine = f"id IN ({ph}) AND scope_id = ? AND consumed_at IS NULL AND parked_at IS NULL"
        with self._write(scope_id) as w:
            w.conn.execute(
                "UPDATE rollouts SET failed_passes = CASE WHEN COALESCE(failed_as, 'answer') = ? "
                f"THEN failed_passes + 1 ELSE 1 END, failed_as = ? WHERE {mine}",
                (kind, kind, *ids, scope_id),
            )
            counts = dict(
                w.conn.execute(
                    f"SELECT id, failed_passes FROM rollouts WHERE {mine}", (*ids, scope_id)
                )
            )
            batch = [(i, counts[i]) for i in ids if i in counts]
            todo = plan(batch, params)
            if todo.park:
                dph = ",".join("?" * len(todo.park))
                w.conn.execute(
                    "UPDATE rollouts SET parked_at = ?, parked_batch = ?, split_size = NULL "
                    f"WHERE id IN ({dph})",
                    (float(self.clock()), len(batch), *todo.park),
                )
            if todo.release:
                w.conn.execute(
                    "UPDATE rollouts SET split_size = NULL WHERE scope_id = ? "
                    "AND consumed_at IS NULL AND parked_at IS NULL AND split_size IS NOT NULL",
                    (scope_id,),
                )
            for size in sorted(set(todo.split.values())):
                part = [i for i, n in todo.split.items() if n == size]
                w.conn.execute(
                    f"UPDATE rollouts SET split_size = ? WHERE id IN ({','.join('?' * len(part))})",
                    (size, *part),
                )
        return todo.park

    def snapshot(
        self, scope_id: str, limit: int = 32, *, policy: str = "recent", query: str = ""
    ) -> list[Memory]:
        """Live memories shown to a consolidator. "recent" (reference): the `limit`
        most recently confirmed. "relevant": recalled against `query`, padded with
        recent rows up to `limit`."""
        ck.check_scope(scope_id)
        ck.check_int(limit, "limit")
        ck.check_choice(policy, "policy", ("recent", "relevant"))
        ck.check_query(query)
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
        lock). In one write: every rollout must exist in this scope unconsumed
        and unparked (else AlreadyConsumed), every snapshot row must still be
        live and unchanged (else StaleSnapshot), then a validation failure is
        raised (so its code ranks after these two, as before); adds insert
        (they do not fold, as in the reference), merges insert and retire the
        named rows to the new id, retracts point rows at themselves, and
        exactly these rollouts are marked consumed. Any failure mutates
        nothing. Returns what was applied, typed changes included.
        """
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
            self._check_pass(w, scope_id, rollout_ids, snapshot)
            if invalid is not None:
                raise invalid
            live_rows = {  # every one is live: _check_pass just said so
                m.id: r for m in snapshot if (r := sql.live_row(w.conn, scope_id, m.id)) is not None
            }
            now = float(self.clock())
            added: list[str] = []
            retired: list[str] = []
            for ch in typed:
                new_id = None
                if ch.entry is not None:
                    ent, content, tag_list = next(new_rows)
                    vec = next(vecs)
                    new_id = self.new_id()
                    grams = trigrams(content)
                    rowid = sql.insert(
                        w.conn, new_id, scope_id, ent.kind, content, tag_list, ent.confidence, None,
                        now, vec, len(grams), w.seq,
                    )  # fmt: skip
                    added.append(new_id)
                    w.put(
                        LiveRow(
                            scope_id,
                            ent.kind,
                            rowid,
                            content,
                            tag_list,
                            vec,
                            ent.confidence,
                            now,
                            now,
                            grams,
                        )
                    )
                for mid in ch.ids:
                    r = live_rows[mid]
                    sql.retire(w.conn, r.rowid, new_id or mid, w.seq)
                    retired.append(mid)
                    w.drop(scope_id, r.kind, r.rowid)
            if rollout_ids:
                ph = ",".join("?" * len(rollout_ids))
                w.conn.execute(
                    f"UPDATE rollouts SET consumed_at = ? WHERE id IN ({ph})", (now, *rollout_ids)
                )
        return CommitResult(
            added=tuple(added), retired=tuple(retired), consumed=tuple(rollout_ids), changes=typed
        )

    @staticmethod
    def _check_commit(scope_id: Any, rollout_ids: Any, snapshot: Any, params: Any) -> None:
        """commit_pass's argument types (values are the proposal rules' business)."""
        ck.check_scope(scope_id)
        if not isinstance(rollout_ids, list | tuple):
            raise ConfigError(f"rollout_ids={rollout_ids!r:.80}: must be a list of ids")
        for rid in rollout_ids:
            if not isinstance(rid, str):
                raise ProposalError("rollout_ids", f"rollout id {rid!r:.80} is not a string")
        if not isinstance(snapshot, list | tuple) or not all(
            isinstance(m, Memory) and isinstance(m.id, str) and isinstance(m.scope_id, str)
            for m in snapshot
        ):
            raise ConfigError(f"snapshot={snapshot!r:.80}: must be a list of Memory rows")
        ck.check_type(params, "params", ConsolidationParams)

    @staticmethod
    def _check_pass(
        w: Write, scope_id: str, rollout_ids: list[str], snapshot: list[Memory]
    ) -> None:
        """What can change under the lock: consumption or parking, then snapshot currency."""
        for rid in rollout_ids:
            r = w.conn.execute(
                "SELECT consumed_at, parked_at FROM rollouts WHERE id = ? AND scope_id = ?",
                (rid, scope_id),
            ).fetchone()
            if r is None:
                raise AlreadyConsumed(f"rollout {rid!r} is not staged in scope {scope_id!r}")
            if r[0] is not None:
                raise AlreadyConsumed(f"rollout {rid!r} was already consumed")
            if r[1] is not None:  # another connection parked it after this pass read it
                raise AlreadyConsumed(f"rollout {rid!r} was parked")
        for m in snapshot:
            if m.scope_id != scope_id:
                continue  # validation rejects it as snapshot_scope
            r = sql.live_row(w.conn, scope_id, m.id)
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

    # -- bulk load (benchmarks) ------------------------------------------------------------

    def bulk_load(
        self,
        scope_id: str,
        contents: Sequence[str],
        embeddings: np.ndarray | None = None,
        *,
        kind: str = "fact",
        confidence: float = 0.7,
        timestamps: Sequence[float] | None = None,
    ) -> None:
        """Insert many live rows in one write, for benchmarks and test fixtures:
        it bypasses fold-in (near-duplicates stay separate rows), does not
        redact, and records no tags. Not for an agent's memories: use
        `remember_many`, which keeps every SPEC rule. Each backend inserts the
        rows its fastest way (SQLite `executemany`, Postgres one COPY).

        `embeddings` (one row per content) are normalised; `timestamps` sets
        created_at = last_seen_at per row (default: now). Arguments are checked
        first (ConfigError naming the argument); nothing is written then."""
        ck.check_scope(scope_id)
        ck.check_tags(contents, "contents")  # a list of strings, not one string
        for i, content in enumerate(contents):
            ck.check_content(content, f"contents[{i}]")
        ck.check_kind(kind)
        ck.check_confidence(confidence)
        n = len(contents)
        if embeddings is not None and np.shape(embeddings)[:1] != (n,):
            raise ConfigError(
                f"embeddings must have one row per content ({n}), got shape {np.shape(embeddings)}"
            )
        if timestamps is not None and len(timestamps) != n:
            raise ConfigError(
                f"timestamps must have one entry per content ({n}), got {len(timestamps)}"
            )
        now = float(self.clock())
        if embeddings is not None:
            embeddings = normalize_rows(np.asarray(embeddings, dtype=np.float32))
        rows = (
            (_new_id(), scope_id, kind, content, float(confidence),
             now if timestamps is None else float(timestamps[i]),
             None if embeddings is None else embeddings[i], len(trigrams(content)))
            for i, content in enumerate(contents)
        )  # fmt: skip
        with self._write(scope_id) as w:
            self._bulk_rows(w, rows)
            w.reload(scope_id)  # cheaper than patching every row


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
    ) -> SQLiteStore:
        """Open (creating and migrating) a store.

        The embedder's name and dimension are recorded on first use; opening
        with another one raises EmbedderMismatch. `embedder=None` opens any
        store keyword-only: nothing is embedded, new rows carry no vector.
        `read_only=True` opens an existing store of this schema version and
        never writes to the file; anything else (missing, empty, foreign,
        corrupt, older or newer schema) is a ConfigError and the file is untouched.
        """
        if not isinstance(path, str | os.PathLike) or not str(path).strip():
            raise ConfigError(f"path={path!r:.80}: must be a non-blank str or path")
        ck.check_text(str(path), "path")
        if not callable(clock):
            raise ConfigError(f"clock={clock!r:.80}: must be callable")
        ck.check_type(fold, "fold", FoldParams)
        ck.check_type(redaction, "redaction", RedactionParams)
        emb = get_embedder(embedder)
        if read_only:
            conn = _connect_read_only(str(path), emb)
            return cls(
                conn, path=str(path), embedder=emb, clock=clock, fold=fold, redaction=redaction
            )
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
        return cls(conn, path=str(path), embedder=emb, clock=clock, fold=fold, redaction=redaction)

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


def record_embedder(conn: Any, emb: Embedder | None, where: str) -> None:
    """Record `emb` as the store's embedder (name, dimension, fingerprint) on
    first use, under the store-wide write lock; EmbedderMismatch if another one
    is recorded or a reembed is unfinished (either backend's connection). A
    store that records a name and dimension but no fingerprint (written before
    memkit recorded one) adopts the opener's fingerprint when name and dimension
    agree: they were the whole identity it was written under."""
    if emb is None:
        return
    conn.begin_write(None)
    try:
        meta = check_recorded_embedder(conn, emb, where)
        want = embedder_meta(emb)
        missing = [(k, v) for k, v in want.items() if k not in meta]
        if missing:
            for key, value in missing:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, value),
                )
        conn.end_write(True)
    except BaseException:
        conn.end_write(False)
        raise


def describe_embedder(meta: Mapping[str, str], prefix: str = "embedder") -> str:
    """'name' (dim D, fingerprint F) from a store's meta rows (or an embedder's)."""
    fp = meta.get(f"{prefix}_fingerprint") or "not recorded"
    return f"{meta.get(prefix)!r} (dim {meta.get(f'{prefix}_dim')}, fingerprint {fp})"


def check_recorded_embedder(conn: Any, emb: Embedder, path: str) -> dict[str, str]:
    """The store's meta rows; EmbedderMismatch (naming both) unless the recorded
    embedder (if any) is `emb` by name, dimension and, when recorded, fingerprint,
    or while a `reembed` is unfinished."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    mine = embedder_meta(emb)
    how = f"memkit store reembed --db {path} --embedder {emb.name}"
    if "reembed_to" in meta:
        raise EmbedderMismatch(
            f"store {path!r} is being re-embedded from {describe_embedder(meta)} to "
            f"{describe_embedder(meta, 'reembed_to')}, unfinished; refusing to open it with "
            f"{describe_embedder(mine)}: run `memkit store reembed --db {path} --embedder "
            f"{meta['reembed_to']}` to finish"
        )
    if meta.get("embedder") is None:
        return meta
    differs = [
        k
        for k in mine
        if k in meta
        and meta[k] != mine[k]
        and not (k == "embedder_dim" and "0" in (meta[k], mine[k]))  # a dim learned later
    ]
    if differs:
        raise EmbedderMismatch(
            f"store {path!r} was built with embedder {describe_embedder(meta)}; refusing to "
            f"open it with {describe_embedder(mine)}; re-embed it first: `{how}`"
        )
    return meta


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
