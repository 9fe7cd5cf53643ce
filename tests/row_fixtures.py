"""Typed run rows for tests, from the few fields a test cares about.

Each builder fills every other field with a neutral value and parses the
result with the row type's own `from_json`, so a fixture is a row a run could
have written (and a renamed field fails here, loudly).
"""

from __future__ import annotations

from typing import Any

from evals.rows import ROW_VERSION, AttemptRow, ExtractionRow, PassRow, ProbeRow, WriteRow


def recalled(fact: str | None, score: float = 0.5, nbytes: int = 10, removed: bool = False):
    return {
        "id": f"id-{fact}",
        "fact": fact,
        "score": score,
        "path": "vector",
        "cosine": score,
        "bytes": nbytes,
        "removed": removed,
    }


def probe(**kw: Any) -> ProbeRow:
    base: dict[str, Any] = {
        "probe_id": "p",
        "scope_id": "s",
        "after_run": "r",
        "variant": "default",
        "query": "q",
        "relevant": [],
        "distractors": [],
        "stale": [],
        "recalled": [],
        "admitted": [],
        "stopped": [],
        "account": {},
        "error": None,
        "fallback": None,
        "full": None,
    }
    rows = {**base, **kw}
    rows["recalled"] = [{**recalled(r.get("fact")), **r} for r in rows["recalled"]]
    rows["admitted"] = [{"id": f"id-{a.get('fact')}", **a} for a in rows["admitted"]]
    return ProbeRow.from_json({"version": ROW_VERSION, **rows}, "fixture")


def attempt(**kw: Any) -> AttemptRow:
    base: dict[str, Any] = {
        "model": "m",
        "consolidator": "c",
        "request_hash": "h",
        "replicate": 0,
        "index": 0,
        "outcome": "ok",
        "status": None,
        "raw_response": None,
        "parse_mode": None,
        "parse_error": None,
        "validation_code": None,
        "strict_code": None,
        "lenient_code": None,
        "parsed_changes": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
        "cost_note": None,
        "latency_s": 0.0,
        "retry_after_s": None,
        "cached": False,
        "error": None,
        "response_format": None,
        "scope_id": "s",
        "snapshot_ids": [],
        "rollout_ids": [],
        "pass": 0,
    }
    return AttemptRow.from_json({"version": ROW_VERSION, **base, **kw}, "fixture")


def write(**kw: Any) -> WriteRow:
    base: dict[str, Any] = {
        "scope_id": "s",
        "run_id": "r",
        "fact": "f",
        "restatement": False,
        "row": "r1",
        "folded": False,
        "row_fact": None,
        "update": False,
        "time": 0.0,
    }
    return WriteRow.from_json({"version": ROW_VERSION, **base, **kw}, "fixture")


def pass_(**kw: Any) -> PassRow:
    base: dict[str, Any] = {
        "scope_id": "s",
        "pass": 0,
        "outcome": "committed",
        "error_code": None,
        "request_hash": "h",
        "rollout_ids": [],
        "snapshot_ids": [],
        "changes": [],
        "parked": [],
        "isolation": False,
        "parked_alone": 0,
        "parked_with_others": 0,
        "request_bytes": 0,
        "excerpt_size": None,
        "request_budget": None,
        "wall_s": 0.0,
    }
    return PassRow.from_json({"version": ROW_VERSION, **base, **kw}, "fixture")


def extraction(**kw: Any) -> ExtractionRow:
    base: dict[str, Any] = {
        "scope_id": "s",
        "rows": [],
        "live_gold": [],
        "stale_gold": [],
        "staged_runs": [],
        "stage_errors": [],
        "rollouts": {"consumed": 0, "pending": 0, "parked": 0},
        "gold": True,
    }
    rows = {**base, **kw}
    rows["rows"] = [{"id": f"m{i}", "content": "c", **r} for i, r in enumerate(rows["rows"])]
    return ExtractionRow.from_json({"version": ROW_VERSION, **rows}, "fixture")
