"""`memkit bench fold-crossing` (issue #36): its phase split and summary by hand,
its refusals, and one small run on Postgres where the crossing write lists the key."""

from __future__ import annotations

import gzip
import json

import pytest

from evals import bench_ann
from evals import bench_fold_crossing as b
from evals.cli.base import RunFailed


def _w(rows: int, ms: float, state: str, **bounds: int) -> dict:
    return {"rows_before": rows, "s": ms / 1e3, "folded": False, "state": state, **bounds}


AHEAD = [
    _w(10, 500.0, "not kept"),  # the first write: builds the writer's index
    _w(11, 2.0, "not kept"),
    _w(12, 4.0, "not kept"),
    _w(13, 3.0, "not kept"),
    _w(14, 10.0, "pending", lo=0, hi=100),
    _w(15, 20.0, "pending", lo=50, hi=100),
    _w(16, 30.0, "listed"),
    _w(17, 6.0, "listed"),
]


def test_the_key_state_is_read_from_its_fold_posted_row():
    assert b.key_state(None) == {"state": "not kept"}
    assert b.key_state({"sk": 7}) == {"state": "listed"}  # a store before listing ahead
    assert b.key_state({"sk": 7, "lo": 5, "hi": 9}) == {"state": "pending", "lo": 5, "hi": 9}
    assert b.key_state({"sk": 7, "lo": 9, "hi": 9}) == {"state": "listed"}  # lo >= hi
    assert b.key_state({"sk": 7, "lo": 10, "hi": 9}) == {"state": "listed"}


def test_phases_are_the_state_after_each_write_in_order():
    by = b.split_phases(AHEAD)
    assert [len(by[p]) for p in b.PHASES] == [4, 2, 2]
    assert [w["rows_before"] for w in by["listing ahead"]] == [14, 15]


def test_the_summary_by_hand_first_write_apart():
    s = b.summarize(AHEAD)
    ph = s["phases"]
    # not listed without the first: [2, 4, 3] ms; linear percentiles over [2, 3, 4]
    assert ph["not listed"]["writes"] == 3
    assert ph["not listed"]["p50_ms"] == pytest.approx(3.0)
    assert ph["not listed"]["p95_ms"] == pytest.approx(3.9)  # 3 + 0.9 x (4 - 3)
    assert ph["not listed"]["max_ms"] == pytest.approx(4.0)
    assert (ph["listing ahead"]["p50_ms"], ph["listing ahead"]["p95_ms"]) == pytest.approx(
        (15.0, 19.5)
    )
    assert ph["listing ahead"]["max_ms"] == pytest.approx(20.0)
    assert (ph["listed"]["p50_ms"], ph["listed"]["p95_ms"]) == pytest.approx((18.0, 28.8))
    assert s["first_write_ms"] == pytest.approx(500.0)
    assert (s["slowest_ms"], s["slowest_rows_before"], s["slowest_phase"]) == (
        pytest.approx(30.0),
        16,
        "listed",
    )
    assert s["baseline_p50_ms"] == pytest.approx(3.0)
    assert s["slowest_over_baseline"] == pytest.approx(10.0)
    assert (s["listing_started_at"], s["listed_at"]) == (14, 16)
    assert s["remember_s"] == pytest.approx(0.575)
    assert s["past_cap"] is None  # no cap given


def test_the_writes_past_the_cap_by_hand_whatever_their_phase():
    """Cap 15: the writes with 16 and 17 live rows before them (30 and 6 ms); the
    one with 15 (at the cap: still the writer's index) is not past it."""
    past = b.summarize(AHEAD, cap=15)["past_cap"]
    assert past["writes"] == 2
    assert (past["p50_ms"], past["p95_ms"], past["max_ms"]) == pytest.approx((18.0, 28.8, 30.0))
    assert b.summarize(AHEAD, cap=17)["past_cap"] == {
        "writes": 0,
        "p50_ms": None,
        "p95_ms": None,
        "max_ms": None,
    }
    assert b.summarize(AHEAD, cap=9)["past_cap"]["writes"] == 7  # the first write apart


