"""Model-facing memory tools (SPEC §6): schemas plus handlers, pinned to one scope.

`MemoryTools` binds a store to the run's own scope, so the model can never
name a scope, and consults the host's permission callable both when it
advertises tools and when it executes one: a denied tool is invisible and
inert. Argument decoding is pure and happens entirely before the store is
touched, so a refused call writes nothing. Every refusal is a `ToolError`
naming the tool and the argument.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memkit.checks import check_scope, text_problem
from memkit.errors import ConfigError, NotFound, ToolError
from memkit.text import byte_len, truncate_middle
from memkit.types import CONFIDENCE_CHOSEN, Memory, Recalled, RememberResult

RECALL, LEARN, EDIT = "memory_recall", "learn", "memory_edit"
TOOL_NAMES: tuple[str, ...] = (RECALL, LEARN, EDIT)

QUERY_MAX_BYTES = 2000
LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 20, 8
CONTENT_MAX_BYTES = 2000
"""memory_recall returns content through truncate_middle(content, 2000)."""
LESSON_MAX_BYTES = 8192
"""(memkit) `learn` lessons and `memory_edit` contents: the SPEC's lesson bound (§7.6)."""
TAGS_MAX, TAGS_JOINED_MAX_BYTES = 32, 2048
"""(memkit) Tags of `learn`/`memory_edit`: the SPEC's proposal tag bounds (§7.6)."""
EDIT_ACTIONS: tuple[str, ...] = ("update", "forget", "invalidate")


class MemoryStore(Protocol):
    """The store methods the tools use (CONTRIBUTING.md, Store contract)."""

    def recall(self, scope_id: str, query: str, limit: int = ...) -> list[Recalled]: ...

    def remember(
        self,
        scope_id: str,
        content: str,
        *,
        kind: str = ...,
        confidence: float = ...,
        tags: Sequence[str] = ...,
    ) -> RememberResult: ...

    def update(
        self,
        scope_id: str,
        memory_id: str,
        content: str,
        *,
        tags: Sequence[str] | None = ...,
        confidence: float = ...,
    ) -> str: ...

    def retract(self, scope_id: str, memory_id: str) -> None: ...


_TAGS_SCHEMA = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Optional short labels, e.g. a component or topic name.",
}

