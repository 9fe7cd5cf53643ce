"""Both readings of one consolidator answer: strict, and after the lenient repair.

A pass reads an answer once with `judge`: one lenient parse (which tries the
strict reading first) and one validation of the changes it found. The pass
commits under the configured mode (`Judgement.under`), and the attempt
records both readings, so evaluations score strict validity and validity
after repair from the same record instead of from the mode that ran. The
rules themselves live in `memkit.proposal`; nothing here re-derives them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from memkit.errors import ProposalError
from memkit.proposal import parse_response


@dataclass(frozen=True)
class Verdict:
    """One reading of an answer: its changes and the first failure, if any.

    `changes` is the parsed raw list (None when unparsable), `error` the
    ProposalError of the first failure (None when valid), `typed` what the
    validator returned when valid.
    """

    changes: list[Any] | None
    error: ProposalError | None = None
    typed: Any = None

    @property
    def code(self) -> str | None:
        return None if self.error is None else self.error.code


@dataclass(frozen=True)
class Judgement:
    """Both readings of one answer: strict, and after the lenient repair."""

    strict: Verdict
    lenient: Verdict
    mode: Literal["strict", "repaired", "failed"]
    """How the lenient parse got the JSON ("failed": not even after repair)."""

    def under(self, lenient: bool) -> tuple[Verdict, Literal["strict", "repaired", "failed"]]:
        """The verdict and parse mode that govern a pass in the given mode."""
        if lenient:
            return self.lenient, self.mode
        return self.strict, "strict" if self.mode == "strict" else "failed"


def judge(text: str | None, validate: Callable[[list[Any]], Any]) -> Judgement:
    """Parse `text` once (lenient, which tries strict first) and validate once.

    `validate(changes)` returns typed changes or raises ProposalError; any
    code it raises is recorded as is.
    """
    try:
        parsed = parse_response(text, lenient=True)
    except ProposalError as e:
        failed = Verdict(None, e)
        return Judgement(failed, failed, "failed")
    try:
        lenient = Verdict(parsed.changes, typed=validate(parsed.changes))
    except ProposalError as e:
        lenient = Verdict(parsed.changes, e)
    if parsed.mode == "strict":
        return Judgement(lenient, lenient, "strict")
    why = (parsed.strict_error or "not strict JSON").removeprefix("[parse] ")
    strict = Verdict(None, ProposalError("parse", why))
    return Judgement(strict, lenient, "repaired")
