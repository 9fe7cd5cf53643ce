"""JSON Lines files are read and written with `jsonlines`; a bad line names file:line."""

from __future__ import annotations

import pytest

from evals.runfolder import read_jsonl, write_jsonl
from memkit.consolidate import ReplayConsolidator
from memkit.errors import ConfigError


def test_run_files_round_trip_and_bad_lines_name_file_and_line(tmp_path):
    p = tmp_path / "probes.jsonl"
    write_jsonl(p, [{"b": 1, "a": "é"}, {"a": 2}])
    assert p.read_text(encoding="utf-8").splitlines()[0] == '{"a": "é", "b": 1, "version": 1}'
    assert read_jsonl(p) == [{"a": "é", "b": 1, "version": 1}, {"a": 2, "version": 1}]
    p.write_text('{"a": 1}\n\n{"a": \n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"probes\.jsonl:3:"):
        read_jsonl(p)
    p.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"probes\.jsonl:2:"):
        read_jsonl(p)


def test_replay_names_the_bad_line_of_attempts_jsonl(tmp_path):
    (tmp_path / "attempts.jsonl").write_text(
        '{"request_hash": "h", "raw_response": "{}"}\nnot json\n', encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"attempts\.jsonl:2:"):
        ReplayConsolidator(tmp_path)
    (tmp_path / "attempts.jsonl").write_text(
        '{"request_hash": "h", "raw_response": "{}"}\n\n', encoding="utf-8"
    )
    assert len(ReplayConsolidator(tmp_path)) == 1
