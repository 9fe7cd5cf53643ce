"""`memkit store {stats,recall,history,copy,reembed,sidecar,fold-search} --db PATH`: shell use.

`stats`, `recall` and `history` are read-only on what they inspect: the store is
opened with `read_only=True`, so
a missing, empty, foreign or corrupt file is refused in one line and left
byte-for-byte as it was. `recall` reopens the store with the embedder
recorded in it (no mismatch possible); `stats` and `history` never load a
model. An unknown `--scope` is refused with the scopes the store holds.
Stored text is printed through `memkit.text.terminal_safe` (control characters,
terminal escapes and bidi overrides as visible escapes); `--json` escapes them
as JSON does (ASCII only).
`copy` writes only its destination; `reembed` moves a store to another
embedder in place (`memkit.store.reembed`), with progress on stderr;
`fold-search` switches a Postgres store's fold-in mode (`memkit.store.fold_postings`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memkit.errors import ConfigError, MemkitError, MissingExtra, did_you_mean
from memkit.params import FoldParams, RecallParams
from memkit.store.backends import is_postgres_url, open_store, sqlite_path
from memkit.store.rules import SQLStore
from memkit.store.sidecar import MIN_ROWS
from memkit.text import terminal_safe as safe
from memkit.types import KINDS, Memory


def _open(db: str, *, with_embedder: bool) -> SQLStore:
    """The store a path or URL names (`open_store`: SQLite or postgresql://), read-only."""
    store = open_store(db, embedder=None, read_only=True)
    if not with_embedder:
        return store
    recorded = store.stats()["embedder"]
    store.close()
    return open_store(db, embedder=recorded, read_only=True)


def _check_scope(store: SQLStore, scope: str | None) -> None:
    if scope is None:
        return
    known = store.scopes()
    if scope not in known:
        listed = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "") or "(none)"
        raise ConfigError(
            f"scope {scope!r} is not in {store.path!r}{did_you_mean(scope, known)}; "
            f"scopes: {listed}"
        )


def _mem_json(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "scope_id": m.scope_id,
        "kind": m.kind,
        "content": m.content,
        "tags": list(m.tags),
        "confidence": m.confidence,
        "source_run_id": m.source_run_id,
        "created_at": m.created_at,
        "seen_count": m.seen_count,
        "last_seen_at": m.last_seen_at,
        "superseded_by": m.superseded_by,
    }


def _stats(args: argparse.Namespace) -> int:
    with _open(args.db, with_embedder=False) as store:
        _check_scope(store, args.scope)
        scopes = [args.scope] if args.scope else store.scopes()
        total = store.stats(args.scope)
        per_scope = {s: store.stats(s) for s in scopes}
    if args.json:
        total["per_scope"] = {
            s: {k: st[k] for k in ("live", "superseded", "retracted", "by_kind")}
            for s, st in per_scope.items()
        }
        print(json.dumps(total, indent=2))
        return 0
    print(
        f"{args.db}: {total['rows']} rows ({total['live']} live, {total['superseded']} "
        f"superseded, {total['retracted']} retracted) in {total['scopes']} scope(s); "
        f"embedder {safe(total['embedder'] or 'none')}; rollouts {total['rollouts_pending']} "
        f"pending, {total['rollouts_consumed']} consumed"
    )
    head = ["scope", "live", *KINDS, "superseded", "retracted"]
    rows = [
        [safe(s), st["live"], *(st["by_kind"][k] for k in KINDS), st["superseded"], st["retracted"]]
        for s, st in per_scope.items()
    ]
    width = max([len(head[0]), *(len(r[0]) for r in rows)])
    print(f"{head[0]:<{width}} " + " ".join(f"{h:>10}" for h in head[1:]))
    for r in rows:
        print(f"{r[0]:<{width}} " + " ".join(f"{v:>10}" for v in r[1:]))
    return 0


