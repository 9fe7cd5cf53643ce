"""Eligibility and evidence staging (SPEC §7, "Eligibility" and "Staging").

Everything here except `stage_run` is a pure function of the transcript, so
the id and the bounded evidence of a run can be computed, tested and compared
without a store. The id hashes the *original* messages; the evidence is the
redacted, truncated tail the consolidator will read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from memkit.checks import check_type
from memkit.errors import TranscriptError
from memkit.params import ConsolidationParams, RedactionParams
from memkit.redact import redact
from memkit.runs import RUN_STATUSES, eligible
from memkit.text import byte_len, truncate_bytes, truncate_middle
from memkit.types import Rollout

_REQUIRED_FIELDS: tuple[str, ...] = ("run_id", "scope_id", "status", "messages")


class StagingStore(Protocol):
    """The part of the store staging needs."""

    def stage_rollout(self, rollout: Rollout) -> bool: ...


def canonical_json(value: Any) -> str:
    """Key-sorted, compact, non-ASCII-preserving JSON: one text per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rollout_id(messages: Iterable[Mapping[str, Any]]) -> str:
    """SHA-256 hex of the canonical JSON of the whole message list (SPEC §7.1).

    Streamed one message at a time (`[`, messages joined by `,`, `]`), so the
    hash equals that of `canonical_json(list(messages))` without building a
    second copy of a long transcript.

    `messages` that are not an iterable of message objects (None, a string, one
    message), or a message that is not UTF-8 JSON, are a TranscriptError naming
    them, never a TypeError: the check rides along the one pass the hash makes.
    """
    _check_messages_arg(messages, Iterable)
    h = hashlib.sha256(b"[")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise _bad_message(i, m)
        if i:
            h.update(b",")
        try:
            h.update(canonical_json(m).encode("utf-8"))
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as e:
            raise TranscriptError(
                f"messages[{i}] is not UTF-8 JSON ({type(e).__name__}: {e!s:.120})"
            ) from None
    h.update(b"]")
    return h.hexdigest()


def _check_messages_arg(messages: Any, kind: type) -> None:
    """`messages` is a `kind` (Iterable or Sequence) of messages, not a str/bytes/one message."""
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, kind):
        raise TranscriptError(
            f"messages must be a list of message objects, got {type(messages).__name__} "
            f"{messages!r:.80}"
        )


def _bad_message(i: int, m: Any) -> TranscriptError:
    got = f"{type(m).__name__} {m!r:.80}"
    return TranscriptError(f"messages[{i}] must be a message object, got {got}")


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a multi-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, Mapping) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, str):
                parts.append(p)
        return "".join(parts)
    return str(content)


def _tool_call_notes(message: Mapping[str, Any], params: ConsolidationParams) -> str:
    calls = message.get("tool_calls") or []
    notes = []
    for call in list(calls)[: params.tool_calls_annotated]:
        fn = call.get("function") if isinstance(call, Mapping) else None
        fn = fn if isinstance(fn, Mapping) else (call if isinstance(call, Mapping) else {})
        name = str(fn.get("name") or "")
        args = fn.get("arguments")
        args = args if isinstance(args, str) else canonical_json(args) if args is not None else ""
        notes.append(
            f"\nTool call {truncate_bytes(name, params.tool_name_bytes)}: "
            f"{truncate_middle(args, params.tool_args_bytes)}"
        )
    return "".join(notes)


def evidence_messages(
    messages: Sequence[Mapping[str, Any]],
    params: ConsolidationParams = ConsolidationParams(),
    redaction: RedactionParams = RedactionParams(),
) -> list[dict[str, Any]]:
    """The bounded, redacted tail of a transcript, in chronological order (SPEC §7.1).

    Walks backwards from the last message while fewer than
    `evidence_messages` are kept and the byte budget is positive; system
    messages and empty results are skipped and do not count.

    Arguments of the wrong type (messages that are not a list of message
    objects, params or redaction of another class) are a TranscriptError or
    ConfigError naming them; only the messages walked are looked at.
    """
    _check_messages_arg(messages, Sequence)
    check_type(params, "params", ConsolidationParams)
    check_type(redaction, "redaction", RedactionParams)
    kept: list[dict[str, Any]] = []
    budget = params.evidence_bytes
    last = len(messages) - 1
    for k, m in enumerate(reversed(messages)):
        if len(kept) >= params.evidence_messages or budget <= 0:
            break
        if not isinstance(m, Mapping):
            raise _bad_message(last - k, m)
        role = str(m.get("role") or "")
        if role == "system":
            continue
        content = _text(m.get("content")) + _tool_call_notes(m, params)
        content = redact(content, redaction)
        content = truncate_middle(content, min(budget, params.message_bytes))
        if not content:
            continue
        out: dict[str, Any] = {"role": role}
        if m.get("name"):
            out["name"] = truncate_bytes(str(m["name"]), params.name_bytes)
        if m.get("tool_call_id"):
            out["tool_call_id"] = truncate_bytes(str(m["tool_call_id"]), params.tool_call_id_bytes)
        out["content"] = content
        kept.append(out)
        budget -= byte_len(content)
    kept.reverse()
    return kept


