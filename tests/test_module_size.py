"""Modules stay readable (issue #35): no module of memkit/ or evals/ is over 600
lines unless its docstring says why, in a paragraph starting "Why over 600 lines:"
(what one responsibility needs the length, or what split is planned)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT = 600
MARK = "Why over 600 lines:"


def stated_reason(docstring: str | None) -> str:
    """The text after MARK in a docstring ("" when there is none)."""
    if not docstring or MARK not in docstring:
        return ""
    return docstring.split(MARK, 1)[1].split("\n\n", 1)[0].strip()


def unexplained(n_lines: int, docstring: str | None) -> bool:
    """Over the limit with no reason of at least a sentence's length."""
    return n_lines > LIMIT and len(stated_reason(docstring)) < 40


def modules() -> list[Path]:
    return sorted(p for top in ("memkit", "evals") for p in (REPO / top).rglob("*.py"))


def test_the_limit_holds_at_600_lines_and_one_more_needs_a_reason():
    why = f"Summary.\n\n{MARK} one class holds every rule so each is written once."
    assert not unexplained(600, None)
    assert unexplained(601, None)
    assert unexplained(601, "A docstring that says nothing about its length.")
    assert unexplained(601, f"Summary.\n\n{MARK} long.")  # a word is not a reason
    assert not unexplained(601, why)
    assert not unexplained(5000, why)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_is_over_600_lines_without_saying_why(path):
    text = path.read_text(encoding="utf-8")
    n = len(text.splitlines())
    assert not unexplained(n, ast.get_docstring(ast.parse(text))), (
        f"{path.relative_to(REPO)} has {n} lines: split it, or say in its docstring "
        f'why one responsibility needs them ("{MARK} ...")'
    )
