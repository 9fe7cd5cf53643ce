"""The store's in-memory indexes: loading, catching up with the table, their bound.

Three indexes serve the hot paths of one connection: a float32 matrix of the
live embedded rows per scope (vector recall on SQLite; Postgres searches
vectors in the database and never loads it), a `GramIndex` per (scope, kind)
(fold-in) and a `KeywordIndex` per scope (the keyword path). All load
lazily from the table and follow other connections' and processes' writes
through `change_seq`: every write stamps the rows it touches with a number
above all earlier ones, so catching up reads only the rows changed since.
Numbers count per file on SQLite and per scope on Postgres (`memkit.store.sqlite_db`:
the connection says which), so the indexes remember how far they caught up
per file or per scope.

Every writer goes through `memkit.store.write_txn.Write`, the one write
transaction: it catches the indexes up under the write lock and applies its
patches (`LiveRow`, `Drop`) after its commit, so the indexes follow the table.
The vector and keyword indexes queue what they are given and apply it at
their next query, so a burst of writes pays once (`BACKLOG` bounds the queue).

What they hold is bounded (`index_cache_mb`, `memkit.store.index_bound`): after an
operation, least recently used scopes lose all their indexes (`Indexes.trim`) as
`forget` drops them; on Postgres with their numbering, while on SQLite the file's
stays (the other scopes are caught up to it; a scope loaded afresh is past it).

A (scope, kind) trigram index holds only the live rows a fold-in can still
reach: those seen within the fold window (SPEC §3.3) and a margin before it
(`WINDOW_MARGIN`), read when it is built (`grams_of`). A row's `last_seen_at`
moves only by a write, which every index follows, so a row left out can be
a fold target again only if the clock goes back past the margin. Each
decision checks the index it asks against its own clock (`serves`): when the
clock went back that far, or on by a margin (the index would hold rows aged
out), the index is built again first. A write checks it before its lock too
(`warm_grams`, against the window `window_start` estimates), so the build
that aging needs is not done while other writers wait; the check under the
lock stays exact for a clock that jumped. A writer's memory thus grows with
the rows its scope saw in the last window and two margins, not with its size.

Leaves out: any rule (what folds, what ranks: `memkit.store`, `memkit.store.rank`);
approximate search (vectors are exact brute force, no ANN; the gram index is
exact); persistence (indexes are rebuilt from the table in each process, on a
scope's first use; only a big scope's matrix is mapped from a file beside a
SQLite database when one is there, `memkit.store.sidecar`); and a bound inside
one scope on the vector and keyword indexes (they hold all its live rows).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import Any

import numpy as np

from memkit.embed import normalize_rows
from memkit.params import DAY
from memkit.store.fold_local import LocalCap, OverCap, count_sql
from memkit.store.gram_index import GramIndex
from memkit.store.index_bound import Held
from memkit.store.keyword_index import KeywordIndex
from memkit.store.rows import COLS, Row
from memkit.store.sidecar import Sidecars
from memkit.store.vectors import ScopeVectors
from memkit.types import KINDS

SYNC_MAX = 5_000
"""Catching up on more changed rows than this drops the indexes instead (they reload)."""

WINDOW_MARGIN = 0.5
"""A trigram index reads the rows seen within (1 + this) fold windows (at least
a day more than the window), so a clock that goes back less than that margin
keeps it; it is built again once the clock moves the margin on (it then holds
at most the window and twice the margin of rows)."""

BACKLOG = 4_096
"""The vector and keyword indexes queue writes until their next query; once a
queue is longer than this and than its index's rows (a quarter of them for
vectors), the index is dropped (it reloads from the table on its next use,
which then costs no more)."""


@dataclass(frozen=True, slots=True)
class LiveRow:
    """A patch: this row is live now with this content, vector and recency."""

    scope_id: str
    kind: str
    rowid: int
    content: str
    tags: Sequence[str]
    vec: np.ndarray | None
    confidence: float
    last_seen: float | None
    created: float | None
    grams: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Drop:
    """A patch: this row is no longer live."""

    scope_id: str
    kind: str
    rowid: int


Statement = tuple[str, Sequence[Any]]
"""A statement with `?` placeholders, and its arguments."""

TopAndChanges = tuple[int, list[tuple[Any, ...]]]
"""What a connection's `top_and_changes` reads: the scope's highest committed
change number and the rows changed since."""


# --- the indexes of one connection ----------------------------------------------------


class Indexes:
    """Every in-memory index of one connection, and how far they have caught up."""

    def __init__(
        self,
        conn: Any,
        dim: int,
        sidecars: Sidecars | None = None,
        cap: int | None = None,
        window: float | None = None,
    ):
        self.conn = conn
        """A `memkit.store.sqlite_db` connection (SQLiteDb or PgDb)."""
        self.dim = dim
        self.sidecars = sidecars
        """Where big scopes' matrices are mapped from and left (a SQLite file; else None)."""
        self.vectors: dict[str, ScopeVectors] = {}
        self.grams: dict[tuple[str, str], GramIndex] = {}
        self.keywords: dict[str, KeywordIndex] = {}
        self.seen: dict[str | None, int] = {}
        """Per numbering (the file: None; or a scope): every change up to this
        change_seq is reflected in the indexes."""
        if not conn.per_scope:
            self.seen[None] = conn.top(None)
        self.held = Held(cap)
        """What each scope's indexes hold, and the bound (`trim`)."""
        self.window = window if window is not None and window < float("inf") else None
        """The fold window in seconds: trigram indexes hold the rows seen within it
        (None: every live row)."""
        self.margin = max(WINDOW_MARGIN * (self.window or 0.0), DAY)
        """Seconds of rows a trigram index reads before the window (`WINDOW_MARGIN`)."""
        self.asked: tuple[float, float] | None = None
        """The fold window's start a decision last asked for, and `monotonic()` then."""
        self.local: LocalCap | None = None
        """The cap on the trigram indexes while the connection keeps the database's
        postings (Postgres `fold_search="server"`: `memkit.store.fold_local`)."""

    def capped(self) -> LocalCap | None:
        """The cap on the trigram indexes now: `local` while the connection keeps
        postings (the other source of candidates), else None (uncapped)."""
        if self.local is None or getattr(self.conn, "postings", None) is None:
            return None
        return self.local

    def key(self, scope_id: str) -> str | None:
        """The numbering a scope's changes belong to."""
        return scope_id if self.conn.per_scope else None

    def _loaded(self, key: str | None) -> bool:
        if key is None:
            return bool(self.vectors or self.grams or self.keywords)
        return key in self.vectors or key in self.keywords or self._has_grams(key)

    def _has_grams(self, scope_id: str) -> bool:
        return any((scope_id, kind) in self.grams for kind in KINDS)

    # -- the bound on what is held ------------------------------------------------------

    def scope_bytes(self, scope_id: str) -> int:
        """Estimated bytes of one scope's indexes now (each index's `nbytes`)."""
        held: list[ScopeVectors | KeywordIndex | GramIndex | None]
        held = [self.vectors.get(scope_id), self.keywords.get(scope_id)]
        held += [self.grams.get((scope_id, kind)) for kind in KINDS]
        return sum(ix.nbytes for ix in held if ix is not None)

    def trim(self, keep: str | None = None) -> None:
        """After an operation on `keep` (under the store's lock): drop every trigram
        index grown past the fold-in cap (`capped`), then every index of the
        scopes `Held.victims` names, to stay within the cache's cap."""
        cap = self.capped()
        if cap is not None:
            for scope_id, kind in [k for k, gi in self.grams.items() if not cap.fits(len(gi))]:
                del self.grams[(scope_id, kind)]
                cap.over(scope_id, kind)
                self.held.changed(scope_id)
        for scope_id in self.held.victims(keep, self.scope_bytes):
            self._forget_scope(scope_id)
            if self.conn.per_scope:
                self.seen.pop(scope_id, None)  # the next catch-up notes the scope's top

    def put(self, p: LiveRow, grams: bool = True, own: bool = False) -> None:
        """Hold `p` as live (`grams=False`: its trigram index already does; `own`: a
        row this connection wrote, its vector not yet as a load holds it)."""
        self.held.changed(p.scope_id)
        sv = self.vectors.get(p.scope_id)
        if sv is not None:
            if p.vec is None:
                sv.queue.append((p.rowid,))
            else:
                vec = as_loaded(p.vec) if own else p.vec
                sv.queue.append((p.rowid, vec, p.confidence, p.last_seen, p.created))
            self._shed_vectors(p.scope_id, sv)
        if grams:
            self.patch_grams(p)
        ki = self.keywords.get(p.scope_id)
        if ki is not None:
            ki.put(p.rowid, p.content, p.tags, p.last_seen)
            self._shed_keywords(p.scope_id, ki)

    def drop(self, scope_id: str, kind: str, rowid: int, grams: bool = True) -> None:
        """Forget a row that is no longer live (`grams=False`: its trigram index did)."""
        self.held.changed(scope_id)
        sv = self.vectors.get(scope_id)
        if sv is not None:
            sv.queue.append((rowid,))
            self._shed_vectors(scope_id, sv)
        if grams:
            self.patch_grams(Drop(scope_id, kind, rowid))
        ki = self.keywords.get(scope_id)
        if ki is not None:
            ki.drop(rowid)
            self._shed_keywords(scope_id, ki)

    def patch_grams(self, p: LiveRow | Drop) -> None:
        """Apply `p` to its (scope, kind) trigram index, when that is loaded."""
        self.held.changed(p.scope_id)
        gi = self.grams.get((p.scope_id, p.kind))
        if gi is None:
            return
        if isinstance(p, LiveRow):
            gi.put(p.rowid, p.content, p.grams)
        else:
            gi.drop(p.rowid)

    def _shed_keywords(self, scope_id: str, ki: KeywordIndex) -> None:
        """Drop a keyword index whose queue of writes (applied at its next query)
        outgrew its rows: building it again from SQLite then costs no more."""
        queued, live = ki.backlog
        if queued > max(live, BACKLOG):
            del self.keywords[scope_id]

    def _shed_vectors(self, scope_id: str, sv: ScopeVectors) -> None:
        """The same for a scope's vectors, at a quarter of its rows: a queued
        write holds its ~1 KB vector, so the queue never adds more than a
        quarter to the matrix's memory."""
        if len(sv.queue) > max(sv.n // 4, BACKLOG):
            del self.vectors[scope_id]

    def forget(self, scope_id: str | None = None) -> None:
        """Drop the indexes (of one scope, or all); they reload on use."""
        if scope_id is None:
            self.vectors.clear()
            self.grams.clear()
            self.keywords.clear()
            self.held.clear()
            return
        self._forget_scope(scope_id)
        self.held.changed(scope_id)

    def _forget_scope(self, scope_id: str) -> None:
        self.vectors.pop(scope_id, None)
        self.keywords.pop(scope_id, None)
        for kind in KINDS:
            self.grams.pop((scope_id, kind), None)

    def catch_up(
        self,
        scope_id: str,
        top: int | None = None,
        changes: list[tuple[Any, ...]] | None = None,
        applied: list[Row] | None = None,
        grams_later: list[LiveRow | Drop] | None = None,
    ) -> int:
        """Apply rows other connections changed (in the scope's numbering) since we
        last looked; return the highest change_seq now reflected. `top` is the
        highest committed number when the caller knows it (a write, under its
        lock: then this is every change, and the writer's rows take the next);
        `changes`, the rows of `changes_since` when the caller read them already
        (in the same round trip as the lock, `Write`). The rows applied one by one
        are appended to `applied` (none when the indexes were dropped instead).
        `grams_later`: the trigram indexes' patches are appended there for the
        caller to apply (`Write`: after its commit, out of the scope's lock)."""
        c = self.conn
        key = self.key(scope_id)
        seen = self.seen.get(key, 0)
        if top is None and changes is None and self._loaded(key):
            top, changes = c.top_and_changes(key, seen, self.holds_vectors(key))
        elif top is None:
            top = c.top(key)
        if top == seen:
            return top
        if top < seen or not self._loaded(key):
            self.forget(key)
            self.seen[key] = top
            return top
        if changes is None:
            changes = c.execute(*changes_since(key, seen, self.holds_vectors(key))).fetchall()
        rows = changes
        if len(rows) > SYNC_MAX:
            self.forget(key)
            self.seen[key] = top
            return top
        for r, p in patches(c, rows, lambda scope: scope in self.vectors):
            if applied is not None:
                applied.append(r)
            if grams_later is not None:
                grams_later.append(p)
            if isinstance(p, Drop):
                self.drop(p.scope_id, p.kind, p.rowid, grams=grams_later is None)
            else:
                self.put(p, grams=grams_later is None)
        self.seen[key] = max([top, *(r[0] for r in rows)])
        return self.seen[key]

    def holds_vectors(self, key: str | None) -> bool:
        """Whether a numbering's catch-up needs the changed rows' vectors (a scope's
        matrix is loaded: never on Postgres, which searches vectors in the database)."""
        return bool(self.vectors) if key is None else key in self.vectors

    def since(self, scope_id: str) -> int | None:
        """How far the scope's numbering is caught up, when its indexes are loaded
        (None: a catch-up would only note the top)."""
        key = self.key(scope_id)
        return self.seen.get(key, 0) if self._loaded(key) else None

    def grams_of(
        self, scope_id: str, kind: str, threshold: float, since: float | None = None
    ) -> GramIndex:
        """The (scope, kind) trigram index serving `threshold`, built from the table
        on first use. `since`: the start of the fold window of the decision that
        asks (its clock minus the window); the index is built again unless it
        `serves` it (module docstring). Without `since` (read ahead of a decision,
        which checks it then), an index held is returned as it is, and a first
        one reads the rows from the wall clock's window on. Call after `catch_up`.
        `OverCap` when the window holds more rows than the fold-in cap (`capped`)."""
        gi = self.grams.get((scope_id, kind))
        if gi is None or not self.answers(gi, threshold, since):
            cutoff = None
            if self.window is not None:
                start = time.time() - self.window if since is None else since
                cutoff = start - self.margin
            sql = (
                "SELECT rowid, content FROM memories "
                "WHERE scope_id = ? AND kind = ? AND superseded_by IS NULL"
            )
            args: tuple[Any, ...] = (scope_id, kind)
            if cutoff is not None:
                sql, args = sql + " AND last_seen_at > ?", (*args, cutoff)
            cap = self.capped()
            if cap is not None:  # counted first, then read at most cap + 1 rows
                self.grams.pop((scope_id, kind), None)
                if not cap.local(scope_id, kind):
                    raise OverCap(f"{scope_id!r}/{kind!r}: over {cap.rows} rows, not rechecked yet")
                (n,) = self.conn.execute(count_sql(sql), (*args, cap.rows + 1)).fetchone()
                if not cap.fits(int(n)):
                    cap.over(scope_id, kind)
                    raise OverCap(f"{scope_id!r}/{kind!r}: over {cap.rows} rows")
                sql, args = sql + " LIMIT ?", (*args, cap.rows + 1)
            read = [0]
            gi = GramIndex.build(
                _counted(self.conn.stream(sql, args), read),
                floor=min(threshold, 1.0),  # above 1 nothing folds; the index still answers
            )
            if cap is not None and not cap.fits(read[0]):  # grew since the count
                cap.over(scope_id, kind)
                raise OverCap(f"{scope_id!r}/{kind!r}: over {cap.rows} rows")
            if cap is not None:
                cap.fitted(scope_id, kind)
            gi.cutoff = cutoff
            self.grams[(scope_id, kind)] = gi
        self.held.use(scope_id)
        return gi

    def answers(self, gi: GramIndex, threshold: float, since: float | None) -> bool:
        """Whether `grams_of` returns the trigram index `gi` as it is for `threshold`
        (it was built for one at most as high) and a decision whose fold window
        starts at `since` (`serves`; None: not checked)."""
        return gi.floor <= threshold and (since is None or self.serves(gi, since))

    def serves(self, gi: GramIndex, since: float) -> bool:
        """Whether a trigram index may answer a decision whose fold window starts at
        `since`: it holds every row seen after it (`GramIndex.covers`), and the
        clock has not moved a margin past its build (it would hold aged rows).
        `since` is noted as the window last asked for (`window_start`)."""
        self.note(since)
        if gi.cutoff is None:
            return self.window is None
        return gi.covers(since) and since - gi.cutoff <= 2 * self.margin

    def note(self, since: float) -> None:
        """A decision's fold window starts at `since` (`window_start`; a decision the
        postings answered notes it too, so a later build reads the right window)."""
        self.asked = (since, monotonic())

    def window_start(self) -> float | None:
        """The start of the fold window a decision would ask for now, estimated before
        the store's clock is read (under the write lock, once a decision): the one
        last asked for plus the monotonic seconds since (None before any). A
        clock that moves as time does is followed; a jump of the clock is seen by
        the decision's own check (`serves`), under the lock."""
        if self.asked is None:
            return None
        since, at = self.asked
        return since + (monotonic() - at)

    def warm_grams(self, scope_id: str, kinds: Iterable[str], threshold: float) -> None:
        """Build the (scope, kind) trigram indexes a write will need before it takes
        the write lock: a first build, or a build again once the clock has moved a
        margin on (`window_start`, `serves`), reads every live row of the scope
        seen within the window and margin (seconds at 100k rows), and other
        processes' writers would wait that long. Rows committed meanwhile are
        applied again by the write's catch-up (puts and drops are idempotent)."""
        if threshold <= 0:
            return  # the fold-in scan needs no index
        since = self.window_start()
        stale = [
            k
            for k in kinds
            if (gi := self.grams.get((scope_id, k))) is None
            or not self.answers(gi, threshold, since)
        ]
        if stale:
            self.catch_up(scope_id)
            for kind in stale:
                self.grams_of(scope_id, kind, threshold, since)

    def keywords_of(self, scope_id: str) -> KeywordIndex:
        """The scope's keyword index, caught up with other connections' writes."""
        self.catch_up(scope_id)
        ki = self.keywords.get(scope_id)
        if ki is None:
            ki = self.keywords[scope_id] = KeywordIndex.build(
                (rowid, content, json.loads(tags) if tags else (), seen)
                for rowid, content, tags, seen in self.conn.execute(
                    "SELECT rowid, content, tags, last_seen_at FROM memories "
                    "WHERE scope_id = ? AND superseded_by IS NULL",
                    (scope_id,),
                )
            )
        self.held.use(scope_id)
        return ki

    def vectors_of(self, scope_id: str) -> ScopeVectors:
        """The scope's live embedded rows, caught up with other connections' writes."""
        self.catch_up(scope_id)
        sv = self.vectors.get(scope_id)
        if sv is None:
            sv = self.vectors[scope_id] = self._load_vectors(scope_id)
        sv.flush()
        self.held.use(scope_id)
        return sv

    def _load_vectors(self, scope_id: str) -> ScopeVectors:
        """The scope's matrix from its sidecar plus the rows changed since it was
        made, else from the table (then left in a sidecar for the next process)."""
        side, seen = self.sidecars, self.seen.get(self.key(scope_id), 0)
        if side is None:
            return ScopeVectors.load(self.conn, scope_id, self.dim)
        got = side.open(self.conn, scope_id, seen)
        if got is not None:
            fields, made = got
            rows = self.conn.execute(*changes_since(None, made)).fetchall() if made < seen else []
            if len(rows) <= SYNC_MAX:
                sv = ScopeVectors.mapped_from(fields)
                for r, p in patches(self.conn, rows, lambda scope: scope == scope_id):
                    if r.scope_id != scope_id:
                        continue
                    if isinstance(p, LiveRow) and p.vec is not None:
                        sv.queue.append((p.rowid, p.vec, p.confidence, p.last_seen, p.created))
                    else:
                        sv.queue.append((p.rowid,))
                side.counts["used"] += 1
                side.counts["delta_rows"] += len(sv.queue)
                return sv
        return self._load_and_leave(scope_id, seen)

    def rewrite_sidecar(self, scope_id: str) -> ScopeVectors:
        """The scope's matrix loaded from the table and left in its sidecar now
        (`Sidecars.write`, strict), replacing any file there; it serves this
        connection from then on."""
        self.catch_up(scope_id)
        sv = self._load_and_leave(scope_id, self.seen.get(self.key(scope_id), 0), strict=True)
        self.vectors[scope_id] = sv
        self.held.use(scope_id)
        return sv

    def _load_and_leave(self, scope_id: str, seen: int, strict: bool = False) -> ScopeVectors:
        """The scope's matrix from the table, left in its sidecar as of `seen`."""
        assert self.sidecars is not None
        sv = ScopeVectors.load(self.conn, scope_id, self.dim)
        self.sidecars.write(self.conn, scope_id, sv.fields(), seen, strict)
        return sv


def _counted(rows: Iterable[Any], n: list[int]) -> Iterator[Any]:
    """`rows`, counting them in `n[0]`."""
    for r in rows:
        n[0] += 1
        yield r


def as_loaded(vec: np.ndarray) -> np.ndarray:
    """A written vector as a load from the table (or another connection's catch-up)
    holds it: normalised from the stored float32 again, which is not a no-op to the
    bit. So a writer's matrix, a reloaded one and a fresh process's are the same,
    and a scope dropped by the cache bound answers as before once reloaded."""
    out: np.ndarray = normalize_rows(np.array(vec, dtype=np.float32))[0]
    return out


def patches(
    conn: Any, rows: list[tuple[Any, ...]], vectors: Callable[[str], bool]
) -> Iterator[tuple[Row, LiveRow | Drop]]:
    """Each row read by `changes_since`, in order, with its patch. A vector is
    parsed only for a scope where `vectors(scope_id)` (one whose vectors are
    held: never on Postgres); other patches carry None."""
    for change in rows:
        r = Row._make(change[1:-1])
        if not r.live:
            yield r, Drop(r.scope_id, r.kind, r.rowid)
            continue
        emb = change[-1]
        vec = None
        if emb is not None and vectors(r.scope_id):
            vec = normalize_rows(conn.unvec(emb).copy())[0]
        yield r, LiveRow(
            r.scope_id, r.kind, r.rowid, r.content, r.tag_list, vec, r.confidence,
            r.last_seen_at, r.created_at,
        )  # fmt: skip


def changes_since(key: str | None, seen: int, vectors: bool = True) -> tuple[str, tuple[Any, ...]]:
    """The statement (and arguments) reading the rows changed after `seen` in a
    numbering (the file: None; or a scope), in order, one more than `SYNC_MAX`:
    (change_seq, the `Row`'s columns, embedding; NULL unless `vectors`)."""
    where, args = ("change_seq > ?", (seen,)) if key is None else (
        "scope_id = ? AND change_seq > ?", (key, seen)
    )  # fmt: skip
    return (
        f"SELECT change_seq, {COLS}, {'embedding' if vectors else 'NULL'} FROM memories "
        f"WHERE {where} "
        "ORDER BY change_seq LIMIT ?",
        (*args, SYNC_MAX + 1),
    )
