"""The store bench's two HNSW levers (`--hnsw-ops`, `--warm`): options checked
before work, tables well formed, and both run end to end at a tiny size."""

from __future__ import annotations

import numpy as np
import pytest

from evals import bench_ann, bench_backends, bench_ops


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--hnsw-ops", "cosine,l2"], "want distinct names of ['cosine', 'ip']"),
        (["--hnsw-ops", "ip,ip"], "want distinct names"),
        (["--hnsw-ops", ""], "want distinct names"),
        (["--warm", "-1"], "want 0 or more recalls"),
    ],
)
def test_levers_the_bench_cannot_measure_are_refused_before_work(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        bench_backends.main([*argv, "--sizes", "100"])
    assert e.value.code == 2 and says in capsys.readouterr().err


def _sweep(ef: int, reads: bool) -> dict:
    e = {"ef_search": ef, "hnsw_p50": 1.5, "hnsw_p95": 2.0, "hnsw_recall8": 0.9}
    e |= {"hnsw_recall1": 1.0, "hnsw_fallbacks": 0}
    if reads:
        e |= {"hnsw_idx_read": 1234.4, "hnsw_heap_read": 99.6}
    return e


def test_the_sweep_table_says_cold_or_warm_and_the_blocks_a_query_read():
    row = {"rows": 1_000_000, "hnsw_build_s": 300.0, "hnsw_index_mb": 1900.0, "warm": 500}
    row |= {"ef_sweep": [_sweep(100, True)], "ef_sweep_warm": [_sweep(100, True)]}
    plain = {"rows": 10, "hnsw_build_s": 1.0, "hnsw_index_mb": 1.0, "ef_sweep": [_sweep(40, False)]}
    lines = bench_ann.render_sweep([row, plain]).splitlines()
    assert len({line.count("|") for line in lines}) == 1 and len(lines) == 5
    assert "| cold | 1,234 / 100 | – |" in lines[2]
    assert "| warm (500 before) | 1,234 / 100 | – |" in lines[3]
    assert "| cold | – | – |" in lines[4]


def test_the_ops_table_has_a_row_per_class_and_ef_search():
    e = {"p50": 1.0, "p95": 2.0, "recall8": 0.5, "recall1": 1.0, "build_s": 3.0, "index_mb": 8}
    row = {"rows": 200_000, "load": "1.0/1.0/1.0", "ops_graph": [16, 64]}
    row["ops_sweep"] = [
        e | {"ops": o, "ef_search": ef} for ef in (200, 100) for o in ("ip", "cosine")
    ]
    lines = bench_ops.render_ops([row]).splitlines()
    assert len({line.count("|") for line in lines}) == 1 and len(lines) == 6
    assert lines[2].startswith("| 200,000 | 16 / 64 | cosine | 3.0 / 8 | 100 | 1.00 / 2.00 |")
    assert bench_ops.render_ops([{"rows": 1}]) == ""


def test_both_classes_return_the_whole_scope_when_ef_search_covers_it(pg_dsn):
    """At a tiny size with ef_search above the scope's rows each index returns every
    row, so the top 8 by the client's cosine is the exact answer under either class."""
    from memkit.store import PostgresStore

    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((300, 16)).astype(np.float32)
    texts = [f"row {i}" for i in range(300)]
    with PostgresStore.open(pg_dsn, embedder=None) as store:
        store.bulk_load("s", texts, vecs)
    logged: list[str] = []
    got = bench_ops.ops_sweep(
        pg_dsn, "s", vecs[:5] + 0.1, [400, 10], ["cosine", "ip"], (4, 8), {}, logged.append
    )
    assert [(g["ops"], g["ef_search"]) for g in got] == [
        ("cosine", 400), ("ip", 400), ("ip", 10), ("cosine", 10)
    ]  # fmt: skip
    for g in got[:2]:
        assert g["recall8"] == 1.0 and g["recall1"] == 1.0
    assert all(0.0 <= g["recall8"] <= 1.0 and g["build_s"] > 0 for g in got)
    assert any("ops ip: build" in line for line in logged)


def test_the_warm_sweep_runs_at_a_tiny_size_with_its_block_counts(pg_dsn, monkeypatch):
    monkeypatch.setattr(bench_ann, "PAGES_WAIT_S", 0.0)
    row = bench_backends.bench_backend(
        "postgres", pg_dsn, 300, 3, 0, lambda _m: None, [40], None, "random", "plain",
        warm=4, hnsw_ops=["ip"],
    )  # fmt: skip
    assert row["warm"] == 4 and [e["ef_search"] for e in row["ef_sweep_warm"]] == [40]
    for e in row["ef_sweep"] + row["ef_sweep_warm"]:
        assert {"hnsw_idx_read", "hnsw_heap_read", "hnsw_idx_hit"} <= e.keys()
        assert min(e["hnsw_idx_read"], e["hnsw_heap_read"]) >= 0
    assert [(e["ops"], e["ef_search"]) for e in row["ops_sweep"]] == [("ip", 40)]
