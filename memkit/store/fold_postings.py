"""Fold-in candidates searched by Postgres: the `fold_search="server"` mode (issue #36).

In the default mode a writer finds fold-in candidates in an in-memory trigram
index of its (scope, kind) (`memkit.store.gram_index`), which grows with the
rows seen in the fold window: 634 MB at 1M rows written at once. In server
mode the database holds the index instead, as a postings table, and a writer
holds nothing per scope: the server returns the few rows that can reach the
threshold, and the client scores them exactly and decides with the same rule.

Why exact: l-prefix filtering holds for ANY fixed total order of the grams
(`memkit.store.gram_index`'s proof). Here the order needs no per-scope state:
the common trigrams of a static list (`memkit/data/common_trigrams.txt`, its
provenance in the file) go last, the most common last; every other gram is
ordered by `mix64` of its exact code (`gram_codes`: no two grams share one),
ties by the code. A live row posts the first `prefix_len(m)` of its m grams
(for the database's `floor`, the lowest threshold served) as
(sk, gram, m, rowid); a probe reads its own first `probe_codes` grams'
postings at a possible length, keeps the rows with enough hits, and joins the
live rows of the scope and kind. `sk` is a 64-bit hash of (scope, kind): a
collision only adds candidates, which the join drops.

A probe need not read all its lists (`split_probe`): of its codes, needing h
hits, it may skip any s <= h - 1 and keep the rows with >= h - s hits in the
lists it reads, then count each one's hits in the skipped lists by key; the
rows are the same whichever codes it skips. It skips the lists `pg_stats`
estimates longest (the scope's common words' grams, which the static order
cannot know), so the estimates decide the cost, never the answer.

The mode is a property of the database (meta rows `fold_search`,
`fold_floor`, `fold_order`), read at open, so every writer maintains the
postings of the (scope, kind)s listed as kept (`memkit.store.fold_listed`:
those a writer needed): a row's postings are written with it (`post`), a
row whose text changes re-posts (`unpost` of the old text, then `post`), and
a dead row's postings stay and are filtered by the live join. Switching
(`set_mode`) empties them in one transaction while no other client has the
store open: every open holds a shared advisory lock (`MODE_LOCK`) for its
session.

Leaves out: the rule (what folds: `memkit.store.writes`), and SQLite (one
process's store: its in-memory index is the fast path).
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import numpy as np

from memkit.errors import ConfigError
from memkit.store.gram_index import HITS, gram_codes
from memkit.store.rows import COLS, Row
from memkit.text import jaccard, trigrams

MODES = ("client", "server")
"""`fold_search` values: the writer's memory, or the database's postings past the
writer's cap (`memkit.store.fold_local`)."""

NEW_STORE_MODE = "server"
"""The mode a new Postgres store takes unless its creator asks another: a writer's
memory bounded by its cap whatever a scope's size, and under the cap it writes
as client mode does (no postings kept: `memkit.store.fold_listed`)."""

MODE_LOCK = 0x6D656D666F6C64
"""Advisory key: every open holds it shared for its session; `set_mode` exclusively."""

