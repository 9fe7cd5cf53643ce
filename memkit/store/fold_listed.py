"""Which (scope, kind)s keep server-mode fold-in postings: those a writer needed (issue #36).

Keeping a row's postings costs its write ~1.1 ms of machine CPU (one B-tree
entry a gram of its prefix), and a writer whose (scope, kind) fits its cap
(`fold_local_rows`, `memkit.store.fold_local`) never reads them: it decides
from its own trigram index. So the postings are kept only for the (scope,
kind)s listed in `fold_posted` (by `scope_key`), and a (scope, kind) is listed
when a writer first needs its postings, or ahead of that. Under the cap,
server mode writes as fast as client mode; past it, the writer's memory stays
bounded.

A listed key may still be *listing ahead*: its live rows with `lo < rowid <= hi`
(`fold_posted`'s columns) have no postings yet; every other live row of it
has its own. A key is *fully listed* when `lo >= hi`; only then do its
postings answer a fold-in (`listed`). The rules, each enforced where the
write happens:

* a row's postings are written with it only while its key is listed and the
  row is not pending: a write reads its scope's listed kinds and their
  pending ranges in its lock's round trip (`PgDb.listed_now`, `kept_sql`) and
  computes postings only for those rows, and each posting statement checks
  the list and the range itself (`Postings.post`); both run under the scope's
  write lock, so they see any listing committed before it;
* a writer whose own index of a (scope, kind) would hold more than its
  `fold_list_at` share of the cap (default 0.75) starts listing the key ahead
  (`start_sql`, in its write's lock round trip): pending are the key's live
  rows from its oldest to the table's highest rowid, so every row written
  after is posted with it;
* every write of a scope, in its lock's round trip, reads up to `LIST_STEP`
  rows (per row it may write) at the bottom of each pending range, and posts
  them and raises `lo` in its transaction (`advance`): a key nearing the cap
  is posted a few rows a write, not all at once;
* a writer that needs a key's postings and finds it not fully listed lists it
  (`post_scope`) in a write of its own, under the scope's lock: the rows still
  pending (or, for a key not listed, every live row) are posted and the key
  marked fully listed in one transaction, so no writer of the scope writes
  between the two and a rollback takes both back (that write pays for the
  rows the listing ahead had not reached: ~the cap's worth when nothing was
  listed ahead);
* a bulk load posts its rows of listed keys (outside their pending ranges)
  and fully lists every key it leaves with more live rows than the loader's
  listing-ahead share of its cap (`list_big`); so does a switch to server
  mode (`fold_postings.set_mode`) and a copy into a server-mode store;
* nothing is unlisted, and `lo` only rises, while the mode holds (a switch
  empties the list with the postings, with no other client open), so a
  client caches the keys it found fully listed (`Postings.listed`) or in the
  list (`Postings.kept`) and never asks again.

`problems` checks the rule. Leaves out: the postings themselves and the probe
(`memkit.store.fold_postings`), and when a writer needs them
(`memkit.store.writes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Sized
from functools import lru_cache
from typing import Any

from memkit.store import fold_postings
from memkit.store.fold_local import LocalCap
from memkit.store.fold_postings import (
    Postings,
    bigint_array,
    row_postings,
    scope_key,
    table_bytes,
)
from memkit.types import KINDS

REFRESH_AT = 100_000
"""Postings written by a listing from which the writer vacuums and analyses the
table after it (`fold_postings.refresh`: index-only probes, length estimates);
~2,500 rows of the bench's texts. Below it the estimates stay as they were."""


LIST_STEP = 8
"""Pending rows a write posts (`advance`) per row it may write: 400,000 rows in
the 50,000 writes between the default's 0.75 of the cap and the cap. A remember
then takes ~4 ms more (5.48-6.15 against 1.78-2.03 ms p50 in two runs, one
process, 150,000 rows pending at the default cap: `memkit bench fold-crossing`,
docs/postgres-scale.md)."""


def _state(db: Any, sk: int) -> tuple[int, int] | None:
    """The key's (lo, hi) as `db` sees the table now; None when not listed."""
    got = db.execute("SELECT lo, hi FROM fold_posted WHERE sk = ?", (sk,)).fetchall()
    return None if not got else (int(got[0][0]), int(got[0][1]))


