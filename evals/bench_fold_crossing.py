"""`memkit bench fold-crossing`: the remembers around a writer's fold-in cap (issue #36).

In a server-mode Postgres store a writer folds in from its own trigram index
while a (scope, kind)'s fold window holds at most `fold_local_rows` rows (the
cap, `--cap`), and from the database's postings past it; the key's rows are
posted ("listed") when a writer needs them. Listing them all in the write
that crosses the cap holds the scope's lock for one long write (43 s at 200k
rows, docs/postgres-scale.md); `fold_list_at` (`--list-at`) lists the key
ahead of the cap, a few rows per write, once the writer's index holds more
than that share of the cap. This bench times every write of that path, one
configuration per `--list-at` value, each in a fresh schema of one server
(a private pgserver, `evals.pg_local`, unless `--pg-dsn` names one):

* one scope bulk-loaded with `--start` x cap synthetic texts
  (`evals.bench_data.synthetic_texts`, kind "fact", random unit vectors:
  the bench's `Table` embedder answers from them, no model in the timing);
* then single `remember`s of new texts, each timed alone, until the scope
  holds cap x (1 + `--past`) live rows. After each write, outside its
  timing, a query reads the key's state in `fold_posted`: not kept, pending
  (rows lo < rowid <= hi still to post) or listed.

Each write's phase is the key's state after it: "not listed", "listing
ahead", "listed" (so the write that lists the whole key at once is the first
"listed" one). The first write builds the writer's trigram index from the
loaded rows (seconds at a big cap: what a writer's restart costs, not the
crossing) and is reported apart. Reported per configuration: the bulk load's
seconds; the first write's ms; over the other writes, per phase the writes
and their p50 / p95 / max ms (and the same over the writes past the cap,
whose fold-in the postings decide), the slowest write, its live rows before it,
and its ratio to the p50 of the "not listed" writes of the same run (the
baseline); the live rows before the writes where listing started and where
it ended; the remember phase's total seconds (all writes); the postings rows
at the end.
`--out` keeps the raw rows (per write: live rows before, seconds, state).

`--writers N` (N >= 2) times the same path from N processes writing the one
scope at once (`evals.bench_fold_writers`): each writer's first write is
reported apart (the slowest of them), a write's time includes its wait for
the scope's lock (so the crossing write at 1.0 shows in the others' writes
too), and `wall_s` with writes/s is the timed writes' span.

Loud failures (exit 1): a store not in server mode, a writer that fails or
dies, or a key not fully listed when the writes end. Leaves out: what a
writer waited for (lock or cores), real text and embedders, recall, and what
happens past the end (`--past`) or to a (scope, kind) that shrinks below the
cap.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench_data import Table, synthetic_texts, unit_vectors
from evals.bench_fold_writers import Job, run_writers
from evals.cli.base import RunFailed
from memkit.errors import ConfigError
from memkit.store.fold_postings import scope_key

SCOPE, KIND = "crossing", "fact"
PHASES = ("not listed", "listing ahead", "listed")
"""A write's phase: the key's state after it (`phase_of`)."""
_PHASE = {"not kept": "not listed", "pending": "listing ahead", "listed": "listed"}


# -- pure rules -----------------------------------------------------------------------


def key_state(row: dict[str, Any] | None) -> dict[str, Any]:
    """The key's state from its `fold_posted` row (None: no row): "not kept"; "pending"
    with `lo`, `hi` while lo < hi (rows lo < rowid <= hi still to post); else
    "listed" (a row without lo/hi, a store before listing ahead, is listed)."""
    if row is None:
        return {"state": "not kept"}
    lo, hi = row.get("lo"), row.get("hi")
    if lo is not None and hi is not None and int(lo) < int(hi):
        return {"state": "pending", "lo": int(lo), "hi": int(hi)}
    return {"state": "listed"}


def phase_of(write: dict[str, Any]) -> str:
    """A write's phase: its key's state after it, as `PHASES` names it."""
    return _PHASE[write["state"]]


def split_phases(writes: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The writes by phase, in order (every phase present, maybe empty)."""
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES}
    for w in writes:
        out[phase_of(w)].append(w)
    return out