BACKFILL_ROWS = 20_000
"""Rows posted at once by `backfill` (their postings' arrays stay a few MB)."""


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed bijection of uint64 that scatters the codes,
    so the grams off the common list come in no order related to their letters."""
    z = np.asarray(x).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


_COMMON_BASE = np.uint64(1 << 63)


class GramOrder:
    """A fixed total order of every trigram code: by key, then code. The key is
    mix64(code) >> 1 (< 2**63) off the list, 2**63 + place on it, the most
    common gram (`common[0]`) placed last."""

    def __init__(self, common: Sequence[int] | np.ndarray = ()):
        self.common = np.asarray(common, dtype=np.int64)
        if np.unique(self.common).size != self.common.size:
            raise ConfigError("the common trigram list repeats a code")
        by_code = np.argsort(self.common)
        self._sorted = self.common[by_code]
        self._place = (self.common.size - 1 - by_code).astype(np.uint64)

    def keys(self, codes: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes, dtype=np.int64)
        k: np.ndarray = mix64(codes) >> np.uint64(1)
        if self._sorted.size:
            pos = np.minimum(np.searchsorted(self._sorted, codes), self._sorted.size - 1)
            hit = self._sorted[pos] == codes
            k[hit] = _COMMON_BASE + self._place[pos[hit]]
        return k

    def sort(self, codes: np.ndarray) -> np.ndarray:
        """`codes` in the order."""
        codes = np.asarray(codes, dtype=np.int64)
        out: np.ndarray = codes[np.lexsort((codes, self.keys(codes)))]
        return out


@functools.cache
def common_list() -> tuple[np.ndarray, str]:
    """The shipped common trigram codes, most common first, and the order's id
    (`common2048-` and the file's sha256 prefix), recorded with the postings."""
    raw = resources.files("memkit").joinpath("data/common_trigrams.txt").read_bytes()
    codes = [int(x) for x in raw.decode("ascii").splitlines() if x and not x.startswith("#")]
    order_id = f"common{len(codes)}-{hashlib.sha256(raw).hexdigest()[:16]}"
    return np.asarray(codes, dtype=np.int64), order_id


@functools.cache
def default_order() -> GramOrder:
    return GramOrder(common_list()[0])


def prefix_len(m: Any, floor: float, hits: int = HITS) -> Any:
    """How many of its first grams a row of m grams posts (as `GramIndex`)."""
    m = np.asarray(m, dtype=np.int64)
    return np.minimum(m, m - np.ceil(floor * m - 1e-9).astype(np.int64) + hits)


def row_postings(
    texts: Sequence[str], order: GramOrder, floor: float, hits: int = HITS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(text index, code) of every posting of `texts`, grouped by text and in the
    order within each, and each text's number of distinct grams."""
    row, codes = gram_codes(list(texts))
    if codes.size == 0:
        return row, codes, np.zeros(len(texts), dtype=np.int64)
    o = np.lexsort((codes, order.keys(codes), row))
    row, codes = row[o], codes[o]
    keep = np.ones(row.size, dtype=bool)
    keep[1:] = (row[1:] != row[:-1]) | (codes[1:] != codes[:-1])
    row, codes = row[keep], codes[keep]
    m = np.bincount(row, minlength=len(texts)).astype(np.int64)
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    posted = np.arange(row.size) - starts[row] < prefix_len(m, floor, hits)[row]
    return row[posted], codes[posted], m


def gram_code(g: str) -> int:
    """The `gram_codes` code of one trigram."""
    return (ord(g[0]) << 42) | (ord(g[1]) << 21) | ord(g[2])


def probe_codes(
    grams: frozenset[str], order: GramOrder, t: float, hits: int = HITS
) -> tuple[list[int], int]:
    """The codes whose postings a probe at threshold `t` (> 0) reads, in the
    order, and the hits a row needs among them; ([], 0) when nothing can match."""
    n = len(grams)
    need = max(1, math.ceil(t * n - 1e-9))
    if n == 0 or need > n:
        return [], 0
    codes = np.fromiter(map(gram_code, grams), np.int64, n)
    take = min(n, n - need + hits)
    out: list[int] = order.sort(codes)[:take].tolist()
    return out, min(hits, need)


SKIP_KEEP = 5
"""Hits a probe still asks of the lists it reads when it skips long ones
(`split_probe`): it skips at most h - SKIP_KEEP of its codes. Skipping more
reads less but lets through more candidates, each checked against the skipped
lists (offline, 100k bench texts: h - 5 halves the mean postings read at the
same p95; h - 1 reads 8x fewer but checks 4,000 candidates a probe)."""

LONG_LIST = 1_000.0
"""Estimated postings from which a code's list is worth skipping (`split_probe`)."""

STATS_TARGET = 1_000
"""`fold_postings.gram`'s statistics target: up to this many most common grams
(and their share of the postings) in `pg_stats`, the probe's length estimates."""


def split_probe(
    codes: Sequence[int],
    h: int,
    lengths: Mapping[int, float],
    keep: int | None = None,
    long: float | None = None,
) -> tuple[list[int], list[int]]:
    """(read, skipped): a probe's codes split so the longest lists are not read.

    A probe keeps the rows with >= h hits among its codes. A row with s' <= s
    hits among the s skipped codes has >= h - s among the read ones, so the
    rows with >= h - s hits in the read lists hold every answer, and counting
    their skipped hits (a lookup by the row's key) gives each one's exact total:
    the answer is the same for ANY choice of skipped codes while s <= h - 1
    (at s = h a row could have no hit among the read lists: refused). Which
    codes go is a matter of cost only: the `lengths` estimates (absent: short)
    of at least `long` postings (default `LONG_LIST`), longest first, at most
    h - `keep` (default `SKIP_KEEP`) of them, the later in the order first."""
    keep = SKIP_KEEP if keep is None else keep
    long = LONG_LIST if long is None else long
    if keep < 1:
        raise ConfigError(f"skip keep {keep!r}: a probe must ask >= 1 hit of the lists it reads")
    room = h - keep
    if room <= 0:
        return list(codes), []
    est = [(lengths.get(c, 0.0), i) for i, c in enumerate(codes)]
    longest = sorted((e for e in est if e[0] >= long), reverse=True)[:room]
    gone = {i for _, i in longest}
    return [c for i, c in enumerate(codes) if i not in gone], [codes[i] for i in sorted(gone)]


def length_bounds(n: int, t: float) -> tuple[int, int]:
    """The gram counts a row can have and reach similarity t with n grams (loose by one)."""
    return math.floor(t * n - 1e-9), math.ceil(n / t + 1e-9)


def scope_key(scope_id: str, kind: str) -> int:
    """The postings' 64-bit key of a (scope, kind): a hash (a collision only adds
    candidates, which the probe's join on scope and kind drops)."""
    h = hashlib.blake2b(f"{scope_id}\x00{kind}".encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(h.digest(), "little", signed=True)


def bigint_array(codes: Iterable[int]) -> str:
    """A bigint[] literal (a text parameter cast in SQL: one type, whatever the values)."""
    return "{" + ",".join(map(str, codes)) + "}"


_LISTED = (
    "EXISTS (SELECT 1 FROM fold_posted WHERE sk = ? AND NOT (?::bigint > lo AND ?::bigint <= hi))"
)
"""The condition a row's posting statement checks (its key, its rowid twice): its
(scope, kind) is listed and the row is not among those a listing ahead has yet
to post (one look-up, run once a statement: `memkit.store.fold_listed`)."""

_M_COLS = ", ".join(f"m.{c.strip()}" for c in COLS.split(","))


@dataclass(frozen=True)
class Postings:
    """A database's server-mode postings: the floor they serve and their order."""

    floor: float
    order_id: str
    lengths: Mapping[int, float] = field(default_factory=dict, compare=False, repr=False)
    """Estimated postings of the most common grams (`read_lengths`), for `split_probe`."""
    keep: int | None = None
    """`split_probe`'s hits kept (None: `SKIP_KEEP`)."""
    listed: set[int] = field(default_factory=set, compare=False, repr=False)
    """Keys this client found listed, every row posted (`memkit.store.fold_listed`):
    never unlisted while the mode holds, so never asked again."""
    kept: set[int] = field(default_factory=set, compare=False, repr=False)
    """Keys this client saw in `fold_posted`, listed or being listed ahead: a
    writer never starts listing these again."""
    seen_bytes: float = 0.0
    """The table's size when `lengths` were read (`table_bytes`)."""
    probed: set[int] = field(default_factory=set, compare=False, repr=False)
    """Keys whose postings this client asked for: `fold_listed.stale` checked once."""

    @property
    def order(self) -> GramOrder:
        return default_order()

    def check(self, threshold: float) -> None:
        """ConfigError unless the postings serve a fold threshold (> 0 needs >= floor)."""
        if 0 < threshold < self.floor:
            raise ConfigError(
                f"fold threshold {threshold!r} is below the store's fold-in postings floor "
                f"{self.floor!r} (fold_search='server'): open with a threshold >= the floor, "
                "or set the mode again with a lower floor (set_fold_search)"
            )

    def post(self, conn: Any, scope_id: str, kind: str, rowid: int, content: str) -> None:
        """Post a live row's prefix when its (scope, kind) is listed (one statement,
        which checks the list: `memkit.store.fold_listed`; none without a gram)."""
        rowid = int(rowid)
        _, codes, m = row_postings([content], self.order, self.floor)
        if codes.size:
            sk = scope_key(scope_id, kind)
            conn.execute(
                "INSERT INTO fold_postings (sk, gram, m, rowid) "
                "SELECT ?, g, ?, ? FROM unnest(?::text::bigint[]) g "
                f"WHERE {_LISTED} ON CONFLICT DO NOTHING",
                (sk, int(m[0]), rowid, bigint_array(codes.tolist()), sk, rowid, rowid),
            )

    def unpost(self, conn: Any, scope_id: str, kind: str, rowid: int, content: str) -> None:
        """Drop the postings a row's earlier text `content` made (by their whole key;
        nothing read when its (scope, kind) is not listed)."""
        rowid = int(rowid)
        _, codes, m = row_postings([content], self.order, self.floor)
        if codes.size:
            sk = scope_key(scope_id, kind)
            conn.execute(
                "DELETE FROM fold_postings WHERE sk = ? AND m = ? AND rowid = ? "
                f"AND gram = ANY(?::text::bigint[]) AND {_LISTED}",
                (sk, int(m[0]), rowid, bigint_array(codes.tolist()), sk, rowid, rowid),
            )

    def probe(
        self, scope_id: str, kind: str, grams: frozenset[str], t: float
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The statement returning (as `Row`s) the live rows of (scope, kind) that may
        reach similarity `t` with `grams`; None when none can. ConfigError for a
        `t` below the floor (a store's fold threshold may change after its open)."""
        self.check(t)
        codes, h = probe_codes(grams, self.order, t)
        if not codes:
            return None
        lo, hi = length_bounds(len(grams), t)
        sk = scope_key(scope_id, kind)
        read, skipped = split_probe(codes, h, self.lengths, self.keep)
        if not skipped:
            return (
                f"SELECT {_M_COLS} FROM (SELECT rowid FROM fold_postings "
                "WHERE sk = ? AND gram = ANY(?::text::bigint[]) AND m BETWEEN ? AND ? "
                "GROUP BY rowid HAVING count(*) >= ?) c JOIN memories m ON m.rowid = c.rowid "
                "WHERE m.scope_id = ? AND m.kind = ? AND m.superseded_by IS NULL",
                (sk, bigint_array(codes), lo, hi, h, scope_id, kind),
            )
        # a live row's postings all carry its one gram count m: (sk, gram, m, rowid)
        # of a skipped gram is a primary-key lookup (split_probe: why exact)
        return (
            f"SELECT {_M_COLS} FROM (SELECT rowid, m, count(*) AS k FROM fold_postings "
            "WHERE sk = ? AND gram = ANY(?::text::bigint[]) AND m BETWEEN ? AND ? "
            "GROUP BY rowid, m HAVING count(*) >= ?) c JOIN memories m ON m.rowid = c.rowid "
            "WHERE m.scope_id = ? AND m.kind = ? AND m.superseded_by IS NULL "
            "AND c.k + (SELECT count(*) FROM fold_postings p WHERE p.sk = ? "
            "AND p.gram = ANY(?::text::bigint[]) AND p.m = c.m AND p.rowid = c.rowid) >= ?",
            (
                sk,
                bigint_array(read),
                lo,
                hi,
                h - len(skipped),
                scope_id,
                kind,
                sk,
                bigint_array(skipped),
                h,
            ),
        )

    @staticmethod
    def scored(
        rows: Iterable[tuple[Any, ...]], grams: frozenset[str], t: float
    ) -> dict[int, tuple[Row, float]]:
        """{rowid: (row, similarity)} of a probe's rows at or above `t`, scored exactly."""
        out: dict[int, tuple[Row, float]] = {}
        for r in map(Row._make, rows):
            sim = jaccard(grams, trigrams(r.content))
            if sim >= t:
                out[r.rowid] = (r, sim)
        return out

    def backfill(self, db: Any, where: str = "", args: Sequence[Any] = ()) -> int:
        """Post every live row (`AND where`), `BACKFILL_ROWS` at a time by COPY, in
        the caller's transaction; the postings written."""
        sql = "SELECT rowid, scope_id, kind, content FROM memories WHERE superseded_by IS NULL"
        chunk: list[tuple[Any, ...]] = []
        done = 0
        for r in db.stream(sql + (f" AND {where}" if where else ""), args):
            chunk.append(r)
            if len(chunk) >= BACKFILL_ROWS:
                done += self._copy(db, chunk)
                chunk = []
        return done + self._copy(db, chunk)

    def _copy(self, db: Any, rows: Sequence[tuple[Any, ...]]) -> int:
        if not rows:
            return 0
        idx, codes, m = row_postings([r[3] for r in rows], self.order, self.floor)
        sks = [scope_key(r[1], r[2]) for r in rows]
        with db.conn.cursor().copy("COPY fold_postings (sk, gram, m, rowid) FROM STDIN") as cp:
            for i, code in zip(idx.tolist(), codes.tolist(), strict=True):
                cp.write_row((sks[i], code, int(m[i]), int(rows[i][0])))
        return int(codes.size)


BATCH_PROBES = 2_048
"""Items of a `remember_many` whose probes go in one statement with the lock
(`BatchProbe`); a longer batch probes item by item inside its transaction."""


class BatchProbe:
    """A write's fold-in candidates for every item at once: one statement, read
    with the scope's lock (each item's probe, its rows tagged by its position),
    then kept true as the write goes: a row the write inserted or folded into is
    scored from its state in the write (`wrote`), not as the read found it, so
    item i decides as a probe after items 0..i-1 would."""

    def __init__(
        self,
        postings: Postings,
        scope_id: str,
        items: Sequence[tuple[str, frozenset[str]]],
        t: float,
    ):
        self.t = t
        self._probes = [postings.probe(scope_id, kind, grams, t) for kind, grams in items]
        parts = [(i, p) for i, p in enumerate(self._probes) if p is not None]
        self.statement: tuple[str, tuple[Any, ...]] | None = None
        if parts:
            self.statement = (
                " UNION ALL ".join(f"SELECT {i}, q.* FROM ({p[0]}) q" for i, p in parts),
                tuple(a for _, p in parts for a in p[1]),
            )
        self._found: dict[int, list[tuple[Any, ...]]] = {}
        self._wrote: dict[int, Row] = {}

    def take(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """The statement's rows (item position, then a `Row`'s columns)."""
        for r in rows:
            self._found.setdefault(int(r[0]), []).append(tuple(r[1:]))

    def candidates(self, i: int, kind: str, grams: frozenset[str]) -> dict[int, tuple[Row, float]]:
        """{rowid: (row, similarity >= t)} of item i (of `kind`, with `grams`)."""
        if self._probes[i] is None:
            return {}  # nothing can reach t: no grams, or t above 1
        read = [r for r in self._found.get(i, ()) if r[0] not in self._wrote]
        out = Postings.scored(read, grams, self.t)
        for row in self._wrote.values():
            if row.kind == kind and row.live:
                sim = jaccard(grams, trigrams(row.content))
                if sim >= self.t:
                    out[row.rowid] = (row, sim)
        return out

    def wrote(self, row: Row) -> None:
        """The write inserted this row or folded into it: its state now."""
        self._wrote[row.rowid] = row


def read_mode(conn: Any) -> Postings | None:
    """The database's postings (server mode), or None (client mode: no row, or 'client')."""
    got = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('fold_search', 'fold_floor', 'fold_order')"
        ).fetchall()
    )
    mode = got.get("fold_search", "client")
    if mode == "client":
        return None
    if mode != "server" or "fold_floor" not in got or "fold_order" not in got:
        raise ConfigError(f"the store records fold_search {mode!r} incompletely or unknown: {got}")
    _, order_id = common_list()
    if got["fold_order"] != order_id:
        raise ConfigError(
            f"the store's fold-in postings use gram order {got['fold_order']!r}, this memkit "
            f"{order_id!r}: set the mode again (set_fold_search) to rebuild them"
        )
    return Postings(
        float(got["fold_floor"]), order_id, read_lengths(conn), seen_bytes=table_bytes(conn)
    )


def table_bytes(conn: Any) -> float:
    """The postings table's size on disk now (a file size: exact, no statistics)."""
    got = conn.execute("SELECT pg_relation_size('fold_postings'::regclass)").fetchone()
    return float(got[0])


def read_lengths(conn: Any) -> dict[int, float]:
    """{gram: estimated postings} of the grams `pg_stats` counts most common in
    `fold_postings` (up to `STATS_TARGET`, table-wide: every scope's lists
    together), as the last ANALYZE saw them; {} before one. Estimates only:
    `split_probe` is exact whatever they say."""
    got = conn.execute(
        "SELECT s.most_common_vals::text, s.most_common_freqs, c.reltuples "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_stats s "
        "ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'gram' "
        "WHERE c.oid = 'fold_postings'::regclass"
    ).fetchone()
    if got is None or got[0] is None or got[2] is None or got[2] <= 0:
        return {}
    vals = [int(v) for v in got[0].strip("{}").split(",") if v]
    if len(vals) != len(got[1]):
        raise ConfigError(f"pg_stats fold_postings.gram: {len(vals)} values, {len(got[1])} freqs")
    return {v: float(f) * float(got[2]) for v, f in zip(vals, got[1], strict=True)}


def refresh(conn: Any, postings: Postings, analyze: bool = True) -> Postings:
    """After many postings were written (a backfill): VACUUM (the visibility map,
    so a probe's count is an index-only scan) and ANALYZE (the length estimates;
    not when `analyze` is False), outside any transaction; the new estimates.
    VACUUM marks a page all-visible only once its rows' commit is flushed (a
    hint bit of an asynchronous commit waits for its WAL), so a durable commit
    of a transaction with an id flushes the WAL first."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = on")
        conn.execute("SELECT pg_current_xact_id()")
    conn.execute("VACUUM (ANALYZE) fold_postings" if analyze else "VACUUM fold_postings")
    # the client's caches kept
    return replace(postings, lengths=read_lengths(conn), seen_bytes=table_bytes(conn))


def check_mode(mode: Any) -> None:
    if mode is not None and mode not in MODES:
        raise ConfigError(f"fold_search={mode!r}: want None, 'client' or 'server'")


def check_floor(floor: Any) -> float:
    if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 < floor <= 1:
        raise ConfigError(f"fold floor {floor!r}: want a number in (0, 1]")
    return float(floor)


SWITCH_WAIT_S = 2.0
"""How long `set_mode` waits for the other clients' shared holds to go: a client
that has just closed releases its hold when its server backend exits, a few ms
after the close returns (without the wait a switch right after a close failed
now and then)."""


def _exclusive(c: Any) -> bool:
    """Take `MODE_LOCK` exclusively, polling up to `SWITCH_WAIT_S`; False when the
    others still hold it then."""
    end = time.monotonic() + SWITCH_WAIT_S
    while True:
        (got,) = c.execute("SELECT pg_try_advisory_lock(%s)", (MODE_LOCK,)).fetchone()
        if got or time.monotonic() >= end:
            return bool(got)
        time.sleep(0.02)


def write_mode(c: Any, mode: str, floor: float) -> str:
    """Record the fold-in mode in meta (in the caller's transaction; a new store's
    at its creation, `memkit.store.pg_schema.migrate`); the gram order's id."""
    check_mode(mode)
    _, order_id = common_list()
    for k, v in (
        ("fold_search", mode),
        ("fold_floor", repr(check_floor(floor))),
        ("fold_order", order_id),
    ):
        c.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (k, v),
        )
    if mode == "server":
        c.execute(f"ALTER TABLE fold_postings ALTER gram SET STATISTICS {STATS_TARGET}")
    return order_id


def set_mode(
    db: Any, mode: str, floor: float, list_keys: Callable[[Any, Postings], Any] | None = None
) -> Postings | None:
    """Switch the database's fold-in mode in one transaction (postings and their list
    emptied; in server mode then `list_keys(db, postings)`, which lists and posts
    the (scope, kind)s that should be from the start: `memkit.store.fold_listed`;
    the others are listed when a writer first needs them), holding `MODE_LOCK`
    exclusively:
    ConfigError if another client still has the store open after `SWITCH_WAIT_S`
    (it would go on in the old mode). The caller's own shared hold is released
    first and taken again."""
    check_mode(mode)
    floor = check_floor(floor)
    c = db.conn
    c.execute("SELECT pg_advisory_unlock_shared(%s)", (MODE_LOCK,))
    try:
        if not _exclusive(c):
            raise ConfigError(
                "cannot switch fold_search: other clients have this store open "
                "(they would go on in the old mode); close them first"
            )
        try:
            out = None
            with c.transaction():
                c.execute("TRUNCATE fold_postings, fold_posted")
                order_id = write_mode(c, mode, floor)
                if mode == "server":
                    out = Postings(floor, order_id)
                    if list_keys is not None:
                        list_keys(db, out)
            if out is None:
                c.execute("ANALYZE fold_postings")
                return None
            return refresh(c, out)
        finally:
            c.execute("SELECT pg_advisory_unlock(%s)", (MODE_LOCK,))
    finally:
        c.execute("SELECT pg_advisory_lock_shared(%s)", (MODE_LOCK,))
