"""The one route of a consolidation proposal (SPEC §7.5-7.6): parse, then validate.

A pass parses a consolidator's text once (`parse_response`) and validates
the parsed `changes` once (`validate_proposal`); the store's `commit_pass`
takes the resulting `Proposal` and re-checks under its write lock only what
can change there (snapshot currency and rollout consumption), never the
pure rules here. Evaluations score raw answers with the same helpers
(`unknown_ids`, `widening_entries`, `raw_op`), so no rule is derived twice.

Everything here is pure: no store, no model, no I/O. Below both the store
and `memkit.consolidate` (it imports only checks, errors, params and types), so the
store can commit a proposal without loading consolidation or LiteLLM.

Seams for extension: parse outcomes are decided in `parse_response` (one
`Parsed` per response); the scope rule of an entry lives only in
`entry_scope` / `widens_scope`; the per-entry lesson rules only in `_entry`.
Stable codes are `memkit.errors.PROPOSAL_CODES` (re-exported as `CODES`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memkit.checks import text_problem
from memkit.errors import PROPOSAL_CODES, ConfigError, ProposalError
from memkit.params import ConsolidationParams
from memkit.types import CONFIDENCE_INFERRED, KINDS, Change, Entry, Memory, op_of

CODES: tuple[str, ...] = PROPOSAL_CODES
"""The stable rejection codes (SPEC §7.5-7.7)."""

__all__ = [
    "CODES",
    "PROPOSAL_SCHEMA",
    "PROPOSAL_SCHEMA_NAME",
    "RESPONSE_FORMS",
    "Change",
    "Entry",
    "Parsed",
    "Proposal",
    "change_to_json",
    "entry_scope",
    "parse_response",
    "proposal_response_format",
    "raw_op",
    "unknown_ids",
    "validate_batch",
    "validate_changes",
    "validate_proposal",
    "widening_entries",
    "widens_scope",
]

_ROLLOUT_ID = re.compile(r"[0-9a-f]{64}")
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL)


def _blen(s: str) -> int:
    return len(s.encode("utf-8"))


# --- parse (SPEC §7.5) ----------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """A parsed answer: the raw `changes` list and how it was obtained.

    Strict means the whole text is one JSON object with a `changes` array.
    The lenient mode (memkit) strips a Markdown code fence or takes the
    outermost `{...}`; it is reported as "repaired" so evaluations can tell a
    model that follows the format from one that merely contains the right
    JSON. `strict_error` holds why strict parsing failed when "repaired".
    """

    changes: list[Any]
    mode: Literal["strict", "repaired"]
    strict_error: str | None = None


def _strict(text: str) -> list[Any]:
    try:
        obj = json.loads(text)
    except (ValueError, TypeError) as e:
        raise ProposalError("parse", f"response is not JSON ({e}): {text!r:.120}") from None
    except RecursionError:
        raise ProposalError("parse", f"response is nested too deeply: {text[:60]!r}") from None
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


# --- the answer's JSON Schema (structured output, a per-model option) ------------

_BOUNDS = ConsolidationParams()
PROPOSAL_SCHEMA_NAME = "memkit_proposal"
PROPOSAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "changes": {
            "type": "array",
            "maxItems": _BOUNDS.max_changes,
            "items": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": {"type": "string"},
                        "maxItems": _BOUNDS.max_ids,
                    },
                    "entry": {
                        "anyOf": [
                            {"type": "null"},
                            {
                                "type": "object",
                                "properties": {
                                    "kind": {"type": "string", "enum": list(KINDS)},
                                    "content": {"type": "string", "minLength": 1},
                                    "tags": {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "maxItems": _BOUNDS.max_tags,
                                    },
                                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                                },
                                "required": ["kind", "content"],
                                "additionalProperties": False,
                            },
                        ]
                    },
                },
                "required": ["ids", "entry"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["changes"],
    "additionalProperties": False,
}
"""The shape of a proposal as a JSON Schema, for constrained decoding only.

