"""`memkit bench fold-crossing --writers N` (issue #36): the writers' rows made one
run by hand, the summary with each writer's first write apart, the plan's bound,
and small runs on Postgres from 2 processes, one of them failing loudly."""

from __future__ import annotations

import json

import pytest

from evals import bench_fold_crossing as b
from evals import bench_fold_writers as bw


def _w(end: float, ms: float, state: str = "not kept", folded: bool = False) -> dict:
    return {"s": ms / 1e3, "end": end, "folded": folded, "state": state}


def test_quotas_split_the_rows_larger_shares_first():
    assert bw.quotas(10, 4) == [3, 3, 2, 2]
    assert bw.quotas(8, 4) == [2, 2, 2, 2]
    assert bw.quotas(3, 1) == [3]


def test_the_writers_rows_are_one_run_in_end_order_firsts_apart():
    """Writer 0 ends at 1.0 (its first), 3.0, 5.0 (folded); writer 1 at 2.0 (its
    first), 4.0, 6.0. In end order the rows before are 100, 101, 102, 103, 104
    and 104 again after the fold (the write ending at 6.0 sees 104 + 0)."""
    w0 = [_w(1.0, 900.0), _w(3.0, 2.0), _w(5.0, 3.0, folded=True)]
    w1 = [_w(2.0, 800.0), _w(4.0, 4.0, "pending"), _w(6.0, 5.0, "listed")]
    run = bw.order([w0, w1], load=100)
    assert [(w["writer"], w["end"]) for w in run] == [
        (0, 1.0), (1, 2.0), (0, 3.0), (1, 4.0), (0, 5.0), (1, 6.0)
    ]  # fmt: skip
    assert [w["rows_before"] for w in run] == [100, 101, 102, 103, 104, 104]
    assert all("first" not in w for w in run)


def test_the_summary_puts_each_writers_first_apart_and_spans_the_rest():
    w0 = [_w(1.0, 900.0), _w(3.0, 2.0), _w(5.0, 3.0)]
    w1 = [_w(2.0, 800.0), _w(4.0, 4.0, "pending"), _w(6.0, 6.0, "listed")]
    s = b.summarize(bw.order([w0, w1], load=100), cap=103, firsts=2)
    assert s["first_write_ms"] == pytest.approx(900.0)  # the slowest first
    assert [s["phases"][p]["writes"] for p in b.PHASES] == [2, 1, 1]
    assert s["phases"]["not listed"]["p50_ms"] == pytest.approx(2.5)
    assert s["past_cap"]["writes"] == 2  # 104 and 105 rows before the writes ending at 5, 6
    # the 4 timed writes: the first starts at 3.0 - 0.002, the last ends at 6.0
    assert s["wall_s"] == pytest.approx(3.002)
    assert s["writes_per_s"] == pytest.approx(4 / 3.002)
    assert s["slowest_ms"] == pytest.approx(6.0) and s["slowest_rows_before"] == 105
    with pytest.raises(b.ConfigError, match="want 3 or more"):
        b.summarize(bw.order([w0[:1], w1[:1]], load=100), firsts=2)


def test_one_writers_summary_has_its_span_too():
    s = b.summarize([{**_w(1.0, 50.0), "rows_before": 1}, {**_w(2.0, 10.0), "rows_before": 2}])
    assert s["wall_s"] == pytest.approx(0.01) and s["writes_per_s"] == pytest.approx(100.0)
    no_end = [{k: v for k, v in w.items() if k != "end"} for w in ([_w(1, 5)] * 2)]
    s = b.summarize([{**w, "rows_before": 1} for w in no_end])
    assert s["wall_s"] is None and s["writes_per_s"] is None


def test_the_plan_wants_two_writes_a_writer():
    # cap 40, start 0.7, past 0.25: 28 loaded, 50 at the end, 22 new rows
    assert b.check_plan(40, 0.7, 0.25, [1.0], writers=11) is None
    assert "--writers 12: 22 new rows" in b.check_plan(40, 0.7, 0.25, [1.0], writers=12)


SMALL = ["fold-crossing", "--cap", "40", "--start", "0.7", "--past", "0.25", "--writers", "2"]


def test_two_writers_list_the_key_ahead_and_at_the_crossing(pg_server_dsn, tmp_path, capsys):
    from evals.commands import bench_main

    out = tmp_path / "writers.json"
    args = [*SMALL, "--list-at", "1.0,0.75", "--pg-dsn", pg_server_dsn, "--out", str(out)]
    assert bench_main(args) == 0
    got = json.loads(out.read_text())
    assert got["writers"] == 2
    at_once, ahead = got["configs"]
    for c in (at_once, ahead):
        assert c["writers"] == 2 and c["loaded_rows"] == 28
        writes = c["writes"]
        assert sorted(w["writer"] for w in writes[:2]) == [0, 1]  # the firsts apart
        added = sum(not w["folded"] for w in writes)
        assert added == 22 and writes[-1]["state"] == "listed"
        ends = [w["end"] for w in writes[2:]]
        assert ends == sorted(ends)
        assert {w["writer"] for w in writes} == {0, 1}
        assert c["summary"]["wall_s"] > 0 and c["summary"]["writes_per_s"] > 0
    # the crossing: the write past the cap (41 rows before with one writer) or the
    # next, the other writer's (each finds the cap crossed by its own count)
    assert at_once["summary"]["listing_started_at"] == at_once["summary"]["listed_at"]
    assert at_once["summary"]["listed_at"] in (41, 42)
    assert ahead["summary"]["listing_started_at"] < 40 and ahead["summary"]["listed_at"] <= 41
    assert at_once["postings_rows"] == ahead["postings_rows"] > 0
    assert "| 2 |" in capsys.readouterr().out  # the writers column


def test_a_writer_that_fails_fails_the_run_naming_it(pg_server_dsn, capsys, monkeypatch):
    from evals.commands import bench_main

    calls = []

    def failing(store, text):
        calls.append(text)  # each process's own list, after the fork
        if len(calls) == 3:
            raise RuntimeError("the provider went away")
        return store.remember(b.SCOPE, text, kind=b.KIND)

    monkeypatch.setattr("evals.bench_fold_crossing.remember", failing)
    assert bench_main([*SMALL, "--list-at", "0.75", "--pg-dsn", pg_server_dsn]) == 1
    err = capsys.readouterr().err
    assert "fold-crossing --list-at 0.75: writer" in err
    assert "failed: RuntimeError: the provider went away" in err
