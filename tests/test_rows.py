"""Typed run rows (issue #35 item 1): a row round-trips, a bad row is loud and named,
versions are checked, and every committed recording still loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import row_fixtures

from evals.rows import (
    ROW_VERSION,
    TABLE_ROWS,
    AttemptRow,
    ExtractionRow,
    ProbeRow,
    RowError,
    WriteRow,
    read_rows,
    rows_of,
)
from memkit.errors import MemkitError

REPO = Path(__file__).resolve().parents[1]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_every_row_type_round_trips_through_its_json():
    rows = [
        row_fixtures.probe(recalled=[{"fact": "f"}], admitted=[{"fact": "f", "bytes": 3}]),
        row_fixtures.attempt(raw_response="{}", parsed_changes=[{"ids": [], "entry": None}]),
        row_fixtures.write(group="g", row_group=None),
        row_fixtures.pass_(),
        row_fixtures.extraction(rows=[{"fact": None}]),
    ]
    for row in rows:
        again = type(row).from_json(json.loads(json.dumps(row.to_json())))
        assert again == row and again.to_json() == row.to_json()
    assert {type(r).FILE for r in rows} == set(TABLE_ROWS)


def test_optional_fields_are_left_out_not_written_as_null():
    plain = row_fixtures.probe().to_json()
    assert not {"group", "undefined", "apart", "ranking", "system", "replicate"} & set(plain)
    ranked = row_fixtures.probe(ranking=[["f", "s1"]], ranking_full=None).to_json()
    assert ranked["ranking"] == [["f", "s1"]] and ranked["ranking_full"] is None
    assert ranked["relevant_sessions"] == []
    assert "row_group" not in row_fixtures.write().to_json()
    # an attempt keeps its own replicate; only the system is a tag
    assert row_fixtures.attempt(replicate=2).to_json()["replicate"] == 2
    assert row_fixtures.attempt().to_json()["pass"] == 0


def test_a_bad_row_names_file_line_and_field(tmp_path):
    good = {**row_fixtures.write().to_json(), "system": "store", "replicate": 0}
    assert read_rows(_write(tmp_path / "w.jsonl", [good]), WriteRow)[0].system == "store"
    cases = [
        ({k: v for k, v in good.items() if k != "folded"}, r":2: field 'folded' is missing"),
        ({**good, "folded": "yes"}, r":2: field 'folded': expected true or false"),
        ({**good, "fold": True}, r":2: unknown field 'fold'"),
        ({**good, "version": ROW_VERSION + 1}, r":2: row version 2 is newer"),
        ({k: v for k, v in good.items() if k != "version"}, r":2: field 'version' is missing"),
    ]
    for bad, message in cases:
        path = _write(tmp_path / "w.jsonl", [good, bad])
        with pytest.raises(RowError, match=rf"w\.jsonl{message}"):
            read_rows(path, WriteRow)
    (tmp_path / "w.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(RowError, match=r"w\.jsonl:2"):
        read_rows(tmp_path / "w.jsonl", WriteRow)
    assert issubclass(RowError, MemkitError)


def test_a_nested_row_error_names_the_path_inside_the_row():
    row = row_fixtures.probe(recalled=[{"fact": "f"}]).to_json()
    row["recalled"][0]["score"] = "high"
    with pytest.raises(RowError, match=r"probes:3: field 'recalled': \[0\]: .*'score'"):
        ProbeRow.from_json(row, "probes:3")


def test_fields_added_within_version_1_read_as_not_recorded():
    """Rows written before `full`, `fallback`, `rollouts` or `gold` existed still load;
    each absent field reads as 'not recorded' (baselines undefined, no rollout unit)."""
    probe = row_fixtures.probe().to_json()
    for later in ("full", "fallback", "error", "stale", "stopped"):
        del probe[later]
    old = ProbeRow.from_json(probe)
    assert old.full is None and old.fallback is None and old.stale == ()
    ext = row_fixtures.extraction().to_json()
    del ext["rollouts"], ext["gold"]
    assert ExtractionRow.from_json(ext).rollouts is None
    # but a field every row always had is required
    att = row_fixtures.attempt().to_json()
    del att["request_hash"]
    with pytest.raises(RowError, match="'request_hash' is missing"):
        AttemptRow.from_json(att)


def test_missing_run_file_reads_as_no_rows(tmp_path):
    assert rows_of(tmp_path, ProbeRow) == []


@pytest.mark.parametrize(
    "recording", sorted((REPO / "datasets").rglob("recordings/*.jsonl")), ids=lambda p: p.name
)
def test_every_committed_recording_still_loads(recording):
    from memkit.consolidate import ReplayConsolidator

    replay = ReplayConsolidator(recording)
    assert len(replay) > 0 and replay.model and replay.budget
