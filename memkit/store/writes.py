"""Writing memories (SPEC §3): what a write folds into, `remember` and
`remember_many`, curation (`update`, `retract`) and the benchmarks' bulk load.

Fold-in never compares against every row: an in-memory trigram index per
(scope, kind) (`memkit.store.gram_index`, exact by l-prefix filtering) scores
the few candidates exactly; the database then confirms they are live and in
window. On a Postgres database in `fold_search="server"` mode the database
finds the candidates instead (`memkit.store.fold_postings`: a postings table
kept for the (scope, kind)s a writer needed it for, `memkit.store.fold_listed`)
for a (scope, kind) whose fold window holds more rows than the writer's cap
(`fold_local_rows`, `memkit.store.fold_local`); under it the writer's own
index answers, as in client mode. The rule and the
scoring are the same either way. Embedding happens before the store lock is
taken, so a slow embedder never stalls other readers and writers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from memkit import checks as ck
from memkit.embed import normalize_rows
from memkit.errors import ConfigError, NotFound
from memkit.params import DAY
from memkit.store import fold_listed
from memkit.store import rows as sql
from memkit.store.base import StoreBase, new_row_id
from memkit.store.fold_local import OverCap
from memkit.store.fold_postings import BATCH_PROBES, BatchProbe, scope_key
from memkit.store.gram_index import GramIndex
from memkit.store.index import Indexes, LiveRow, Statement
from memkit.store.rows import Row
from memkit.store.write_txn import Write
from memkit.text import jaccard, recent_trigrams, trigrams
from memkit.types import Memory, RememberResult

ITEM_FIELDS: tuple[str, ...] = ("content", "kind", "confidence", "tags", "source_run_id")
"""The fields of one `remember_many` item (those of `remember`)."""


class _Item(NamedTuple):
    """One checked, redacted write."""

    content: str
    kind: str
    confidence: float
    tags: list[str]
    source_run_id: str | None
    grams: frozenset[str]


class _Foresight(NamedTuple):
    """Fold-in candidates read before the write lock (`Writes._foresee`)."""

    seen: int
    """The scope's numbering's change number the candidates reflect."""
    gram_index: GramIndex
    """The (scope, kind) trigram index that answered (a reload makes them stale)."""
    rows: dict[int, tuple[Row, float]] | None
    """The candidates with their facts, when read before the lock; else None and
    their facts are read with the lock (`sims`)."""
    sims: dict[int, float]
    """{rowid: similarity} of the candidates the index gave (`rows` None)."""


def best_fold(
    candidates: Iterable[tuple[Row, float]], now: float, window: float, threshold: float
) -> Row | None:
    """The row to fold into among (row, similarity) candidates (SPEC §3.3): seen
    within `window` seconds of `now`, similarity at or above `threshold`, the
    highest (similarity, last seen, rowid); None when none qualifies."""
    best: Row | None = None
    best_key = None
    for r, sim in candidates:
        if r.last_seen_at is None or not (now - r.last_seen_at) < window or sim < threshold:
            continue
        key = (sim, r.last_seen_at, r.rowid)
        if best_key is None or key > best_key:
            best, best_key = r, key
    return best


def _written(
    it: _Item, target: Row | None, mid: str, scope_id: str, rowid: int, conf: float, now: float
) -> Row:
    """The row a write's item left: inserted (`target` None) or folded into `target`,
    as `memkit.store.rows.insert` / `fold_into` write it."""
    tags = json.dumps(list(it.tags), ensure_ascii=False)
    if target is None:
        return Row(
            rowid, mid, scope_id, it.kind, it.content, tags, conf, it.source_run_id, now, 1, now,
            None,
        )  # fmt: skip
    return target._replace(
        content=it.content,
        tags=tags,
        confidence=conf,
        source_run_id=it.source_run_id if it.source_run_id is not None else target.source_run_id,
        seen_count=target.seen_count + 1,
        last_seen_at=now,
    )


def _still_live(
    sims: Mapping[int, float], rows: Iterable[Row], scope_id: str, kind: str
) -> dict[int, tuple[Row, float]]:
    """{rowid: (row, similarity)} of the candidates `sims` scored whose `rows` (their
    facts) are still live in (scope, kind)."""
    return {
        r.rowid: (r, sims[r.rowid])
        for r in rows
        if r.scope_id == scope_id and r.kind == kind and r.live
    }


class _Committed:
    """What `_fold_target` reads outside a write: the connection and the
    committed rows' trigram indexes (caught up by the caller)."""

    def __init__(self, conn: Any, indexes: Indexes):
        self.conn, self._ix = conn, indexes

    def similar(
        self,
        scope_id: str,
        kind: str,
        grams: frozenset[str],
        threshold: float,
        since: float | None,
    ) -> dict[int, float]:
        return self._ix.grams_of(scope_id, kind, threshold, since).similar(grams, threshold)


