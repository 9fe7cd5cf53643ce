"""SIGKILL a worker at random moments inside chosen store calls (no tests here).

One harness for the crash tests (`test_consolidate_crash`, `test_consolidate_parking`);
each passes its worker loop (`crash_loops.<name>`) and its own invariant check.

A "zygote" child imports memkit once and, on each request, forks a worker
that opens the store, says so, and runs the loop. The worker appends a line to
an event file when it enters ("c") and leaves ("d") each *watched* store
method (e.g. `commit_pass`). The harness picks the kill moment relative to
those events, not to the wall clock, so the kills stay inside the watched
calls however loaded the machine is: it waits until the worker has entered a
watched method 1-3 times (randomly; later entries mean earlier passes
finished), then sleeps a random fraction of up to 1.5x the median duration of
that method measured so far, then SIGKILLs. Afterwards the event file says
whether the kill landed inside a watched call (its last line is an entry).
Forking from a warm zygote keeps dozens of kills within seconds.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

ZYGOTE = textwrap.dedent(
    """
    import asyncio, importlib, os, sys, time

    DB, LOOP, EVENTS, WATCH = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    module, name = LOOP.split(":")
    loop = getattr(importlib.import_module(module), name)
    # warm the backend's imports once, so every forked worker starts working at once
    from memkit.store import is_postgres_url, open_store
    if is_postgres_url(DB):
        import memkit.store.postgres, psycopg, pgvector.psycopg
    else:
        import memkit.store

    def watched(store, fd):
        for method in WATCH:
            real = getattr(store, method)

            def wrap(*a, _real=real, _name=method, **k):
                os.write(fd, f"c {time.monotonic()} {_name}\\n".encode())
                try:
                    return _real(*a, **k)
                finally:
                    os.write(fd, f"d {time.monotonic()} {_name}\\n".encode())

            setattr(store, method, wrap)
        return store

    def work():
        fd = os.open(EVENTS, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        store = watched(open_store(DB, embedder=None), fd)
        print(f"open {os.getpid()}", flush=True)  # the kill clock starts once the store is open
        asyncio.run(loop(store))

    print("ready", flush=True)
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                work()
            finally:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        print(f"reaped {status}", flush=True)
    """
)


@dataclass
class KillReport:
    kills: int = 0
    inside: int = 0
    """Kills that landed inside a watched call (entered, not left)."""
    inside_by: Counter = field(default_factory=Counter)
    """The same kills per watched method."""
    durations: list[float] = field(default_factory=list)
    """Seconds of each watched call that completed, over all rounds."""


def stage_runs(db: str, scope: str, start: int, n: int) -> dict[str, str]:
    """Stage n one-message rollouts (run ids run-<start>..); rollout id -> run id."""
    from memkit.consolidate import build_rollout
    from memkit.store import open_store

    staged = {}
    with open_store(db, embedder=None) as store:
        for i in range(start, start + n):
            run_id = f"run-{i:04d}"
            msgs = [{"role": "user", "content": f"evidence {i}"}]
            r = build_rollout(scope, msgs, "", run_id=run_id)
            assert store.stage_rollout(r)
            staged[r.id] = run_id
    return staged


def assert_file_sound(db: str) -> None:
    """On SQLite, the file passes `PRAGMA integrity_check` (Postgres: nothing to do)."""
    import sqlite3

    from memkit.store import is_postgres_url

    if is_postgres_url(db):
        return
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        con.close()


def _events(path: Path) -> list[tuple[str, float, str]]:
    """(kind, time, method) per line of the event file; "c" enters, "d" leaves."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        kind, t, method = [*line.split(" ", 2), "", ""][:3]
        if kind in ("c", "d") and t:
            out.append((kind, float(t), method))
    return out


def _completed(events: list[tuple[str, float, str]]) -> list[float]:
    return [b[1] - a[1] for a, b in itertools.pairwise(events) if a[0] == "c" and b[0] == "d"]


def kill_rounds(
    tmp_path: Path,
    db: str,
    loop: str,
    watch: tuple[str, ...],
    *,
    after_round: Callable[[], None],
    target_inside: int,
    max_kills: int,
    seed: int,
    target_each: int = 0,
    more: Callable[[], bool] = lambda: False,
    start_timeout: float = 60.0,
) -> KillReport:
    """SIGKILL workers running `loop` ("module:function" of an async `loop(store)`)
    until `target_inside` kills landed inside a `watch`ed method, and at least
    `target_each` inside each of them, and `more()` is false; or `max_kills`.
    `after_round()` checks the invariant (and restocks the queue) after each kill.
    Returns what happened; the caller asserts on it."""
    script = tmp_path / "zygote.py"
    script.write_text(ZYGOTE)
    events = tmp_path / "events"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    z = subprocess.Popen(
        [sys.executable, str(script), db, loop, str(events), ",".join(watch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
    )
    rng = random.Random(seed)
    report = KillReport()
    try:
        line = z.stdout.readline().strip()
        if line != "ready":
            z.kill()
            raise AssertionError(f"zygote did not start: {line!r} {z.stderr.read()}")
        while report.kills < max_kills and (
            report.inside < target_inside
            or any(report.inside_by[m] < target_each for m in watch)
            or more()
        ):
            after_round()
            z.stdin.write("go\n")
            z.stdin.flush()
            opened = z.stdout.readline().split()
            if opened[:1] != ["open"]:
                z.kill()
                raise AssertionError(f"worker did not start: {opened} {z.stderr.read()}")
            pid = int(opened[1])
            entries = rng.randint(1, 3)
            typical = statistics.median(report.durations) if report.durations else 0.005
            deadline = time.monotonic() + start_timeout
            while sum(1 for k, *_ in _events(events) if k == "c") < entries:
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    z.kill()
                    raise AssertionError(
                        f"worker never entered {watch} {entries} times: {z.stderr.read()}"
                    )
                time.sleep(0.0005)
            time.sleep(rng.uniform(0, 1.5 * typical))
            os.kill(pid, signal.SIGKILL)
            reaped = z.stdout.readline().strip()
            if not reaped.startswith("reaped"):
                z.kill()
                raise AssertionError(f"zygote: {reaped!r} {z.stderr.read()}")
            status = int(reaped.split()[1])
            if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
                z.kill()
                raise AssertionError(
                    f"worker ended on its own (status {status}): {z.stderr.read()}"
                )
            got = _events(events)
            report.kills += 1
            if got and got[-1][0] == "c":
                report.inside += 1
                report.inside_by[got[-1][2]] += 1
            report.durations += _completed(got)
        after_round()
    finally:
        if z.poll() is None:
            z.stdin.close()
            z.wait(timeout=30)
    return report