def listed(db: Any, postings: Postings, scope_id: str, kind: str) -> bool:
    """Whether (scope, kind) is fully listed, its postings answering a fold-in
    (cached once seen so)."""
    sk = scope_key(scope_id, kind)
    if sk in postings.listed:
        return True
    state = _state(db, sk)
    if state is None:
        return False
    postings.kept.add(sk)
    if state[0] < state[1]:
        return False
    postings.listed.add(sk)
    return True


def post_scope(db: Any, postings: Postings, scope_id: str, kind: str) -> int:
    """List (scope, kind) fully: post its live rows (those still pending, when it is
    listed ahead), in the caller's write (which holds the scope's lock, outside a
    batch: the rows go by COPY); the postings written, 0 when it was fully listed
    already. The key joins the cache only after the caller's commit (`cache`)."""
    sk = scope_key(scope_id, kind)
    state = _state(db, sk)
    if state is None:
        db.execute("DELETE FROM fold_postings WHERE sk = ?", (sk,))  # none: a hash's twin's
        db.execute("INSERT INTO fold_posted (sk) VALUES (?)", (sk,))
        return postings.backfill(db, "scope_id = ? AND kind = ?", (scope_id, kind))
    lo, hi = state
    if lo >= hi:
        return 0
    n = postings.backfill(
        db, "scope_id = ? AND kind = ? AND rowid > ? AND rowid <= ?", (scope_id, kind, lo, hi)
    )
    db.execute("UPDATE fold_posted SET lo = hi WHERE sk = ?", (sk,))
    return n


POSTING_BYTES = 60
"""A posting's heap row at least (24 bytes of header, 28 of data, aligned, and its
line pointer): `stale` reads the table's growth in postings from its size."""


def stale(conn: Any, postings: Postings, keys: Iterable[int]) -> bool:
    """Whether a writer about to probe `keys` should refresh the postings' length
    estimates first (`fold_postings.refresh`): once a key, when the table is now
    over twice the size it was when they were read, by `REFRESH_AT` postings or
    more (a key listed ahead, a few rows a write, never refreshed them: a probe
    then reads its longest lists whole; past a 200,000-row cap, 42.17 against
    11.24 ms p50 a write once refreshed, docs/postgres-scale.md). One statement,
    once per key and client; the keys join `Postings.probed`."""
    new = [k for k in keys if k not in postings.probed]
    if not new:
        return False
    postings.probed.update(new)
    now, then = table_bytes(conn), postings.seen_bytes
    return now > 2 * then and now - then >= REFRESH_AT * POSTING_BYTES


REFRESH_LOCK = 0x6D656D726673
"""Advisory key held by a client while it refreshes the postings' estimates
(`refresh`): one refresh at a time, the others wait for it."""


def analysed_since(conn: Any) -> bool:
    """Whether `fold_postings` was analysed (by a client's refresh or autovacuum)
    fewer than `REFRESH_AT` postings ago: its length estimates are then as a
    refresh would leave them (`pg_stat_user_tables`: an ANALYZE resets its count
    at once; writers' counts may lag their commits by a second, counting fewer)."""
    got = conn.execute(
        "SELECT n_mod_since_analyze, coalesce(last_analyze, last_autoanalyze) IS NOT NULL "
        "FROM pg_stat_user_tables WHERE relid = 'fold_postings'::regclass"
    ).fetchone()
    return got is not None and bool(got[1]) and got[0] < REFRESH_AT


def refresh(conn: Any, postings: Postings) -> Postings:
    """The postings with fresh length estimates (`fold_postings.refresh`), one client
    at a time (`REFRESH_LOCK`, taken outside any transaction and outside the
    scope's lock: a writer arriving while another refreshes waits for it). A
    client finding the table `analysed_since` only vacuums (the visibility map,
    which another's vacuum may have left unmarked: one run beside writers with
    older snapshots cannot mark the newest postings' pages) and reads the shared
    estimates. Four writers crossing the cap together had each vacuumed and
    analysed after the other: their first writes past it 1.28, 2.34, 3.40 and
    4.54 s (docs/postgres-scale.md)."""
    conn.execute("SELECT pg_advisory_lock(%s)", (REFRESH_LOCK,))
    try:
        return fold_postings.refresh(conn, postings, analyze=not analysed_since(conn))
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (REFRESH_LOCK,))