It states the SPEC §1.5 change object with the validator's count bounds
(changes, ids, tags); byte bounds, blank content, unknown ids and scopes are
left to `parse_response` + `validate_changes`, which stay the judges: an
answer decoded under this schema is parsed and validated like any other.
"""

RESPONSE_FORMS: tuple[str, ...] = ("json_schema", "json_object")
"""How a server takes the schema: OpenAI's `json_schema` form (OpenAI, vLLM,
Ollama, llama.cpp's own llama-server) or `json_object` + `schema`, the only
form llama-cpp-python's server turns into a grammar (it ignores any other
`type`, and its request model refuses `json_schema`)."""


def proposal_response_format(form: str) -> dict[str, Any]:
    """The `response_format` request field carrying PROPOSAL_SCHEMA in `form` (a fresh copy)."""
    schema = json.loads(json.dumps(PROPOSAL_SCHEMA))
    if form == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": PROPOSAL_SCHEMA_NAME, "schema": schema},
        }
    if form == "json_object":
        return {"type": "json_object", "schema": schema}
    raise ConfigError(
        f"structured output form must be one of {', '.join(RESPONSE_FORMS)}, got {form!r}"
    )


# --- helpers shared with evaluations ---------------------------------------------


_SCOPE_KEYS: tuple[str, ...] = ("scope_id", "scope")


def entry_scope(raw_entry: Mapping[str, Any]) -> Any:
    """The scope a raw entry names: the first non-empty of `scope_id`, `scope`
    (None when neither names one; null and "" name none)."""
    for key in _SCOPE_KEYS:
        value = raw_entry.get(key)
        if value not in (None, ""):
            return value
    return None


def _foreign_scope(raw_entry: Mapping[str, Any], scope_id: str) -> Any:
    """The first value under `scope_id`/`scope` that is set and is not the pass's."""
    for key in _SCOPE_KEYS:
        value = raw_entry.get(key)
        if value not in (None, "", scope_id):
            return value
    return None


def widens_scope(raw_entry: Any, scope_id: str) -> bool:
    """True when a raw entry names a scope other than the pass's (`scope_widening`),
    under either key: `{"scope_id": "", "scope": "other"}` widens as much as
    `{"scope": "other"}` does, and so does a scope that is not a string."""
    return isinstance(raw_entry, Mapping) and _foreign_scope(raw_entry, scope_id) is not None


def raw_op(raw_change: Any) -> Literal["add", "merge", "retract", "invalid"]:
    """The operation a raw (unvalidated) change asks for, as `Change.op` names it."""
    if not isinstance(raw_change, Mapping):
        return "invalid"
    return op_of(bool(raw_change.get("ids")), raw_change.get("entry") is not None)


def unknown_ids(raw_changes: Sequence[Any] | None, snapshot_ids: Collection[str]) -> int:
    """How many ids the raw changes name that are not in the pass's snapshot."""
    n = 0
    for ch in raw_changes or ():
        ids = ch.get("ids") if isinstance(ch, Mapping) else None
        if isinstance(ids, str):  # a bare string is one id (the validator refuses it: parse)
            ids = [ids]
        if isinstance(ids, list):
            n += sum(1 for i in ids if isinstance(i, str) and i not in snapshot_ids)
    return n


def widening_entries(raw_changes: Sequence[Any] | None, scope_id: str) -> int:
    """How many raw changes carry an entry naming another scope."""
    return sum(
        widens_scope(ch.get("entry"), scope_id)
        for ch in raw_changes or ()
        if isinstance(ch, Mapping)
    )


# --- validate (SPEC §7.6): first failure wins --------------------------------------