def build_rollout(
    scope_id: str,
    messages: Sequence[Mapping[str, Any]],
    final_answer: str | None,
    params: ConsolidationParams = ConsolidationParams(),
    run_id: str | None = None,
    redaction: RedactionParams = RedactionParams(),
) -> Rollout:
    """The staged evidence of one run: id over the originals, bounded redacted evidence.

    Bad arguments are a TranscriptError naming them (a scope or run id that is not
    a string, messages that are not a list of role-bearing mappings, content that
    is not UTF-8 JSON), never a TypeError from deep inside."""
    if not isinstance(scope_id, str) or not scope_id.strip():
        raise TranscriptError(f"scope_id must be a non-empty string: {scope_id!r:.80}")
    if run_id is not None and not isinstance(run_id, str):
        raise TranscriptError(f"run_id must be a string or None: {run_id!r:.80}")
    check_type(params, "params", ConsolidationParams)
    check_type(redaction, "redaction", RedactionParams)
    _check_evidence(messages, final_answer, (list, tuple))
    return _build(scope_id, messages, final_answer, params, run_id, redaction)


def _build(
    scope_id: str,
    messages: Sequence[Mapping[str, Any]],
    final_answer: str | None,
    params: ConsolidationParams,
    run_id: str | None,
    redaction: RedactionParams,
) -> Rollout:
    """build_rollout on arguments already checked (stage_run checked the transcript)."""
    final = truncate_middle(redact(final_answer or "", redaction), params.final_bytes)
    return Rollout(
        id=rollout_id(messages),
        scope_id=scope_id,
        messages=tuple(evidence_messages(messages, params, redaction)),
        final=final,
        run_id=run_id,
    )


def check_transcript(run: Mapping[str, Any]) -> None:
    """Raise TranscriptError naming the first malformed field of a transcript record."""
    if not isinstance(run, Mapping):
        raise TranscriptError(f"transcript must be an object, got {type(run).__name__}")
    for f in _REQUIRED_FIELDS:
        if f not in run:
            raise TranscriptError(f"transcript field {f!r} is missing")
    for f in ("run_id", "scope_id"):
        if not isinstance(run[f], str) or not run[f]:
            raise TranscriptError(f"transcript field {f!r} must be a non-empty string: {run[f]!r}")
    if not isinstance(run["status"], str) or run["status"] not in RUN_STATUSES:
        raise TranscriptError(f"transcript field 'status' is {run['status']!r}")
    parent = run.get("parent_run_id")
    if parent is not None and not isinstance(parent, str):
        raise TranscriptError(f"transcript field 'parent_run_id' must be a string: {parent!r}")
    stop = run.get("stop_reason")
    if stop is not None and not isinstance(stop, str):
        raise TranscriptError(f"transcript field 'stop_reason' must be a string: {stop!r}")
    turns = run.get("turns", 0)
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        raise TranscriptError(f"transcript field 'turns' must be a count: {turns!r}")
    _check_evidence(run["messages"], run.get("final_answer"), list)


def _check_evidence(
    msgs: Any, final: Any, kinds: type[Sequence[Any]] | tuple[type[Sequence[Any]], ...]
) -> None:
    """A transcript's messages and final answer, as staging reads them."""
    if not isinstance(msgs, kinds):
        raise TranscriptError(f"transcript field 'messages' must be a list: {type(msgs).__name__}")
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise TranscriptError(
                f"transcript field 'messages[{i}]' needs a string role: {m!r:.80}"
            )
    if final is not None and not isinstance(final, str):
        raise TranscriptError(f"transcript field 'final_answer' must be a string: {final!r:.80}")
    for name, value in (("final_answer", final or ""), ("messages", msgs)):
        try:  # the rollout id hashes the canonical JSON of the originals, as UTF-8
            canonical_json(value).encode("utf-8")
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as e:
            raise TranscriptError(
                f"transcript field {name!r} is not UTF-8 JSON ({type(e).__name__}: {e!s:.120})"
            ) from None


def stage_run(
    store: StagingStore,
    run: Mapping[str, Any],
    params: ConsolidationParams = ConsolidationParams(),
    redaction: RedactionParams | None = None,
) -> Rollout | None:
    """Stage a finished run's evidence; None when the run is not eligible.

    Staging is idempotent by id: the same transcript twice is one rollout
    (the store answers False the second time; the rollout is returned anyway).
    Redaction defaults to the store's own settings, so evidence is never
    redacted more loosely than the memories it becomes.
    """
    check_type(params, "params", ConsolidationParams)
    if redaction is not None:
        check_type(redaction, "redaction", RedactionParams)
    check_transcript(run)
    if not eligible(run):
        return None
    if redaction is None:
        redaction = getattr(store, "redaction", None) or RedactionParams()
    rollout = _build(
        run["scope_id"], run["messages"], run.get("final_answer"), params, run["run_id"], redaction
    )
    store.stage_rollout(rollout)
    return rollout
