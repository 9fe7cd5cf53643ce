"""The one write transaction of a scope, and how it keeps the indexes true.

Every writer goes through `Write`, one context manager:

    with Write(lock, indexes, scope) as w:  # lock, begin_write, catch up, w.seq
        ...SQL on w.conn stamping change_seq = w.seq...
        w.put(LiveRow(...)); w.drop(scope, kind, rowid)   # collected
    # COMMIT, then the collected patches are applied in order; on any error
    # ROLLBACK, nothing is applied, and the scopes written are reloaded

The trigram indexes are the exception: they take each put and drop before
they next answer (`w.similar`, fold-in inside the write), so a batch folds
into rows it wrote itself exactly as one write after another would. Until
then the write holds them back with the rows its catch-up read under the lock,
in order: a `remember` whose candidates were read ahead asks no index under
the lock, so it indexes the other writers' rows and its own after its commit,
out of the lock the others wait for. Nothing else reads them while the write
holds the lock, and a rollback drops them (they reload from the table). The
indexes themselves, their catch-up and the patches' meaning are
`memkit.store.index`.

Leaves out: any rule (what a write changes: `memkit.store.writes`,
`memkit.store.rollouts`) and the engine's statements (`begin_write`,
`end_write`: `memkit.store.sqlite_db`, `memkit.store.postgres`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from memkit.store.gram_index import GramIndex
from memkit.store.index import Drop, Indexes, LiveRow, Statement
from memkit.store.rows import Row


@dataclass(frozen=True, slots=True)
class Reload:
    """A patch: drop the scope's indexes (after a bulk write, reloading is cheaper)."""

    scope_id: str


class Write:
    """One write transaction of a scope: lock, `begin_write`, catch up, `seq`;
    collect index patches; commit; apply them. See the module docstring."""

    def __init__(
        self,
        lock: threading.RLock,
        indexes: Indexes,
        scope_id: str,
        rows: int = 0,
        read: Statement | None = None,
        list_kinds: frozenset[str] = frozenset(),
    ):
        self.rows = rows
        """Rows the write will insert at most (`begin_write` may reserve their rowids)."""
        self.list_kinds = list_kinds
        """Kinds whose postings the write starts listing ahead (`begin_write`)."""
        self.read = read
        """A statement read under the lock, in the lock's round trip: its rows are
        `read_rows` ([] without one)."""
        self.read_rows: list[tuple[Any, ...]] = []
        self._lock = lock
        self._indexes = indexes
        self.conn = indexes.conn
        self.scope_id = scope_id
        self.seq = 0
        self._top = 0
        self._patches: list[LiveRow | Drop | Reload] = []
        self._touched: set[str] = set()
        self._entered_at = 0
        self._caught_up: list[Row] = []
        self._grams_later: list[LiveRow | Drop] = []
        """Trigram index patches not applied yet, in order: the rows the lock's
        catch-up read, then this write's own. Applied after the commit, out of
        the scope's lock (other writers wait for what is done under it), or
        before the trigram indexes answer inside the write (`similar`)."""

    def __enter__(self) -> Write:
        self._lock.acquire()
        try:
            ix = self._indexes
            since = ix.since(self.scope_id) if self.conn.per_scope else None
            self._entered_at = ix.seen.get(ix.key(self.scope_id), 0)
            vectors = ix.holds_vectors(ix.key(self.scope_id))
            top = self.conn.begin_write(
                self.scope_id, since, self.rows, vectors, self.read, self.list_kinds
            )
            try:
                changes = self.conn.take_changes()
                self.read_rows = self.conn.take_read()
                self._top = ix.catch_up(
                    self.scope_id, top, changes, self._caught_up, self._grams_later
                )
                self.seq = self._top + 1
            except BaseException:
                self.conn.end_write(False)
                raise
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                try:
                    self.conn.end_write(True)
                except BaseException:
                    self._rollback()
                    raise
                ix = self._indexes
                # a write that changed no row stamped nothing: its number is not taken
                ix.seen[ix.key(self.scope_id)] = self.seq if self._patches else self._top
                self._apply_grams()
                for p in self._patches:  # the trigram indexes took them already
                    if isinstance(p, LiveRow):
                        ix.put(p, grams=False, own=True)
                    elif isinstance(p, Drop):
                        ix.drop(p.scope_id, p.kind, p.rowid, grams=False)
                    else:
                        ix.forget(p.scope_id)
            else:
                self._rollback()
        finally:
            try:
                self._indexes.trim(self.scope_id)  # after the write, still under the lock
            finally:
                self._lock.release()

    def _rollback(self) -> None:
        self.conn.end_write(False)
        # The trigram indexes took this write's rows as it went, and an index
        # loaded inside it read them from the table: reload those scopes.
        self._apply_grams()  # the other writers' rows are committed: they stay
        for scope_id in self._touched:
            self._indexes.forget(scope_id)

    def _apply_grams(self) -> None:
        """Apply the trigram index patches held back (`_grams_later`), in order."""
        for p in self._grams_later:
            self._indexes.patch_grams(p)
        self._grams_later.clear()

    def put(self, p: LiveRow) -> None:
        """After commit, the indexes hold this row as live with these facts. The
        (scope, kind) trigram index holds it before it next answers inside this
        write, so the rest of the write folds into it (a rollback drops that index)."""
        self._patches.append(p)
        self._touched.add(p.scope_id)
        self._grams_later.append(p)

    def drop(self, scope_id: str, kind: str, rowid: int) -> None:
        """After commit, the indexes no longer hold this row (the trigram index
        before it next answers inside this write)."""
        d = Drop(scope_id, kind, rowid)
        self._patches.append(d)
        self._touched.add(scope_id)
        self._grams_later.append(d)

    def reload(self, scope_id: str) -> None:
        """After commit, drop the scope's indexes (a bulk write: cheaper to reload)."""
        self._patches.append(Reload(scope_id))
        self._touched.add(scope_id)

    def changed_since(self, seen: int, kind: str, index: GramIndex) -> list[Row] | None:
        """The rows of this write's scope and `kind` that other writers changed after
        `seen` (its numbering's change number when `index`, the (scope, kind)
        trigram index, answered a question before the lock), as they are now;
        None when that is not known: the indexes moved on or were reloaded
        since, or this write changed rows already."""
        ix = self._indexes
        if (
            self._entered_at != seen
            or self._patches
            or ix.grams.get((self.scope_id, kind)) is not index
        ):
            return None
        return [r for r in self._caught_up if r.scope_id == self.scope_id and r.kind == kind]

    def similar(
        self,
        scope_id: str,
        kind: str,
        grams: frozenset[str],
        threshold: float,
        since: float | None,
    ) -> dict[int, float]:
        """Live rows of (scope, kind) with trigram similarity >= threshold, as this
        write sees them: the committed rows and the rows this write changed (for a
        decision whose fold window starts at `since`: `Indexes.grams_of`)."""
        self._touched.add(scope_id)  # an index loaded now reads this write's rows
        self._apply_grams()
        gi = self._indexes.grams_of(scope_id, kind, threshold, since)
        return gi.similar(grams, threshold)
