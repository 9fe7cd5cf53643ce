"""The write half of `memkit bench store --backend postgres` (`evals.bench_backends`):
remembers/s from 1 and 4 processes racing from a common start, `remember_many`,
`synchronous_commit` off, the bare-INSERT ceilings (among them the lock shape:
a `remember`'s two round trips under one locked row, no client work between,
with the 4-process rate's share of it), and the CPU each write race
took (the writers' own and the whole machine's, per write, and the cores busy),
so a reader sees whether the machine's cores or a lock bound a rate. Leaves
out the recall half and the corpus (`evals.bench_backends`, `evals.bench_data`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
from pathlib import Path
from typing import Any, NamedTuple

from memkit.errors import ConfigError

SCOPE = "bench"
"""The scope the writers write (the bench's big scope)."""


OWN_SCOPES = tuple(f"{SCOPE}-own-{k}" for k in range(4))
"""The 4-process race's other shape: each writer its own scope, each a copy of
the big scope's rows (as an agent's tools pin it to its own scope)."""


def _writer(url, emb, scope, batch, ready, go, out, options, many) -> None:
    from memkit.store import open_store

    store = open_store(url, embedder=emb, **options)
    store.remember(scope, batch[0])  # loads the fold-in index before the clock starts
    ready.release()
    go.wait()
    cpu = time.process_time()
    if many:
        store.remember_many(scope, batch[1:])
    else:
        for text in batch[1:]:
            store.remember(scope, text)
    out.put(time.process_time() - cpu)
    store.close()


def _write_rate(
    url: str,
    emb: Any,
    batches: list[list[str]],
    options: dict | None = None,
    many: bool = False,
    scopes: tuple[str, ...] | None = None,
) -> tuple[float, dict[str, float | None]]:
    """Remembers per second of len(batches) processes writing at once (`many`:
    each process's batch in one `remember_many`; `scopes`: process k writes
    scopes[k], else all write `SCOPE`), and the race's CPU cells."""
    each = [(url, emb, SCOPE if scopes is None else scopes[k], b) for k, b in enumerate(batches)]
    race = _race(_writer, each, (options or {}, many))
    n = sum(len(b) - 1 for b in batches)
    return n / race.wall, cpu_cells(race, n)


class Race(NamedTuple):
    """One race of writer processes: its wall seconds, the CPU seconds the writers
    spent (their own, summed) and the machine's busy CPU seconds over it (None
    where /proc/stat cannot be read)."""

    wall: float
    client_cpu: float
    machine_cpu: float | None


def machine_busy_s(stat: str | None = None) -> float | None:
    """CPU seconds all cores have been busy since boot, from /proc/stat's `cpu`
    line (`stat`: its text; read when None): every field but idle and iowait
    (guest time is inside user). None when it cannot be read or parsed."""
    try:
        if stat is None:
            stat = Path("/proc/stat").read_text()
        fields = stat.splitlines()[0].split()
        if fields[0] != "cpu":
            return None
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, IndexError, ValueError):
        return None
    if len(ticks) < 8:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _race(target: Any, each: list[tuple[Any, ...]], common: tuple[Any, ...]) -> Race:
    """One forked process per `each` entry, `target(*entry, ready, go, out, *common)`;
    each releases `ready` when set up, starts its clock when `go` is set and puts
    its CPU seconds spent since on `out`. The wall time runs from the common start
    until every process is done."""
    ctx = mp.get_context("fork")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*e, ready, go, out, *common)) for e in each]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    busy = machine_busy_s()
    t = time.perf_counter()
    go.set()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"bench process {target.__name__} exited {p.exitcode}")
    wall = time.perf_counter() - t
    after = machine_busy_s()
    cpu = sum(out.get(timeout=10) for _ in procs)
    return Race(wall, cpu, None if busy is None or after is None else after - busy)