def validate_batch(
    scope_id: str,
    rollout_ids: Sequence[str],
    snapshot: Sequence[Memory],
    n_changes: int,
    params: ConsolidationParams = ConsolidationParams(),
) -> None:
    """Checks on the pass itself, before any change is looked at.

    Arguments of the wrong type are the caller's error, a ConfigError naming
    them (not a TypeError from `len` or `.id`); the SPEC codes judge values."""
    if not isinstance(scope_id, str):
        raise ConfigError(f"scope_id must be a string, got {scope_id!r:.80}")
    if not isinstance(rollout_ids, list | tuple):
        raise ConfigError(f"rollout_ids must be a list of ids, got {rollout_ids!r:.80}")
    if not isinstance(snapshot, list | tuple) or not all(isinstance(m, Memory) for m in snapshot):
        raise ConfigError(f"snapshot must be a list of Memory, got {snapshot!r:.80}")
    if not rollout_ids or len(rollout_ids) > params.max_rollouts:
        raise ProposalError(
            "bounds", f"{len(rollout_ids)} rollouts (want 1..{params.max_rollouts})"
        )
    if len(snapshot) > params.snapshot_size:
        raise ProposalError(
            "bounds", f"{len(snapshot)} snapshot memories (max {params.snapshot_size})"
        )
    if n_changes > params.max_changes:
        raise ProposalError("bounds", f"{n_changes} changes (max {params.max_changes})")
    seen: set[str] = set()
    for rid in rollout_ids:
        if not isinstance(rid, str) or not _ROLLOUT_ID.fullmatch(rid):
            raise ProposalError("rollout_ids", f"rollout id {rid!r} is not 64 lowercase hex")
        if rid in seen:
            raise ProposalError("rollout_ids", f"rollout id {rid!r} appears twice")
        seen.add(rid)
    for m in snapshot:
        if not m.id:
            raise ProposalError("snapshot_scope", "snapshot memory without id")
        if m.scope_id != scope_id:
            raise ProposalError(
                "snapshot_scope",
                f"snapshot memory {m.id!r} is in scope {m.scope_id!r}, not {scope_id!r}",
            )


def _entry(raw: Any, i: int, scope_id: str, params: ConsolidationParams) -> Entry:
    where = f"change {i}"
    if not isinstance(raw, dict):
        raise ProposalError("parse", f"{where}: entry must be an object or null, got {raw!r:.80}")
    if widens_scope(raw, scope_id):
        raise ProposalError(
            "scope_widening",
            f"{where}: entry names scope {_foreign_scope(raw, scope_id)!r:.80}, "
            f"pass scope is {scope_id!r}",
        )
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ProposalError("invalid_lesson", f"{where}: content is blank or not a string")
    problem = text_problem(content)
    if problem:
        raise ProposalError("invalid_lesson", f"{where}: content is {problem}")
    if _blen(content) > params.content_bytes:
        raise ProposalError(
            "invalid_lesson",
            f"{where}: content is {_blen(content)} bytes (max {params.content_bytes})",
        )
    tags = raw.get("tags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ProposalError(
            "invalid_lesson", f"{where}: tags must be a list of strings, got {tags!r:.80}"
        )
    for t in tags:
        problem = text_problem(t)
        if problem:
            raise ProposalError("invalid_lesson", f"{where}: a tag is {problem}")
    if len(tags) > params.max_tags:
        raise ProposalError("invalid_lesson", f"{where}: {len(tags)} tags (max {params.max_tags})")
    joined = _blen(" ".join(tags))
    if joined > params.tags_joined_bytes:
        raise ProposalError(
            "invalid_lesson",
            f"{where}: tags joined are {joined} bytes (max {params.tags_joined_bytes})",
        )
    conf = raw.get("confidence")
    if conf is None:
        conf = CONFIDENCE_INFERRED
    if (
        isinstance(conf, bool)
        or not isinstance(conf, int | float)
        or math.isnan(conf)
        or not 0.0 <= conf <= 1.0
    ):
        raise ProposalError("invalid_lesson", f"{where}: confidence {conf!r} outside [0,1]")
    kind = raw.get("kind")
    if kind is None:  # missing or null: a fact; 0, false or "" are not kinds
        kind = "fact"
    if not isinstance(kind, str) or kind not in KINDS:
        raise ProposalError("invalid_lesson", f"{where}: unknown kind {kind!r:.80}")
    return Entry(
        content=content,
        kind=kind,
        tags=tuple(tags),
        confidence=float(conf),
        scope_id=scope_id,
    )


