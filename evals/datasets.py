"""Dataset records, loaders and validators for the DESIGN.md "Dataset formats".

A dataset folder holds `dataset.json` plus `transcripts.jsonl`, `facts.jsonl`,
`probes.jsonl` and optionally `pairs.jsonl`. Every line is checked (JSON,
required fields and types, kinds, statuses, roles, tool calls answered by
tool results, ISO 8601 timestamps, unique ids, ids that resolve across files,
gold that is consistent in time, `dataset.json` counts). Every problem becomes
a `memkit.errors.DatasetError` naming file, line and field; `validate_dataset`
returns all of them and `load_dataset` raises them combined, so a bad line is
never silently dropped.

The same records are produced by the public-benchmark adapters in
`evals.adapters`, and `check_records` runs the cross-record rules on those
in-memory datasets too.

Why over 600 lines: the dataset format is one contract: its record types,
the line-by-line checks that name file:line:field, and the cross-record rules
(`check_records`, which the adapters' in-memory datasets go through too) are
read and enforced in one place. The cross-record rules are the part to move
out next (issue #35).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import jsonlines

from memkit.errors import ConfigError, DatasetError
from memkit.runs import INELIGIBLE_REASONS, RUN_STATUSES, ineligible_reasons
from memkit.types import KINDS

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
LABELS: tuple[str, ...] = ("paraphrase", "distinct")

FILES: tuple[str, ...] = ("transcripts.jsonl", "facts.jsonl", "probes.jsonl", "pairs.jsonl")


def _no_meta() -> Mapping[str, Any]:
    """Adapters keep source details (dialog ids, question types) in `meta`; files have none."""
    return MappingProxyType({})


# --- records -----------------------------------------------------------------


def parse_timestamp(value: str) -> float:
    """ISO 8601 -> UTC epoch seconds; a naive timestamp is read as UTC.

    Raises ValueError naming the value when it does not parse.
    """
    try:
        dt = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"timestamp {value!r} is not ISO 8601") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def iso_utc(ts: float) -> str:
    """UTC epoch seconds -> ISO 8601 with a `Z`-free `+00:00` offset."""
    return datetime.fromtimestamp(ts, UTC).isoformat()


@dataclass(frozen=True, slots=True)
class Transcript:
    """One recorded run. `started_at` keeps the ISO string, `started_ts` its epoch."""

    run_id: str
    scope_id: str
    parent_run_id: str | None
    status: str
    stop_reason: str
    turns: int
    started_at: str
    started_ts: float
    task: str
    messages: tuple[Mapping[str, Any], ...]
    final_answer: str
    meta: Mapping[str, Any] = field(default_factory=_no_meta, compare=False)

    @property
    def is_root(self) -> bool:
        return self.parent_run_id is None

    @property
    def ineligible(self) -> tuple[str, ...]:
        """The SPEC §7 eligibility rules this run breaks (`memkit.runs`); () if none."""
        return ineligible_reasons(
            parent_run_id=self.parent_run_id,
            status=self.status,
            turns=self.turns,
            stop_reason=self.stop_reason,
        )

    @property
    def eligible(self) -> bool:
        """SPEC §7: root, succeeded, at least one turn, normal stop reason."""
        return not self.ineligible

    def as_run(self) -> dict[str, Any]:
        """The plain transcript mapping `memkit.consolidate.stage_run` takes (fresh copies)."""
        return {
            "run_id": self.run_id,
            "scope_id": self.scope_id,
            "parent_run_id": self.parent_run_id,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "turns": self.turns,
            "started_at": self.started_at,
            "task": self.task,
            "messages": [json.loads(json.dumps(m)) for m in self.messages],
            "final_answer": self.final_answer,
        }


@dataclass(frozen=True, slots=True)
class GoldFact:
    """A gold memory: what a correct store holds, where it came from and how it ended."""

    fact_id: str
    scope_id: str
    kind: str
    content: str
    paraphrases: tuple[str, ...]
    established_in: tuple[str, ...]
    retracted_in: str | None = None
    superseded_by: str | None = None
    meta: Mapping[str, Any] = field(default_factory=_no_meta, compare=False)

    @property
    def live_at_end(self) -> bool:
        return self.retracted_in is None and self.superseded_by is None

    def as_record(self) -> dict[str, Any]:
        return {
            "fact_id": self.fact_id,
            "scope_id": self.scope_id,
            "kind": self.kind,
            "content": self.content,
            "paraphrases": list(self.paraphrases),
            "established_in": list(self.established_in),
            "retracted_in": self.retracted_in,
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True, slots=True)
class Probe:
    """A recall probe asked after `after_run` was replayed; `relevant` may be empty."""

    probe_id: str
    scope_id: str
    after_run: str
    query: str
    relevant: tuple[str, ...]
    distractors: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=_no_meta, compare=False)

    @property
    def off_topic(self) -> bool:
        """No fact answers it: the right recall is nothing."""
        return not self.relevant

    def as_record(self) -> dict[str, Any]:
        return {
            "probe_id": self.probe_id,
            "scope_id": self.scope_id,
            "after_run": self.after_run,
            "query": self.query,
            "relevant": list(self.relevant),
            "distractors": list(self.distractors),
        }


@dataclass(frozen=True, slots=True)
class Pair:
    """A labelled text pair; `score` is kept for graded sources (STS-B)."""

    a: str
    b: str
    label: str
    source: str
    score: float | None = None

    @property
    def is_paraphrase(self) -> bool:
        return self.label == "paraphrase"


@dataclass(frozen=True)
class Dataset:
    """A whole dataset: metadata plus the four record lists, in file order."""

    name: str
    version: str
    description: str
    license: str
    counts: Mapping[str, Any]
    transcripts: tuple[Transcript, ...]
    facts: tuple[GoldFact, ...]
    probes: tuple[Probe, ...]
    pairs: tuple[Pair, ...] = ()
    path: str | None = field(default=None, compare=False)
    info: Mapping[str, Any] = field(default_factory=_no_meta, compare=False)
    """Further `dataset.json` keys (e.g. the bundled data's per-scope agents)."""

    @cached_property
    def facts_by_id(self) -> dict[str, GoldFact]:
        return {f.fact_id: f for f in self.facts}

    @cached_property
    def runs_by_id(self) -> dict[str, Transcript]:
        return {t.run_id: t for t in self.transcripts}

    @cached_property
    def scopes(self) -> tuple[str, ...]:
        """Scope ids in order of first appearance among the transcripts."""
        return tuple(dict.fromkeys(t.scope_id for t in self.transcripts))

    def transcripts_by_scope(self) -> dict[str, list[Transcript]]:
        """Each scope's runs in time order (ties keep file order)."""
        out: dict[str, list[Transcript]] = {s: [] for s in self.scopes}
        for t in self.transcripts:
            out[t.scope_id].append(t)
        for runs in out.values():
            runs.sort(key=lambda t: t.started_ts)
        return out

    def facts_in(self, scope_id: str) -> list[GoldFact]:
        return [f for f in self.facts if f.scope_id == scope_id]

    def probes_in(self, scope_id: str) -> list[Probe]:
        return [p for p in self.probes if p.scope_id == scope_id]

    def fold_groups(self) -> dict[str, list[str]]:
        """successor fact id -> ids of the facts superseded into it (fold-in / merge gold)."""
        groups: dict[str, list[str]] = {}
        for f in self.facts:
            if f.superseded_by is not None:
                groups.setdefault(f.superseded_by, []).append(f.fact_id)
        return groups

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON of metadata and every record, for run manifests.

        Independent of the folder the data was read from and of JSON key order.
        """
        h = hashlib.sha256()
        head = {"name": self.name, "version": self.version}
        h.update(_canon(head))
        for t in self.transcripts:
            h.update(b"T" + _canon({**t.as_run(), "meta": dict(t.meta)}))
        for f in self.facts:
            h.update(b"F" + _canon({**f.as_record(), "meta": dict(f.meta)}))
        for p in self.probes:
            h.update(b"P" + _canon({**p.as_record(), "meta": dict(p.meta)}))
        for pr in self.pairs:
            h.update(b"Q" + _canon(pair_record(pr)))
        return h.hexdigest()

    def to_frames(self) -> dict[str, Any]:
        """pandas DataFrames: transcripts (no message bodies), facts, probes, pairs."""
        import pandas as pd

        runs = [
            {
                **{k: v for k, v in t.as_run().items() if k != "messages"},
                "started_ts": t.started_ts,
                "n_messages": len(t.messages),
                "eligible": t.eligible,
            }
            for t in self.transcripts
        ]
        facts = [
            {**f.as_record(), "n_paraphrases": len(f.paraphrases), "live_at_end": f.live_at_end}
            for f in self.facts
        ]
        probes = [
            {**p.as_record(), "n_relevant": len(p.relevant), "off_topic": p.off_topic}
            for p in self.probes
        ]
        return {
            "transcripts": pd.DataFrame(runs),
            "facts": pd.DataFrame(facts),
            "probes": pd.DataFrame(probes),
            "pairs": pairs_frame(self.pairs),
        }


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def pair_record(p: Pair) -> dict[str, Any]:
    rec: dict[str, Any] = {"a": p.a, "b": p.b, "label": p.label, "source": p.source}
    if p.score is not None:
        rec["score"] = p.score
    return rec


def pairs_frame(pairs: Iterable[Pair]) -> Any:
    """Pairs as a DataFrame with columns a, b, label, source, score."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"a": p.a, "b": p.b, "label": p.label, "source": p.source, "score": p.score}
            for p in pairs
        ],
        columns=["a", "b", "label", "source", "score"],
    )