def cpu_cells(race: Race, writes: int) -> dict[str, float | None]:
    """The CPU columns of one write race: per write (ms) and cores busy."""
    machine = race.machine_cpu
    return {
        "client_ms": 1000 * race.client_cpu / writes,
        "machine_ms": None if machine is None else 1000 * machine / writes,
        "cores": None if machine is None else machine / race.wall,
    }


_INSERT = "INSERT INTO bare (content, embedding) VALUES (%s, %s)"
_LOCK = "UPDATE bare_lock SET n = n + 1 WHERE k = 1 RETURNING n"


def _bare_writer(url, texts, vec, shape, ready, go, out) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS bare_lock (k int PRIMARY KEY, n bigint)")
        c.execute("INSERT INTO bare_lock VALUES (1, 0) ON CONFLICT DO NOTHING")
        ready.release()
        go.wait()
        cpu = time.process_time()
        for text in texts:
            if shape == "two_trips":  # memkit's shape: the lock's row, then insert + sync
                with c.pipeline() as p:
                    c.execute(_LOCK).fetchone()  # a flush, not a sync: the lock stays held
                    c.execute(_INSERT, (text, vec))
                    p.sync()  # commits the pipeline's implicit transaction
                continue
            with c.transaction():
                if shape == "locked":
                    c.execute(_LOCK)
                c.execute(_INSERT, (text, vec))
        out.put(time.process_time() - cpu)


BARE_SHAPES = ("plain", "locked", "two_trips")
"""`bare_rate`'s transaction shapes."""


def bare_rate(
    url: str, batches: list[list[str]], vec: str, shape: str = "plain"
) -> tuple[float, dict[str, float | None]]:
    """The ceiling of durable writes on this server: INSERT + COMMIT per text into a
    plain table (no index), from len(batches) processes at once. `shape`
    "locked": each transaction first updates one shared row, as a scope's
    writers lock its row (one round trip under the lock); "two_trips": the
    shape of a `remember` (`memkit.store.postgres.PgDb.begin_write`), two
    round trips under the lock with no client work between: the first locks
    the row and returns it, the second inserts and commits (a pipeline's sync).
    Per second, and the race's CPU cells."""
    import psycopg

    if shape not in BARE_SHAPES:
        raise ValueError(f"shape={shape!r}: want one of {BARE_SHAPES}")
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS bare (content text, embedding vector)")
    race = _race(_bare_writer, [(url, b, vec, shape) for b in batches], ())
    n = sum(len(b) for b in batches)
    return n / race.wall, cpu_cells(race, n)


def _keep(row: dict, key: str, measured: tuple[float, dict[str, float | None]]) -> None:
    """A write race's rate into `row[key]` and its CPU cells into `row["cpu"][key]`."""
    rate, cells = measured
    row[key] = rate
    row.setdefault("cpu", {})[key] = cells


def load_own_scopes(url: str, emb: Any, texts: list[str], vecs: Any, row: dict, log) -> None:
    """Setup, not measured: `OWN_SCOPES`, each a copy of the big scope's rows,
    so a writer in its own scope probes a fold-in index as big as the shared one."""
    from memkit.store import open_store

    store = open_store(url, embedder=emb)
    t = time.perf_counter()
    for scope in OWN_SCOPES:
        store.bulk_load(scope, texts, vecs)
    store.close()
    row["setup_own_scopes_s"] = time.perf_counter() - t
    log(
        f"  setup (not measured): {len(OWN_SCOPES)} own scopes of {len(texts):,} rows "
        f"{row['setup_own_scopes_s']:.1f} s"
    )


