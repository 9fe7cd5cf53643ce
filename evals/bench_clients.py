"""The bench's freshly spawned clients (`evals.bench_backends`): a recall client
and a writer, each timed from opening the store to its first answer, with its
peak RSS. Spawned, not forked: nothing is inherited, so the RSS is the client's
own (a forked child would share the parent's corpus and tables)."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench_data import LIMIT

WRITER_TEXT = "a fresh writer's first note: the qzxv deploy runs on staging at dusk"
"""What the fresh writer remembers: a new row (no stored text is near it)."""


def status_mb(field: str, status: str | None = None) -> float | None:
    """A memory field of /proc/self/status (or of `status`), e.g. "VmRSS", in MB;
    None where it is not said (no /proc: not Linux), never a made-up 0."""
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return None
    for line in status.splitlines():
        fields = line.split()
        if fields[:1] == [f"{field}:"] and len(fields) >= 2 and fields[1].isdigit():
            return int(fields[1]) / 1024
    return None


def peak_rss_mb(status: str | None = None) -> float | None:
    """This process's peak RSS (VmHWM) in MB, or None (`status_mb`)."""
    return status_mb("VmHWM", status)


def rss_cell(mb: float | None) -> str:
    """A peak RSS for the log, or why there is none."""
    return "undefined (no /proc/self/status VmHWM)" if mb is None else f"{mb:.0f} MB"


def _recall_client(url: str, qs: np.ndarray, scope: str, out: Any) -> None:
    """Recalls of `qs` (no embedder: query vectors given): the seconds from opening
    the store to its first answer (a cold open: SQLite loads the scope's matrix)
    and the peak RSS, which on SQLite includes the matrix."""
    from memkit.store import open_store

    t = time.perf_counter()
    store = open_store(url, embedder=None, read_only=True)
    store.recall(scope, "q", LIMIT, query_embedding=qs[0])
    first = time.perf_counter() - t
    for q in qs[1:]:
        store.recall(scope, "q", LIMIT, query_embedding=q)
    store.close()
    out.put((first, peak_rss_mb()))


def _writer_client(url: str, emb: Any, scope: str, options: dict, out: Any) -> None:
    """One `remember` of WRITER_TEXT (fold-in searched): the seconds from opening
    the store (with `options`) to its return (a writer builds the scope's trigram
    index from every live row's text) and the peak RSS."""
    from memkit.store import open_store

    t = time.perf_counter()
    store = open_store(url, embedder=emb, **options)
    store.remember(scope, WRITER_TEXT)
    first = time.perf_counter() - t
    store.close()
    out.put((first, peak_rss_mb()))


def fresh_recall(url: str, qs: np.ndarray, scope: str) -> tuple[float, float | None]:
    """(seconds from open to the first recall, peak RSS MB or None) of a fresh client."""
    first, rss = spawned(_recall_client, url, qs, scope)
    return first, rss


def fresh_writer(
    url: str, emb: Any, scope: str, options: dict | None = None
) -> tuple[float, float | None]:
    """(seconds from open to the first remember's return, peak RSS MB or None) of a
    fresh writer opened with `options`; `emb` must embed WRITER_TEXT (and should
    know nothing else)."""
    first, rss = spawned(_writer_client, url, emb, scope, options or {})
    return first, rss


def spawned(target: Any, *args: Any) -> Any:
    """What `target(*args, out)` put on `out`, run in a freshly spawned process;
    RuntimeError naming the exit code when it dies without an answer or exits
    non-zero."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, out))
    p.start()
    while True:
        try:
            got = out.get(timeout=1.0)
            break
        except queue.Empty:
            if not p.is_alive() and out.empty():
                p.join()
                raise RuntimeError(
                    f"bench client {target.__name__} exited {p.exitcode} without an answer"
                ) from None
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"bench client {target.__name__} exited {p.exitcode}")
    return got