def _recall(args: argparse.Namespace) -> int:
    params = RecallParams()
    if args.floor is not None:
        params = replace(params, floor=args.floor)
    if args.hybrid:
        params = replace(params, hybrid="rrf")
    with _open(args.db, with_embedder=True) as store:
        _check_scope(store, args.scope)
        hits = store.recall(args.scope, args.query, args.limit, params)
    if args.json:
        keys = ("path", "score", "cosine", "confidence_weight", "decay", "keywords_matched")
        rows = [
            {
                **{k: getattr(h, k) for k in keys},
                "fallback": h.fallback,
                "memory": _mem_json(h.memory),
            }
            for h in hits
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for h in hits:
        if h.path == "keyword":
            why = f"keywords={safe(str(h.keywords_matched))} (keyword path: {h.fallback})"
        else:
            parts = [] if h.cosine is None else [f"cos={h.cosine:.3f}"]
            if h.confidence_weight is not None:
                parts.append(f"conf={h.confidence_weight:.2f} decay={h.decay:.3f}")
            if h.keywords_matched is not None:
                parts.append(f"keywords={h.keywords_matched}")
            why = " ".join(parts) + (" (fused)" if h.path == "hybrid" else "")
        print(f"{h.score:7.4f} {h.path:<7} {safe(h.id)} ({safe(h.kind)}) {why}")
        print(f"        {safe(h.content)}")
    if not hits:
        print("(nothing recalled)")
    return 0


def _history(args: argparse.Namespace) -> int:
    with _open(args.db, with_embedder=False) as store:
        _check_scope(store, args.scope)
        chain = store.history(args.scope, args.id)
    if args.json:
        print(json.dumps([_mem_json(m) for m in chain], indent=2))
        return 0
    for m in chain:
        state = "live" if m.live else ("retracted" if m.retracted else f"-> {m.superseded_by}")
        print(f"{safe(m.id)} ({safe(m.kind)}, seen {m.seen_count}, {safe(state)})")
        print(f"        {safe(m.content)}")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="memkit store",
        description="Inspect a memkit store (stats, recall, history: read-only), copy it, "
        "re-embed it with another embedder, or write a SQLite scope's vector sidecar.",
    )
    sub = ap.add_subparsers(
        dest="sub",
        metavar="{stats,recall,history,copy,reembed,sidecar,fold-search}",
        required=True,
        help="what to do",
    )

    def command(
        name: str, help_: str, fn: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument(
            "--db", required=True, metavar="PATH", help="the store: a SQLite file or postgresql://"
        )
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        p.set_defaults(fn=fn)
        return p

    p = command("stats", "row counts: totals, then per scope by kind", _stats)
    p.add_argument("--scope", help="only this scope (default: every scope, listed by name)")
    p = command("recall", "recall with the score breakdown of every hit", _recall)
    p.add_argument("--scope", required=True, help="the scope to recall from")
    p.add_argument("--limit", type=int, default=8, help="most hits to return (default 8)")
    p.add_argument(
        "--floor",
        type=float,
        help="vector-path relevance floor (default: the store's embedder's own, docs/embedders.md)",
    )
    p.add_argument(
        "--hybrid",
        action="store_true",
        help="fuse the vector and keyword rankings (reciprocal-rank fusion; memkit extension)",
    )
    p.add_argument("query", help="the recall query text")
    p = command("history", "the revision chain of a memory, oldest first", _history)
    p.add_argument("--scope", required=True, help="the memory's scope")
    p.add_argument("id", help="any memory id in the chain")
    p = sub.add_parser(
        "copy",
        help="copy every memory and rollout to another store (writes only --to)",
        description="Copy every memory, history chain and rollout from --from to --to "
        "(any backend to any backend), then verify counts and content checksums.",
    )
    p.add_argument("--from", dest="src", required=True, metavar="SRC", help="source store")
    p.add_argument("--to", dest="dst", required=True, metavar="DST", help="destination store")
    p.add_argument(
        "--into-nonempty", action="store_true", help="add to a destination that holds rows"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(fn=_copy)
    p = command(
        "reembed",
        "re-embed every memory in place with another embedder (resumable; progress on stderr)",
        _reembed,
    )
    p.add_argument(
        "--embedder", required=True, help="the new embedder: wordllama, minilm, hashing[-D], ..."
    )
    p.add_argument("--batch", type=int, default=256, help="memories per transaction (default 256)")
    p = command(
        "sidecar",
        "write a SQLite scope's vector sidecar now, from the table (docs/behaviour.md)",
        _sidecar,
    )
    p.add_argument("--scope", required=True, help="the scope whose matrix to write")
    p.add_argument(
        "--min-rows",
        type=int,
        default=MIN_ROWS,
        help=f"refuse a scope with fewer live embedded rows (default {MIN_ROWS:,})",
    )
    p = command(
        "fold-search",
        "switch a Postgres store's fold-in mode: client (each writer's in-memory index) or "
        "server (the database's postings past each writer's cap, a new store's mode: the "
        "(scope, kind)s past this client's cap posted now; no other client may be open)",
        _fold_search,
    )
    p.add_argument("mode", choices=("client", "server"), metavar="MODE", help="client or server")
    p.add_argument(
        "--floor",
        type=float,
        default=FoldParams().threshold,
        help="server: the lowest fold threshold the postings serve "
        f"(default {FoldParams().threshold}, the store's default threshold)",
    )
    return ap


def _copy(args: argparse.Namespace) -> int:
    from memkit.store.copy import copy_store

    rep = copy_store(args.src, args.dst, into_nonempty=args.into_nonempty)
    if args.json:
        print(json.dumps(rep.__dict__, indent=2))
    else:
        print(
            f"copied {rep.memories} memories ({rep.scopes} scopes) and {rep.rollouts} rollouts; "
            f"verified: memories sha256 {rep.memories_sha256[:16]}, "
            f"rollouts sha256 {rep.rollouts_sha256[:16]}"
        )
    return 0


def _reembed(args: argparse.Namespace) -> int:
    def progress(done: int, total: int) -> None:
        print(f"reembed: {done}/{total} memories", file=sys.stderr, flush=True)

    with open_store(args.db, embedder=None) as store:
        rep = store.reembed(args.embedder, batch=args.batch, progress=progress)
    if args.json:
        print(json.dumps(rep.__dict__, indent=2))
    else:
        how = (
            "nothing to do"
            if not rep.batches and not rep.resumed
            else (f"{rep.embedded_now} re-embedded now" + (" (resumed)" if rep.resumed else ""))
        )
        print(
            f"{args.db}: embedder {rep.previous or 'none'} -> {rep.embedder}: {how}; "
            f"verified {rep.rows} memories with {rep.embedder} vectors"
        )
    return 0


def _sidecar(args: argparse.Namespace) -> int:
    from memkit.store.sqlite import SQLiteStore

    if is_postgres_url(args.db):
        raise ConfigError("vector sidecars are SQLite's: a Postgres store searches in the server")
    with _open(args.db, with_embedder=False) as store:  # a memkit file, never a new one
        _check_scope(store, args.scope)
    with SQLiteStore.open(sqlite_path(args.db), embedder=None, vector_sidecar=args.min_rows) as s:
        rep = s.write_sidecar(args.scope)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(
            f"{safe(rep['path'])}: {rep['rows']:,} rows of scope {safe(args.scope)}, "
            f"{rep['bytes'] / 2**20:.1f} MiB, written in {rep['seconds']:.2f} s"
        )
    return 0


def _fold_search(args: argparse.Namespace) -> int:
    from memkit.store.postgres import PostgresStore

    if not is_postgres_url(args.db):
        raise ConfigError("fold-search is a Postgres store's mode (a SQLite store's is its own)")
    # threshold 1: at or above any floor, so the open takes the database's mode as it is
    with PostgresStore.open(args.db, embedder=None, fold=FoldParams(threshold=1.0)) as store:
        before = store.fold_search
        store.set_fold_search(args.mode, floor=args.floor)
    if args.json:
        print(json.dumps({"before": before, "fold_search": args.mode, "floor": args.floor}))
    else:
        floor = f" (floor {args.floor})" if args.mode == "server" else ""
        print(f"fold_search: {before} -> {args.mode}{floor}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """inspect a store: stats, recall, history, copy; reembed it; write a vector sidecar"""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code: int = args.fn(args)
        return code
    except MemkitError as e:  # a bad path, file or scope is a usage error (2)
        print(f"memkit store {args.sub}: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) and not isinstance(e, MissingExtra) else 1
