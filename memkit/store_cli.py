"""`memkit store {stats,recall,history} --db PATH ...`: inspect a store from a shell.

Read-mostly helpers over SQLiteStore. `recall` reopens the store with the
embedder recorded in it (so no mismatch is possible); `stats` and `history`
open it keyword-only and never load a model.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from dataclasses import replace
from pathlib import Path

from memkit.errors import MemkitError
from memkit.params import RecallParams
from memkit.store import SQLiteStore
from memkit.types import Memory


def _open(db: str, *, with_embedder: bool) -> SQLiteStore:
    if not Path(db).is_file():
        raise MemkitError(f"no store at {db!r}")
    embedder = None
    if with_embedder:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        except sqlite3.Error:
            row = None
        finally:
            conn.close()
        embedder = row[0] if row else None
    return SQLiteStore.open(db, embedder=embedder)


def _mem_json(m: Memory) -> dict:
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


def _run(fn, argv) -> int:
    try:
        return fn(argv)
    except MemkitError as e:
        print(f"memkit store: {e}", file=sys.stderr)
        return 1


def stats_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit store stats", description="row counts of a store")
    ap.add_argument("--db", required=True)
    ap.add_argument("--scope", default=None, help="one scope (default: all)")
    ap.add_argument("--json", action="store_true")

    def go(argv):
        args = ap.parse_args(argv)
        with _open(args.db, with_embedder=False) as store:
            st = store.stats(args.scope)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            for k, v in st.items():
                print(f"{k:>18}: {v}")
        return 0

    return _run(go, argv)


def recall_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit store recall", description="recall with scores")
    ap.add_argument("--db", required=True)
    ap.add_argument("--scope", required=True)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--floor", type=float, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("query")

    def go(argv):
        args = ap.parse_args(argv)
        params = RecallParams()
        if args.floor is not None:
            params = replace(params, floor=args.floor)
        with _open(args.db, with_embedder=True) as store:
            hits = store.recall(args.scope, args.query, args.limit, params)
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "path": h.path,
                            "score": h.score,
                            "cosine": h.cosine,
                            "confidence_weight": h.confidence_weight,
                            "decay": h.decay,
                            "keywords_matched": h.keywords_matched,
                            "memory": _mem_json(h.memory),
                        }
                        for h in hits
                    ],
                    indent=2,
                )
            )
            return 0
        for h in hits:
            if h.path == "vector":
                why = f"cos={h.cosine:.3f} conf={h.confidence_weight:.2f} decay={h.decay:.3f}"
            else:
                why = f"keywords={h.keywords_matched}"
            print(f"{h.score:7.4f} {h.path:<7} {h.id} ({h.kind}) {why}\n        {h.content}")
        if not hits:
            print("(nothing recalled)")
        return 0

    return _run(go, argv)


def history_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="memkit store history", description="revision chain")
    ap.add_argument("--db", required=True)
    ap.add_argument("--scope", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("id")

    def go(argv):
        args = ap.parse_args(argv)
        with _open(args.db, with_embedder=False) as store:
            chain = store.history(args.scope, args.id)
        if args.json:
            print(json.dumps([_mem_json(m) for m in chain], indent=2))
            return 0
        for m in chain:
            state = "live" if m.live else ("retracted" if m.retracted else f"-> {m.superseded_by}")
            print(f"{m.id} ({m.kind}, seen {m.seen_count}, {state})\n        {m.content}")
        return 0

    return _run(go, argv)