def _ms_stats(ws: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not ws:
        return {"writes": 0, "p50_ms": None, "p95_ms": None, "max_ms": None}
    ms = np.asarray([w["s"] for w in ws]) * 1e3
    return {
        "writes": len(ws),
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "max_ms": float(ms.max()),
    }


def _first(writes: Sequence[dict[str, Any]], pred: Callable[[dict[str, Any]], bool]) -> Any:
    return next((w["rows_before"] for w in writes if pred(w)), None)


def summarize(
    writes: Sequence[dict[str, Any]], cap: int | None = None, firsts: int = 1
) -> dict[str, Any]:
    """The first `firsts` writes apart (each writer's first: it builds the writer's
    index, a restart's cost, not the cap's; `first_write_ms` is the slowest of
    them); over the others, per phase the writes and their p50 / p95 / max ms
    (numpy's linear percentiles), and the slowest write with its ratio to the "not
    listed" p50 (the baseline; None without such writes). With the `cap`, the
    same figures over the writes past it (`past_cap`: more than `cap` live rows
    before them, so the postings decide), whatever their phase. Over all writes:
    the live rows before the write that started listing and the one that ended
    it (None: never), and their total seconds; with end times (`end`, seconds on
    one clock), the others' span from the first's start to the last's end
    (`wall_s`) and their writes a second over it (None without)."""
    if len(writes) < firsts + 1:
        raise ConfigError(f"{len(writes)} writes: want {firsts + 1} or more to summarize")
    rest = writes[firsts:]
    by = split_phases(rest)
    slow = max(rest, key=lambda w: w["s"])
    base = _ms_stats(by["not listed"])["p50_ms"]
    wall = None
    if all("end" in w for w in rest):
        wall = max(w["end"] for w in rest) - min(w["end"] - w["s"] for w in rest)
    return {
        "first_write_ms": max(w["s"] for w in writes[:firsts]) * 1e3,
        "phases": {p: _ms_stats(ws) for p, ws in by.items()},
        "past_cap": None if cap is None else _ms_stats([w for w in rest if w["rows_before"] > cap]),
        "slowest_ms": slow["s"] * 1e3,
        "slowest_rows_before": slow["rows_before"],
        "slowest_phase": phase_of(slow),
        "baseline_p50_ms": base,
        "slowest_over_baseline": None if not base else slow["s"] * 1e3 / base,
        "listing_started_at": _first(writes, lambda w: w["state"] != "not kept"),
        "listed_at": _first(writes, lambda w: w["state"] == "listed"),
        "remember_s": float(sum(w["s"] for w in writes)),
        "wall_s": wall,
        "writes_per_s": len(rest) / wall if wall else None,
    }


def check_listed(config: dict[str, Any]) -> None:
    """RunFailed naming the configuration when its key is not listed after its last
    write (listing never ended: the phases and the cost measured are not the run
    asked for)."""
    writes = config["writes"]
    if not writes or writes[-1]["state"] != "listed":
        last = writes[-1] if writes else {"state": "no writes", "rows_before": None}
        raise RunFailed(
            f"--list-at {config['list_at']}: the key is not fully listed after the last "
            f"write ({len(writes)} writes, last at {last['rows_before']} live rows before it, "
            f"state {last['state']}{_bounds(last)})"
        )


def _bounds(w: dict[str, Any]) -> str:
    return f" lo {w['lo']} hi {w['hi']}" if "lo" in w else ""


def _fmt(x: Any, spec: str) -> str:
    return "undefined" if x is None else format(x, spec)


def render(configs: Sequence[dict[str, Any]]) -> str:
    """The configurations as markdown: one table of phases, one of the totals."""
    lines = [
        "| list at | phase | writes | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for c in configs:
        rows = list(c["summary"]["phases"].items())
        if c["summary"].get("past_cap") is not None:  # the same writes again, by rows
            rows.append(("past the cap (any phase)", c["summary"]["past_cap"]))
        for p, st in rows:
            cells = [_fmt(st[k], ".2f") for k in ("p50_ms", "p95_ms", "max_ms")]
            lines.append(f"| {c['list_at']} | {p} | {st['writes']:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| list at | bulk load s | first write ms | slowest ms (rows before, phase) "
        "| slowest / not-listed p50 | listing started / ended (rows before) "
        "| remember s | postings rows | writers | wall s (writes/s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        s = c["summary"]
        lines.append(
            f"| {c['list_at']} | {c['bulk_load_s']:.1f} | {s['first_write_ms']:.1f} "
            f"| {s['slowest_ms']:.1f} ({s['slowest_rows_before']:,}, {s['slowest_phase']}) "
            f"| {_fmt(s['slowest_over_baseline'], '.1f')} "
            f"| {_fmt(s['listing_started_at'], ',')} / {_fmt(s['listed_at'], ',')} "
            f"| {s['remember_s']:.1f} | {c['postings_rows']:,} | {c.get('writers', 1)} "
            f"| {_fmt(s.get('wall_s'), '.1f')} ({_fmt(s.get('writes_per_s'), ',.0f')}) |"
        )
    return "\n".join(lines)


def plan(cap: int, start: float, past: float) -> tuple[int, int]:
    """(rows bulk-loaded, live rows the writes end at); rounded to 1e-6 first, so a
    share written in decimal lands where it reads (40 x 1.05 is 42, not 43)."""
    return round(cap * start), math.ceil(round(cap * (1 + past), 6))


# -- arguments --------------------------------------------------------------------------


def list_ats(text: str) -> list[float]:
    """'1.0,0.75' -> [1.0, 0.75] (an argparse type): each 0 < x <= 1."""
    out = []
    for part in text.split(","):
        try:
            x = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r}: want a number 0 < x <= 1") from None
        if not 0 < x <= 1:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{part!r}: want 0 < x <= 1")
        out.append(x)
    return out


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want an integer >= 1") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want an integer >= 1")
    return n


def _share(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: want a number") from None
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: want 0 < x < 1")
    return x


def check_plan(
    cap: int, start: float, past: float, lists: Sequence[float], writers: int = 1
) -> str | None:
    """Why these values cannot measure the crossing (a usage error), or None."""
    load, end = plan(cap, start, past)
    if load < 1:
        return f"--start {start} of --cap {cap} loads no row"
    if end - load < 2 * writers:
        return (
            f"--writers {writers}: {end - load:,} new rows give a writer fewer than 2 "
            "(its first write, then a timed one)"
        )
    if end < cap + 2:
        return f"--past {past}: the writes end at {end:,} rows, want past {cap + 1:,} (the cap + 1)"
    over = [x for x in lists if load >= x * cap]
    if over:
        return (
            f"--start {start} loads {load:,} rows, not under --list-at {over[0]} of the cap: "
            "no write would run before listing (the ratio's baseline)"
        )
    return None


# -- the run ------------------------------------------------------------------------------


def open_options(cap: int, list_at: float, table: Table) -> dict[str, Any]:
    """`open_store`'s options for one configuration."""
    return {"embedder": table, "fold_local_rows": cap, "fold_list_at": list_at}


def _loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def timed_writes(
    store: Any,
    state: Callable[[], dict[str, Any]],
    fresh: Sequence[str],
    rows: int,
    end: int,
    log: Callable[[str], None],
    label: str,
) -> list[dict[str, Any]]:
    """`remember` each of `fresh` in turn, each timed alone, until the scope holds
    `end` live rows (`rows` now; a write that folds adds none); each write's row
    with the key's state after it (`state`, read outside the timing). A progress
    line every ~5 % of the writes."""
    writes: list[dict[str, Any]] = []
    every = max(1, (end - rows) // 20)
    for text in fresh:
        if rows >= end:
            return writes
        t0 = time.perf_counter()
        res = remember(store, text)
        t1 = time.perf_counter()
        dt = t1 - t0
        writes.append({"rows_before": rows, "s": dt, "end": t1, "folded": res.folded, **state()})
        rows += 0 if res.folded else 1
        if len(writes) % every == 0 or rows >= end:
            w = writes[-1]
            log(
                f"{label}: {len(writes):,} writes, {rows:,}/{end:,} rows, "
                f"{dt * 1e3:.1f} ms, key {w['state']}{_bounds(w)}"
            )
    if rows >= end:
        return writes
    folded = sum(w["folded"] for w in writes)
    raise RunFailed(f"{label}: texts ran out at {rows:,} live rows ({folded} writes folded)")


def remember(store: Any, text: str) -> Any:
    """One timed write: a new text in the bench's (scope, kind)."""
    return store.remember(SCOPE, text, kind=KIND)


def _scalar(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> Any:
    """The first column of the statement's first row (None: no row)."""
    row = conn.execute(sql, args).fetchone()
    return None if row is None else row[0]


def run_config(
    base: str,
    list_at: float,
    cap: int,
    texts: list[str],
    vecs: np.ndarray,
    load: int,
    end: int,
    log: Callable[[str], None],
    writers: int = 1,
) -> dict[str, Any]:
    """One configuration in a fresh schema of `base` (dropped afterwards): the bulk
    load, then timed remembers until the scope holds `end` live rows, from this
    process or from `writers` processes at once (`run_writers`)."""
    import psycopg

    from evals.pg_local import fresh_schema
    from memkit.store import open_store

    url = fresh_schema(base)
    out: dict[str, Any] = {"list_at": list_at, "cap": cap, "writers": writers}
    out["load_start"] = _loadavg()
    label = f"fold-crossing --list-at {list_at}"
    state_sql = ("SELECT to_jsonb(p) FROM fold_posted p WHERE sk = %s", (scope_key(SCOPE, KIND),))
    options = open_options(cap, list_at, Table(texts, vecs))
    with psycopg.connect(url, autocommit=True) as conn:
        schema = _scalar(conn, "SELECT current_schema()")

        def state() -> dict[str, Any]:
            return key_state(_scalar(conn, *state_sql))

        try:
            with open_store(url, **options) as store:
                if store.fold_search != "server":
                    raise RunFailed(
                        f"{label}: the store is in {store.fold_search!r} mode, "
                        "not 'server' (no cap to cross)"
                    )
                t0 = time.perf_counter()
                store.bulk_load(SCOPE, texts[:load], vecs[:load], kind=KIND)
                out["bulk_load_s"] = time.perf_counter() - t0
                rows = int(store.stats(SCOPE)["live"])
                out["loaded_rows"], out["state_after_load"] = rows, state()
                if writers == 1:
                    out["writes"] = timed_writes(store, state, texts[load:], rows, end, log, label)
            if writers > 1:  # after the loader's store is closed
                job = Job(url, options, remember, state_sql, key_state, label)
                out["writes"] = run_writers(writers, job, texts[load:], end - rows, rows)
            out["postings_rows"] = int(_scalar(conn, "SELECT count(*) FROM fold_postings"))
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    out["load_end"] = _loadavg()
    out["summary"] = summarize(out["writes"], cap, firsts=writers)
    return out


def main(argv: list[str] | None = None) -> int:
    from evals.pg_local import local_postgres

    ap = argparse.ArgumentParser(prog="memkit bench fold-crossing", description=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument(
        "--cap", type=_positive_int, default=20_000, help="the writer's fold_local_rows"
    )
    ap.add_argument(
        "--start", type=_share, default=0.70, help="share of the cap bulk-loaded first (0-1)"
    )
    ap.add_argument(
        "--past",
        type=float,
        default=0.05,
        help="writes go on until the scope holds cap x (1 + this) live rows",
    )
    ap.add_argument(
        "--list-at",
        type=list_ats,
        default=[1.0, 0.75],
        help="fold_list_at values, comma-separated (0 < x <= 1; 1.0: all rows at the "
        "crossing), one configuration each",
    )
    ap.add_argument(
        "--writers",
        type=_positive_int,
        default=1,
        help="processes writing the scope at once (each its own store; default 1)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the texts and vectors")
    ap.add_argument(
        "--out", help="write the raw rows and summaries here (JSON; gzipped if it ends .gz)"
    )
    ap.add_argument("--pg-dsn", help="a Postgres server to use (default: a private pgserver)")
    args = ap.parse_args(argv)
    if not 0 < args.past < float("inf"):
        ap.error(f"--past {args.past}: want a number > 0")
    why = check_plan(args.cap, args.start, args.past, args.list_at, args.writers)
    if why:
        ap.error(why)
    load, end = plan(args.cap, args.start, args.past)
    n = end + max(16, (end - load) // 50)  # a few spare texts for writes that fold
    texts = synthetic_texts(random.Random(args.seed), n)
    vecs = unit_vectors(np.random.default_rng(args.seed), n)
    result: dict[str, Any] = {
        "bench": "fold-crossing",
        "cap": args.cap,
        "start": args.start,
        "past": args.past,
        "seed": args.seed,
        "writers": args.writers,
        "loaded": load,
        "end_rows": end,
        "configs": [],
    }

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def save() -> None:
        if args.out:  # a run at the default cap has ~70,000 rows a configuration
            text = json.dumps(result, indent=1) + "\n"
            if args.out.endswith(".gz"):
                Path(args.out).write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
            else:
                Path(args.out).write_text(text)

    with local_postgres(args.pg_dsn, None if args.pg_dsn else "1GB") as base:
        for x in args.list_at:
            config = run_config(base, x, args.cap, texts, vecs, load, end, log, args.writers)
            result["configs"].append(config)
            save()
            try:
                check_listed(config)
            except RunFailed:
                print(render(result["configs"]))
                raise
    print(render(result["configs"]))
    return 0
