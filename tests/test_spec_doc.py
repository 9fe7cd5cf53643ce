"""The rules live in the repository (issue #35): every "§N" or "§N.M" that code, tests
and docs cite is a section of docs/spec.md, whose sections are numbered without gaps,
and the contributor docs point at it rather than at a file outside the clone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "docs" / "spec.md"
CITING = ("memkit", "evals", "tests", "docs", "notebooks", "datasets")
SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".cfg", ".sql"}
TOP_FILES = ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml")

HEADING = re.compile(r"^#{2,3} §(\d+(?:\.\d+)?)\b", re.M)
NUMBER = r"\d+(?:\.\d+)?"
CITATION = re.compile(rf"§\s?({NUMBER})(?:\s?[-–]\s?({NUMBER}))?")


def defined_sections(text: str) -> list[str]:
    """Section numbers in heading order, as written ("3", "3.1", ...)."""
    return HEADING.findall(text)


def cited_sections(text: str) -> set[str]:
    """Every section a text cites; a range ("§7.5-7.6", "§1–4") cites both ends."""
    out = set()
    for first, last in CITATION.findall(text):
        out.add(first)
        if last:
            out.add(last)
    return out


def citing_files() -> list[Path]:
    files = [REPO / name for name in TOP_FILES if (REPO / name).exists()]
    for top in CITING:
        files += [p for p in sorted((REPO / top).rglob("*")) if p.suffix in SUFFIXES]
    return [p for p in files if p != SPEC and p.is_file()]


def test_the_citation_reader_finds_single_sections_and_both_ends_of_ranges():
    text = "SPEC §3.3, §7.5-7.6, §1–4, § 8 and §2 (not 2.)"
    assert cited_sections(text) == {"3.3", "7.5", "7.6", "1", "4", "8", "2"}
    assert cited_sections("no section here; a paragraph sign alone §") == set()


def test_every_cited_section_is_in_docs_spec():
    defined = set(defined_sections(SPEC.read_text(encoding="utf-8")))
    missing = {}
    for path in citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for section in sorted(cited_sections(text) - defined):
            missing.setdefault(section, []).append(str(path.relative_to(REPO)))
    assert not missing, f"cited but not defined in docs/spec.md: {missing}"


def test_the_citations_are_found_at_all():
    """Guards the scan itself: the code does cite the SPEC, sub-sections included."""
    cited = set().union(*(cited_sections(p.read_text(errors="replace")) for p in citing_files()))
    assert {"3.3", "4.2", "5.2", "7.6", "7.8", "8"} <= cited


def test_sections_are_numbered_in_order_without_gaps():
    sections = defined_sections(SPEC.read_text(encoding="utf-8"))
    assert len(sections) == len(set(sections)), "a section number is used twice"
    top = [s for s in sections if "." not in s]
    assert top == [str(i) for i in range(1, len(top) + 1)]
    for t in top:
        subs = [s for s in sections if s.startswith(f"{t}.")]
        assert subs == [f"{t}.{i}" for i in range(1, len(subs) + 1)], t
        # a sub-section follows its own section's heading
        assert all(sections.index(s) > sections.index(t) for s in subs)


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md"])
def test_the_contributor_docs_point_at_docs_spec(name):
    text = (REPO / name).read_text(encoding="utf-8")
    assert "docs/spec.md" in text
    assert "shared/SPEC.md" not in text


def sections_with_bodies(text: str) -> dict[str, str]:
    """Each sub-section's number mapped to its heading line and body."""
    parts = re.split(r"^(?=#{2,3} §)", text, flags=re.M)
    return {m.group(1): p for p in parts if (m := HEADING.match(p)) and "." in m.group(1)}


def test_every_memkit_extension_is_marked_and_listed():
    """A rule memkit adds is marked "(memkit)" where it stands, and §10 lists exactly
    the sections that hold one (so the list and the marks cannot drift apart)."""
    text = SPEC.read_text(encoding="utf-8")
    body, listed = text.split("## §10", 1)
    marked = {n for n, part in sections_with_bodies(body).items() if "**(memkit)**" in part}
    in_table = {c for c in cited_sections(listed) if "." in c}
    assert marked == in_table
    assert {"3.1", "3.7", "4.4", "5.5", "7.5", "7.8"} <= marked
