"""The report as a list of section builders (issue #35): each takes the loaded run and
returns its sections, well formed, and none when the run lacks the file it reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.report import BUILDERS, build_report
from evals.report.sections import matcher, read

EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "example"


def _well_formed(sections) -> None:
    for title, head, rows in sections:
        assert title and head and all(len(r) == len(head) for r in rows), title
        assert all(isinstance(c, str) for r in rows for c in r), title


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_each_builder_makes_well_formed_sections(build):
    _well_formed(build(read(EXAMPLE)))


@pytest.fixture
def bare(tmp_path):
    """The example with only manifest.json and metrics.json."""
    d = tmp_path / "bare"
    d.mkdir()
    for f in ("manifest.json", "metrics.json"):
        shutil.copy(EXAMPLE / f, d / f)
    return d


@pytest.mark.parametrize("build", BUILDERS, ids=lambda b: b.__name__)
def test_a_builder_without_its_file_adds_nothing(bare, build):
    got = build(read(bare))
    _well_formed(got)
    if build.__name__ == "system_tables":  # metrics.json: one table per system
        assert len(got) == 6
    elif build.__name__ == "sources":  # the manifest's source notes only
        assert all(t.startswith("Source notes") for t, _, _ in got)
    elif build.__name__ == "provider_limits":  # read from the manifest
        assert len(got) <= 1
    else:
        assert got == []


def test_the_report_shows_every_builders_sections_in_order(tmp_path):
    d = tmp_path / "example"
    shutil.copytree(EXAMPLE, d)
    md = build_report(d)[0].read_text()
    titles = [t for build in BUILDERS for t, _, _ in build(read(d))]
    at = [md.index(f"## {t}\n") for t in titles]
    assert at == sorted(at) and len(titles) >= 15


def test_matcher_says_why_it_was_not_measured(bare):
    (bare / "matcher.json").write_text(json.dumps({"n": 0}))
    ((title, _, rows),) = matcher(read(bare))
    assert title == "Gold matcher accuracy" and rows[0][0] == "not measured"
