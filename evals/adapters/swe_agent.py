"""SWE-agent trajectories (`*.traj`, MIT): long coding-agent runs with large tool outputs.

Mapping: one scope per file (each is a different repository and issue); the
file's `history` is one root run at a synthetic time (`SWE_START`, one hour
per file in name order) in OpenAI format: roles and content as recorded,
`tool_calls` kept, and a tool message's one-item `tool_call_ids` list read as
its `tool_call_id`. The runs with text actions (the GPT-4 runs) have no tool
calls: their observations arrive as user messages, as the agent saw them.
Every run is `succeeded`/`stop` (`info.exit_status`, e.g. "submitted", is
kept in `meta`).

There is no gold memory: like tau-bench, every metric that needs gold is
undefined here (never 0), and the report says so (`info["gold"]`). The
source measures how much of a long tool observation the SPEC §7 evidence
window keeps (`evidence.json`).

Left out: `trajectory` (the same steps again, with environment state),
`info.submission` (the patch), `replay_config`, message `thought`/`action`
fields (the content already holds the text the model produced).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from evals.adapters.shared import At, field, find_data, load_json, make_dataset, root_run, tool_chat
from evals.adapters.tau_bench import NO_GOLD
from evals.datasets import Dataset, Transcript

SWE_START = "2024-01-01T00:00:00+00:00"
"""Synthetic start of the first trajectory file (the files carry no run times)."""


def load_swe_agent(path: str | Path, *, limit: int | None = None) -> Dataset:
    """SWE-agent `.traj` files (a file or a folder) as a Dataset; `limit` keeps the first."""
    files = find_data(path, "swe_agent", ["*.traj"], limit=limit)
    files = files[:limit] if limit is not None else files
    base = datetime.fromisoformat(SWE_START).timestamp()
    runs: list[Transcript] = []
    for k, file in enumerate(files):
        rec = load_json(file)
        at = At(file, 1)
        history = field(rec, "history", list, at)
        scope = f"swe:{file.stem}"
        info = field(rec, "info", dict, at, default={})
        messages = tool_chat(history, file, 1, "history", tool_call_id="tool_call_ids")
        runs.append(
            root_run(
                f"{scope}:run",
                scope,
                base + 3600 * k,
                messages,
                exit_status=field(info, "exit_status", str, at["info"], default=None),
            )
        )
    return make_dataset(
        "swe-agent",
        files,
        "SWE-agent trajectories via memkit's adapter: one run per file with its tool calls "
        "and observations; no gold memory.",
        "MIT",
        runs,
        [],
        [],
        info={
            "gold": NO_GOLD.replace("tau-bench", "SWE-agent"),
            "matcher": "not used: the source has no gold memory, so nothing is matched",
        },
    )
