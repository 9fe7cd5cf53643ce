"""Which (scope, kind)s keep server-mode fold-in postings: those a writer needed (issue #36).

Keeping a row's postings costs its write ~1.1 ms of machine CPU (one B-tree
entry a gram of its prefix), and a writer whose (scope, kind) fits its cap
(`fold_local_rows`, `memkit.store.fold_local`) never reads them: it decides
from its own trigram index. So the postings are kept only for the (scope,
kind)s listed in `fold_posted` (by `scope_key`), and a (scope, kind) is listed
when a writer first needs its postings. Under the cap, server mode writes as
fast as client mode; past it, the writer's memory stays bounded.

The rules, each enforced where the write happens:

* a row's postings are written with it only while its key is listed: a write
  reads which kinds of its scope are listed in its lock's round trip
  (`PgDb.listed_now`) and computes postings only for those rows, and each
  posting statement checks the list itself (`Postings.post`); both run under
  the scope's write lock, so they see any listing committed before it;
* a writer that needs an unlisted key's postings lists it (`post_scope`) in a
  write of its own, under the scope's lock: every live row of the (scope,
  kind) is posted and the key listed in one transaction, so no writer of the
  scope writes between the two and a rollback takes both back (that write
  pays for posting the rows: ~the cap's worth when a scope grows past it);
* a bulk load posts its rows of listed keys and lists every key it leaves
  with more live rows than the loader's cap (`list_big`); so does a switch to
  server mode (`fold_postings.set_mode`) and a copy into a server-mode store;
* nothing is unlisted while the mode holds (a switch empties the list with
  the postings, with no other client open), so a client caches the keys it
  found listed (`Postings.listed`) and never asks again.

A listed key's postings are exactly its live rows' (`problems`); an unlisted
key has none. Leaves out: the postings themselves and the probe
(`memkit.store.fold_postings`), and when a writer needs them
(`memkit.store.writes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memkit.store.fold_postings import Postings, row_postings, scope_key

REFRESH_AT = 100_000
"""Postings written by a listing from which the writer vacuums and analyses the
table after it (`fold_postings.refresh`: index-only probes, length estimates);
~2,500 rows of the bench's texts. Below it the estimates stay as they were."""


def _in_list(db: Any, sk: int) -> bool:
    """Whether the key is listed, as `db` sees the table now."""
    return bool(db.execute("SELECT 1 FROM fold_posted WHERE sk = ?", (sk,)).fetchall())


def listed(db: Any, postings: Postings, scope_id: str, kind: str) -> bool:
    """Whether (scope, kind)'s postings are kept (cached once seen listed)."""
    sk = scope_key(scope_id, kind)
    if sk in postings.listed:
        return True
    if _in_list(db, sk):
        postings.listed.add(sk)
        return True
    return False


def post_scope(db: Any, postings: Postings, scope_id: str, kind: str) -> int:
    """List (scope, kind) and post its live rows, in the caller's write (which holds
    the scope's lock, outside a batch: the rows go by COPY); the postings written,
    0 when another writer listed it first. The key joins the cache only after the
    caller's commit (`cache`)."""
    sk = scope_key(scope_id, kind)
    if _in_list(db, sk):
        return 0
    db.execute("DELETE FROM fold_postings WHERE sk = ?", (sk,))  # none: a hash's twin's
    db.execute("INSERT INTO fold_posted (sk) VALUES (?)", (sk,))
    return postings.backfill(db, "scope_id = ? AND kind = ?", (scope_id, kind))


def cache(postings: Postings, keys: Iterable[tuple[str, str]]) -> None:
    """After the commit that listed them: the client knows these keys are listed."""
    postings.listed.update(scope_key(s, k) for s, k in keys)


def list_big(db: Any, postings: Postings, cap: int, scope_id: str | None = None) -> int:
    """List every unlisted (scope, kind) (of `scope_id`, or all) holding more than
    `cap` live rows, posting its rows; the postings written. In the caller's
    write (a bulk load, a copy, a switch of mode)."""
    where, args = ("AND scope_id = ?", (scope_id,)) if scope_id is not None else ("", ())
    keys = db.execute(
        f"SELECT scope_id, kind FROM memories WHERE superseded_by IS NULL {where} "
        "GROUP BY scope_id, kind HAVING count(*) > ?",
        (*args, int(cap)),
    ).fetchall()
    return sum(post_scope(db, postings, s, k) for s, k in keys)


def post_written(db: Any, postings: Postings, scope_id: str, seq: int) -> int:
    """Post a bulk write's rows (its change number `seq` in `scope_id`) of listed
    keys, in its transaction; the postings written."""
    kinds = [
        k
        for (k,) in db.execute(
            "SELECT DISTINCT kind FROM memories WHERE scope_id = ? AND change_seq = ?",
            (scope_id, seq),
        ).fetchall()
    ]
    return sum(
        postings.backfill(db, "scope_id = ? AND kind = ? AND change_seq = ?", (scope_id, kind, seq))
        for kind in kinds
        if _in_list(db, scope_key(scope_id, kind))
    )


def problems(db: Any, postings: Postings) -> list[str]:
    """How the postings differ from the rules (module docstring): every live row of
    a listed key has exactly its own postings, and no other posting is kept for a
    live row. A check for tests and tools; [] when right."""
    listed_keys = {int(r[0]) for r in db.execute("SELECT sk FROM fold_posted").fetchall()}
    rows: Sequence[tuple[Any, ...]] = [
        r
        for r in db.execute(
            "SELECT rowid, scope_id, kind, content FROM memories WHERE superseded_by IS NULL"
        ).fetchall()
        if scope_key(r[1], r[2]) in listed_keys
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
