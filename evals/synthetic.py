"""A synthetic dataset in the bundled format, sized for harness benches and tests.

`write_synthetic(root, scopes=64, runs=2)` writes `scopes` scopes of `runs`
short succeeded runs each, one gold fact per run and one probe per scope, so a
pipeline run makes about one consolidation pass per run and the cost of a run
is dominated by the passes (what `memkit bench harness --latency` measures).
The facts are distinct sentences; nothing here is meant to score well.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonlines

TOPICS = ("deploy", "region", "editor", "database", "queue", "cache", "linter", "runner")


def _fact_text(scope: int, run: int) -> str:
    topic = TOPICS[(scope + run) % len(TOPICS)]
    return f"For project {scope} the {topic} setting number {run} is value-{scope}-{run}"


def write_synthetic(root: str | Path, *, scopes: int = 64, runs: int = 2) -> Path:
    """Write the dataset folder `root` (created) and return it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    meta = {
        "name": f"synthetic-{scopes}x{runs}",
        "version": "1",
        "description": "synthetic scopes for harness benches (evals/synthetic.py)",
        "license": "CC0",
        "counts": {},
    }
    (root / "dataset.json").write_text(json.dumps(meta), encoding="utf-8")
    transcripts, facts, probes = [], [], []
    for s in range(scopes):
        sid = f"s{s:04d}"
        for r in range(runs):
            rid = f"{sid}-r{r}"
            text = _fact_text(s, r)
            transcripts.append(
                {
                    "run_id": rid,
                    "scope_id": sid,
                    "parent_run_id": None,
                    "status": "succeeded",
                    "stop_reason": "stop",
                    "turns": 1,
                    "started_at": f"2026-01-{r + 1:02d}T09:00:00Z",
                    "task": f"Remember: {text}.",
                    "messages": [
                        {"role": "user", "content": f"Remember: {text}."},
                        {"role": "assistant", "content": "Noted."},
                    ],
                    "final_answer": "Noted.",
                }
            )
            facts.append(
                {
                    "fact_id": f"{rid}-f",
                    "scope_id": sid,
                    "kind": "fact",
                    "content": text,
                    "paraphrases": [],
                    "established_in": [rid],
                    "retracted_in": None,
                    "superseded_by": None,
                }
            )
        probes.append(
            {
                "probe_id": f"{sid}-p",
                "scope_id": sid,
                "after_run": f"{sid}-r{runs - 1}",
                "query": f"project {s} settings",
                "relevant": [f"{sid}-r0-f"],
            }
        )
    for name, rows in (("transcripts", transcripts), ("facts", facts), ("probes", probes)):
        with jsonlines.open(root / f"{name}.jsonl", "w", dumps=json.dumps) as out:
            out.write_all(rows)
    return root