def validate_changes(
    scope_id: str,
    rollout_ids: Sequence[str],
    snapshot: Sequence[Memory],
    changes: Any,
    params: ConsolidationParams = ConsolidationParams(),
) -> tuple[Change, ...]:
    """Validate a parsed `changes` array against the pass; return typed changes.

    `changes` is the raw JSON value (a list of dicts). Raises ProposalError
    with the first failure's code; an empty list is valid.
    """
    if not isinstance(changes, list):
        raise ProposalError("parse", f"changes must be an array, got {type(changes).__name__}")
    validate_batch(scope_id, rollout_ids, snapshot, len(changes), params)
    known = {m.id for m in snapshot}
    used: set[str] = set()
    out: list[Change] = []
    for i, raw in enumerate(changes):
        if not isinstance(raw, dict):
            raise ProposalError("parse", f"change {i} must be an object, got {raw!r:.80}")
        ids = raw.get("ids") or []
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            raise ProposalError("parse", f"change {i}: ids must be a list of strings")
        entry_raw = raw.get("entry")
        if len(ids) > params.max_ids:
            raise ProposalError(
                "empty_change", f"change {i}: {len(ids)} ids (max {params.max_ids})"
            )
        if not ids and entry_raw is None:
            raise ProposalError("empty_change", f"change {i}: neither ids nor entry")
        for mid in ids:
            if mid not in known:
                raise ProposalError("unknown_id", f"change {i}: id {mid!r} is not in the snapshot")
            if mid in used:
                raise ProposalError("unknown_id", f"change {i}: id {mid!r} is used twice")
            used.add(mid)
        entry = None if entry_raw is None else _entry(entry_raw, i, scope_id, params)
        out.append(Change(ids=tuple(ids), entry=entry))
    return tuple(out)


@dataclass(frozen=True)
class Proposal:
    """Changes validated for one pass, with the pass they were validated for.

    Made by `validate_proposal`; `SQLiteStore.commit_pass` accepts it in place
    of raw changes and then checks only snapshot currency and consumption.
    """

    scope_id: str
    rollout_ids: tuple[str, ...]
    snapshot: tuple[Memory, ...]
    changes: tuple[Change, ...]
    params: ConsolidationParams

    def is_for(
        self,
        scope_id: str,
        rollout_ids: Sequence[str],
        snapshot: Sequence[Memory],
        params: ConsolidationParams,
    ) -> bool:
        """True when this proposal was validated for exactly this pass."""
        return (
            self.scope_id == scope_id
            and self.rollout_ids == tuple(rollout_ids)
            and self.snapshot == tuple(snapshot)
            and self.params == params
        )


def validate_proposal(
    scope_id: str,
    rollout_ids: Sequence[str],
    snapshot: Sequence[Memory],
    changes: Any,
    params: ConsolidationParams = ConsolidationParams(),
) -> Proposal:
    """`validate_changes`, keeping the pass it validated for (see `Proposal`)."""
    typed = validate_changes(scope_id, rollout_ids, snapshot, changes, params)
    return Proposal(scope_id, tuple(rollout_ids), tuple(snapshot), typed, params)


def change_to_json(change: Change) -> dict[str, Any]:
    """The wire form of a validated change (inverse of validate_changes for one item)."""
    entry = None
    if change.entry is not None:
        e = change.entry
        entry = {
            "kind": e.kind,
            "content": e.content,
            "tags": list(e.tags),
            "confidence": e.confidence,
        }
    return {"ids": list(change.ids), "entry": entry}