SCHEMAS: dict[str, dict[str, Any]] = {
    RECALL: {
        "type": "function",
        "function": {
            "name": RECALL,
            "description": (
                "Search this workspace's long-term memory (facts, preferences, procedures "
                "and lessons from earlier runs). Read-only. Returns the best matches first."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What to look for (1-2000 bytes).",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": LIMIT_MIN,
                        "maximum": LIMIT_MAX,
                        "default": LIMIT_DEFAULT,
                        "description": "How many entries to return (1-20, default 8).",
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    LEARN: {
        "type": "function",
        "function": {
            "name": LEARN,
            "description": (
                "Remember a durable lesson for future runs in this workspace: a stable fact, "
                "preference or procedure you verified. Restating a known lesson refreshes "
                "it instead of duplicating it. Not for task status or one-off details."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "lesson": {
                        "type": "string",
                        "description": "The lesson, one self-contained sentence or two.",
                    },
                    "tags": _TAGS_SCHEMA,
                },
                "required": ["lesson"],
            },
        },
    },
    EDIT: {
        "type": "function",
        "function": {
            "name": EDIT,
            "description": (
                "Correct or retire a memory shown with an id: 'update' replaces its "
                "content (history is kept), 'forget' or 'invalidate' retracts it."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The memory's id."},
                    "action": {"type": "string", "enum": list(EDIT_ACTIONS)},
                    "content": {
                        "type": "string",
                        "description": "The corrected content (required for 'update').",
                    },
                    "tags": _TAGS_SCHEMA,
                },
                "required": ["id", "action"],
            },
        },
    },
}
"""OpenAI function-calling schemas, by tool name."""


# --- pure argument decoding ----------------------------------------------------


def decode_arguments(tool: str, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool call's arguments as a dict: a JSON object text, a mapping, or nothing."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ToolError(tool, None, f"arguments are not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ToolError(
                tool, None, "arguments are not valid JSON (nested too deeply)"
            ) from None
    if not isinstance(arguments, Mapping):
        raise ToolError(
            tool, None, f"arguments must be a JSON object, got {type(arguments).__name__}"
        )
    return dict(arguments)


def _optional(tool: str, args: Mapping[str, Any], name: str) -> str | None:
    """A string argument, stripped; None when absent or null."""
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolError(tool, name, f"must be a string, got {type(value).__name__}")
    problem = text_problem(value)
    if problem:
        raise ToolError(tool, name, f"is {problem}")
    return value.strip()


def _required(tool: str, args: Mapping[str, Any], name: str) -> str:
    """A non-blank string argument, stripped."""
    value = _optional(tool, args, name)
    if value is None:
        raise ToolError(tool, name, "is required")
    if not value:
        raise ToolError(tool, name, "must not be blank")
    return value


def _tags(tool: str, args: Mapping[str, Any]) -> tuple[str, ...] | None:
    """Optional tags: a list of strings, stripped, blanks dropped; None when absent."""
    value = args.get("tags")
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise ToolError(tool, "tags", f"must be an array of strings, got {type(value).__name__}")
    out: list[str] = []
    for i, tag in enumerate(value):
        if not isinstance(tag, str):
            raise ToolError(tool, "tags", f"item {i} must be a string, got {type(tag).__name__}")
        problem = text_problem(tag)
        if problem:
            raise ToolError(tool, "tags", f"item {i} is {problem}")
        if tag.strip():
            out.append(tag.strip())
    if len(out) > TAGS_MAX:
        raise ToolError(tool, "tags", f"{len(out)} tags (max {TAGS_MAX})")
    joined = byte_len(" ".join(out))
    if joined > TAGS_JOINED_MAX_BYTES:
        raise ToolError(
            tool, "tags", f"joined they are {joined} bytes (max {TAGS_JOINED_MAX_BYTES})"
        )
    return tuple(out)


def _lesson(tool: str, args: Mapping[str, Any], name: str) -> str:
    """A non-blank lesson of at most LESSON_MAX_BYTES, stripped."""
    value = _required(tool, args, name)
    size = byte_len(value)
    if size > LESSON_MAX_BYTES:
        raise ToolError(tool, name, f"is {size} bytes (max {LESSON_MAX_BYTES})")
    return value


def _limit(tool: str, args: Mapping[str, Any]) -> int:
    value = args.get("limit")
    if value is None:
        return LIMIT_DEFAULT
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(tool, "limit", f"must be an integer, got {value!r}")
    if not LIMIT_MIN <= value <= LIMIT_MAX:
        raise ToolError(tool, "limit", f"{value} is outside {LIMIT_MIN}..{LIMIT_MAX}")
    return value


@dataclass(frozen=True, slots=True)
class RecallArgs:
    query: str
    limit: int = LIMIT_DEFAULT


@dataclass(frozen=True, slots=True)
class LearnArgs:
    lesson: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EditArgs:
    id: str
    action: str
    content: str | None = None
    tags: tuple[str, ...] | None = None


def parse_recall(args: Mapping[str, Any]) -> RecallArgs:
    """memory_recall: strict; unknown fields (a `scope`, say) are errors."""
    for name in args:
        if name not in ("query", "limit"):
            raise ToolError(RECALL, name, "unknown argument (allowed: query, limit)")
    query = _required(RECALL, args, "query")
    size = byte_len(query)
    if size > QUERY_MAX_BYTES:
        raise ToolError(RECALL, "query", f"is {size} bytes (max {QUERY_MAX_BYTES})")
    return RecallArgs(query, _limit(RECALL, args))


def parse_learn(args: Mapping[str, Any]) -> LearnArgs:
    """learn: a non-blank lesson and optional tags; other fields are ignored."""
    lesson = _lesson(LEARN, args, "lesson")
    return LearnArgs(lesson, _tags(LEARN, args) or ())


def parse_edit(args: Mapping[str, Any]) -> EditArgs:
    """memory_edit: id and a known action; `update` needs non-blank content."""
    memory_id = _required(EDIT, args, "id")
    action = _required(EDIT, args, "action")
    if action not in EDIT_ACTIONS:
        raise ToolError(
            EDIT, "action", f"unknown action {action!r} (use {', '.join(EDIT_ACTIONS)})"
        )
    if action != "update":
        return EditArgs(memory_id, action, None, _tags(EDIT, args))
    return EditArgs(memory_id, action, _lesson(EDIT, args, "content"), _tags(EDIT, args))


# --- the tools -------------------------------------------------------------------


def _allow_all(tool_name: str) -> bool:
    return True


class MemoryTools:
    """The memory tools of one run: its store, its scope, its host's permission gate.

    `permit(name)` is asked every time, so a host can revoke a tool mid-run.
    `memory_edit` exists only when the store says `supports_curation`; with
    no store at all (`store=None`) no tool is offered.
    """

    def __init__(
        self,
        store: MemoryStore | None,
        scope_id: str,
        permit: Callable[[str], bool] = _allow_all,
    ):
        check_scope(scope_id, "MemoryTools scope_id")
        if not callable(permit):
            raise ConfigError(f"MemoryTools permit={permit!r:.80}: must be callable")
        self.store = store
        self.scope_id = scope_id
        self.permit = permit

    def _offered(self) -> tuple[str, ...]:
        if self.store is None:
            return ()
        if getattr(self.store, "supports_curation", False):
            return TOOL_NAMES
        return (RECALL, LEARN)

    def names(self) -> tuple[str, ...]:
        """Names of the tools currently advertised (offered and permitted)."""
        return tuple(n for n in self._offered() if self.permit(n))

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of the advertised tools (fresh copies)."""
        return [json.loads(json.dumps(SCHEMAS[n])) for n in self.names()]

    def call(self, name: str, arguments: str | Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Execute one tool call; raises ToolError, before any store access, on refusal."""
        if name not in TOOL_NAMES:
            raise ToolError(str(name), None, f"unknown tool (known: {', '.join(TOOL_NAMES)})")
        if name not in self._offered():
            why = (
                "no memory store is installed"
                if self.store is None
                else "the store does not support curation"
            )
            raise ToolError(name, None, f"not offered: {why}")
        if not self.permit(name):
            raise ToolError(name, None, "not permitted by the host")
        args = decode_arguments(name, arguments)
        if name == RECALL:
            return self._recall(parse_recall(args))
        if name == LEARN:
            return self._learn(parse_learn(args))
        return self._edit(parse_edit(args))

    def _installed(self, name: str) -> MemoryStore:
        """The store; `call` offers no tool without one, so this refusal is a backstop."""
        if self.store is None:
            raise ToolError(name, None, "not offered: no memory store is installed")
        return self.store

    def _recall(self, a: RecallArgs) -> dict[str, Any]:
        entries = []
        for hit in self._installed(RECALL).recall(self.scope_id, a.query, limit=a.limit):
            m: Memory = hit.memory if isinstance(hit, Recalled) else hit
            if m.scope_id != self.scope_id:
                continue  # never show another scope's rows, whatever the store returned
            content = truncate_middle(m.content, CONTENT_MAX_BYTES)
            entry: dict[str, Any] = {"id": m.id, "kind": m.kind, "content": content}
            if content != m.content:
                entry["truncated"] = True
            entries.append(entry)
        return {"entries": entries}

    def _learn(self, a: LearnArgs) -> dict[str, Any]:
        res = self._installed(LEARN).remember(
            self.scope_id, a.lesson, kind="learning", confidence=CONFIDENCE_CHOSEN, tags=a.tags
        )
        message = (
            f"Folded into existing memory {res.id} (restated lesson refreshed)."
            if res.folded
            else f"Learned as memory {res.id}."
        )
        return {"id": res.id, "folded": res.folded, "message": message}

    def _edit(self, a: EditArgs) -> dict[str, Any]:
        try:
            if a.action == "update" and a.content is not None:  # parse_edit guarantees both
                new_id = self._installed(EDIT).update(
                    self.scope_id, a.id, a.content, tags=a.tags, confidence=CONFIDENCE_CHOSEN
                )
                return {
                    "action": "update",
                    "id": new_id,
                    "replaces": a.id,
                    "message": f"Memory {a.id} updated; the new revision is {new_id}.",
                }
            self._installed(EDIT).retract(self.scope_id, a.id)
        except NotFound:
            raise ToolError(EDIT, "id", f"memory {a.id!r} not found in scope") from None
        return {"action": a.action, "id": a.id, "message": f"Memory {a.id} retracted."}
