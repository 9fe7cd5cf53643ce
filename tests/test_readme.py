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


def readme_problems(text: str) -> list[str]:
    """What keeps a README from being what a newcomer reads first ([] when nothing)."""
    problems = []
    if len(text.splitlines()) > MAX_LINES:
        problems.append(f"{len(text.splitlines())} lines (max {MAX_LINES})")
    sections = re.findall(r"^## (.+)$", text, re.M)
    if not sections or sections[0] != "The two commands":
        return [*problems, "the first section is not 'The two commands'"]
    first = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", first, re.S)
    lines = block[1].splitlines() if block else []
    if len(lines) < 2 or not (
        lines[0].startswith("make eval") and lines[1].startswith("make test")
    ):
        problems.append("the two commands' block does not start with make eval, make test")
    return problems


def test_readme_is_short_and_starts_with_the_two_commands():
    assert readme_problems(README.read_text(encoding="utf-8")) == []


def test_the_readme_checks_hold_at_the_line_bound_and_fail_past_it():
    top = "# memkit\n\n## The two commands\n\n```bash\nmake eval\nmake test\n```\n"
    pad = MAX_LINES - len(top.splitlines())
    assert readme_problems(top + "x\n" * pad) == []
    assert readme_problems(top + "x\n" * (pad + 1)) == [f"{MAX_LINES + 1} lines (max {MAX_LINES})"]
    assert readme_problems(top.replace("make eval\nmake test", "make test\nmake eval")) != []
    assert readme_problems("# memkit\n\n## Using the library\n") != []


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
