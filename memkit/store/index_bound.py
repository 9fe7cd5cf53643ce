"""The bound on what one connection's in-memory indexes hold (issue #36).

A long-lived process serving many scopes (an API server writing for many
agents) would otherwise hold every scope it ever touched. Every index says
what it holds (`nbytes`: its arrays as stored plus a measured constant per
Python object); `Held` keeps each scope's total, least recently used first,
and after an operation names the scopes whose indexes to drop, all kinds at
once, until the total is within the cap (`index_cache_mb` at open):

* the scope the operation used (`keep`) is never named: one bigger than the
  whole cap stays while in use, so a store with one big scope never drops
  it, whatever the cap;
* a scope bigger than the cap by itself is named first (it can never fit
  beside another), then the least recently used.

Dropping and reloading is `memkit.store.index.Indexes`' (a dropped scope
reloads from the table on its next use, as after `forget`). Leaves out: any
bound inside one scope (a scope's index holds all its live rows), and the
memory a process holds besides the indexes (SQLite's page cache, Python's
caches, allocator slack; docs/postgres-scale.md measures them).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from memkit.errors import ConfigError

CACHE_MB = 4096
"""The default bound (`index_cache_mb`), in MB (2**20 bytes). A 100k-row scope of
the bench's synthetic texts holds 323 MB of indexes on SQLite (256-d vectors 135,
keywords 138, trigrams 50) and 188 MB on Postgres (no vectors), so the largest
scope the project measures, 1M rows, holds ~3.2 GB (docs/postgres-scale.md, "What
a client caches, and its bound"): a process serving one such scope and small ones
never reloads it, and one serving many scopes stays under 4 GB of indexes."""

MB = 1 << 20


def cap_bytes(mb: Any, name: str = "index_cache_mb") -> int | None:
    """The bound in bytes for `mb` megabytes (an int or float >= 0; 0 keeps only the
    scope in use), None for no bound; ConfigError naming anything else."""
    if mb is None:
        return None
    if isinstance(mb, bool) or not isinstance(mb, int | float):
        raise ConfigError(f"{name}={mb!r:.80}: must be a number of MB >= 0 or None")
    if not (math.isfinite(mb) and mb >= 0):
        raise ConfigError(f"{name}={mb!r}: must be a finite number of MB >= 0 (None: no bound)")
    return int(mb * MB)


class Held:
    """Estimated bytes of each scope's indexes, least recently used first."""

    def __init__(self, cap: int | None):
        self.cap = cap
        """Bytes the indexes may hold between operations; None: no bound."""
        self.scopes: OrderedDict[str, int] = OrderedDict()
        """Each used scope's bytes as last measured, least recently used first."""
        self.total = 0
        self.evicted = 0
        """Scopes named by `victims` since open."""
        self._changed: set[str] = set()
        self._big: set[str] = set()
        self._limit = math.inf if cap is None else cap

    def use(self, scope_id: str) -> None:
        """An operation uses the scope now (its indexes are loaded or loading)."""
        self._changed.add(scope_id)
        if scope_id in self.scopes:
            self.scopes.move_to_end(scope_id)
        else:
            self.scopes[scope_id] = 0

    def changed(self, scope_id: str) -> None:
        """The scope's indexes were patched or dropped: measure it again."""
        self._changed.add(scope_id)

    def clear(self) -> None:
        """Every index was dropped."""
        self.scopes.clear()
        self._changed.clear()
        self._big.clear()
        self.total = 0

    def measure(self, size_of: Callable[[str], int]) -> int:
        """The total now: scopes changed since the last look are measured again with
        `size_of` (bytes of its loaded indexes); one holding nothing leaves."""
        for scope_id in self._changed:
            old = self.scopes.get(scope_id)
            if old is None:
                continue  # patched, never used: nothing of it is loaded
            n = size_of(scope_id)
            self.total += n - old
            if n:
                self.scopes[scope_id] = n
            else:
                del self.scopes[scope_id]
            (self._big.add if n > self._limit else self._big.discard)(scope_id)
        self._changed.clear()
        return self.total

    def victims(self, keep: str | None, size_of: Callable[[str], int]) -> list[str]:
        """The scopes whose indexes to drop now, in order (see the module docstring),
        taken out of the accounting: the caller drops their indexes."""
        if self.measure(size_of) <= self._limit:
            return []
        out: list[str] = []
        for scope_id in [*self._big, *self.scopes]:
            if self.total <= self._limit:
                break
            if scope_id != keep and scope_id in self.scopes:
                self.total -= self.scopes.pop(scope_id)
                self._big.discard(scope_id)
                out.append(scope_id)
        self.evicted += len(out)
        return out
