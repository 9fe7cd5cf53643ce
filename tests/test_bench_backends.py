"""`memkit bench store --backend postgres`: its tables are well formed whatever a
row measured (a recall-only part, `--writes 0`, leaves the write cells empty)."""

from __future__ import annotations

from evals import bench_backends


def _row(backend: str, writes: bool) -> dict:
    row = {
        "backend": backend,
        "rows": 1_000_000,
        "small_rows": 10_000,
        "exact_p50": 900.0,
        "exact_p95": 1200.0,
        "small_exact_p50": 12.0,
        "small_exact_p95": 15.0,
        "cold_first_s": 0.3,
        "client_rss_mb": 60.0,
        "load": "0.5/0.7/1.0",
    }
    if backend == "postgres":
        row |= {
            "hnsw_p50": 4.0,
            "hnsw_p95": 6.0,
            "hnsw_recall8": 0.99,
            "hnsw_fallbacks": 0,
            "small_hnsw_p50": 2.0,
            "small_hnsw_p95": 3.0,
            "small_hnsw_recall8": 1.0,
            "small_hnsw_fallbacks": 0,
            "hnsw_build_s": 300.0,
            "hnsw_index_mb": 1900.0,
        }
    if writes:
        row |= {"rem_1": 250.0, "rem_4": 300.0, "many_1": 2000.0}
    return row


def test_tables_have_as_many_cells_per_row_as_their_header_with_or_without_writes():
    rows = [_row("sqlite", True), _row("postgres", False)]
    recall, writes = bench_backends.render(rows).split("\n\n")
    for table in (recall, writes):
        assert len({line.count("|") for line in table.splitlines()}) == 1
    assert (
        "| postgres | 1,000,000 | 900.00 / 1200.00 | 4.00 / 6.00 | 0.990 | 0 | 10,000 |" in recall
    )
    assert "| 300.0 / 1900 | 0.30 / 60 | – | 0.5/0.7/1.0 |" in recall
    assert writes.splitlines()[-1].startswith("| postgres | 1,000,000 | – | – | – |")
    assert writes.splitlines()[-2].startswith("| sqlite | 1,000,000 | 250 | 300 | 2,000 | – |")