# --- counts ------------------------------------------------------------------


def compute_counts(ds: Dataset, sizes: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Every count `dataset.json` may state; each stated one is checked on load.

    scopes; runs, root_runs, eligible_runs (SPEC §7 eligibility),
    ineligible_by_reason (child, failed, aborted, parked, zero_turns,
    abnormal_stop; a run can have several reasons), by_status; messages,
    tool_calls; facts, facts_by_kind, facts_by_hard_case (from a fact's
    `hard_case` field), paraphrases, restatements (establishing runs after
    the first), superseded, retracted, superseded_or_retracted; probes,
    off_topic_probes (no relevant fact); pairs, pairs_by_label, hand_pairs
    (source ending in ":hand"); bytes ({file name: size}, when `sizes` is given).
    Tallies hold only the values that occur.
    """
    tr, fa = ds.transcripts, ds.facts

    def tally(values: Iterable[Any]) -> dict[str, int]:
        return dict(sorted(Counter(v for v in values if v is not None).items()))

    counts: dict[str, Any] = {
        "scopes": len(ds.scopes),
        "runs": len(tr),
        "root_runs": sum(t.is_root for t in tr),
        "eligible_runs": sum(t.eligible for t in tr),
        "ineligible_by_reason": {
            why: sum(why in t.ineligible for t in tr) for why in INELIGIBLE_REASONS
        },
        "by_status": tally(t.status for t in tr),
        "messages": sum(len(t.messages) for t in tr),
        "tool_calls": sum(len(m.get("tool_calls") or []) for t in tr for m in t.messages),
        "facts": len(fa),
        "facts_by_kind": tally(f.kind for f in fa),
        "facts_by_hard_case": tally(f.meta.get("hard_case") for f in fa),
        "paraphrases": sum(len(f.paraphrases) for f in fa),
        "restatements": sum(max(0, len(f.established_in) - 1) for f in fa),
        "superseded": sum(f.superseded_by is not None for f in fa),
        "retracted": sum(f.retracted_in is not None for f in fa),
        "superseded_or_retracted": sum(not f.live_at_end for f in fa),
        "probes": len(ds.probes),
        "off_topic_probes": sum(p.off_topic for p in ds.probes),
        "pairs": len(ds.pairs),
        "pairs_by_label": tally(p.label for p in ds.pairs),
        "hand_pairs": sum(p.source.endswith(":hand") for p in ds.pairs),
    }
    if sizes is not None:
        counts["bytes"] = dict(sorted(sizes.items()))
    return counts


def dataset_path(path: Any) -> Path:
    """A str or os.PathLike as a Path; anything else (None, 5, bytes) is a ConfigError."""
    if not isinstance(path, str | os.PathLike) or not str(path).strip():
        raise ConfigError(f"dataset path must be a non-blank str or path, got {path!r:.80}")
    return Path(path)


# --- JSON with no surprises --------------------------------------------------------

MAX_DEPTH = 64
"""Deepest nesting a dataset record may have; deeper is a DatasetError, never a
RecursionError somewhere downstream (the formats need 5 levels)."""


class _NonFinite:
    """Stands in for NaN/Infinity while parsing, so the walk can name the field."""

    def __init__(self, name: str):
        self.name = name


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _problem(obj: Any, text: str) -> tuple[str | None, str] | None:
    """(field path, message) of the first value a dataset must not hold, or None:
    NaN/Infinity, a lone surrogate, nesting deeper than MAX_DEPTH. Iterative.

    The walk is skipped when the text cannot hold any of them (no NaN/Infinity
    token, no surrogate escape, fewer brackets than MAX_DEPTH), and strings are
    only encoded when the text has a surrogate escape (raw UTF-8 cannot carry
    one): most lines cost a few substring scans."""
    strings = _SURROGATE_ESCAPE.search(text) is not None
    if (
        not strings
        and "NaN" not in text
        and "Infinity" not in text
        and text.count("[") + text.count("{") <= MAX_DEPTH
    ):
        return None
    stack: list[tuple[Any, str, int]] = [(obj, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return where or None, f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(value, _NonFinite):
            return where or None, f"{value.name} is not a number JSON allows"
        if isinstance(value, str):
            if strings:
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as e:
                    return where or None, f"not UTF-8: lone surrogate at index {e.start}"
        elif isinstance(value, dict):
            items = [(v, f"{where}.{k}" if where else str(k), depth + 1) for k, v in value.items()]
            if strings:
                items += [(k, where, depth + 1) for k in value]  # keys must be UTF-8 too
            stack.extend(reversed(items))
        elif isinstance(value, list):
            stack.extend(
                (v, f"{where}[{i}]", depth + 1) for i, v in reversed(list(enumerate(value)))
            )
    return None


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_NonFinite)


class _LineProblem(ValueError):
    """What is wrong with one JSONL line, raised by `_checked_loads`: a
    ValueError, so `jsonlines` wraps it (with the line number) as its cause."""

    def __init__(self, field: str | None, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def _checked_loads(text: str) -> Any:
    """One line's text as a value, or a _LineProblem: invalid JSON, nesting too
    deep, NaN/Infinity, lone surrogates."""
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        raise _LineProblem(None, f"invalid JSON: {e.msg} at column {e.colno}") from None
    except RecursionError:
        raise _LineProblem(None, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # e.g. an integer beyond Python's digit limit
        raise _LineProblem(None, f"invalid JSON: {e}") from None
    bad = _problem(obj, text)
    if bad is not None:
        raise _LineProblem(*bad)
    return obj


def _not_utf8(file: str, line: int, e: UnicodeDecodeError) -> DatasetError:
    return DatasetError(
        file, line, None, f"not UTF-8: byte {e.object[e.start]:#04x} at column {e.start + 1}"
    )


def parse_json_line(raw: bytes | str, file: str, line: int) -> Any:
    """One JSONL line as a value, or a DatasetError naming file:line[:field]: bytes
    that are not UTF-8 (with their column), invalid JSON, nesting too deep,
    NaN/Infinity, lone surrogates. The adapters use it for every source line."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _not_utf8(file, line, e) from None
    try:
        return _checked_loads(raw)
    except _LineProblem as p:
        raise DatasetError(file, line, p.field, p.message) from None


def parse_json_document(data: bytes, file: str) -> Any:
    """A whole JSON file (e.g. dataset.json) with the checks of `parse_json_line`;
    a problem is located by line where the parser knows it, else by field."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DatasetError(
            file, line, None, f"not UTF-8: byte {data[e.start]:#04x} at column {col}"
        ) from None
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(file, e.lineno, None, f"invalid JSON: {e}") from None
    except RecursionError:
        raise DatasetError(file, None, None, f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise DatasetError(file, None, None, f"invalid JSON: {e}") from None
    bad = _problem(obj, text)
    if bad is not None:
        raise DatasetError(file, None, bad[0], bad[1])
    return obj


# --- per-line checks -----------------------------------------------------------

_MISSING = object()


class _Line:
    """Error sink for one JSONL line: every message names file, line and field."""

    def __init__(self, file: str, line: int | None, errors: list[DatasetError]):
        self.file, self.line, self.errors = file, line, errors
        self.bad = False

    def err(self, fld: str | None, message: str) -> None:
        self.bad = True
        self.errors.append(DatasetError(self.file, self.line, fld, message))

    def get(
        self,
        obj: Mapping[str, Any],
        key: str,
        types: type | tuple[type, ...],
        *,
        prefix: str = "",
        nullable: bool = False,
        required: bool = True,
        nonempty: bool = False,
    ) -> Any:
        """obj[key] checked against types; returns _MISSING after reporting a problem."""
        name = f"{prefix}{key}"
        if key not in obj:
            if required:
                self.err(name, "required field is missing")
            return _MISSING
        value = obj[key]
        if value is None:
            if nullable or not required:
                return None
            self.err(name, "must not be null")
            return _MISSING
        if isinstance(value, bool) and bool not in _as_tuple(types):
            self.err(name, f"expected {_type_names(types)}, got bool {value!r}")
            return _MISSING
        if not isinstance(value, types):
            self.err(
                name, f"expected {_type_names(types)}, got {type(value).__name__} {_short(value)}"
            )
            return _MISSING
        if nonempty and isinstance(value, str) and not value.strip():
            self.err(name, "must be a non-blank string")
            return _MISSING
        return value

    def str_list(self, obj: Mapping[str, Any], key: str, *, required: bool = True) -> Any:
        value = self.get(obj, key, list, required=required)
        if value is _MISSING or value is None:
            return value
        ok = True
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                self.err(f"{key}[{i}]", f"expected a non-blank string, got {_short(item)}")
                ok = False
        return tuple(value) if ok else _MISSING

    def timestamp(self, obj: Mapping[str, Any], key: str) -> tuple[str, float] | Any:
        value = self.get(obj, key, str)
        if value is _MISSING:
            return _MISSING
        try:
            return value, parse_timestamp(value)
        except ValueError as e:
            self.err(key, str(e))
            return _MISSING


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _type_names(types: type | tuple[type, ...]) -> str:
    names = {"str": "string", "int": "integer", "float": "number", "list": "list", "dict": "object"}
    return " or ".join(names.get(t.__name__, t.__name__) for t in _as_tuple(types))


def _short(value: Any, n: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def check_messages(messages: Sequence[Any], sink: _Line, prefix: str = "messages") -> None:
    """OpenAI chat format: roles, content types, tool calls answered by tool results.

    Every assistant `tool_calls[].id` must be answered by a later `tool`
    message with that `tool_call_id`, and every tool message must answer an
    earlier, not yet answered call.
    """
    open_calls: dict[str, str] = {}  # id -> field where it was made
    seen_calls: set[str] = set()
    for i, m in enumerate(messages):
        at = f"{prefix}[{i}]"
        if not isinstance(m, dict):
            sink.err(at, f"expected an object, got {type(m).__name__}")
            continue
        role = sink.get(m, "role", str, prefix=f"{at}.")
        if role is _MISSING:
            continue
        if role not in ROLES:
            sink.err(f"{at}.role", f"unknown role {role!r} (expected one of {', '.join(ROLES)})")
            continue
        calls = m.get("tool_calls")
        has_calls = bool(calls)
        content_nullable = role == "assistant" and has_calls
        sink.get(m, "content", str, prefix=f"{at}.", nullable=content_nullable)
        sink.get(m, "name", str, prefix=f"{at}.", required=False)
        if calls is not None and role != "assistant":
            sink.err(f"{at}.tool_calls", f"only assistant messages carry tool calls, not {role!r}")
        elif calls is not None:
            if not isinstance(calls, list):
                sink.err(f"{at}.tool_calls", f"expected a list, got {type(calls).__name__}")
                calls = []
            for j, call in enumerate(calls):
                _check_call(call, f"{at}.tool_calls[{j}]", sink, open_calls, seen_calls)
        if role == "tool":
            tcid = sink.get(m, "tool_call_id", str, prefix=f"{at}.", nonempty=True)
            if tcid is _MISSING:
                continue
            if tcid in open_calls:
                del open_calls[tcid]
            elif tcid in seen_calls:
                sink.err(f"{at}.tool_call_id", f"tool call {tcid!r} was already answered")
            else:
                sink.err(f"{at}.tool_call_id", f"answers no earlier tool call: {tcid!r}")
        elif "tool_call_id" in m and m["tool_call_id"] is not None:
            sink.err(f"{at}.tool_call_id", f"only tool messages carry tool_call_id, not {role!r}")
    for call_id, where in open_calls.items():
        sink.err(where, f"tool call {call_id!r} has no tool result")


def _check_call(
    call: Any, at: str, sink: _Line, open_calls: dict[str, str], seen: set[str]
) -> None:
    if not isinstance(call, dict):
        sink.err(at, f"expected an object, got {type(call).__name__}")
        return
    cid = sink.get(call, "id", str, prefix=f"{at}.", nonempty=True)
    typ = call.get("type", "function")
    if typ != "function":
        sink.err(f"{at}.type", f"unsupported tool call type {typ!r} (expected 'function')")
    fn = sink.get(call, "function", dict, prefix=f"{at}.")
    if fn is not _MISSING:
        sink.get(fn, "name", str, prefix=f"{at}.function.", nonempty=True)
        sink.get(fn, "arguments", str, prefix=f"{at}.function.")
    if cid is _MISSING:
        return
    if cid in seen:
        sink.err(f"{at}.id", f"duplicate tool call id {cid!r}")
        return
    seen.add(cid)
    open_calls[cid] = f"{at}.id"


_TRANSCRIPT_FIELDS = frozenset(Transcript.__dataclass_fields__) - {"started_ts", "meta"}
_FACT_FIELDS = frozenset(GoldFact.__dataclass_fields__) - {"meta"}
_PROBE_FIELDS = frozenset(Probe.__dataclass_fields__) - {"meta"}


def _extra(obj: Mapping[str, Any], known: frozenset[str]) -> Mapping[str, Any]:
    """Fields beyond the format (e.g. a fact's `hard_case`) are kept, read-only, in `meta`."""
    return MappingProxyType({k: v for k, v in obj.items() if k not in known})


def _parse_transcript(obj: dict[str, Any], s: _Line) -> Transcript | None:
    run_id = s.get(obj, "run_id", str, nonempty=True)
    scope_id = s.get(obj, "scope_id", str, nonempty=True)
    parent = s.get(obj, "parent_run_id", str, nullable=True, nonempty=True)
    status = s.get(obj, "status", str)
    if status is not _MISSING and status not in RUN_STATUSES:
        s.err("status", f"unknown status {status!r} (expected one of {', '.join(RUN_STATUSES)})")
    stop = s.get(obj, "stop_reason", str)
    turns = s.get(obj, "turns", int)
    if turns is not _MISSING and turns < 0:
        s.err("turns", f"must be >= 0, got {turns}")
    started = s.timestamp(obj, "started_at")
    task = s.get(obj, "task", str)
    messages = s.get(obj, "messages", list)
    if messages is not _MISSING:
        check_messages(messages, s)
    final = s.get(obj, "final_answer", str)
    if s.bad:
        return None
    return Transcript(
        run_id=run_id,
        scope_id=scope_id,
        parent_run_id=parent,
        status=status,
        stop_reason=stop,
        turns=turns,
        started_at=started[0],
        started_ts=started[1],
        task=task,
        messages=tuple(messages),
        final_answer=final,
        meta=_extra(obj, _TRANSCRIPT_FIELDS),
    )


def _parse_fact(obj: dict[str, Any], s: _Line) -> GoldFact | None:
    fact_id = s.get(obj, "fact_id", str, nonempty=True)
    scope_id = s.get(obj, "scope_id", str, nonempty=True)
    kind = s.get(obj, "kind", str)
    if kind is not _MISSING and kind not in KINDS:
        s.err("kind", f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    content = s.get(obj, "content", str, nonempty=True)
    paraphrases = s.str_list(obj, "paraphrases")
    established = s.str_list(obj, "established_in")
    if established is not _MISSING and not established:
        s.err("established_in", "must name at least one run")
    retracted = s.get(obj, "retracted_in", str, nullable=True, nonempty=True)
    superseded = s.get(obj, "superseded_by", str, nullable=True, nonempty=True)
    if superseded is not _MISSING and superseded is not None and superseded == fact_id:
        s.err("superseded_by", f"fact {fact_id!r} cannot supersede itself (use retracted_in)")
    if s.bad:
        return None
    return GoldFact(
        fact_id,
        scope_id,
        kind,
        content,
        paraphrases,
        established,
        retracted,
        superseded,
        meta=_extra(obj, _FACT_FIELDS),
    )


def _parse_probe(obj: dict[str, Any], s: _Line) -> Probe | None:
    probe_id = s.get(obj, "probe_id", str, nonempty=True)
    scope_id = s.get(obj, "scope_id", str, nonempty=True)
    after = s.get(obj, "after_run", str, nonempty=True)
    query = s.get(obj, "query", str, nonempty=True)
    relevant = s.str_list(obj, "relevant")
    distractors = s.str_list(obj, "distractors", required=False)
    if s.bad:
        return None
    if distractors is _MISSING or distractors is None:
        distractors = ()
    return Probe(
        probe_id, scope_id, after, query, relevant, distractors, meta=_extra(obj, _PROBE_FIELDS)
    )


def _parse_pair(obj: dict[str, Any], s: _Line) -> Pair | None:
    a = s.get(obj, "a", str, nonempty=True)
    b = s.get(obj, "b", str, nonempty=True)
    label = s.get(obj, "label", str)
    if label is not _MISSING and label not in LABELS:
        s.err("label", f"unknown label {label!r} (expected paraphrase or distinct)")
    source = s.get(obj, "source", str, nonempty=True)
    score = s.get(obj, "score", (int, float), required=False)
    if s.bad:
        return None
    return Pair(a, b, label, source, None if score in (None, _MISSING) else float(score))


_Parser = Callable[[dict[str, Any], _Line], Any]


_BOM = b"\xef\xbb\xbf"
_BLANK = object()
_BLANK_CHARS = " \t\r\n\x0b\x0c"


def _line_loads(text: str) -> Any:
    """`_checked_loads`, with a blank line (ASCII whitespace only) as _BLANK."""
    return _BLANK if not text.strip(_BLANK_CHARS) else _checked_loads(text)


def _invalid_line(file: str, e: jsonlines.InvalidLineError) -> DatasetError:
    """jsonlines' error for one line as a DatasetError at its line (and field)."""
    cause = e.__cause__
    if isinstance(cause, _LineProblem):
        return DatasetError(file, e.lineno, cause.field, cause.message)
    if isinstance(cause, UnicodeDecodeError):
        return _not_utf8(file, e.lineno, cause)
    return DatasetError(file, e.lineno, None, str(e))


def _read_jsonl(
    path: Path, parse: _Parser, errors: list[DatasetError], id_key: str | None
) -> tuple[list[Any], list[int], set[str], set[str]]:
    """Parse every line; returns good records, their line numbers, and every id seen.

    Ids of lines that failed other checks are still returned so that references
    to them are not reported twice. Blank lines are allowed (they hold no record).
    """
    records: list[Any] = []
    lines: list[int] = []
    seen: dict[str, int] = {}
    scopes: set[str] = set()
    file = str(path)
    # split on "\n" only: str.splitlines() would also break at U+2028, U+0085 and
    # friends, which JSON with ensure_ascii=False may hold raw inside strings
    raw_lines = path.read_bytes().split(b"\n")
    # jsonlines silently drops one U+FEFF or U+001E (RFC 7464) before any line;
    # a dataset holds neither, so each is an error here (a BOM opening the file
    # is dropped after its error, and the line is still read)
    for n, raw in enumerate(raw_lines, start=1):
        if raw.startswith(_BOM) and n == 1:
            errors.append(
                DatasetError(file, 1, None, "starts with a byte-order mark; write plain UTF-8")
            )
            raw_lines[0] = raw[len(_BOM) :]
        elif raw.startswith((_BOM, b"\x1e")):
            what = "a byte-order mark (U+FEFF)" if raw.startswith(_BOM) else "U+001E"
            errors.append(DatasetError(file, n, None, f"line starts with {what}"))
            raw_lines[n - 1] = b""
    # jsonlines decodes each line to str before `loads` (its type says str | bytes)
    reader = jsonlines.Reader(raw_lines, loads=cast("Callable[[str | bytes], Any]", _line_loads))
    n = 0
    while True:
        n += 1  # blank lines are read too (skip_empty=False), so the n-th read is line n
        try:
            obj = reader.read(allow_none=True, skip_empty=False)
        except EOFError:
            break
        except jsonlines.InvalidLineError as e:
            errors.append(_invalid_line(file, e))
            continue
        if obj is _BLANK:
            continue
        sink = _Line(file, n, errors)
        if not isinstance(obj, dict):
            sink.err(None, f"expected a JSON object, got {type(obj).__name__}")
            continue
        rid = obj.get(id_key) if id_key else None
        if isinstance(rid, str) and rid:
            if rid in seen:
                sink.err(id_key, f"duplicate id {rid!r} (first on line {seen[rid]})")
            else:
                seen[rid] = n
        if isinstance(obj.get("scope_id"), str):
            scopes.add(obj["scope_id"])
        record = parse(obj, sink)
        if record is not None and not sink.bad:
            records.append(record)
            lines.append(n)
    return records, lines, set(seen), scopes


# --- cross-record checks --------------------------------------------------------


@dataclass
class _Loc:
    """Where each record came from: file name and line, for error messages."""

    transcripts: tuple[str, Sequence[int]]
    facts: tuple[str, Sequence[int]]
    probes: tuple[str, Sequence[int]]


def _default_loc(n_t: int, n_f: int, n_p: int, origin: str) -> _Loc:
    return _Loc(
        (f"{origin}/transcripts", range(1, n_t + 1)),
        (f"{origin}/facts", range(1, n_f + 1)),
        (f"{origin}/probes", range(1, n_p + 1)),
    )


def check_records(
    transcripts: Sequence[Transcript],
    facts: Sequence[GoldFact],
    probes: Sequence[Probe],
    *,
    origin: str = "<memory>",
    loc: _Loc | None = None,
    known_ids: tuple[set[str], set[str], set[str]] = (set(), set(), set()),
) -> list[DatasetError]:
    """Cross-record rules: ids unique and resolving within the scope, gold consistent in time.

    - run, fact and probe ids are unique;
    - `parent_run_id`, `established_in`, `retracted_in` and `after_run` name
      transcripts of the same scope; `superseded_by`, `relevant` and
      `distractors` name facts of the same scope; fact and probe scopes exist;
    - a fact is retracted, and its successor established, no earlier than the
      fact itself; supersede chains have no cycles;
    - every relevant fact is live once `after_run` has been replayed
      (established at or before it, not yet retracted or superseded), and no
      fact is both relevant and a distractor.
    `known_ids` holds the run ids, fact ids and transcript scope ids of lines
    rejected earlier, so a reference to them is not reported a second time.
    """
    loc = loc or _default_loc(len(transcripts), len(facts), len(probes), origin)
    errors: list[DatasetError] = []
    bad_runs, bad_facts, bad_scopes = known_ids

    def err(which: tuple[str, Sequence[int]], i: int, fld: str | None, msg: str) -> None:
        errors.append(DatasetError(which[0], which[1][i], fld, msg))

    runs: dict[str, Transcript] = {}
    for i, t in enumerate(transcripts):
        if t.run_id in runs:
            err(loc.transcripts, i, "run_id", f"duplicate run id {t.run_id!r}")
        runs.setdefault(t.run_id, t)
    order: dict[str, int] = {}
    per_scope: dict[str, list[Transcript]] = {}
    for t in transcripts:
        per_scope.setdefault(t.scope_id, []).append(t)
    for scope_runs in per_scope.values():
        for k, t in enumerate(sorted(scope_runs, key=lambda t: t.started_ts)):
            order.setdefault(t.run_id, k)
    scopes = set(per_scope)

    def run_ref(which, i, fld, rid, scope) -> bool:
        t = runs.get(rid)
        if t is None:
            if rid not in bad_runs:
                err(which, i, fld, f"unknown run {rid!r}")
            return False
        if t.scope_id != scope:
            err(which, i, fld, f"run {rid!r} belongs to scope {t.scope_id!r}, not {scope!r}")
            return False
        return True

    for i, t in enumerate(transcripts):
        if t.parent_run_id is not None:
            if t.parent_run_id == t.run_id:
                err(loc.transcripts, i, "parent_run_id", f"run {t.run_id!r} is its own parent")
            else:
                run_ref(loc.transcripts, i, "parent_run_id", t.parent_run_id, t.scope_id)

    by_id: dict[str, GoldFact] = {}
    for i, f in enumerate(facts):
        if f.fact_id in by_id:
            err(loc.facts, i, "fact_id", f"duplicate fact id {f.fact_id!r}")
        by_id.setdefault(f.fact_id, f)

    first_seen: dict[str, int] = {}  # fact id -> order index of first establishing run
    for f in facts:
        idx = [order[r] for r in f.established_in if r in runs and runs[r].scope_id == f.scope_id]
        if idx:
            first_seen.setdefault(f.fact_id, min(idx))

    def fact_ref(which, i, fld, fid, scope) -> bool:
        g = by_id.get(fid)
        if g is None:
            if fid not in bad_facts:
                err(which, i, fld, f"unknown fact {fid!r}")
            return False
        if g.scope_id != scope:
            err(which, i, fld, f"fact {fid!r} belongs to scope {g.scope_id!r}, not {scope!r}")
            return False
        return True

    for i, f in enumerate(facts):
        if f.scope_id not in scopes:
            if f.scope_id not in bad_scopes:
                err(loc.facts, i, "scope_id", f"scope {f.scope_id!r} has no transcripts")
            continue
        dup = [r for r, c in Counter(f.established_in).items() if c > 1]
        if dup:
            err(loc.facts, i, "established_in", f"run {dup[0]!r} listed twice")
        for j, rid in enumerate(f.established_in):
            run_ref(loc.facts, i, f"established_in[{j}]", rid, f.scope_id)
        start = first_seen.get(f.fact_id)
        ret_ok = f.retracted_in is not None and run_ref(
            loc.facts, i, "retracted_in", f.retracted_in, f.scope_id
        )
        if ret_ok and start is not None and order[str(f.retracted_in)] < start:
            err(
                loc.facts,
                i,
                "retracted_in",
                f"run {f.retracted_in!r} is earlier than the fact's first evidence",
            )
        if f.superseded_by is not None and fact_ref(
            loc.facts, i, "superseded_by", f.superseded_by, f.scope_id
        ):
            succ = first_seen.get(f.superseded_by)
            if start is not None and succ is not None and succ < start:
                err(
                    loc.facts,
                    i,
                    "superseded_by",
                    f"successor {f.superseded_by!r} is established before this fact",
                )
    for i, f in enumerate(facts):
        seen = {f.fact_id}
        nxt = f.superseded_by
        while nxt is not None and nxt in by_id:
            if nxt in seen:
                err(loc.facts, i, "superseded_by", f"supersede chain from {f.fact_id!r} loops")
                break
            seen.add(nxt)
            nxt = by_id[nxt].superseded_by

    def live_at(f: GoldFact, k: int) -> str | None:
        """Why fact f is not live once run index k is replayed, or None."""
        start = first_seen.get(f.fact_id)
        if start is None or start > k:
            return "is not established yet"
        if f.retracted_in in order and order[f.retracted_in] <= k:
            return f"was retracted in {f.retracted_in!r}"
        succ = first_seen.get(f.superseded_by) if f.superseded_by else None
        if succ is not None and succ <= k:
            return f"was superseded by {f.superseded_by!r}"
        return None

    probe_ids: set[str] = set()
    for i, p in enumerate(probes):
        if p.probe_id in probe_ids:
            err(loc.probes, i, "probe_id", f"duplicate probe id {p.probe_id!r}")
        probe_ids.add(p.probe_id)
        if p.scope_id not in scopes:
            if p.scope_id not in bad_scopes:
                err(loc.probes, i, "scope_id", f"scope {p.scope_id!r} has no transcripts")
            continue
        after_ok = run_ref(loc.probes, i, "after_run", p.after_run, p.scope_id)
        for key, ids in (("relevant", p.relevant), ("distractors", p.distractors)):
            for j, fid in enumerate(ids):
                if ids.index(fid) != j:
                    err(loc.probes, i, f"{key}[{j}]", f"fact {fid!r} listed twice")
                elif fact_ref(loc.probes, i, f"{key}[{j}]", fid, p.scope_id) and key == "relevant":
                    if fid in p.distractors:
                        err(
                            loc.probes,
                            i,
                            f"{key}[{j}]",
                            f"fact {fid!r} is both relevant and a distractor",
                        )
                    elif after_ok:
                        why = live_at(by_id[fid], order[p.after_run])
                        if why:
                            err(
                                loc.probes,
                                i,
                                f"{key}[{j}]",
                                f"fact {fid!r} {why} after run {p.after_run!r}",
                            )
    return errors


def check_dataset(ds: Dataset) -> list[DatasetError]:
    """Cross-record rules (and message rules) on an in-memory dataset, e.g. an adapter's.

    Records are located as `<name>/transcripts:<n>` etc. (1-based position).
    """
    errors: list[DatasetError] = []
    for n, t in enumerate(ds.transcripts, start=1):
        sink = _Line(f"{ds.name}/transcripts", n, errors)
        check_messages(list(t.messages), sink)
    errors += check_records(ds.transcripts, ds.facts, ds.probes, origin=ds.name)
    return errors


# --- dataset.json ---------------------------------------------------------------

_META_FIELDS: tuple[tuple[str, type], ...] = (
    ("name", str),
    ("version", str),
    ("description", str),
    ("license", str),
    ("counts", dict),
)


_META_KEYS = frozenset(k for k, _ in _META_FIELDS)


def _read_meta(path: Path, errors: list[DatasetError]) -> dict[str, Any] | None:
    file = str(path)
    if not path.is_file():
        errors.append(DatasetError(file, None, None, "file is missing"))
        return None
    try:
        obj = parse_json_document(path.read_bytes(), file)
    except DatasetError as e:
        errors.append(e)
        return None
    if not isinstance(obj, dict):
        errors.append(DatasetError(file, 1, None, "expected a JSON object"))
        return None
    sink = _Line(file, 1, errors)
    sink.line = None  # one JSON document: the field name locates the problem
    for key, typ in _META_FIELDS:
        sink.get(obj, key, typ, nonempty=key in ("name", "version", "license"))
    return None if sink.bad else obj


def _check_counts(
    stated: Mapping[str, Any], actual: Mapping[str, Any], file: str
) -> list[DatasetError]:
    errors = []
    for key, value in stated.items():
        if key not in actual:
            errors.append(
                DatasetError(
                    file, None, f"counts.{key}", f"unknown count (checkable: {', '.join(actual)})"
                )
            )
        elif value != actual[key]:
            errors.append(
                DatasetError(
                    file,
                    None,
                    f"counts.{key}",
                    f"states {value!r} but the files hold {actual[key]!r}",
                )
            )
    return errors


# --- public loaders -------------------------------------------------------------


def _read_all(path: str | Path) -> tuple[Dataset | None, list[DatasetError]]:
    root = dataset_path(path)
    errors: list[DatasetError] = []
    if not root.is_dir():
        return None, [DatasetError(str(root), None, None, "dataset folder does not exist")]
    meta = _read_meta(root / "dataset.json", errors)
    parsed: dict[str, Any] = {}
    for fname, parser, key in (
        ("transcripts.jsonl", _parse_transcript, "run_id"),
        ("facts.jsonl", _parse_fact, "fact_id"),
        ("probes.jsonl", _parse_probe, "probe_id"),
        ("pairs.jsonl", _parse_pair, None),
    ):
        p = root / fname
        if not p.is_file():
            if fname != "pairs.jsonl":
                errors.append(DatasetError(str(p), None, None, "file is missing"))
            parsed[fname] = ([], [], set(), set())
            continue
        parsed[fname] = _read_jsonl(p, parser, errors, key)
    t, t_lines, t_ids, t_scopes = parsed["transcripts.jsonl"]
    f, f_lines, f_ids, _ = parsed["facts.jsonl"]
    pr, p_lines, _, _ = parsed["probes.jsonl"]
    loc = _Loc(
        (str(root / "transcripts.jsonl"), t_lines),
        (str(root / "facts.jsonl"), f_lines),
        (str(root / "probes.jsonl"), p_lines),
    )
    good_runs = {x.run_id for x in t}
    good_facts = {x.fact_id for x in f}
    errors += check_records(
        t, f, pr, loc=loc, known_ids=(t_ids - good_runs, f_ids - good_facts, t_scopes)
    )
    meta = meta or {}
    ds = Dataset(
        name=meta.get("name", root.name),
        version=str(meta.get("version", "")),
        description=meta.get("description", ""),
        license=meta.get("license", ""),
        counts=meta.get("counts", {}),
        transcripts=tuple(t),
        facts=tuple(f),
        probes=tuple(pr),
        pairs=tuple(parsed["pairs.jsonl"][0]),
        path=str(root),
        info=MappingProxyType({k: v for k, v in meta.items() if k not in _META_KEYS}),
    )
    if isinstance(meta.get("counts"), dict) and not errors:
        sizes = {n: (root / n).stat().st_size for n in FILES if (root / n).is_file()}
        actual = compute_counts(ds, sizes)
        errors += _check_counts(meta["counts"], actual, str(root / "dataset.json"))
    return ds, errors


def validate_dataset(path: str | Path) -> list[DatasetError]:
    """Every problem in the dataset folder at path, in file order; [] when valid.

    `dataset.json` counts are compared only when the records themselves are
    valid (a rejected line would make every count differ).
    """
    return _read_all(path)[1]


def combine_errors(errors: Sequence[DatasetError], limit: int = 20) -> DatasetError:
    """One DatasetError located at the first problem, listing the others; `.errors` holds all."""
    first = errors[0]
    loc = first.file if first.line is None else f"{first.file}:{first.line}"
    if first.field:
        loc = f"{loc}:{first.field}"
    message = str(first).removeprefix(f"{loc}: ")
    if len(errors) > 1:
        shown = "\n  ".join(str(e) for e in errors[1:limit])
        more = f"\n  ... and {len(errors) - limit} more" if len(errors) > limit else ""
        message = f"{message}\n{len(errors) - 1} more error(s):\n  {shown}{more}"
    combined = DatasetError(first.file, first.line, first.field, message)
    combined.errors = list(errors)  # type: ignore[attr-defined]
    return combined


def load_dataset(path: str | Path) -> Dataset:
    """Load and validate a dataset folder; raises DatasetError naming every problem."""
    ds, errors = _read_all(path)
    if errors:
        raise combine_errors(errors)
    assert ds is not None
    return ds


def load_pairs(path: str | Path) -> list[Pair]:
    """Load and validate a `pairs.jsonl` file (a, b, label, source, optional score)."""
    errors: list[DatasetError] = []
    p = dataset_path(path)
    if not p.is_file():
        raise DatasetError(str(p), None, None, "file is missing")
    pairs, _, _, _ = _read_jsonl(p, _parse_pair, errors, None)
    if errors:
        raise combine_errors(errors)
    return pairs
