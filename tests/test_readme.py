"""The README is what a newcomer reads first (issue #35): at most 400 lines, the two
commands first, and every link in it and in docs/ leads somewhere that exists, down to
the heading a link names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 400
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings."""
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^#{1,6} (.+)$", line):
            a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(a.replace(" ", "-"))
    return out


def test_readme_is_short_and_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[0] == "The two commands"
    first = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", first, re.S)[1].splitlines()
    assert block[0].startswith("make eval") and block[1].startswith("make test")


def test_the_line_bound_is_checked_at_the_bound_and_past_it(tmp_path):
    assert len(("x\n" * MAX_LINES).splitlines()) <= MAX_LINES
    assert not len(("x\n" * (MAX_LINES + 1)).splitlines()) <= MAX_LINES


@pytest.mark.parametrize(
    "doc", [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))], ids=str
)
def test_every_relative_link_resolves(doc):
    bad = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        missing_anchor = anchor and dest.suffix == ".md" and anchor not in anchors(dest)
        if not dest.exists() or missing_anchor:
            bad.append(target)
    assert not bad, f"{doc.name}: links to nothing: {bad}"


def test_every_behaviour_note_is_listed_in_the_readme():
    """The README lists each extension in one line; docs/behaviour.md holds its text."""
    notes = anchors(REPO / "docs" / "behaviour.md") - {
        "behaviour-notes-memkit-extensions-of-the-spec"
    }
    listed = set(re.findall(r"\(docs/behaviour\.md#([^)]+)\)", README.read_text(encoding="utf-8")))
    assert notes == listed
