"""`memkit bench harness`: how fast the evaluation suite itself is.

Three numbers, each against its goal:
- store-mode eval of the dataset (all scopes, every probe, metrics with CIs);
- a 20-point floor sweep (goal <= 30 s): one replay, 20 probe variants;
- harness passes/s with a mock consolidator (goal >= 200): pipeline mode with a
  consolidator that answers `{"changes": []}` at once, so the number measures
  staging, request shaping, parse/validate/commit and bookkeeping, not a model.
Wall-clock seconds; the embedder is loaded (and its cache warmed) beforehand.

`--latency S` measures instead the harness at provider scale: a loopback
OpenAI-compatible server in its own process (`tests/stub_openai.py`) answers
`{"changes": []}` after S seconds (optionally a 429 with Retry-After to a
share of requests), and pipeline runs of a synthetic dataset (`--scopes`,
default 64, at least `--runs` passes each and enough for `--min-ideal-s`
of ideal wall time) go through LiteLLM at each `--levels`
concurrency. Per level: achieved passes/s beside the ideal
`min(concurrency, scopes) / latency`, their ratio (goal >= 0.9 at 32 with
0.5 s), the harness process's own CPU seconds per pass and the most requests
in flight. Then a `--rss-scopes` (default 500) run through the CLI in a
child process reports its peak RSS (goal < 1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_SWEEP_S = 30.0
GOAL_PASSES_PER_S = 200.0
GOAL_IDEAL_SHARE = 0.9
"""Latency mode: achieved passes/s at concurrency 32, 0.5 s latency, over the ideal."""
GOAL_RSS_BYTES = 1 << 30


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
    p.add_argument(
        "--latency",
        type=float,
        help="latency mode: seconds the loopback server takes per answer (e.g. 0.5)",
    )
    p.add_argument(
        "--rate-429",
        type=float,
        default=0.0,
        help="latency mode: share of requests answered 429 with Retry-After: 1 (default 0)",
    )
    p.add_argument(
        "--levels",
        default="1,8,32,64",
        help="latency mode: concurrency levels (default %(default)s)",
    )
    p.add_argument(
        "--scopes", type=int, default=64, help="latency mode: synthetic scopes (default 64)"
    )
    p.add_argument(
        "--runs", type=int, default=2, help="latency mode: runs (passes) per scope (default 2)"
    )
    p.add_argument(
        "--min-ideal-s",
        type=float,
        default=8.0,
        help="latency mode: each level runs enough passes per scope (at least --runs) "
        "for this many seconds of ideal wall time (default %(default)s)",
    )
    p.add_argument(
        "--rss-scopes",
        type=int,
        default=500,
        help="latency mode: scopes of the peak-RSS run (0: skip; default 500)",
    )
    a = p.parse_args(argv if argv is not None else sys.argv[1:])
    if a.latency is not None:
        return latency_main(a)

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


class Loopback:
    """The stub server in a child process (the measured process only runs the harness)."""

    def __init__(self, latency: float, rate_429: float):
        import subprocess

        stub = REPO / "tests" / "stub_openai.py"
        if not stub.is_file():
            raise SystemExit(f"memkit bench harness: --latency needs {stub} (a source checkout)")
        self.proc = subprocess.Popen(
            [sys.executable, str(stub), "--latency", str(latency), "--rate-429", str(rate_429)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def _level(root: Path, ds, url: str, concurrency: int, latency: float, scopes: int) -> dict:
    """One pipeline run at `concurrency`: achieved vs ideal passes/s, CPU per pass."""
    import tempfile

    from evals.rows import PassRow
    from evals.runner import RunConfig, run_eval

    spec = "litellm:openai/bench"
    cfg = RunConfig(
        dataset=str(root),
        name=f"c{concurrency}",
        store_mode=False,
        consolidators=(spec,),
        embedder="hashing",
        concurrency=concurrency,
        resamples=20,
        model_options={spec: {"api_base": url, "api_key_env": "MEMKIT_BENCH_KEY", "timeout": 30}},
    )
    marks: list[tuple[float, float]] = []

    def on_pass(_row: PassRow) -> None:
        marks.append((time.perf_counter(), time.process_time()))

    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        run_eval(cfg, Path(tmp) / "run", quiet=True, dataset=ds, on_pass=on_pass, report=False)
        manifest = json.loads((Path(tmp) / "run" / "manifest.json").read_text())
    t1, c1 = marks[-1]
    passes = len(marks)
    rate = passes / (t1 - t0)
    ideal = min(concurrency, scopes) / latency
    lim = manifest["providers"]["limits"].get("openai/bench", {})
    return {
        "concurrency": concurrency,
        "passes": passes,
        "wall_s": round(t1 - t0, 3),
        "passes_per_s": round(rate, 2),
        "ideal_passes_per_s": round(ideal, 2),
        "share_of_ideal": round(rate / ideal, 3),
        "cpu_ms_per_pass": round(1000 * (c1 - c0) / passes, 2),
        "cpu_bound_passes_per_s": round(passes / (c1 - c0), 1) if c1 > c0 else None,
        "in_flight_max": lim.get("in_flight_max"),
        "rate_limited": lim.get("rate_limited"),
    }


def _peak_rss(root: Path, url: str, log) -> dict:
    """A whole CLI run of the big synthetic dataset in a child process; its peak RSS."""
    import resource
    import subprocess
    import tempfile

    from evals.rows import PassRow, read_rows

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "memkit.cli",
            "eval",
            "run",
            "--dataset",
            str(root),
            "--mode",
            "pipeline",
            "--embedder",
            "hashing",
            "--consolidator",
            "litellm:openai/bench",
            "--api-base",
            url,
            "--api-key-env",
            "MEMKIT_BENCH_KEY",
            "--concurrency",
            "64",
            "--resamples",
            "200",
            "--out",
            str(Path(tmp) / "run"),
            "--quiet",
        ]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            log(done.stdout + done.stderr)
        rows = Path(tmp) / "run" / "passes.jsonl"
        passes = len(read_rows(rows, PassRow))  # [] when the run wrote none
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    return {"exit": done.returncode, "passes": passes, "wall_s": round(wall, 1), "peak_rss": rss}


def runs_for(concurrency: int, scopes: int, latency: float, runs: int, min_ideal_s: float) -> int:
    """Passes per scope at one level: at least `runs`, and enough for `min_ideal_s`
    of ideal wall time, so the run's start-up and its last stragglers (a scope's
    passes are sequential) do not decide the ratio (at 32 with 2 passes per scope
    the ideal run is 2 s, ~0.4 s of it start-up)."""
    ideal_rate = min(concurrency, scopes) / latency
    return max(runs, math.ceil(min_ideal_s * ideal_rate / scopes))


def latency_main(a: argparse.Namespace) -> int:
    """`--latency`: the harness at provider scale (module docstring)."""
    import os
    import tempfile

    from evals.datasets import load_dataset
    from evals.synthetic import write_synthetic

    def log(msg: str) -> None:
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    os.environ.setdefault("MEMKIT_BENCH_KEY", "bench-local")
    out: dict = {
        "latency_s": a.latency,
        "rate_429": a.rate_429,
        "scopes": a.scopes,
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(os.getloadavg()[0], 1),
    }
    with tempfile.TemporaryDirectory() as tmp, Loopback(a.latency, a.rate_429) as srv:
        datasets: dict[int, tuple[Path, object]] = {}
        small = write_synthetic(Path(tmp) / "warm", scopes=2, runs=1)
        log("warming LiteLLM (import and first calls) ...")
        _level(small, load_dataset(small), srv.url, 2, a.latency, 2)
        rows = []
        for c in levels:
            runs = runs_for(c, a.scopes, a.latency, a.runs, a.min_ideal_s)
            if runs not in datasets:
                root = write_synthetic(Path(tmp) / f"syn{runs}", scopes=a.scopes, runs=runs)
                datasets[runs] = (root, load_dataset(root))
            root, ds = datasets[runs]
            log(f"concurrency {c}: {a.scopes} scopes x {runs} passes at {a.latency} s ...")
            rows.append(_level(root, ds, srv.url, c, a.latency, a.scopes))
        out["levels"] = rows
        out["load_avg_1m_after"] = round(os.getloadavg()[0], 1)
        if a.rss_scopes:
            big = write_synthetic(Path(tmp) / "big", scopes=a.rss_scopes, runs=a.runs)
            log(f"peak RSS of a {a.rss_scopes}-scope pipeline run (CLI, child process) ...")
            out["rss"] = {"scopes": a.rss_scopes, **_peak_rss(big, srv.url, log)}
    if a.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    print(
        f"loopback latency {a.latency} s, 429 share {a.rate_429:g}, "
        f"{a.scopes} synthetic scopes, >= {a.runs} passes each and >= {a.min_ideal_s:g} s of "
        f"ideal wall per level; {out['cpus']} CPUs, load average "
        f"{out['load_avg_1m_before']} before / {out['load_avg_1m_after']} after"
    )
    print(
        "| concurrency | passes | passes/s | ideal | share of ideal | harness CPU ms/pass "
        "| CPU-bound passes/s | most in flight |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in out["levels"]:
        print(
            f"| {r['concurrency']} | {r['passes']} | {r['passes_per_s']:.1f} | "
            f"{r['ideal_passes_per_s']:.1f} | "
            f"{r['share_of_ideal']:.2f} | {r['cpu_ms_per_pass']:.1f} | "
            f"{r['cpu_bound_passes_per_s']} | {r['in_flight_max']} |"
        )
    at32 = [r for r in out["levels"] if r["concurrency"] == 32]
    if at32 and a.latency == 0.5:
        good = at32[0]["share_of_ideal"] >= GOAL_IDEAL_SHARE
        print(f"goal >= {GOAL_IDEAL_SHARE:.0%} of ideal at concurrency 32: {_ok(good)}")
    if "rss" in out:
        r = out["rss"]
        print(
            f"{r['scopes']}-scope pipeline run ({r['passes']} passes, {r['wall_s']} s, exit "
            f"{r['exit']}): peak RSS {r['peak_rss'] / 2**20:.0f} MiB "
            f"(goal < 1 GiB: {_ok(r['peak_rss'] < GOAL_RSS_BYTES)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
