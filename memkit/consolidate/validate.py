"""Validation of a consolidation proposal (SPEC §7.6): pure, first failure wins.

The same function runs twice: once on the parsed model output, and again
inside the store's commit transaction, so nothing the model says reaches the
database unchecked. Each rejection carries a stable code for evaluations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from memkit.errors import ProposalError
from memkit.params import ConsolidationParams
from memkit.types import CONFIDENCE_INFERRED, KINDS, Change, Entry, Memory

_ROLLOUT_ID = re.compile(r"[0-9a-f]{64}")


def _blen(s: str) -> int:
    return len(s.encode("utf-8"))


def validate_batch(
    scope_id: str,
    rollout_ids: Sequence[str],
    snapshot: Sequence[Memory],
    n_changes: int,
    params: ConsolidationParams = ConsolidationParams(),
) -> None:
    """Checks on the pass itself, before any change is looked at."""
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
    scope = raw.get("scope_id", raw.get("scope", ""))
    if scope not in (None, "") and scope != scope_id:
        raise ProposalError(
            "scope_widening", f"{where}: entry names scope {scope!r}, pass scope is {scope_id!r}"
        )
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ProposalError("invalid_lesson", f"{where}: content is blank or not a string")
    if _blen(content) > params.content_bytes:
        raise ProposalError(
            "invalid_lesson",
            f"{where}: content is {_blen(content)} bytes (max {params.content_bytes})",
        )
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ProposalError("invalid_lesson", f"{where}: tags must be a list of strings")
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
    kind = raw.get("kind") or "fact"
    if kind not in KINDS:
        raise ProposalError("invalid_lesson", f"{where}: unknown kind {kind!r}")
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
