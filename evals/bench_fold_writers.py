"""Several writers of one scope for `memkit bench fold-crossing --writers N` (issue #36).

With one writer the crossing write holds the scope's lock alone; with several,
every other writer of the scope waits behind it, and while a key is listed
ahead every writer posts a few pending rows a write. This module runs N
processes (forked, each its own store and connection, the same options), each
remembering its share of the fresh texts (`quotas`) one at a time, each write
timed alone (a write's time includes its wait for the scope's lock) and its
key's state read after it, outside the timing, on the writer's own connection.
Every writer's first write builds its own trigram index; the writers then
wait for each other (a barrier), so the timed writes start together.

`order` makes the writers' rows one run: a write's `rows_before` is the loaded
rows plus the rows added by the writes that ended before it (end times are
CLOCK_MONOTONIC, shared by the processes; a write commits under the scope's
lock just before it ends, so end order is commit order up to the few
microseconds between the commit and the clock read). Leaves out: what a
writer waited for (lock or CPU; both are in its time) and several scopes.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evals.cli.base import RunFailed

BARRIER_S = 3600.0
"""How long a writer waits at the barrier for the others' first writes (each
builds its index from the loaded rows: seconds at the default cap)."""


def quotas(rows: int, n: int) -> list[int]:
    """`rows` new rows split over `n` writers, the larger shares first."""
    return [rows // n + (1 if i < rows % n else 0) for i in range(n)]


def order(per_writer: Sequence[Sequence[dict[str, Any]]], load: int) -> list[dict[str, Any]]:
    """The writers' writes as one run: every writer's first write first (it builds
    that writer's index: reported apart), then the others, each group by end time.
    Each write gets `rows_before` (`load` plus the rows the writes that ended
    before it added; a write that folds adds none) and `writer` (its index)."""
    tagged = [
        {**w, "writer": i, "first": j == 0}
        for i, ws in enumerate(per_writer)
        for j, w in enumerate(ws)
    ]
    tagged.sort(key=lambda w: w["end"])
    rows = load
    for w in tagged:
        w["rows_before"] = rows
        rows += 0 if w["folded"] else 1
    firsts = [w for w in tagged if w["first"]]
    rest = [w for w in tagged if not w["first"]]
    for w in tagged:
        del w["first"]
    return firsts + rest


@dataclass(frozen=True)
class Job:
    """What every writer shares: the store and its options, the timed write, and
    the statement (with its decoder) reading the key's state after each write."""

    url: str
    options: dict[str, Any]
    write: Callable[[Any, str], Any]
    state_sql: tuple[str, tuple[Any, ...]]
    key_state: Callable[[Any], dict[str, Any]]
    label: str


def _writer(i: int, job: Job, texts: Sequence[str], quota: int, barrier: Any, out: Any) -> None:
    """One writer process: `quota` new rows, then its rows (or its error) on `out`."""
    try:
        import psycopg

        from memkit.store import open_store

        writes: list[dict[str, Any]] = []
        added = 0
        every = max(1, quota // 20)
        with (
            psycopg.connect(job.url, autocommit=True) as conn,
            open_store(job.url, **job.options) as store,
        ):
            for text in texts:
                if added >= quota:
                    break
                t0 = time.perf_counter()
                res = job.write(store, text)
                t1 = time.perf_counter()
                got = conn.execute(*job.state_sql).fetchone()
                row = {"s": t1 - t0, "end": t1, "folded": res.folded}
                writes.append({**row, **job.key_state(None if got is None else got[0])})
                added += 0 if res.folded else 1
                if len(writes) == 1:
                    barrier.wait(BARRIER_S)
                if i == 0 and len(writes) % every == 0:
                    state = writes[-1]["state"]
                    print(
                        f"{job.label}: writer 0 {added:,}/{quota:,} rows, key {state}",
                        file=sys.stderr,
                        flush=True,
                    )
        if added < quota:
            raise RunFailed(f"texts ran out at {added:,} of {quota:,} rows")
        out.put((i, writes, None))
    except BaseException as e:  # reported to the parent, which fails loudly
        barrier.abort()
        out.put((i, None, f"{type(e).__name__}: {e}"))


def run_writers(
    n: int, job: Job, fresh: Sequence[str], rows: int, load: int
) -> list[dict[str, Any]]:
    """`n` writer processes adding `rows` rows between them (writer i remembers
    `fresh[i::n]` until its quota is added), their writes ordered as one run
    (`order`, from `load` rows). RunFailed naming the writer when one fails or
    dies without a word; the others are stopped."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    barrier = ctx.Barrier(n)
    parts = quotas(rows, n)
    procs = [
        ctx.Process(target=_writer, args=(i, job, fresh[i::n], parts[i], barrier, out), daemon=True)
        for i in range(n)
    ]
    for p in procs:
        p.start()
    got: dict[int, list[dict[str, Any]]] = {}
    try:
        while len(got) < n:
            try:
                i, writes, err = out.get(timeout=30)
            except queue.Empty:
                dead = [j for j, p in enumerate(procs) if j not in got and p.exitcode is not None]
                if dead:
                    j = dead[0]
                    raise RunFailed(
                        f"{job.label}: writer {j} exited ({procs[j].exitcode}) without its rows"
                    ) from None
                continue
            if err is not None:
                raise RunFailed(f"{job.label}: writer {i} failed: {err}")
            got[i] = writes
    finally:
        for p in procs:
            if p.is_alive() and len(got) < n:
                p.terminate()
            p.join(60)
    return order([got[i] for i in range(n)], load)