def cache(postings: Postings, keys: Iterable[tuple[str, str]]) -> None:
    """After the commit that listed them: the client knows these keys are listed."""
    sks = [scope_key(s, k) for s, k in keys]
    postings.listed.update(sks)
    postings.kept.update(sks)


def start_sql(scope_id: str, kinds: Iterable[str]) -> tuple[str, tuple[Any, ...]]:
    """The statement listing (scope, kind)s ahead (in a write's lock round trip, under
    the scope's lock): pending from the key's oldest live row to the table's highest
    rowid; a key already listed is left as it is."""
    ks = sorted(kinds)
    return (
        "INSERT INTO fold_posted (sk, lo, hi) SELECT k.sk, coalesce((SELECT min(m.rowid) - 1 "
        "FROM memories m WHERE m.scope_id = ? AND m.kind = k.kind AND m.superseded_by IS NULL), "
        "0), coalesce((SELECT max(rowid) FROM memories), 0) "
        "FROM unnest(?::text[], ?::text::bigint[]) AS k(kind, sk) ON CONFLICT (sk) DO NOTHING",
        (scope_id, ks, bigint_array(scope_key(scope_id, k) for k in ks)),
    )


def ahead(
    postings: Postings | None,
    cap: LocalCap | None,
    held: Mapping[tuple[str, str], Sized],
    scope_id: str,
    kinds: Sequence[str],
) -> frozenset[str]:
    """The kinds whose keys a server-mode write of `kinds` (one a row) starts listing
    ahead of the writer's cap: those whose `held` index would hold more than the
    cap's `list_at` share after it, and not seen listed yet (none at share 1: the
    crossing write lists; none in client mode)."""
    if postings is None or cap is None or cap.list_at >= 1:
        return frozenset()
    adds = Counter(kinds)
    return frozenset(
        k
        for k, n in adds.items()
        if (gi := held.get((scope_id, k))) is not None
        and len(gi) + n > cap.ahead
        and scope_key(scope_id, k) not in postings.kept
    )


KINDS_SQL = "'{" + ",".join(KINDS) + "}'::text[]"
"""The kinds as a literal of the statement's text (a list parameter costs a write's
client ~0.09 ms to adapt)."""


@lru_cache(maxsize=4096)
def kind_keys(scope_id: str) -> str:
    """The bigint[] literal of the scope's keys, one a kind in `KINDS` order (five
    hashes a write otherwise)."""
    return bigint_array(scope_key(scope_id, k) for k in KINDS)


def kept_sql(scope_id: str, step: int) -> tuple[str, tuple[Any, ...]]:
    """The statement (in a write's lock round trip) reading the scope's listed kinds
    with their pending ranges, and for each key listed ahead up to `step` of its
    pending live rows, lowest rowid first: (kind, lo, hi, rowid, content) rows,
    rowid and content None when there are none. The query is the server's
    function `memkit_kept` (`memkit.store.pg_schema`, migration 9), held on its
    generic plan: sent as a statement, it was planned afresh at every write."""
    return (
        f"SELECT * FROM memkit_kept({KINDS_SQL}, ?::text::bigint[], ?::text, ?::int)",
        (kind_keys(scope_id), scope_id, int(step)),
    )


def post_rows(db: Any, postings: Postings, rows: Sequence[tuple[Any, ...]]) -> int:
    """Post rows (rowid, scope_id, kind, content) with one INSERT (not COPY: it goes
    in a write's pipeline); the postings written. None of them may be posted
    already: the primary key refuses a second posting, so a broken rule is an
    error, not a skip."""
    idx, codes, m = row_postings([r[3] for r in rows], postings.order, postings.floor)
    if not codes.size:
        return 0
    ii = idx.tolist()
    db.execute(
        "INSERT INTO fold_postings (sk, gram, m, rowid) SELECT * FROM unnest("
        "?::text::bigint[], ?::text::bigint[], ?::text::int[], ?::text::bigint[])",
        (
            bigint_array(scope_key(rows[i][1], rows[i][2]) for i in ii),
            bigint_array(codes.tolist()),
            bigint_array(int(m[i]) for i in ii),
            bigint_array(int(rows[i][0]) for i in ii),
        ),
    )
    return int(codes.size)


