"""Parsing a consolidator's answer (SPEC §7.5): strict by default, repair on request.

Strict means the whole text is one JSON object with a `changes` array. The
lenient mode (memkit) strips a Markdown code fence or takes the outermost
`{...}`; it is reported as "repaired" so evaluations can tell a model that
follows the format from one that merely contains the right JSON.

`judge` reads an answer once and returns both readings (strict and
lenient, each parsed and validated), so a pass commits under the configured
mode while evaluations score both from the same record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from memkit.errors import ProposalError

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    """A parsed answer: the raw `changes` list and how it was obtained.

    `strict_error` holds why strict parsing failed when the mode is "repaired".
    """

    changes: list[Any]
    mode: Literal["strict", "repaired"]
    strict_error: str | None = None


def _strict(text: str) -> list[Any]:
    try:
        obj = json.loads(text)
    except (ValueError, TypeError) as e:
        raise ProposalError("parse", f"response is not JSON ({e}): {text!r:.120}") from None
    if not isinstance(obj, dict):
        raise ProposalError("parse", f"response is a JSON {type(obj).__name__}, not an object")
    changes = obj.get("changes")
    if changes is None:
        raise ProposalError("parse", "response has no 'changes' array (missing or null)")
    if not isinstance(changes, list):
        raise ProposalError(
            "parse", f"'changes' must be an array, got {type(changes).__name__}: {changes!r:.80}"
        )
    return changes


def _candidates(text: str) -> list[str]:
    out = [m.group(1) for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        out.append(text[start : end + 1])
    return out


def parse_response(text: str | None, lenient: bool = False) -> Parsed:
    """Parse a consolidator's raw answer; raise ProposalError("parse") on failure."""
    if not isinstance(text, str):
        raise ProposalError("parse", f"response is not text: {text!r:.80}")
    try:
        return Parsed(_strict(text), "strict")
    except ProposalError as strict_err:
        if not lenient:
            raise
        for candidate in _candidates(text):
            try:
                return Parsed(_strict(candidate), "repaired", strict_error=str(strict_err))
            except ProposalError:
                continue
        raise


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
