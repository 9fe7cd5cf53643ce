"""Reading memories: recall (SPEC §4: the vector path, the keyword path, and
memkit's hybrid fusion), `get`, `history`, `live`, `scopes` and `stats`.

Vector recall scores a per-scope in-memory float32 matrix of live embeddings
with one matrix-vector product (exact; no ANN); the arithmetic is
`memkit.store.rank`. The query is embedded and tokenised before the store lock
is taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from memkit import checks as ck
from memkit.embed import default_floor_of, normalize_rows
from memkit.errors import ConfigError, NotFound
from memkit.params import RecallParams
from memkit.store import cosine, rank
from memkit.store import rows as sql
from memkit.store.base import StoreBase
from memkit.store.rows import COLS, Row
from memkit.text import keywords
from memkit.types import KINDS, Memory, Recalled

KEYWORD_ALL = 1 << 62
"""A keyword search limit above any row count: hybrid recall fuses every match."""


def _query_vector(value: Any) -> np.ndarray:
    """A caller's query embedding as one finite float32 row, or ConfigError."""
    try:
        q = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        q = None
    if q is None or q.ndim != 1 or q.size == 0 or not np.isfinite(q).all():
        raise ConfigError(f"query_embedding={value!r:.80}: must be a non-empty finite vector")
    return q.copy()


class Reads(StoreBase):
    """Reading memories: recall (SPEC §4), get, history, live, scopes, stats."""

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
            with self._using(scope_id):
                if params.hybrid == "rrf":
                    hits = self._recall_hybrid(scope_id, q, kws, limit, params)
                else:
                    hits = self._recall_vector(scope_id, q, limit, params)
            if hits:
                return hits
            why = "below_floor"
        with self._using(scope_id):
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
        now = float(self.clock())
        near = rank.near_top(  # the fast product finds them, each row's own cosine ranks them
            rank.cosine_scores(q, mat), conf, recency, now, params, limit, cosine.slack(q.shape[0])
        )
        cos = cosine.row_cosines(q, cosine.take_rows(mat, near))
        rowid, conf, last_seen, recency = rowid[near], conf[near], last_seen[near], recency[near]
        return self._ranked(scope_id, cos, rowid, conf, last_seen, recency, limit, params, now)

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
        now: float | None = None,
        found: Mapping[int, Row] | None = None,
    ) -> list[Recalled]:
        """The vector path's answer over these candidates and their cosines (SPEC §4.1),
        at `now` (None: the store's clock), from the rows `found` already read
        (None: read the winners' rows)."""
        now = float(self.clock()) if now is None else now
        ranked = rank.rank_vector(cos, conf, recency, last_seen, rowid, now, params, max(limit, 0))
        if ranked.order.size == 0:
            return []
        k = ranked.order.size if limit <= 0 else min(limit, ranked.order.size)
        top = rowid[ranked.order[:k]]
        rows = sql.by_rowid(self._conn, top) if found is None else found
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
