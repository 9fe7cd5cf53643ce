"""`memkit bench harness`: how fast the evaluation suite itself is.

Three numbers, each against its goal:
- store-mode eval of the dataset (all scopes, every probe, metrics with CIs);
- a 20-point floor sweep (goal <= 30 s): one replay, 20 probe variants;
- harness passes/s with a mock consolidator (goal >= 200): pipeline mode with a
  consolidator that answers `{"changes": []}` at once, so the number measures
  staging, request shaping, parse/validate/commit and bookkeeping, not a model.
Wall-clock seconds; the embedder is loaded (and its cache warmed) beforehand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_SWEEP_S = 30.0
GOAL_PASSES_PER_S = 200.0


def _ok(good: bool) -> str:
    return "ok" if good else "MISSED"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memkit bench harness", description=__doc__)
    p.add_argument(
        "--dataset",
        default=str(REPO / "datasets" / "bundled"),
        help="dataset folder or <adapter>:<dir> (default: the bundled dataset)",
    )
    p.add_argument("--limit", type=int, help="adapters: first N conversations/questions")
    p.add_argument("--embedder", default="wordllama", help="embedder spec (default wordllama)")
    p.add_argument("--points", type=int, default=20, help="floor sweep points")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv if argv is not None else sys.argv[1:])

    def log(msg: str) -> None:
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    from evals import aggregate
    from evals.matcher import Matcher
    from evals.replay import CachingEmbedder, replay_pipeline_scope, replay_store, scopes_of
    from evals.runner import load_any
    from evals.sweep import sweep
    from memkit.consolidate import get_consolidator
    from memkit.embed import get_embedder

    ds = load_any(a.dataset, limit=a.limit)
    emb = CachingEmbedder(get_embedder(a.embedder))
    log("loading the embedder and warming its cache ...")
    replay_store(ds, embedder=emb)  # load the model, warm the embedding cache
    log("timing the store-mode eval ...")

    t0 = time.perf_counter()
    r = replay_store(ds, embedder=emb)
    groups = aggregate.probe_metrics(r.probes)
    groups.update(aggregate.write_metrics(r.writes))
    for v in groups.values():
        aggregate.estimate(v)
    store_s = time.perf_counter() - t0

    floors = [round(i / a.points, 4) for i in range(a.points)]
    log(f"timing a {a.points}-point floor sweep ...")
    t0 = time.perf_counter()
    sweep(ds, {"floor": floors}, embedder=emb)
    sweep_s = time.perf_counter() - t0

    matcher = Matcher(ds.facts)
    mock = get_consolidator("oracle", gold=lambda request: [], name="mock")

    async def pipeline() -> int:
        n = 0
        for s in scopes_of(ds):
            res = await replay_pipeline_scope(s, mock, embedder=emb, matcher=matcher)
            n += len(res.passes)
        return n

    log("timing the pipeline harness with a mock consolidator ...")
    t0 = time.perf_counter()
    passes = asyncio.run(pipeline())
    pipe_s = time.perf_counter() - t0
    rate = passes / pipe_s if pipe_s > 0 else float("inf")

    out = {
        "dataset": getattr(ds, "name", a.dataset),
        "probes": len(ds.probes),
        "store_mode_s": round(store_s, 3),
        "floor_sweep_points": a.points,
        "floor_sweep_s": round(sweep_s, 3),
        "floor_sweep_goal_s": GOAL_SWEEP_S,
        "passes": passes,
        "passes_per_s": round(rate, 1),
        "passes_per_s_goal": GOAL_PASSES_PER_S,
        "pipeline_s_incl_probes": round(pipe_s, 3),
    }
    if a.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(f"dataset {out['dataset']}: {out['probes']} probes")
        print(f"store-mode eval           {store_s:8.2f} s")
        print(
            f"{a.points}-point floor sweep     {sweep_s:8.2f} s  "
            f"(goal <= {GOAL_SWEEP_S:.0f} s: {_ok(sweep_s <= GOAL_SWEEP_S)})"
        )
        print(
            f"harness, mock consolidator {rate:8.1f} passes/s over {passes} passes "
            f"(goal >= {GOAL_PASSES_PER_S:.0f}: {_ok(rate >= GOAL_PASSES_PER_S)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