def test_a_key_listed_at_once_has_no_listing_ahead_phase_and_no_baseline_without_writes():
    at_once = [_w(10, 50.0, "not kept"), _w(11, 1.0, "not kept"), _w(12, 400.0, "listed")]
    s = b.summarize(at_once)
    assert s["phases"]["listing ahead"] == {
        "writes": 0,
        "p50_ms": None,
        "p95_ms": None,
        "max_ms": None,
    }
    assert s["listing_started_at"] == s["listed_at"] == 12
    assert s["slowest_over_baseline"] == pytest.approx(400.0)
    s = b.summarize([_w(10, 50.0, "not kept"), _w(11, 400.0, "listed")])
    assert s["baseline_p50_ms"] is None and s["slowest_over_baseline"] is None
    table = b.render([{"list_at": 1.0, "bulk_load_s": 0.5, "postings_rows": 9, "summary": s}])
    assert "| 1.0 | not listed | 0 | undefined | undefined | undefined |" in table
    assert "| undefined | 11 / 11 |" in table
    assert len({line.count("|") for line in table.split("\n\n")[1].splitlines()}) == 1


def test_a_key_not_listed_after_the_last_write_fails_naming_the_configuration():
    b.check_listed({"list_at": 0.75, "writes": AHEAD})
    with pytest.raises(RunFailed, match=r"--list-at 0.75: .* state pending lo 50 hi 100"):
        b.check_listed({"list_at": 0.75, "writes": AHEAD[:6]})
    with pytest.raises(RunFailed, match="not fully listed"):
        b.check_listed({"list_at": 1.0, "writes": AHEAD[:2]})


