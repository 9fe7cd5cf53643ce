"""The small part every public-benchmark adapter shares.

Finding a source file (the file itself, or a match in the folder or its
benchmark subfolder), hashing it into the dataset's version, loading JSON with
errors that name the file, building a root run from chat messages, building
the `Dataset` with its counts, and reading a required field with an error
naming file, record and field. Nothing benchmark-specific lives here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evals.datasets import (
    Dataset,
    GoldFact,
    Pair,
    Probe,
    Transcript,
    compute_counts,
    dataset_path,
    iso_utc,
    parse_json_document,
)
from memkit.errors import ConfigError, DatasetError
from memkit.text import word_set


def check_limit(limit: Any) -> None:
    """An adapter's `limit`: None or an int >= 0 (not "5", 2.5 or True)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be None or an integer >= 0, got {limit!r:.80}")


def find_data(
    path: str | Path, folder: str, patterns: Sequence[str], limit: Any = None
) -> list[Path]:
    """The data files at path: the file itself, or matches in path or path/folder.

    Every adapter calls this first, so it also checks the adapter's `limit`
    (None or an int >= 0; "5" or 2.5 is a ConfigError, not a late TypeError)."""
    check_limit(limit)
    p = dataset_path(path)
    if p.is_file():
        return [p]
    for d in (p, p / folder):
        if d.is_dir():
            for pattern in patterns:
                hits = sorted(d.glob(pattern))
                if hits:
                    return hits
    raise DatasetError(str(p), None, None, f"no {' or '.join(patterns)} found here or in {folder}/")


def digest(files: Iterable[Path]) -> str:
    """Short content hash of the source files: the adapter dataset's version."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return "sha256:" + h.hexdigest()[:16]


def load_json(path: Path) -> Any:
    """A whole JSON file, checked like a bundled line (`evals.datasets.parse_json_document`):
    bad UTF-8 at file:line, too deep, NaN/Infinity or lone surrogates are DatasetErrors."""
    return parse_json_document(path.read_bytes(), str(path))


def root_run(
    run_id: str,
    scope_id: str,
    ts: float,
    messages: list[dict[str, Any]],
    **meta: Any,
) -> Transcript:
    """A succeeded root run; turns = assistant messages, task = the first user message."""
    first_user = next((m["content"] for m in messages if m["role"] == "user"), "")
    last_assistant = next(
        (m["content"] for m in reversed(messages) if m["role"] == "assistant"), ""
    )
    return Transcript(
        run_id=run_id,
        scope_id=scope_id,
        parent_run_id=None,
        status="succeeded",
        stop_reason="stop",
        turns=sum(m["role"] == "assistant" for m in messages),
        started_at=iso_utc(ts),
        started_ts=ts,
        task=first_user,
        messages=tuple(messages),
        final_answer=last_assistant,
        meta=MappingProxyType(meta),
    )


def make_dataset(
    name: str,
    files: Sequence[Path],
    description: str,
    license: str,
    transcripts: list[Transcript],
    facts: list[GoldFact],
    probes: list[Probe],
    *,
    pairs: Sequence[Pair] = (),
    info: Mapping[str, Any] | None = None,
) -> Dataset:
    ds = Dataset(
        name=name,
        version=digest(files),
        description=description,
        license=license,
        counts={},
        transcripts=tuple(transcripts),
        facts=tuple(facts),
        probes=tuple(probes),
        pairs=tuple(pairs),
        path=str(files[0].parent),
        info=MappingProxyType(dict(info or {})),
    )
    return replace(ds, counts=compute_counts(ds))


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


@dataclass(frozen=True)
class At:
    """Where a value of a source record sits: file, record (a file line or a 1-based
    position) and the field path inside the record ("" for the record itself).

    `at["qa"][3]["answer"]` is the path `qa[3].answer`; `at.error(...)` is the
    DatasetError naming file:record:field that every adapter raises."""

    file: Path
    n: int | None
    path: str = ""

    def __getitem__(self, key: str | int) -> At:
        if isinstance(key, int):
            return At(self.file, self.n, f"{self.path}[{key}]")
        return At(self.file, self.n, f"{self.path}.{key}" if self.path else key)

    def error(self, message: str) -> DatasetError:
        return DatasetError(str(self.file), self.n, self.path or None, message)


_ABSENT = object()


def check(value: Any, types: type | tuple[type, ...], at: At) -> Any:
    """`value` if it is one of `types` (a bool is no integer or number, unless `bool` is
    listed; an integer is a number where `float` is listed), else a DatasetError at `at`
    naming the field, the expected types and the bad value's type."""
    want = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):
        ok = bool in want
    else:
        ok = isinstance(value, want) or (float in want and isinstance(value, int))
    if not ok:
        names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in want)
        raise at.error(f"expected {names}, got {type(value).__name__} {value!r:.60}")
    return value


def field(
    rec: Any, key: str, types: type | tuple[type, ...], at: At, *, default: Any = _ABSENT
) -> Any:
    """rec[key] checked by `check`, else a DatasetError naming file, record and field.

    `rec` must be an object (an error at `at` otherwise). A missing key is an error
    unless a `default` is given; a key present with the wrong type is always one
    (a null is wrong unless `type(None)` is listed)."""
    if not isinstance(rec, dict):
        raise at.error(f"expected an object, got {type(rec).__name__} {rec!r:.60}")
    if key not in rec:
        if default is _ABSENT:
            raise at[key].error("required field is missing")
        return default
    return check(rec[key], types, at[key])


