"""Pure argument validators for memkit's public entry points.

Every public function of the store, the consolidation pipeline and the eval
loaders checks its arguments up front with these, so a bad value is refused
before any work or write, as a `ConfigError` (a `MemkitError` and a
`ValueError`) naming the argument and the value. Nothing is coerced: `5` is
not a scope id, `"ops"` is not a tag list, `True` is not a limit, `"5"` is
not a number. Strings must be encodable as UTF-8, because SQLite, JSON files
and providers all need UTF-8 (a lone surrogate such as `"\\ud800"` from a
broken decoder is refused here, not deep inside a write).

Each validator returns its (unchanged) value, so a call site reads
`scope_id = check_scope(scope_id)`. The model-facing tools keep their own
decoding (their refusals are `ToolError`s) but share `text_problem`: not UTF-8, or
a NUL (U+0000), which Postgres text cannot store, so both backends refuse it.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

from memkit.errors import ConfigError
from memkit.types import KINDS

MAX_CONTENT_BYTES = 65_536
"""Largest memory content the store accepts (UTF-8 bytes). 8x the SPEC's lesson
bound: room for a long procedure, while one write's redaction, trigram and
SQLite work stays in milliseconds (a 10 MB write is refused in well under 1 s)."""

MAX_SCOPE_BYTES = 1_024
"""Longest scope id the store accepts (UTF-8 bytes), on both backends. Postgres keys
its `scopes` rows and indexes on the scope id, and a B-tree entry holds at most ~2.7 KB
(a longer one raised psycopg's ProgramLimitExceeded where SQLite stored it): one bound,
well inside that, keeps one error contract."""

LIMIT_MIN, LIMIT_MAX = -(2**31), 2**31 - 1
"""Integer limits outside this range are refused (SQLite would overflow at 2**63;
no store holds 2**31 rows of one scope)."""


_REPR = reprlib.Repr()  # attributes, not keywords: Python 3.11
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def _show(value: Any, n: int = 80) -> str:
    """A short repr that never builds the whole repr of a 10 MB string or list."""
    r = _REPR.repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def _refuse(name: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{name} {why}, got {_show(value)}")


def utf8_problem(text: str) -> str | None:
    """Why `text` cannot be encoded as UTF-8 (a lone surrogate and where), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"not encodable as UTF-8 (lone surrogate {text[e.start]!r} at index {e.start})"
    return None


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored on either backend, or None: not UTF-8, or a NUL
    (U+0000), which Postgres text cannot hold (SQLite can; one contract refuses it on
    both)."""
    problem = utf8_problem(text)
    if problem is None and "\x00" in text:
        problem = f"not storable (a NUL, U+0000, at index {text.index(chr(0))})"
    return problem


def check_text(
    value: Any, name: str, *, blank: bool = False, max_bytes: int | None = None, stored: bool = True
) -> str:
    """A string, non-blank unless `blank`, at most `max_bytes`, storable (`text_problem`)
    or, when not `stored` (a query, only searched for), UTF-8 encodable."""
    if not isinstance(value, str):
        raise _refuse(name, value, f"must be a string, not {type(value).__name__}")
    problem = text_problem(value) if stored else utf8_problem(value)
    if problem:
        raise _refuse(name, value, f"is {problem}")
    if not blank and not value.strip():
        raise _refuse(name, value, "must be a non-blank string")
    if max_bytes is not None and len(value) * 4 > max_bytes:  # else it cannot be over
        size = len(value.encode("utf-8"))
        if size > max_bytes:
            raise ConfigError(f"{name} is {size} bytes (max {max_bytes}): {_show(value, 40)}")
    return value


def check_scope(value: Any, name: str = "scope_id") -> str:
    """A scope id: a non-blank string (never a number or None) of at most
    MAX_SCOPE_BYTES."""
    return check_text(value, name, max_bytes=MAX_SCOPE_BYTES)


def check_id(value: Any, name: str = "memory_id") -> str:
    """A memory, rollout or run id: a non-blank string."""
    return check_text(value, name)


def check_optional_id(value: Any, name: str = "id") -> str | None:
    """None, or a non-blank string."""
    return None if value is None else check_text(value, name)


def check_content(value: Any, name: str = "content", max_bytes: int = MAX_CONTENT_BYTES) -> str:
    """Memory content: non-blank text of at most `max_bytes` UTF-8 bytes."""
    return check_text(value, name, max_bytes=max_bytes)


def check_query(value: Any, name: str = "query") -> str:
    """A recall query: any UTF-8 string, blank allowed (blank lists recent rows)."""
    return check_text(value, name, blank=True, stored=False)


def check_tags(value: Any, name: str = "tags") -> tuple[str, ...]:
    """A list or tuple of strings; a string is not a tag list."""
    if not isinstance(value, list | tuple):
        raise _refuse(name, value, f"must be a list of strings, not {type(value).__name__}")
    for i, tag in enumerate(value):
        check_text(tag, f"{name}[{i}]", blank=True)
    return tuple(value)


def check_optional_tags(value: Any, name: str = "tags") -> tuple[str, ...] | None:
    return None if value is None else check_tags(value, name)


def check_int(value: Any, name: str, *, lo: int = LIMIT_MIN, hi: int = LIMIT_MAX) -> int:
    """An int (not a bool, a float or a numeric string) within [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(name, value, f"must be an integer, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise _refuse(name, value, f"must be within {lo}..{hi}")
    return value


def check_optional_int(
    value: Any, name: str, *, lo: int = LIMIT_MIN, hi: int = LIMIT_MAX
) -> int | None:
    return None if value is None else check_int(value, name, lo=lo, hi=hi)


def check_confidence(value: Any, name: str = "confidence") -> float:
    """A real number in [0, 1] (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(name, value, f"must be a number, not {type(value).__name__}")
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} {value!r} outside [0, 1]")
    return value


def check_kind(value: Any, name: str = "kind") -> str:
    if not isinstance(value, str) or value not in KINDS:
        raise ConfigError(f"unknown {name} {_show(value)} (want one of {', '.join(KINDS)})")
    return value


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _refuse(name, value, f"must be one of {', '.join(map(repr, choices))}")
    return value


def check_type(value: Any, name: str, types: type | tuple[type, ...]) -> Any:
    """`value` is an instance of `types` (e.g. a params dataclass)."""
    if not isinstance(value, types):
        want = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise _refuse(name, value, f"must be {want}, not {type(value).__name__}")
    return value
