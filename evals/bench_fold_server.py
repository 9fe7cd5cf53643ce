"""`memkit bench fold-server`: fold-in candidates searched in Postgres (a prototype, issue #36).

Would the database, not each writer's memory, find fold-in's candidates? The
rows' prefixes under a fixed gram order (`evals.fold_prefix`: exact for any
fixed order) go into a postings table, btree on (sk, gram, rowid) (`btree`)
and a second one with the row's gram count in the key, so a probe reads only
rows of a possible length (`btree_len`); `--gin` adds an int8[] per row under
a GIN index. For each size, one scope of synthetic texts
(`evals.bench_data.synthetic_texts`) or LongMemEval sentences
(`--corpus longmemeval`) is bulk-loaded into a real `PostgresStore` schema,
the postings backfilled by COPY, and `--queries` probes run (half stored
texts reworded by one word, half new texts): the client computes the probe's
prefix, the server counts hits (GROUP BY ... HAVING) and joins the live rows
in the window, the client scores Jaccard exactly. Every answer is compared
with `GramIndex.similar` on the same rows (`disagree` must be 0). Reported:
probe p50/p95 ms (client work and round trip) beside the in-memory index's
in the same run, candidates and postings read per probe, the tables' size,
the backfill's time, and one durable single-row write alone, with its
postings, and with its prefix array (`--writes` in rotation).

`--order public` (default): the common list is the `--common` trigrams in the
most documents of PAWS and Synthetic-Persona-Chat (under `--datasets`; the
bench never queries them); `--order scope`: every gram of the scope ranked by
its frequency there (what a server-kept order would give at best). Runs on a
private pgserver (`evals.pg_local`, shared_buffers 1GB) unless `--pg-dsn`
names one; each size in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench_data import longmemeval_sentences, percentiles, perturbed, synthetic_texts
from evals.fold_prefix import common_trigrams
from memkit.params import DAY, FoldParams
from memkit.store.fold_postings import GramOrder, length_bounds, probe_codes, row_postings
from memkit.store.gram_index import HITS, GramIndex
from memkit.text import jaccard, trigrams

THRESHOLD = 0.65
"""The store's default fold threshold (`FoldParams`): the postings' floor."""
COMMON_K = 2048
SCOPE, SK = "bench", 1
CHUNK = 20_000

DDL = """
-- (named apart from the store's own fold_postings, fold_search="server")
CREATE TABLE proto_postings (sk integer NOT NULL, gram bigint NOT NULL, rowid bigint NOT NULL);
CREATE TABLE proto_postings_len (
    sk integer NOT NULL, gram bigint NOT NULL, m integer NOT NULL, rowid bigint NOT NULL
);
CREATE TABLE proto_prefix (rowid bigint PRIMARY KEY, sk integer NOT NULL, grams bigint[] NOT NULL);
"""
INDEXES = """
ALTER TABLE proto_postings ADD PRIMARY KEY (sk, gram, rowid);
ALTER TABLE proto_postings_len ADD PRIMARY KEY (sk, gram, m, rowid);
CREATE INDEX proto_prefix_grams ON proto_prefix USING gin (grams);
"""
_LIVE = """m.scope_id = %(scope)s AND m.kind = 'fact' AND m.superseded_by IS NULL
  AND m.last_seen_at > %(since)s"""
PROBES = {
    "btree": f"""
SELECT m.rowid, m.content FROM (
    SELECT rowid FROM proto_postings WHERE sk = %(sk)s AND gram = ANY(%(codes)s)
    GROUP BY rowid HAVING count(*) >= %(h)s
) c JOIN memories m ON m.rowid = c.rowid
WHERE {_LIVE} AND m.ngrams BETWEEN %(lo)s AND %(hi)s""",
    "btree_len": f"""
SELECT m.rowid, m.content FROM (
    SELECT rowid FROM proto_postings_len
    WHERE sk = %(sk)s AND gram = ANY(%(codes)s) AND m BETWEEN %(lo)s AND %(hi)s
    GROUP BY rowid HAVING count(*) >= %(h)s
) c JOIN memories m ON m.rowid = c.rowid
WHERE {_LIVE}""",
    "gin": f"""
SELECT m.rowid, m.content FROM proto_prefix p JOIN memories m ON m.rowid = p.rowid
WHERE p.grams && %(codes)s AND p.sk = %(sk)s
  AND cardinality(ARRAY(SELECT unnest(p.grams) INTERSECT SELECT unnest(%(codes)s))) >= %(h)s
  AND {_LIVE} AND m.ngrams BETWEEN %(lo)s AND %(hi)s""",
}
"""Each layout's probe: the live rows in the window with enough prefix hits."""


def public_docs(root: str) -> list[str]:
    """Documents for the common-trigram list, from permissively licensed sets the
    bench never queries: PAWS sentences (free for any use) and
    Synthetic-Persona-Chat lines (CC BY 4.0)."""
    out: list[str] = []
    with open(f"{root}/paws/paws_wiki_labeled_final_test.tsv", encoding="utf-8") as f:
        for pair in csv.DictReader(f, delimiter="\t"):
            out += [pair["sentence1"], pair["sentence2"]]
    chat = f"{root}/synthetic_persona_chat/Synthetic-Persona-Chat_test.csv"
    with open(chat, encoding="utf-8") as f:
        for cells in csv.reader(f):
            out += [line for cell in cells for line in cell.splitlines() if line.strip()]
    return out


def backfill(
    conn: Any, rows: Sequence[tuple[int, str]], order: GramOrder, hits: int
) -> dict[str, float]:
    """Write every row's prefix in each layout (COPY, `CHUNK` rows at a time), then
    the indexes; the seconds and the sizes."""
    t0 = time.perf_counter()
    conn.execute(DDL)
    posted = 0
    for a in range(0, len(rows), CHUNK):
        chunk = rows[a : a + CHUNK]
        r, codes, m = row_postings([c for _, c in chunk], order, THRESHOLD, hits)
        rowids = np.asarray([rid for rid, _ in chunk], dtype=np.int64)[r]
        posted += codes.size
        g, ms, rids = codes.tolist(), m[r].tolist(), rowids.tolist()
        with conn.cursor().copy("COPY proto_postings (sk, gram, rowid) FROM STDIN") as cp:
            for gram, rid in zip(g, rids, strict=True):
                cp.write_row((SK, gram, rid))
        with conn.cursor().copy("COPY proto_postings_len (sk, gram, m, rowid) FROM STDIN") as cp:
            for gram, mm, rid in zip(g, ms, rids, strict=True):
                cp.write_row((SK, gram, mm, rid))
        if not r.size:
            continue  # no text of the chunk has a gram: nothing to post
        bounds = np.flatnonzero(np.r_[True, r[1:] != r[:-1], True]).tolist()
        with conn.cursor().copy("COPY proto_prefix (rowid, sk, grams) FROM STDIN") as cp:
            for x, y in itertools.pairwise(bounds):
                cp.write_row((rids[x], SK, g[x:y]))
    t1 = time.perf_counter()
    conn.execute(INDEXES)
    t2 = time.perf_counter()
    for table in ("proto_postings", "proto_postings_len", "proto_prefix"):
        conn.execute(f"VACUUM ANALYZE {table}")

    def mb(rel: str) -> float:
        return (
            float(conn.execute("SELECT pg_total_relation_size(%s)", (rel,)).fetchone()[0]) / 2**20
        )

    return {
        "postings_per_row": posted / max(len(rows), 1),
        "copy_s": t1 - t0,
        "index_s": t2 - t1,
        "btree_mb": mb("proto_postings"),
        "btree_len_mb": mb("proto_postings_len"),
        "gin_mb": mb("proto_prefix"),
        "memories_mb": mb("memories"),
    }


def server_similar(
    conn: Any, sql: str, grams: frozenset[str], order: GramOrder, hits: int, since: float
) -> tuple[dict[int, float], int]:
    """{rowid: similarity >= THRESHOLD} found through the server, and how many
    candidates it returned."""
    codes, h = probe_codes(grams, order, THRESHOLD, hits)
    if not codes:
        return {}, 0
    lo, hi = length_bounds(len(grams), THRESHOLD)
    args = {"sk": SK, "codes": codes, "h": h, "scope": SCOPE, "since": since, "lo": lo, "hi": hi}
    cand = conn.execute(sql, args).fetchall()
    out = {}
    for rowid, content in cand:
        sim = jaccard(grams, trigrams(content))
        if sim >= THRESHOLD:
            out[rowid] = sim
    return out, len(cand)


def probe(
    conn: Any,
    layout: str,
    queries: Sequence[str],
    order: GramOrder,
    hits: int,
    reference: Callable[[frozenset[str]], dict[int, float]],
) -> dict[str, float]:
    """One layout's probes, timed, each answer held to `reference`'s."""
    since = time.time() - FoldParams().window_days * DAY
    for q in queries[:3]:  # the plan and the connection warmed
        server_similar(conn, PROBES[layout], trigrams(q), order, hits, since)
    lat, cands, bad = [], [], 0
    for q in queries:
        grams = trigrams(q)
        t0 = time.perf_counter()
        got, nc = server_similar(conn, PROBES[layout], grams, order, hits, since)
        lat.append(time.perf_counter() - t0)
        cands.append(nc)
        bad += got != reference(grams)
    p50, p95 = percentiles(lat)
    return {
        f"{layout}_p50_ms": p50,
        f"{layout}_p95_ms": p95,
        f"{layout}_cands_p50": float(np.median(cands)),
        f"{layout}_cands_max": float(max(cands)),
        f"{layout}_disagree": float(bad),
    }


def postings_read(
    conn: Any, queries: Sequence[str], order: GramOrder, hits: int
) -> dict[str, float]:
    """Postings a probe reads (p50, p95), without and with the length in the key."""
    plain, by_len = [], []
    for q in queries:
        grams = trigrams(q)
        codes, _ = probe_codes(grams, order, THRESHOLD, hits)
        lo, hi = length_bounds(len(grams), THRESHOLD)
        q1 = "SELECT count(*) FROM proto_postings WHERE sk = %s AND gram = ANY(%s)"
        plain.append(conn.execute(q1, (SK, codes)).fetchone()[0])
        q2 = "SELECT count(*) FROM proto_postings_len WHERE sk = %s AND gram = ANY(%s)"
        by_len.append(
            conn.execute(q2 + " AND m BETWEEN %s AND %s", (SK, codes, lo, hi)).fetchone()[0]
        )
    out = {}
    for label, xs in (("read", plain), ("read_len", by_len)):
        out[f"{label}_p50"], out[f"{label}_p95"] = (float(np.percentile(xs, p)) for p in (50, 95))
    return out


def write_costs(conn: Any, texts: Sequence[str], order: GramOrder, hits: int) -> dict[str, float]:
    """Durable single-row writes (autocommit), three shapes in rotation: the row
    alone, the row and its postings in one statement, the row and its prefix
    array. Writes/s of each (client prefix work included)."""
    cols = (
        "id, scope_id, kind, content, tags, confidence, created_at, last_seen_at, embedding, ngrams"
    )
    vals = "%(id)s, 'bench-w', 'fact', %(c)s, '[]', 0.7, %(now)s, %(now)s, %(v)s, %(n)s"
    row = f"INSERT INTO memories ({cols}) VALUES ({vals})"
    with_row = f"WITH r AS ({row} RETURNING rowid) "
    shapes = {
        "row": row,
        "postings": with_row + "INSERT INTO proto_postings (sk, gram, rowid) "
        "SELECT 2, g, r.rowid FROM r, unnest(%(p)s::bigint[]) g",
        "array": with_row + "INSERT INTO proto_prefix (rowid, sk, grams) "
        "SELECT r.rowid, 2, %(p)s::bigint[] FROM r",
    }
    vec = "[" + ",".join(["0.0625"] * 256) + "]"
    spent = dict.fromkeys(shapes, 0.0)
    done = dict.fromkeys(shapes, 0)
    for i, text in enumerate(texts):
        name = list(shapes)[i % len(shapes)]
        t0 = time.perf_counter()
        _, codes, m = row_postings([text], order, THRESHOLD, hits)
        args = {"id": uuid.uuid4().hex, "c": text, "now": time.time(), "v": vec, "n": int(m[0])}
        conn.execute(shapes[name], {**args, "p": codes.tolist()})
        spent[name] += time.perf_counter() - t0
        done[name] += 1
    return {f"write_{k}_per_s": done[k] / spent[k] for k in shapes if spent[k] > 0}


def queries_for(
    rng: random.Random, texts: Sequence[str], fresh: Sequence[str], n: int
) -> list[str]:
    """Half stored texts reworded by one word, half new texts."""
    return [perturbed(rng, rng.choice(texts)) if i % 2 == 0 else fresh[i // 2] for i in range(n)]


def run_size(
    base: str,
    corpus: str,
    texts: list[str],
    fresh: list[str],
    args: argparse.Namespace,
    order: GramOrder | None,
) -> dict[str, Any]:
    """One row: `texts` loaded into a fresh schema of `base`, probed and written to."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from memkit.store import PostgresStore

    schema = f"foldsrv_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = make_conninfo(base, options=f"-csearch_path={schema},public")
    try:
        with PostgresStore.open(url, embedder=None) as st:
            st.bulk_load(SCOPE, texts)
        if order is None:
            order = GramOrder(common_trigrams(texts, 1 << 40))
        row: dict[str, Any] = {"corpus": corpus, "rows": len(texts), "order": args.order}
        row |= {"common": int(order.common.size), "hits": args.hits}
        with psycopg.connect(url, autocommit=True) as conn:
            sql = "SELECT rowid, content FROM memories WHERE scope_id = %s ORDER BY rowid"
            rows = [(int(r), c) for r, c in conn.execute(sql, (SCOPE,))]
            row |= backfill(conn, rows, order, args.hits)
            gi = GramIndex.build(rows, floor=THRESHOLD, hits=args.hits)
            del rows
            qs = queries_for(random.Random(len(texts)), texts, fresh, args.queries)

            def reference(grams: frozenset[str]) -> dict[int, float]:
                return gi.similar(grams, THRESHOLD)

            for layout in ("btree", "btree_len", "gin") if args.gin else ("btree", "btree_len"):
                row |= probe(conn, layout, qs, order, args.hits, reference)
            lat = []
            for q in qs:
                grams = trigrams(q)
                t0 = time.perf_counter()
                reference(grams)
                lat.append(time.perf_counter() - t0)
            row["client_p50_ms"], row["client_p95_ms"] = percentiles(lat)
            row |= postings_read(conn, qs[:200], order, args.hits)
            if args.writes:
                row |= write_costs(conn, fresh[: args.writes], order, args.hits)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    row["load"] = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return row


COLUMNS = (
    ("corpus", "corpus", "{}"),
    ("rows", "rows", "{:,}"),
    ("order", "order", "{}"),
    ("btree p50/p95 ms", ("btree_p50_ms", "btree_p95_ms"), "{:.2f} / {:.2f}"),
    ("btree_len p50/p95 ms", ("btree_len_p50_ms", "btree_len_p95_ms"), "{:.2f} / {:.2f}"),
    ("in memory p50/p95 ms", ("client_p50_ms", "client_p95_ms"), "{:.2f} / {:.2f}"),
    ("postings read p50/p95", ("read_p50", "read_p95"), "{:,.0f} / {:,.0f}"),
    ("cands p50/max", ("btree_cands_p50", "btree_cands_max"), "{:.0f} / {:.0f}"),
    ("disagree", ("btree_disagree", "btree_len_disagree"), "{:.0f} / {:.0f}"),
    ("postings MB", ("btree_mb", "memories_mb"), "{:.0f} (rows {:.0f})"),
    ("writes/s row / +postings", ("write_row_per_s", "write_postings_per_s"), "{:.0f} / {:.0f}"),
    ("load", "load", "{}"),
)


def render(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a markdown table; a value the row lacks is 'undefined'."""
    lines = ["| " + " | ".join(c[0] for c in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = []
        for _, keys, fmt in COLUMNS:
            ks = (keys,) if isinstance(keys, str) else keys
            vals = [r.get(k) for k in ks]
            cells.append("undefined" if None in vals else fmt.format(*vals))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def disagreements(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Each row and layout whose server answers differed from `GramIndex`'s (or
    were never compared): its probe times then time a wrong search."""
    out = []
    for r in rows:
        for layout in ("btree", "btree_len", "gin"):
            bad = r.get(f"{layout}_disagree", 0.0 if layout == "gin" else None)
            if bad is None or bad > 0:
                what = "not compared" if bad is None else f"{bad:.0f} probes differ"
                out.append(f"{r['corpus']} {r['rows']:,} rows, {layout}: {what}")
    return out


def _positive(s: str) -> int:
    n = int(s)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{s}: must be >= 1")
    return n


def _sizes(s: str) -> list[int]:
    try:
        return [_positive(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r}: want sizes like 10000,100000") from None


def main(argv: list[str] | None = None) -> int:
    from evals.pg_local import local_postgres

    ap = argparse.ArgumentParser(prog="memkit bench fold-server", description=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument(
        "--sizes", type=_sizes, default=[100_000], help="rows in the scope, comma-separated"
    )
    ap.add_argument(
        "--corpus",
        choices=("synthetic", "longmemeval"),
        default="synthetic",
        help="the scope's texts",
    )
    ap.add_argument(
        "--order",
        choices=("public", "scope"),
        default="public",
        help="the order's common list: from public text, or the scope's own",
    )
    ap.add_argument(
        "--common", type=_positive, default=COMMON_K, help="trigrams on the public common list"
    )
    ap.add_argument("--hits", type=_positive, default=HITS, help="prefix depth h, as GramIndex")
    ap.add_argument("--queries", type=_positive, default=400, help="probes per layout")
    ap.add_argument("--writes", type=int, default=600, help="single-row writes timed (0: none)")
    ap.add_argument("--gin", action="store_true", help="also probe the int8[] + GIN layout")
    ap.add_argument("--datasets", default="../shared/datasets", help="the public datasets folder")
    ap.add_argument("--pg-dsn", help="a Postgres server to use (default: a private pgserver)")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    if args.writes < 0:
        ap.error(f"--writes {args.writes}: must be >= 0")
    order = None
    if args.order == "public":
        order = GramOrder(common_trigrams(public_docs(args.datasets), args.common))
    rows: list[dict[str, Any]] = []
    extra = max(args.queries, args.writes)
    pool = (
        longmemeval_sentences(f"{args.datasets}/longmemeval") if args.corpus != "synthetic" else []
    )
    if pool and max(args.sizes) + extra > len(pool):
        ap.error(
            f"--sizes: LongMemEval has {len(pool):,} sentences, want {max(args.sizes) + extra:,}"
        )
    with local_postgres(args.pg_dsn, None if args.pg_dsn else "1GB") as base:
        for n in args.sizes:
            if args.corpus == "synthetic":
                texts = synthetic_texts(random.Random(n), n)
                fresh = synthetic_texts(random.Random(-n), extra)
            else:
                texts, fresh = pool[:n], pool[n : n + extra]
            rows.append(run_size(base, args.corpus, texts, fresh, args, order))
            print(json.dumps(rows[-1]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    print(render(rows))
    wrong = disagreements(rows)
    for line in wrong:  # an inexact search's times are not the figure asked for
        print(f"NOT EXACT: {line}", file=sys.stderr)
    return 1 if wrong else 0