def measure(backend, url, emb, batch_texts, writes, vec0, row, log, opts=None) -> None:
    """The write rates of `evals.bench_backends.bench_backend` into `row`, each
    with its CPU cells in `row["cpu"]` (see the module docstring); every writer
    opens with `opts` (e.g. `fold_local_rows`). The own-scopes race needs
    `load_own_scopes` first."""
    opts = dict(opts or {})
    four = [batch_texts[writes * (k + 1) : writes * (k + 2)] for k in range(4)]
    _keep(row, "rem_1", _write_rate(url, emb, [batch_texts[:writes]], opts))
    log(f"  remembers/s, 1 process: {row['rem_1']:.0f}")
    _keep(row, "rem_4", _write_rate(url, emb, four, opts))
    log(f"  remembers/s, 4 processes: {row['rem_4']:.0f}")
    _keep(row, "rem_4_own", _write_rate(url, emb, four, opts, scopes=OWN_SCOPES))
    log(f"  remembers/s, 4 processes, each its own scope: {row['rem_4_own']:.0f}")
    _keep(row, "many_1", _write_rate(url, emb, [batch_texts[: writes // 2]], opts, many=True))
    log(f"  remembers/s, remember_many: {row['many_1']:.0f}")
    if backend == "postgres":
        off = {"synchronous_commit": False, **opts}  # 4 processes wrote these: all fold now
        _keep(row, "rem_1_async", _write_rate(url, emb, [batch_texts[writes : 2 * writes]], off))
        _keep(row, "rem_4_async", _write_rate(url, emb, four, off))
        log(
            f"  synchronous_commit off: {row['rem_1_async']:.0f}/s, "
            f"4 processes {row['rem_4_async']:.0f}/s"
        )
        vec = "[" + ",".join(map(repr, vec0.astype(float).tolist())) + "]"
        quarter = [batch_texts[writes * k : writes * (k + 1)] for k in range(4)]
        _keep(row, "bare_1", bare_rate(url, [batch_texts[:writes]], vec))
        _keep(row, "bare_4", bare_rate(url, quarter, vec))
        _keep(row, "bare_4_locked", bare_rate(url, quarter, vec, "locked"))
        _keep(row, "shape_4", bare_rate(url, quarter, vec, "two_trips"))
        row["rem_4_of_shape"] = of_ceiling(row["rem_4"], row["shape_4"])
        log(
            f"  bare INSERT ceiling: 1 process {row['bare_1']:.0f}/s, 4 processes "
            f"{row['bare_4']:.0f}/s, 4 processes on one locked row {row['bare_4_locked']:.0f}/s"
        )
        share = row["rem_4_of_shape"]
        log(
            f"  lock-shape ceiling (2 round trips under the lock), 4 processes: "
            f"{row['shape_4']:.0f}/s; remember from 4 processes is "
            f"{'undefined' if share is None else f'{share:.2f}'} of it"
        )
    if machine_busy_s() is None:
        log("  CPU per write: /proc/stat unreadable here, the machine columns are undefined")


def of_ceiling(rate: float, ceiling: float) -> float | None:
    """`rate` as a share of `ceiling` (None, undefined, when the ceiling is not positive)."""
    return rate / ceiling if ceiling > 0 else None


WRITE_KINDS = {
    "rem_1": "remember, 1 process",
    "rem_4": "remember, 4 processes",
    "rem_4_own": "remember, 4 processes, each its own scope",
    "many_1": "remember_many",
    "rem_1_async": "sync commit off, 1 process",
    "rem_4_async": "sync commit off, 4 processes",
    "bare_1": "bare INSERT, 1 process",
    "bare_4": "bare INSERT, 4 processes",
    "bare_4_locked": "bare INSERT, 4 processes, one locked row",
    "shape_4": "lock shape: 2 round trips under one locked row, 4 processes",
}


def render_cpu(rows: list[dict]) -> str:
    """The CPU a write took in each write race ('' when no row measured one):
    the writers' own CPU and the machine's busy CPU per write, and the cores busy
    (`cpu_cells`); "undefined" where /proc/stat could not be read."""
    lines = [
        f"| backend | live rows | writes | per s | writers' CPU ms / write "
        f"| machine CPU ms / write | cores busy (of {os.cpu_count()}) | load 1/5/15 |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        for key, name in WRITE_KINDS.items():
            cells = r.get("cpu", {}).get(key)
            if cells is None:
                continue
            m, c = cells["machine_ms"], cells["cores"]
            lines.append(
                f"| {r['backend']} | {r['rows']:,} | {name} | {r[key]:,.0f} "
                f"| {cells['client_ms']:.2f} | {'undefined' if m is None else f'{m:.2f}'} "
                f"| {'undefined' if c is None else f'{c:.2f}'} | {r.get('load', '–')} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""


PROBES = 200
"""`fold_target` calls `fold_probe_times` times (half stored texts reworded, half new)."""


def fold_probe_times(store: Any, texts: list[str], row: dict, log) -> None:
    """p50/p95 ms of a fold-in decision's candidate search (`fold_target`: the
    probe and exact scoring, no write) after one untimed call (client mode: it
    builds the in-memory index, timed apart as `probe_first_s`)."""
    from evals.bench_data import percentiles

    rng = random.Random(len(texts))
    qs = [
        rng.choice(texts) + " again" if i % 2 == 0 else f"a new note {i} on {rng.random():.6f}"
        for i in range(PROBES)
    ]
    t = time.perf_counter()
    store.fold_target(SCOPE, qs[0])
    row["probe_first_s"] = time.perf_counter() - t
    times, folds = [], 0
    for q in qs:
        t = time.perf_counter()
        folds += store.fold_target(SCOPE, q) is not None
        times.append(time.perf_counter() - t)  # seconds: `percentiles` gives ms
    row["probe_p50"], row["probe_p95"] = percentiles(times)
    row["probe_folds"] = folds
    log(
        f"  fold-in probe ({row.get('fold_search', 'client')}): "
        f"first {row['probe_first_s']:.2f} s, "
        f"p50 {row['probe_p50']:.2f} ms, p95 {row['probe_p95']:.2f} ms, {folds} of {PROBES} fold"
    )


def parse_fold_search(text: str) -> tuple[str, dict[str, int]]:
    """A `--fold-search` mode: "client", "server" or "server:local=N" as the
    database's mode and the options every client opens with (`fold_local_rows`);
    ConfigError naming anything else."""
    mode, _, rest = text.partition(":")
    if mode not in ("client", "server") or (rest and mode != "server"):
        raise ConfigError(f"{text!r}: want client, server or server:local=N")
    if not rest:
        return mode, {}
    key, _, value = rest.partition("=")
    if key != "local" or not value.isdigit():
        raise ConfigError(f"{text!r}: want server:local=N (N an int >= 0)")
    return mode, {"fold_local_rows": int(value)}


def fold_modes(text: str) -> list[str]:
    """`--fold-search`'s comma-separated modes, each checked (`parse_fold_search`)."""
    modes = [m.strip() for m in text.split(",")]
    for m in modes:
        parse_fold_search(m)
    return modes


def fold_options(backend: str, text: str, row: dict) -> tuple[str | None, dict[str, Any]]:
    """A bench row's Postgres fold-in mode (None on SQLite; noted in `row`) and the
    options every client of the row opens with (the mode, and `fold_local_rows`
    when named)."""
    if backend != "postgres":
        return None, {}
    mode, opts = parse_fold_search(text)
    row["fold_search"] = mode
    return mode, {"fold_search": mode, **opts}


def local_rows(store: Any) -> int:
    """A server-mode PostgresStore's cap on its own fold-in index."""
    return int(store.fold_local_rows)


def backend_cell(r: dict) -> str:
    """The backend, and its fold-in mode when the database finds the candidates
    (with the writers' cap on their own index, `fold_local_rows`, when not 0)."""
    if r.get("fold_search") != "server":
        return str(r["backend"])
    local = r.get("fold_local_rows", 0)
    return f"{r['backend']} (fold server" + (f", local ≤ {local:,})" if local else ")")
