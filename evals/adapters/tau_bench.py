"""tau-bench historical trajectories (`gpt-4o-airline.json`, MIT): real tool-calling agent runs.

Mapping: one scope per airline user (`info.task.user_id`: the memory an agent
keeps about one customer; the 4 trials of a task and other tasks of the same
user restate the same facts, which exercises fold-in and dedup); each
trajectory is a root run, in (task id, trial) order, one synthetic hour apart
from `TAU_START` (the data has no times); its messages are `traj` in OpenAI
format with `tool_calls` and `role: "tool"` results kept (the system policy
prompt too: staging skips system messages, as SPEC §7 says). Every run
finished normally, so every run is `succeeded` with stop reason `stop`; the
task reward (1.0 or 0.0: did the agent do what the gold actions say) is kept
in the run's `meta["reward"]`, not mistaken for a run failure.

There is no gold memory: no facts, no probes. Every metric that needs gold
(extraction precision/recall, stale rows, every probe metric) is undefined
here, never 0, and the report says so (`info["gold"]`). What the source does
measure in pipeline mode: staging with tool calls under the SPEC §7
evidence bounds (bytes kept vs dropped, `evidence.json`), request shaping,
proposal validity, hallucinated ids, tokens and cost per pass.

Kept as recorded: tool call ids that a trajectory reuses for a later call
(`info["reused_tool_call_ids"]`; `check_dataset` reports each).

Left out: `info.task.actions` / `outputs` (gold tool actions, not memories)
and `instruction` (the simulated user's script: it would be gold for a probe
set this adapter does not build), `reward_info`, `user_cost`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from evals.adapters.shared import (
    At,
    field,
    find_data,
    load_json,
    make_dataset,
    root_run,
    tool_chat,
)
from evals.datasets import Dataset, Transcript
from memkit.errors import DatasetError

TAU_START = "2024-05-15T15:00:00+00:00"
"""Synthetic start of the first trajectory (the policy prompt's 'current time')."""

NO_GOLD = (
    "none: tau-bench records agent runs, not memories, so extraction precision/recall, "
    "stale rows and every probe metric are undefined here (never 0); the matcher has "
    "nothing to match"
)


def load_tau_bench(path: str | Path, *, limit: int | None = None) -> Dataset:
    """tau-bench trajectories (a JSON list) as a Dataset; `limit` keeps the first ones."""
    file = find_data(path, "tau_bench", ["gpt-4o-airline.json", "*.json"], limit=limit)[0]
    data = load_json(file)
    if not isinstance(data, list):
        raise DatasetError(str(file), None, None, "expected a JSON list of trajectories")
    recs = []
    for n, rec in enumerate(data[:limit] if limit is not None else data, start=1):
        at = At(file, n)
        task = field(rec, "task_id", int, at)
        trial = field(rec, "trial", int, at)
        info = field(rec, "info", dict, at)
        user = field(field(info, "task", dict, at["info"]), "user_id", str, at["info"]["task"])
        field(rec, "reward", float, at, default=None)  # kept in the run's meta: a number
        recs.append((task, trial, n, user, rec))
    base = datetime.fromisoformat(TAU_START).timestamp()
    runs: list[Transcript] = []
    for k, (task, trial, n, user, rec) in enumerate(sorted(recs, key=lambda r: r[:3])):
        messages = tool_chat(rec.get("traj"), file, n, "traj")
        runs.append(
            _run(
                f"tau:{user}:task{task}:trial{trial}",
                f"tau:{user}",
                base + 3600 * k,
                messages,
                task_id=task,
                trial=trial,
                reward=rec.get("reward"),
            )
        )
    return make_dataset(
        "tau-bench-airline",
        [file],
        "tau-bench historical gpt-4o airline trajectories via memkit's adapter: one scope per "
        "user, each trajectory a run with its tool calls; no gold memory.",
        "MIT",
        runs,
        [],
        [],
        info={
            "gold": NO_GOLD,
            "matcher": "not used: the source has no gold memory, so nothing is matched",
            "reused_tool_call_ids": _reused_ids(runs),
        },
    )


def _reused_ids(runs: list[Transcript]) -> int:
    """Tool calls whose id an earlier call of the same trajectory already used (an
    upstream quirk, kept as recorded; `check_dataset` reports each)."""
    n = 0
    for r in runs:
        seen: set[str] = set()
        for m in r.messages:
            for c in m.get("tool_calls") or ():
                n += c.get("id") in seen
                seen.add(c.get("id"))
    return n


def _run(run_id: str, scope: str, ts: float, messages: list[dict[str, Any]], **meta: Any) -> Any:
    """A root run whose task is the first user message and whose final answer is the
    last assistant text (an assistant turn that only called tools has none)."""
    run = root_run(run_id, scope, ts, messages, **meta)
    texts = [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]
    return replace(run, final_answer=texts[-1] if texts else "")
