"""A server-mode writer's fold-in memory, capped (issue #36): which (scope, kind)s
it answers from its own trigram index, and which from the database's postings.

In `fold_search="server"` mode the postings of a (scope, kind) are kept once
a writer needed them (`memkit.store.fold_listed`: a writer over its cap lists
the key before it probes), so either source is exact and they decide
identically (the same candidates scored the same way: `memkit.store.writes`).
The in-memory index is the fast one (no probe statement; a decision costs
microseconds), but it grows with the rows of the (scope, kind)'s fold window.
`LocalCap` keeps it for a (scope, kind) while that window (and its margin, as
`memkit.store.index.Indexes.grams_of` reads it) holds at most `rows` live
rows, and sends the rest to the postings:

* before a build, the rows are counted in the database, stopping at rows + 1
  (`count_sql`): a 1M-row window is never read to learn it is too big; the
  build itself reads at most rows + 1 rows and gives up past the cap (a
  writer may add rows between the count and the build);
* an index that grows past the cap (this writer's writes, or others' it
  catches up on) is dropped after the operation (`Indexes.trim`);
* a (scope, kind) found too big is remembered as such for `recheck_s`
  seconds, then counted again, so a scope that shrinks (retractions, rows
  ageing out of the window) goes local again. At most `remembered` of them
  are remembered, least recently marked forgotten first: forgetting one only
  costs a count.

A (scope, kind) nearing the cap is listed ahead of it (`list_at`, a share of
the cap: `memkit.store.fold_listed`), so the write that crosses the cap does
not post its whole window under the scope's lock.

`rows = 0` is plain server mode (never local). Leaves out: client mode (the
index is the only source there, uncapped: `memkit.store.index`), and the
rule itself (`memkit.store.writes`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from time import monotonic
from typing import Any

from memkit.errors import ConfigError, MemkitError

LOCAL_ROWS = 200_000
"""The default cap (`fold_local_rows`). A (scope, kind) trigram index holds ~500
bytes a row of the bench's synthetic texts (50 MB at 100k rows,
`memkit.store.index_bound`), so 200k rows bound a writer's fold-in index at ~100
MB a (scope, kind) in use, and the bench's 100k-row scopes stay local."""

LIST_AT = 0.75
"""The default `fold_list_at`: a writer whose index of a (scope, kind) would hold
more than this share of its cap starts listing the key ahead of the cap
(`memkit.store.fold_listed`). The rest of the cap (50,000 writes at the
default) is the time the listing has: at `fold_listed.LIST_STEP` rows a write
it posts 400,000 rows before the cap, twice the cap's window. Above the
bench's 100k-row scopes (0.5 of the cap), whose timed writes stay unlisted."""

RECHECK_S = 60.0
"""Seconds a (scope, kind) found over the cap answers from the postings before its
rows are counted again (one bounded count: milliseconds to ~100 ms at the cap)."""

REMEMBERED = 4_096
"""(scope, kind)s remembered as over the cap at most (each ~200 bytes)."""


class OverCap(MemkitError):
    """A (scope, kind)'s fold window holds more live rows than the cap: its
    fold-in candidates come from the postings. A signal inside the store
    (`memkit.store.writes` catches it), never out of a store call."""


def check_rows(rows: Any) -> int:
    """`fold_local_rows` as an int >= 0; ConfigError naming anything else."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ConfigError(f"fold_local_rows={rows!r}: want an int >= 0 (0: never local)")
    return rows


def check_share(share: Any) -> float:
    """`fold_list_at` as a float in (0, 1]; ConfigError naming anything else."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ConfigError(
            f"fold_list_at={share!r}: want a share of fold_local_rows in (0, 1] "
            "(1: list a key only when a write crosses the cap)"
        )
    return float(share)


def ahead_rows(rows: int, share: float) -> int:
    """Live rows past which a key is listed ahead of a cap of `rows`: floor(share x
    rows), so share 1 is the cap itself (a key is listed once it holds more)."""
    return int(check_share(share) * check_rows(rows))


class LocalCap:
    """The cap and the (scope, kind)s found over it (module docstring)."""

    def __init__(
        self,
        rows: int,
        recheck_s: float | None = None,
        remembered: int = REMEMBERED,
        clock: Callable[[], float] = monotonic,
        list_at: float = LIST_AT,
    ):
        self.rows = check_rows(rows)
        self.list_at = check_share(list_at)
        """`fold_list_at`: the share of the cap past which a key is listed ahead."""
        self.recheck_s = float(RECHECK_S if recheck_s is None else recheck_s)
        self.remembered = int(remembered)
        self._clock = clock
        self._over: OrderedDict[tuple[str, str], float] = OrderedDict()
        """(scope, kind) -> when it was found over the cap, oldest first."""
        self.counts = {"over": 0, "rechecked": 0, "built": 0}
        """How often a (scope, kind) was found over the cap, counted again, and
        built under it."""

    def local(self, scope_id: str, kind: str) -> bool:
        """Whether to answer (scope, kind) from the in-memory index (it may still
        turn out over the cap: `OverCap` from the build)."""
        if self.rows <= 0:
            return False
        key = (scope_id, kind)
        at = self._over.get(key)
        if at is None:
            return True
        if self._clock() - at < self.recheck_s:
            return False
        del self._over[key]
        self.counts["rechecked"] += 1
        return True

    def over(self, scope_id: str, kind: str) -> None:
        """(scope, kind) holds more rows than the cap: the postings answer it."""
        key = (scope_id, kind)
        self._over.pop(key, None)
        self._over[key] = self._clock()
        self.counts["over"] += 1
        while len(self._over) > self.remembered:
            self._over.popitem(last=False)

    def fitted(self, scope_id: str, kind: str) -> None:
        """(scope, kind)'s index was built under the cap: this writer answers it."""
        self.counts["built"] += 1

    @property
    def held(self) -> int:
        """(scope, kind)s remembered as over the cap now."""
        return len(self._over)

    def fits(self, n: int) -> bool:
        return n <= self.rows

    @property
    def ahead(self) -> int:
        """Rows past which a held index's key is listed ahead (`ahead_rows`)."""
        return ahead_rows(self.rows, self.list_at)


def count_sql(sql: str) -> str:
    """A statement counting `sql`'s rows up to a bound (its last argument): the
    server stops at the bound, so a big window is not read to learn its size."""
    return f"SELECT count(*) FROM ({sql} LIMIT ?) capped"