def test_the_plan_at_its_bounds():
    assert b.plan(40, 0.7, 0.25) == (28, 50)
    assert b.plan(40, 0.7, 0.05) == (28, 42)  # 40 x 1.05 read as written
    assert b.check_plan(40, 0.7, 0.05, [1.0, 0.75]) is None
    assert "want past 41" in b.check_plan(40, 0.7, 0.025, [1.0])  # ends at 41: no listing
    assert b.check_plan(40, 0.725, 0.25, [0.75]) is None  # 29 rows, under 30
    assert "not under --list-at 0.75" in b.check_plan(40, 0.75, 0.25, [1.0, 0.75])  # 30
    assert "loads no row" in b.check_plan(40, 0.01, 0.25, [1.0])


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (["--list-at", "0"], "'0': want 0 < x <= 1"),
        (["--list-at", "1.5"], "'1.5': want 0 < x <= 1"),
        (["--list-at", "x"], "'x': want a number"),
        (["--list-at", "1.0,nan"], "'nan': want 0 < x <= 1"),
        (["--start", "1"], "want 0 < x < 1"),
        (["--past", "0"], "--past 0.0: want a number > 0"),
        (["--cap", "0"], "want an integer >= 1"),
        (["--start", "0.8"], "not under --list-at 0.75"),
    ],
)
def test_bad_values_exit_2_with_a_message(bad, says, capsys):
    from evals.commands import bench_main

    with pytest.raises(SystemExit) as e:
        bench_main(["fold-crossing", *bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "memkit bench fold-crossing" in err and says in err


SMALL = ["fold-crossing", "--cap", "40", "--start", "0.7", "--past", "0.25", "--list-at", "1.0"]


def test_a_small_run_lists_the_key_in_the_write_past_the_cap(pg_server_dsn, tmp_path, capsys):
    from evals.commands import bench_main

    out = tmp_path / "crossing.json"
    assert bench_main([*SMALL, "--pg-dsn", pg_server_dsn, "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["cap"], got["loaded"], got["end_rows"]) == (40, 28, 50)
    (c,) = got["configs"]
    assert c["list_at"] == 1.0 and c["loaded_rows"] == 28
    assert c["state_after_load"] == {"state": "not kept"}
    writes = c["writes"]
    assert [w["rows_before"] for w in writes] == list(range(28, 50))  # no write folded
    listing = [w for w in writes if w["state"] != "not kept"]
    assert listing[0]["rows_before"] == 41  # the write that finds the key over the cap
    assert all(w["state"] == "listed" for w in listing)
    s = c["summary"]
    assert s["listing_started_at"] == s["listed_at"] == 41
    assert [s["phases"][p]["writes"] for p in b.PHASES] == [12, 0, 9]
    assert c["postings_rows"] > 0
    table = capsys.readouterr().out
    assert "| 1.0 | listed | 9 |" in table and "| 41 / 41 |" in table
    assert "| 1.0 | past the cap (any phase) | 9 |" in table  # 41..49 rows before, cap 40
    assert s["past_cap"]["writes"] == 9


def test_a_run_whose_key_is_never_listed_fails_and_keeps_its_rows(
    pg_server_dsn, tmp_path, capsys, monkeypatch
):
    from evals.commands import bench_main

    real = b.open_options
    monkeypatch.setattr(  # a writer whose own cap the scope never reaches
        "evals.bench_fold_crossing.open_options",
        lambda cap, list_at, table: real(cap, list_at, table) | {"fold_local_rows": 1000},
    )
    out = tmp_path / "crossing.json"
    assert bench_main([*SMALL, "--pg-dsn", pg_server_dsn, "--out", str(out)]) == 1
    assert "--list-at 1.0: the key is not fully listed" in capsys.readouterr().err
    (c,) = json.loads(out.read_text())["configs"]
    assert len(c["writes"]) == 22 and c["postings_rows"] == 0


def test_a_store_not_in_server_mode_fails_naming_its_mode(pg_server_dsn, capsys, monkeypatch):
    from evals.commands import bench_main

    real = b.open_options
    monkeypatch.setattr(
        "evals.bench_fold_crossing.open_options",
        lambda cap, list_at, table: real(cap, list_at, table) | {"fold_search": "client"},
    )
    assert bench_main([*SMALL, "--pg-dsn", pg_server_dsn]) == 1
    assert "in 'client' mode, not 'server'" in capsys.readouterr().err


def test_recall_queries_say_they_measure_postgres_hnsw_only(capsys):
    from evals import bench_backends

    assert bench_ann.note_ignored_recall_queries("sqlite", bench_ann.HELD_OUT) is None
    assert bench_ann.note_ignored_recall_queries(None, 7) is None
    assert bench_ann.note_ignored_recall_queries("postgres", 7) is None
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the note comes before any work (and before --warm's check)
        bench_backends.main(["--only", "sqlite", "--recall-queries", "7", "--warm", "-1"])
    assert "note: --recall-queries 7 is ignored" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_backends.main(["--recall-queries", "7", "--warm", "-1"])
    assert "note:" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_backends.main(["--help"])
    assert "Postgres HNSW only (a SQLite-only run ignores" in " ".join(
        capsys.readouterr().out.split()
    )


def test_a_small_run_lists_the_key_ahead_of_the_cap(pg_server_dsn, tmp_path):
    """At 0.75 of cap 40 the write that leaves the index at 31 rows lists the key
    ahead; 8 pending rows a write (`fold_listed.LIST_STEP`) list the 30 older rows
    in 4 writes, so the write past the cap finds it listed and posts only its own."""
    from evals.commands import bench_main

    out = tmp_path / "ahead.json.gz"
    args = [*SMALL[:-1], "0.75", "--pg-dsn", pg_server_dsn, "--out", str(out)]
    assert bench_main(args) == 0
    (c,) = json.loads(gzip.decompress(out.read_bytes()))["configs"]  # (gzipped: .gz)
    s = c["summary"]
    assert c["list_at"] == 0.75
    assert s["listing_started_at"] == 30 and s["listed_at"] == 33
    assert [s["phases"][p]["writes"] for p in b.PHASES] == [1, 3, 17]  # the first write apart


def test_each_configuration_runs_in_a_schema_of_its_own(pg_server_dsn, tmp_path):
    """Both configurations of one run start from a key not kept (a schema shared
    with the first would leave the second's key listed from the start) and post
    the same rows by the end."""
    from evals.commands import bench_main

    out = tmp_path / "both.json"
    args = [*SMALL[:-1], "1.0,0.75", "--pg-dsn", pg_server_dsn, "--out", str(out)]
    assert bench_main(args) == 0
    at_once, ahead = json.loads(out.read_text())["configs"]
    assert (at_once["list_at"], ahead["list_at"]) == (1.0, 0.75)
    for c in (at_once, ahead):
        assert c["state_after_load"] == {"state": "not kept"} and c["loaded_rows"] == 28
    assert at_once["summary"]["listed_at"] == 41 and ahead["summary"]["listed_at"] < 40
    assert at_once["postings_rows"] == ahead["postings_rows"] > 0