class Writes(StoreBase):
    """Writing memories (SPEC §3): fold-in, `remember`, curation, bulk load."""

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
        with self._using(scope_id):
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
        if t <= 0:
            cutoff = now - window - 1.0  # loose SQL bound; the exact test is below
            rows = sql.rows(
                w.conn,
                "WHERE scope_id = ? AND kind = ? AND superseded_by IS NULL AND last_seen_at > ?",
                (scope_id, kind, cutoff),
            )
            return best_fold(
                [(r, jaccard(grams, trigrams(r.content))) for r in rows], now, window, t
            )
        found = self._candidates(w, scope_id, kind, grams, now - window)
        return best_fold(found.values(), now, window, t)

    def _candidates(
        self,
        w: Write | _Committed,
        scope_id: str,
        kind: str,
        grams: frozenset[str],
        since: float | None,
    ) -> dict[int, tuple[Row, float]]:
        """{rowid: (row, similarity)} of the live rows of (scope, kind) at or above
        the threshold (> 0), as `w` sees them (one round trip: the rows' facts),
        for a decision whose fold window starts at `since` (None: read ahead of
        one, which checks the index then: `_decide`). With the database's postings
        (`fold_search="server"`), past the writer's cap (`_local`), the server
        finds them and they are scored here."""
        postings = getattr(self._conn, "postings", None)
        if postings is None or self._local(scope_id, kind):
            try:
                sims = w.similar(scope_id, kind, grams, self.fold.threshold, since)
            except OverCap:
                assert postings is not None  # only a capped index (server mode) is over
            else:
                return _still_live(sims, sql.by_rowid(w.conn, sims).values(), scope_id, kind)
        if since is not None:
            self._ix.note(since)
        if not fold_listed.listed(w.conn, postings, scope_id, kind):
            # a write lists what it will probe first (`_list`); a read ahead leaves
            # the rest to the lock, a decision (a cap crossed inside a write, or
            # `fold_target`'s read) scores the window's rows
            if since is None:
                raise OverCap(f"{scope_id!r}/{kind!r}: postings not kept yet")
            return self._scanned(w, scope_id, kind, grams, since)
        probe = postings.probe(scope_id, kind, grams, self.fold.threshold)
        if probe is None:
            return {}
        found: dict[int, tuple[Row, float]] = postings.scored(
            w.conn.execute(*probe).fetchall(), grams, self.fold.threshold
        )
        return found

    def _scanned(
        self, w: Write | _Committed, scope_id: str, kind: str, grams: frozenset[str], since: float
    ) -> dict[int, tuple[Row, float]]:
        """`_candidates` from the live rows seen after `since` (less a second: the
        exact window test is `best_fold`'s), each scored."""
        rows = sql.rows(
            w.conn,
            "WHERE scope_id = ? AND kind = ? AND superseded_by IS NULL AND last_seen_at > ?",
            (scope_id, kind, since - 1.0),
        )
        t = self.fold.threshold
        scored = ((r, jaccard(grams, trigrams(r.content))) for r in rows)
        return {r.rowid: (r, sim) for r, sim in scored if sim >= t}

    def _list(self, scope_id: str, kinds: Iterable[str]) -> None:
        """Server mode, before a write that probes the postings of (scope, kind)s:
        list those not fully listed yet, posting their rows, in a write of its own
        under the scope's lock (`memkit.store.fold_listed`); then, after many
        postings or estimates grown stale, the table vacuumed and analysed, by
        one client at a time (`fold_listed.refresh`)."""
        postings, n = self._conn.postings, 0
        todo = sorted(k for k in kinds if not fold_listed.listed(self._conn, postings, scope_id, k))
        if todo:
            with self._write(scope_id) as w:
                n = sum(fold_listed.post_scope(w.conn, postings, scope_id, k) for k in todo)
            fold_listed.cache(postings, [(scope_id, k) for k in todo])
        keys = [scope_key(scope_id, k) for k in kinds]  # estimates older than a listing ahead
        if n >= fold_listed.REFRESH_AT or fold_listed.stale(self._conn.conn, postings, keys):
            self._conn.postings = fold_listed.refresh(self._conn.conn, postings)

    def _local(self, scope_id: str, kind: str) -> bool:
        """In server mode: whether this writer's own trigram index may answer
        (scope, kind): held, or not known to be over the cap (`fold_local_rows`)."""
        postings = getattr(self._conn, "postings", None)
        if postings is not None:  # below the floor is refused on either path
            postings.check(self.fold.threshold)
        cap = self._ix.capped()
        return cap is not None and ((scope_id, kind) in self._ix.grams or cap.local(scope_id, kind))

    def _foresee(self, scope_id: str, item: _Item) -> _Foresight | None:
        """`remember`'s fold-in candidates asked before the scope's write lock: the
        trigram index answers as it stands, with no round trip; the candidates'
        facts are read in the lock's round trip (`Write.read`), and `_decide`
        brings them up to date with the rows changed since this client last
        looked, which the lock reads. None when there is nothing to ask ahead
        (threshold <= 0 scans in SQL; no grams). When the index is not loaded
        (or the candidates fill more than one read), the index is caught up and
        the candidates' facts read now (one round trip)."""
        t = self.fold.threshold
        if t <= 0 or not item.grams:
            return None
        ix = self._ix
        gi = ix.grams.get((scope_id, item.kind))
        if gi is not None and gi.floor <= t and ix.since(scope_id) is not None:
            sims = gi.similar(item.grams, t)
            if len(sims) <= sql.CHUNK:
                return _Foresight(ix.seen.get(ix.key(scope_id), 0), gi, None, sims)
        self._ix.catch_up(scope_id)
        committed = _Committed(self._conn, ix)
        try:  # (server mode: an index over the cap is none; the lock's decision probes)
            rows = self._candidates(committed, scope_id, item.kind, item.grams, None)
            gi = ix.grams_of(scope_id, item.kind, t)
        except OverCap:
            return None
        return _Foresight(ix.seen.get(ix.key(scope_id), 0), gi, rows, {})

    def _refreshed(
        self,
        rows: dict[int, tuple[Row, float]],
        changed: Iterable[Row],
        scope_id: str,
        item: _Item,
    ) -> dict[int, tuple[Row, float]]:
        """Candidates brought up to date with rows changed since they were read: a
        changed row of (scope, kind) is scored again on its content now (added,
        replaced or, when no longer live or similar enough, removed)."""
        t = self.fold.threshold
        out = dict(rows)
        for r in changed:
            if r.scope_id != scope_id or r.kind != item.kind:
                continue
            sim = jaccard(item.grams, recent_trigrams(r.content)) if r.live else -1.0
            if sim >= t:
                out[r.rowid] = (r, sim)
            else:
                out.pop(r.rowid, None)
        return out

    def _decide(
        self, w: Write, ahead: _Foresight | None, scope_id: str, item: _Item, now: float
    ) -> Row | None:
        """`_fold_target` under the write lock, from the candidates read ahead when
        they can be brought up to date (`_refreshed`); every other candidate's
        facts are as read. The same answer as `_fold_target` at this moment,
        which decides otherwise."""
        changed = (
            None if ahead is None else w.changed_since(ahead.seen, item.kind, ahead.gram_index)
        )
        window = self.fold.window_days * DAY
        if ahead is None or changed is None or not self._ix.serves(ahead.gram_index, now - window):
            return self._fold_target(w, scope_id, item.kind, item.grams, now)
        rows = ahead.rows
        if rows is None:  # the facts came with the lock
            rows = _still_live(ahead.sims, map(Row._make, w.read_rows), scope_id, item.kind)
        rows = self._refreshed(rows, changed, scope_id, item)
        return best_fold(rows.values(), now, window, self.fold.threshold)

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
        t = self.fold.threshold
        postings = getattr(self._conn, "postings", None)
        ahead, probe = None, None
        with self._lock:  # not under the write lock: other processes' writers go on
            local = self._warm(scope_id, {it.kind for it in items}, t, postings is not None)
            # one item: its candidates are read now (a batch folds into its own rows)
            ahead = self._foresee(scope_id, items[0]) if local and len(items) == 1 else None
        if not local and t > 0:
            with self._lock:
                self._list(scope_id, {it.kind for it in items})
            postings = self._conn.postings  # (refreshed)
        if not local and t > 0 and len(items) <= BATCH_PROBES:
            # the server's postings, probed with the lock, in its round trip
            assert postings is not None
            probe = BatchProbe(postings, scope_id, [(it.kind, it.grams) for it in items], t)
        # the batch holds the statements and the COMMIT (`end_write`): one round trip
        read: Statement | None = None
        if ahead and ahead.sims:
            read = sql.by_rowid_statement(list(ahead.sims))
        read = read if probe is None else probe.statement
        start: frozenset[str] = frozenset()  # kinds whose keys it lists ahead of the cap
        if local:
            with self._lock:
                ix, kinds = self._ix, [it.kind for it in items]
                start = fold_listed.ahead(postings, ix.capped(), ix.grams, scope_id, kinds)
        with self._lock, self._conn.batch(), self._write(scope_id, len(items), read, start) as w:
            reserved = iter(w.conn.reserve_rowids(len(items)))
            if probe is not None:
                probe.take(w.read_rows)
            for i, (it, vec) in enumerate(zip(items, vecs, strict=True)):
                now = float(self.clock())
                if probe is not None:
                    found = probe.candidates(i, it.kind, it.grams)
                    target = best_fold(found.values(), now, self.fold.window_days * DAY, t)
                    self._ix.note(now - self.fold.window_days * DAY)
                else:
                    target = self._decide(w, ahead, scope_id, it, now)
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
                    sql.repost(w.conn, scope_id, it.kind, rowid, target.content, it.content)
                if probe is not None:
                    probe.wrote(_written(it, target, mid, scope_id, rowid, conf, now))
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

    def _warm(self, scope_id: str, kinds: set[str], t: float, server: bool) -> bool:
        """Build the trigram indexes a write will ask (`Indexes.warm_grams`); whether
        they answer it. In server mode, False when a kind's is over the cap
        (`_local`, `OverCap`): the write's candidates come from the postings."""
        if server and (t <= 0 or not all(self._local(scope_id, k) for k in kinds)):
            return False
        try:
            self._ix.warm_grams(scope_id, kinds, t)
        except OverCap:
            return False
        return True

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
            (new_row_id(), scope_id, kind, content, float(confidence),
             now if timestamps is None else float(timestamps[i]),
             None if embeddings is None else embeddings[i], len(trigrams(content)))
            for i, content in enumerate(contents)
        )  # fmt: skip
        with self._write(scope_id) as w:
            self._bulk_rows(w, rows)
            w.reload(scope_id)  # cheaper than patching every row
