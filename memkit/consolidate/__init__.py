"""Rollout consolidation (SPEC §7): staging, shaping, parsing, validation, passes.

    run = {...transcript record...}
    stage_run(store, run)                                   # bounded, redacted evidence
    result = run_pass_sync(store, "scope-a", get_consolidator("heuristic"))
    result.outcome, result.changes, result.attempts          # never raises for a bad pass

Consolidators (`litellm:<model>`, `heuristic`, `oracle`, `replay:<recording.jsonl
or run-dir>`)
all answer `{"changes": [...]}` text that goes through the same
parse -> validate -> commit path.
"""

from __future__ import annotations

from memkit.consolidate.budget import request_budget
from memkit.consolidate.cache import ResponseCache, cache_key
from memkit.consolidate.consolidators import (
    REPLAYABLE,
    LiteLLMConsolidator,
    OracleConsolidator,
    ReplayConsolidator,
    get_consolidator,
)
from memkit.consolidate.heuristic import HeuristicConsolidator
from memkit.consolidate.judge import Judgement, Verdict, judge
from memkit.consolidate.passes import run_pass, run_pass_sync
from memkit.consolidate.recording import read_recording, write_recording
from memkit.consolidate.reply import Consolidator, Reply
from memkit.consolidate.request import (
    NATIVE_PROMPT,
    NATIVE_PROMPT_VERSION,
    ConsolidationRequest,
    build_request,
    evidence_text,
    excerpt,
    prepare_request,
    shape_request,
)
from memkit.consolidate.result import ATTEMPT_VERSION, Attempt, PassResult
from memkit.consolidate.stage import (
    build_rollout,
    canonical_json,
    evidence_messages,
    rollout_id,
    stage_run,
)
from memkit.proposal import (
    Parsed,
    change_to_json,
    parse_response,
    validate_batch,
    validate_changes,
)
from memkit.runs import eligible

__all__ = [
    "ATTEMPT_VERSION",
    "Attempt",
    "ConsolidationRequest",
    "Consolidator",
    "HeuristicConsolidator",
    "Judgement",
    "LiteLLMConsolidator",
    "NATIVE_PROMPT",
    "NATIVE_PROMPT_VERSION",
    "OracleConsolidator",
    "REPLAYABLE",
    "Parsed",
    "PassResult",
    "ReplayConsolidator",
    "Reply",
    "ResponseCache",
    "build_request",
    "build_rollout",
    "cache_key",
    "canonical_json",
    "change_to_json",
    "eligible",
    "evidence_messages",
    "evidence_text",
    "excerpt",
    "get_consolidator",
    "judge",
    "parse_response",
    "prepare_request",
    "read_recording",
    "request_budget",
    "rollout_id",
    "run_pass",
    "run_pass_sync",
    "shape_request",
    "stage_run",
    "validate_batch",
    "validate_changes",
    "Verdict",
    "write_recording",
]