def advance(
    db: Any,
    postings: Postings,
    scope_id: str,
    got: Iterable[Sequence[Any]],
    step: int,
    fresh: frozenset[str] = frozenset(),
) -> dict[str, tuple[int, int]]:
    """From `kept_sql`'s rows: post each key's pending rows read and raise its `lo`
    past them (to `hi` when fewer than `step` came: none is left), in the caller's
    write; {kind: (lo, hi)} of the scope's listed kinds after it. The keys join
    `Postings.kept`, but not the `fresh` kinds this write started listing (its
    rollback would take them back; the next write reads them)."""
    read: dict[str, tuple[int, int, list[tuple[Any, ...]]]] = {}
    for kind, lo, hi, rowid, content in got:
        _, _, rows = read.setdefault(kind, (int(lo), int(hi), []))
        if rowid is not None:
            rows.append((int(rowid), scope_id, kind, content))
    out: dict[str, tuple[int, int]] = {}
    for kind, (lo, hi, rows) in read.items():
        sk = scope_key(scope_id, kind)
        if kind not in fresh:
            postings.kept.add(sk)
        if lo < hi and step > 0:
            post_rows(db, postings, rows)
            lo = hi if len(rows) < step else int(rows[-1][0])
            db.execute("UPDATE fold_posted SET lo = ? WHERE sk = ?", (lo, sk))
        out[kind] = (lo, hi)
    return out


def list_big(db: Any, postings: Postings, rows: int, scope_id: str | None = None) -> int:
    """Fully list every (scope, kind) (of `scope_id`, or all) holding more than `rows`
    live rows (a loader's `fold_local.ahead_rows`), posting its rows; the postings
    written. In the caller's write (a bulk load, a copy, a switch of mode)."""
    where, args = ("AND scope_id = ?", (scope_id,)) if scope_id is not None else ("", ())
    keys = db.execute(
        f"SELECT scope_id, kind FROM memories WHERE superseded_by IS NULL {where} "
        "GROUP BY scope_id, kind HAVING count(*) > ?",
        (*args, int(rows)),
    ).fetchall()
    return sum(post_scope(db, postings, s, k) for s, k in keys)


def post_written(db: Any, postings: Postings, scope_id: str, seq: int) -> int:
    """Post a bulk write's rows (its change number `seq` in `scope_id`) of listed
    keys, outside their pending ranges, in its transaction; the postings written."""
    kinds = [
        k
        for (k,) in db.execute(
            "SELECT DISTINCT kind FROM memories WHERE scope_id = ? AND change_seq = ?",
            (scope_id, seq),
        ).fetchall()
    ]
    n = 0
    for kind in kinds:
        state = _state(db, scope_key(scope_id, kind))
        if state is not None:
            n += postings.backfill(
                db,
                "scope_id = ? AND kind = ? AND change_seq = ? AND NOT (rowid > ? AND rowid <= ?)",
                (scope_id, kind, seq, *state),
            )
    return n


def problems(db: Any, postings: Postings) -> list[str]:
    """How the postings differ from the rules (module docstring): every live row of
    a listed key outside its pending range has exactly its own postings, and no
    other posting is kept for a live row (none for a pending one). A check for
    tests and tools; [] when right."""
    ranges = {
        int(r[0]): (int(r[1]), int(r[2]))
        for r in db.execute("SELECT sk, lo, hi FROM fold_posted").fetchall()
    }

    def posted(rowid: int, sk: int) -> bool:
        lo, hi = ranges.get(sk, (0, -1))
        return sk in ranges and not lo < rowid <= hi

    rows: Sequence[tuple[Any, ...]] = [
        r
        for r in db.execute(
            "SELECT rowid, scope_id, kind, content FROM memories WHERE superseded_by IS NULL"
        ).fetchall()
        if posted(int(r[0]), scope_key(r[1], r[2]))
    ]
    idx, codes, m = row_postings([r[3] for r in rows], postings.order, postings.floor)
    want = {
        (scope_key(rows[i][1], rows[i][2]), c, int(m[i]), int(rows[i][0]))
        for i, c in zip(idx.tolist(), codes.tolist(), strict=True)
    }
    have = set(
        map(
            tuple,
            db.execute(
                "SELECT p.sk, p.gram, p.m, p.rowid FROM fold_postings p JOIN memories m "
                "ON m.rowid = p.rowid AND m.superseded_by IS NULL"
            ).fetchall(),
        )
    )
    out = [f"missing posting {p}" for p in sorted(want - have)[:5]]
    return out + [f"stale posting {p}" for p in sorted(have - want)[:5]]
