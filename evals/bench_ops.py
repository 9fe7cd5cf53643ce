"""`--hnsw-ops` of `memkit bench store --backend postgres`: pgvector's operator
classes for one scope's HNSW index, side by side in the same run.

Issue #36's 1M scope needs its scan ~4x cheaper a step; `vector_ip_ops` (the
negative inner product, `<#>`) was a candidate because a cosine is a dot
product and two norms. memkit stores unit vectors (every write path
normalises: `normalize_rows`), so on its rows the two orders agree. Each
listed class gets its own partial index on the big scope (the store's
predicate and expression, the same graph and build settings, a plain build),
and the same queries are asked of each at each ef_search, the classes'
order alternated per ef_search. A query is the bench's own SQL (the ids of the
`ef_search` nearest rows, so the server's scan is what is timed, not the
vectors' transfer or the client's ranking); its recall@8 is the top 8 of
those rows by the client's cosine against the exact top 8 of the scope's
stored vectors (ties at the 8th counted, `bench_ann.recall_with_ties`).
Baselines: exact 1.000, a random ranking 8 / rows. A plan that does not use
the index it names is an error, never a silent exact scan.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from evals.bench_ann import recall_with_ties
from evals.bench_data import LIMIT, percentiles
from memkit.embed import normalize_rows
from memkit.errors import ConfigError, MemkitError

OPS = {"cosine": ("vector_cosine_ops", "<=>"), "ip": ("vector_ip_ops", "<#>")}
"""--hnsw-ops names: (pgvector operator class, its distance operator)."""


def check_ops(names: list[str]) -> list[str]:
    """The listed operator classes, each known and named once (ConfigError otherwise)."""
    bad = [n for n in names if n not in OPS]
    if bad or not names or len(set(names)) != len(names):
        raise ConfigError(f"--hnsw-ops {','.join(names)!r}: want distinct names of {sorted(OPS)}")
    return names


def _where(conn: Any, scope: str) -> str:
    """The store's predicate of a scope's HNSW index (written again here: evals use
    only memkit's documented names, tests/test_boundaries.py)."""
    from psycopg import sql

    lit = sql.Literal(scope).as_string(conn)
    return f"scope_id = {lit} AND superseded_by IS NULL AND embedding IS NOT NULL"


def scope_matrix(conn: Any, scope: str) -> tuple[dict[int, int], np.ndarray]:
    """The scope's live embedded rows: rowid -> row of the matrix, and the rows
    normalised as the client normalises what it reads (pgvector's loader, binary)."""
    from pgvector.psycopg import register_vector

    register_vector(conn)
    sql = f"SELECT rowid, embedding FROM memories WHERE {_where(conn, scope)}"
    rows = conn.cursor(binary=True).execute(sql).fetchall()
    mat = normalize_rows(np.stack([r[1].to_numpy() for r in rows]))
    return {int(r[0]): j for j, r in enumerate(rows)}, mat


def build(
    conn: Any, scope: str, dim: int, ops: str, graph: tuple[int, int], settings: dict[str, str]
) -> dict:
    """A plain build of the scope's index under `ops`: its name, seconds, MB."""
    name = f"bench_hnsw_{ops}"
    conn.execute(f"DROP INDEX IF EXISTS {name}")  # a run stopped before its own drop
    for key, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, false)", (key, value))
    t = time.perf_counter()
    conn.execute(
        f"CREATE INDEX {name} ON memories USING hnsw ((embedding::vector({dim})) {OPS[ops][0]}) "
        f"WITH (m = {int(graph[0])}, ef_construction = {int(graph[1])}) "
        f"WHERE {_where(conn, scope)}"
    )
    seconds = time.perf_counter() - t
    for key in settings:
        conn.execute(f"RESET {key}")
    (size,) = conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone()
    return {"name": name, "build_s": seconds, "index_mb": size / 2**20}


def nearest_sql(conn: Any, scope: str, dim: int, ops: str) -> str:
    return (
        f"SELECT rowid FROM memories WHERE {_where(conn, scope)} "
        f"ORDER BY embedding::vector({dim}) {OPS[ops][1]} %s::vector({dim}) LIMIT %s"
    )


def _text(q: np.ndarray) -> str:
    return "[" + ",".join(repr(float(x)) for x in q) + "]"


def uses_index(conn: Any, query: str, name: str, q: np.ndarray, ef: int) -> None:
    """MemkitError unless the plan of `query` scans index `name`."""
    plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {query}", (_text(q), ef)).fetchall())
    if name not in plan:
        raise MemkitError(f"the ops bench's query does not use {name}:\n{plan}")