def each(value: Any, types: type | tuple[type, ...], at: At) -> list[Any]:
    """`value` as a list whose every item is one of `types` (errors name `at[i]`)."""
    check(value, list, at)
    for i, item in enumerate(value):
        check(item, types, at[i])
    return value


@contextlib.contextmanager
def record_guard(file: Path, n: int | None) -> Iterator[None]:
    """Run one record's conversion: a field of the wrong shape deep inside it (a list
    where a speaker name belongs, a number where the turns or the QA list belong) is a
    DatasetError naming file and record, never a TypeError traceback.

    The adapters check the type of every field they read (`field`, `each`,
    `tool_chat`), so a mistyped field is a DatasetError naming it; this stays as the
    last net, for a shape no check foresaw.
    """
    try:
        yield
    except DatasetError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
        what = (
            f"field {e.args[0]!r} is missing"
            if isinstance(e, KeyError) and e.args
            else f"{type(e).__name__}: {e}"
        )
        raise DatasetError(str(file), n, None, f"malformed record ({what:.160})") from None


@functools.lru_cache(maxsize=65536)
def words(text: str) -> frozenset[str]:
    """The assembler's word set of a text, memoised (adapters compare each line often)."""
    return frozenset(word_set(text))


def equivalence_pairs(
    positives: Iterable[tuple[str, str]],
    negatives: Iterable[tuple[str, Sequence[str]]],
    source: str,
) -> list[Pair]:
    """Labelled pairs from a source's own equivalences, for the matcher's figure.

    `positives` are (text, text) the source says state one fact; `negatives`
    are (text, candidates it is *not* equivalent to): the candidate sharing the
    most words with it (ties: the first) becomes a hard `distinct` pair.
    """
    out = [Pair(a, b, "paraphrase", source) for a, b in positives]
    for text, others in negatives:
        if others:
            w = words(text)
            best = max(others, key=lambda o: len(w & words(o)) / (len(w | words(o)) or 1))
            out.append(Pair(text, best, "distinct", source))
    return out


def ambiguous_texts(facts: Iterable[GoldFact]) -> list[dict[str, Any]]:
    """Gold facts of one scope that share a text (whitespace and case aside).

    A row holding such a text states each of them, so the text matcher must
    leave it unmatched: these records cap every extraction score below 1.0.
    """
    by: dict[tuple[str, str], list[str]] = {}
    for f in facts:
        for text in dict.fromkeys(
            " ".join(x.split()).casefold() for x in (f.content, *f.paraphrases)
        ):
            ids = by.setdefault((f.scope_id, text), [])
            if f.fact_id not in ids:
                ids.append(f.fact_id)
    return [
        {"scope_id": s, "text": text, "facts": ids} for (s, text), ids in by.items() if len(ids) > 1
    ]


def tool_chat(
    raw: Any, file: Path, n: int, at: str, *, tool_call_id: str = "tool_call_id"
) -> list[dict[str, Any]]:
    """OpenAI-format messages from a recorded agent run: role, content (None -> ""
    except an assistant's that made tool calls), name, tool_calls, tool_call_id.

    `tool_call_id` names the source's field answering a call (SWE-agent keeps a
    one-item list `tool_call_ids`). Everything else a message carries (thoughts,
    message types, agent names) is left out. Every field read is type-checked:
    content a string, null or a list of parts with string `text`; `name` a
    string; each tool call an object with a string `id`, optional string `type`
    and a `function` object with string `name` and `arguments`.
    """
    where = At(file, n, at)
    check(raw, list, where)
    out = []
    for j, m in enumerate(raw):
        mat = where[j]
        role = field(m, "role", str, mat)
        if role not in ("system", "user", "assistant", "tool"):
            raise mat["role"].error(f"unknown role {role!r}")
        content = field(m, "content", (str, list, type(None)), mat, default=None)
        if isinstance(content, list):  # multi-part content: its text parts
            parts = [
                field(p, "text", str, mat["content"][k], default="") for k, p in enumerate(content)
            ]
            content = "".join(parts)
        msg: dict[str, Any] = {"role": role}
        calls = field(m, "tool_calls", (list, type(None)), mat, default=None) or None
        for k, c in enumerate(calls or ()):
            cat = mat["tool_calls"][k]
            field(c, "id", str, cat)
            field(c, "type", str, cat, default=None)
            fn = field(c, "function", dict, cat)
            field(fn, "name", str, cat["function"])
            field(fn, "arguments", str, cat["function"])
        msg["content"] = content if content is not None or (role == "assistant" and calls) else ""
        name = field(m, "name", str, mat, default=None)
        if name and role == "tool":
            msg["name"] = name
        if calls and role == "assistant":
            msg["tool_calls"] = calls
        if role == "tool":
            ids = field(m, tool_call_id, (str, list), mat, default=None)
            if isinstance(ids, list):
                if len(ids) != 1:
                    raise mat[tool_call_id].error(f"expected one id, got {len(ids)}")
                ids = check(ids[0], str, mat[tool_call_id][0])
            msg["tool_call_id"] = ids
        out.append(msg)
    return out


def utc_timestamp(value: Any, fmt: str, file: Path, n: int, at: str) -> float:
    """`value` parsed with `fmt` as UTC epoch seconds, else a DatasetError naming the
    file, record and field."""
    check(value, str, At(file, n, at))
    try:
        return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        raise DatasetError(str(file), n, at, f"unparsable date {value!r}") from None
