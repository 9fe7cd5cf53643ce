"""A tiny dataset in the bundled format, written into tmp_path by eval tests.

Two scopes over simulated weeks: restated facts (fold-in), a supersede, a
retraction, an ineligible run, and probes with relevant and no relevant facts.
Other eval tests import `write_tiny_dataset` from here.
"""

from __future__ import annotations

import json
from pathlib import Path

from evals.datasets import load_dataset

DAY = 86_400


def _run(rid, scope, day, user, answer, status="succeeded"):
    return {
        "run_id": rid,
        "scope_id": scope,
        "parent_run_id": None,
        "status": status,
        "stop_reason": "stop",
        "turns": 1,
        "started_at": f"2026-01-{day:02d}T09:00:00Z",
        "task": user,
        "messages": [
            {"role": "system", "content": "You are a helpful coding agent."},
            {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
        ],
        "final_answer": answer,
    }


def _fact(fid, scope, content, paras, est, kind="fact", retracted=None, superseded=None):
    return {
        "fact_id": fid,
        "scope_id": scope,
        "kind": kind,
        "content": content,
        "paraphrases": paras,
        "established_in": est,
        "retracted_in": retracted,
        "superseded_by": superseded,
    }


TRANSCRIPTS = [
    _run("a1", "alpha", 1, "Remember: the deploy script is ops/deploy.sh.", "Noted."),
    _run("a2", "alpha", 3, "I prefer tabs over spaces in Go code.", "Okay, tabs it is."),
    _run("a3", "alpha", 5, "Again, deploys go through ops/deploy.sh.", "Deployed."),
    _run("a4", "alpha", 9, "We now deploy with make deploy instead of the script.", "Done."),
    _run("a5", "alpha", 12, "Forget the staging database at db-stage-1; it is gone.", "Ok."),
    _run("a6", "alpha", 13, "Crashed run about nothing.", "", status="failed"),
    _run("b1", "beta", 2, "The CI runs on Buildkite, remember that.", "Sure."),
    _run("b2", "beta", 4, "Our primary region is eu-west-1.", "Noted the region."),
    _run("b3", "beta", 6, "Just to repeat: CI is on Buildkite.", "Yes."),
]

FACTS = [
    _fact(
        "deploy-script",
        "alpha",
        "The deploy script is ops/deploy.sh",
        ["Deploys go through ops/deploy.sh", "Use ops/deploy.sh to deploy"],
        ["a1", "a3"],
        kind="procedure",
        superseded="deploy-make",
    ),
    _fact(
        "tabs",
        "alpha",
        "The user prefers tabs over spaces in Go code",
        ["Tabs, not spaces, for Go code"],
        ["a2"],
        kind="preference",
    ),
    _fact(
        "deploy-make",
        "alpha",
        "Deploy with make deploy",
        ["Deploys now run through make deploy"],
        ["a4"],
        kind="procedure",
    ),
    _fact(
        "stage-db",
        "alpha",
        "The staging database is db-stage-1",
        ["Staging DB: db-stage-1"],
        ["a2"],
        retracted="a5",
    ),
    _fact("ci", "beta", "CI runs on Buildkite", ["Buildkite runs our CI"], ["b1", "b3"]),
    _fact("region", "beta", "The primary region is eu-west-1", [], ["b2"]),
]

PROBES = [
    {
        "probe_id": "p1",
        "scope_id": "alpha",
        "after_run": "a3",
        "query": "how do I deploy?",
        "relevant": ["deploy-script"],
    },
    {
        "probe_id": "p2",
        "scope_id": "alpha",
        "after_run": "a5",
        "query": "how do I deploy?",
        "relevant": ["deploy-make"],
        "distractors": ["deploy-script"],
    },
    {
        "probe_id": "p3",
        "scope_id": "alpha",
        "after_run": "a5",
        "query": "Go indentation preference",
        "relevant": ["tabs"],
    },
    {
        "probe_id": "p4",
        "scope_id": "beta",
        "after_run": "b3",
        "query": "which CI system do we use",
        "relevant": ["ci"],
    },
    {
        "probe_id": "p5",
        "scope_id": "beta",
        "after_run": "b3",
        "query": "what is the weather like",
        "relevant": [],
    },
]

PAIRS = [
    {
        "a": "CI runs on Buildkite",
        "b": "Buildkite runs our CI",
        "label": "paraphrase",
        "source": "t",
    },
    {"a": "Deploy with make deploy", "b": "Tabs over spaces", "label": "distinct", "source": "t"},
    {
        "a": "The deploy script is ops/deploy.sh",
        "b": "Deploys go through ops/deploy.sh",
        "label": "paraphrase",
        "source": "t",
    },
]


def write_tiny_dataset(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    meta = {
        "name": "tiny",
        "version": "0.0.1",
        "description": "test fixture",
        "license": "CC0",
        "counts": {},
    }
    (root / "dataset.json").write_text(json.dumps(meta), encoding="utf-8")
    for name, rows in (
        ("transcripts", TRANSCRIPTS),
        ("facts", FACTS),
        ("probes", PROBES),
        ("pairs", PAIRS),
    ):
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (root / f"{name}.jsonl").write_text(text, encoding="utf-8")
    return root


def test_tiny_dataset_loads(tmp_path):
    ds = load_dataset(write_tiny_dataset(tmp_path / "tiny"))
    assert len(ds.transcripts) == 9 and len(ds.facts) == 6 and len(ds.probes) == 5