def exact_top(mat: np.ndarray, q: np.ndarray, k: int = LIMIT) -> list[tuple[int, float]]:
    """(row, cosine) of the k nearest rows of `mat`, best first."""
    cos = mat @ q
    top = np.argpartition(-cos, min(k, len(cos) - 1))[:k]
    return sorted(((int(j), float(cos[j])) for j in top), key=lambda t: -t[1])


def ops_pass(conn: Any, query: str, qs: np.ndarray, ef: int, rows: dict[int, int], mat, want):
    """One pass of the queries at `ef`: p50/p95 ms, recall@8 and recall@1."""
    conn.execute(f"SET hnsw.ef_search = {int(ef)}")
    times, r8, r1 = [], [], []
    for q, w in zip(qs, want, strict=True):
        text = _text(q)
        t = time.perf_counter()
        ids = conn.execute(query, (text, max(ef, LIMIT))).fetchall()
        times.append(time.perf_counter() - t)
        js = np.fromiter((rows[int(i[0])] for i in ids), dtype=np.int64, count=len(ids))
        cos = mat[js] @ q
        got = sorted(zip(js.tolist(), cos.tolist(), strict=True), key=lambda t: -t[1])[:LIMIT]
        r8.append(recall_with_ties(got, w))
        r1.append(recall_with_ties(got[:1], w[:1]))
    p50, p95 = percentiles(times)
    return {"p50": p50, "p95": p95, "recall8": float(np.mean(r8)), "recall1": float(np.mean(r1))}


def ops_sweep(
    url: str,
    scope: str,
    qs: np.ndarray,
    efs: list[int],
    ops: list[str],
    graph: tuple[int, int],
    settings: dict[str, str],
    log,
) -> list[dict]:
    """Each class's index built on `scope`, then each ef_search asked of each (see the
    module docstring); one dict per (ops, ef_search), the build's seconds in each."""
    import psycopg

    out: list[dict] = []
    with psycopg.connect(url, autocommit=True) as conn:
        rows, mat = scope_matrix(conn, scope)
        dim = mat.shape[1]
        qs = np.asarray([q / np.linalg.norm(q) for q in qs], dtype=np.float32)
        want = [exact_top(mat, q) for q in qs]
        built: dict[str, dict] = {}
        try:
            for o in ops:
                built[o] = build(conn, scope, dim, o, graph, settings)
                log(f"  ops {o}: build {built[o]['build_s']:.1f} s, {built[o]['index_mb']:.0f} MB")
            conn.execute("SET enable_sort = off")
            for o in ops:
                uses_index(conn, nearest_sql(conn, scope, dim, o), built[o]["name"], qs[0], efs[0])
            for i, ef in enumerate(efs):
                for o in ops if i % 2 == 0 else ops[::-1]:
                    got = ops_pass(conn, nearest_sql(conn, scope, dim, o), qs, ef, rows, mat, want)
                    got |= {"ops": o, "ef_search": ef, "build_s": built[o]["build_s"]}
                    got["index_mb"] = built[o]["index_mb"]
                    out.append(got)
                    log(
                        f"  ops {o} ef_search {ef}: p50 {got['p50']:.2f} ms, p95 "
                        f"{got['p95']:.2f}, recall@8 {got['recall8']:.3f}, "
                        f"recall@1 {got['recall1']:.3f}"
                    )
        finally:
            for o in ops:
                conn.execute(f"DROP INDEX IF EXISTS bench_hnsw_{o}")
    return out


def render_ops(rows: list[dict]) -> str:
    """The --hnsw-ops rows ('' when no row has them), by size, ef_search, class."""
    lines = [
        "| live rows | graph m / ef_construction | ops | build s / index MB | ef_search "
        "| scan p50 / p95 ms | recall@8 | recall@1 | load 1/5/15 |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        graph = r.get("ops_graph", ["–", "–"])
        for e in sorted(r.get("ops_sweep", []), key=lambda e: (e["ef_search"], e["ops"])):
            lines.append(
                f"| {r['rows']:,} | {graph[0]} / {graph[1]} | {e['ops']} "
                f"| {e['build_s']:.1f} / {e['index_mb']:.0f} | {e['ef_search']} "
                f"| {e['p50']:.2f} / {e['p95']:.2f} | {e['recall8']:.3f} | {e['recall1']:.3f} "
                f"| {r.get('load', '–')} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""
