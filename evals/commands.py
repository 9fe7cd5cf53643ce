"""`memkit eval run | sweep | compare` and `memkit report`: thin argument parsing.

Each `*_main(argv) -> int` maps flags onto a library function in
`evals.runner`, `evals.sweep` or `evals.report` and prints where the results
went. Exit status: 0 ok, 2 bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memkit.errors import MemkitError

DEFAULT_RUNS = Path("reports") / "runs"
DEFAULT_CACHE = Path("reports") / "cache"


def _value(text: str) -> Any:
    """A tunable value from the command line: JSON when it parses, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    from evals.sweep import resolve

    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        name, sep, val = item.partition("=")
        if not sep:
            raise MemkitError(f"--set wants <tunable>=<value>, got {item!r}")
        group, fld = resolve(name.strip())
        out.setdefault(group, {})[fld] = _value(val.strip())
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        help="dataset folder, or <adapter>:<path> (locomo, longmemeval, longmemeval_s, msc)",
    )
    p.add_argument("--preset", help="a named configuration (bundled)")
    p.add_argument("--limit", type=int, help="adapters: first N conversations/questions")
    p.add_argument("--scope", action="append", help="only this scope (repeatable)")
    p.add_argument("--embedder", help="wordllama (default), hashing, litellm:<model>")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="TUNABLE=VALUE",
        help="override a tunable, e.g. --set recall.floor=0.3 (repeatable)",
    )
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--resamples", type=int, help="bootstrap resamples for latency quantiles (default 1000)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _config(a: argparse.Namespace, **extra: Any) -> Any:
    from evals.runner import RunConfig, preset

    kw: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    for key in ("limit", "embedder", "seed", "resamples"):
        if getattr(a, key, None) is not None:
            kw[key] = getattr(a, key)
    if a.scope:
        kw["scopes"] = tuple(a.scope)
    if a.dataset:
        kw["dataset"] = a.dataset
    kw.update(_overrides(a.set))
    if a.preset:
        return preset(a.preset, **kw)
    if "dataset" not in kw:
        raise MemkitError("give --dataset or --preset")
    return RunConfig(**kw)


def run_main(argv: list[str]) -> int:
    """memkit eval run: store mode and/or pipeline mode into a run folder."""
    p = argparse.ArgumentParser(prog="memkit eval run", description=run_main.__doc__)
    _common(p)
    p.add_argument("--out", help="run folder (default reports/runs/<name>)")
    p.add_argument("--name", help="run name (default: the preset or 'run')")
    p.add_argument("--mode", choices=("store", "pipeline", "both"), default=None)
    p.add_argument(
        "--consolidator",
        action="append",
        help="heuristic, oracle, litellm:<model>, replay:<run-dir> (repeatable)",
    )
    p.add_argument("--api-base", help="api_base for every litellm consolidator")
    p.add_argument("--replicates", type=int)
    p.add_argument("--concurrency", type=int, help="requests in flight per model (default 4)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="LLM response cache")
    p.add_argument("--curation", choices=("latest_row", "all_rows"))
    p.add_argument("--no-report", action="store_true")
    a = p.parse_args(argv)
    try:
        from evals.runner import run_eval

        extra: dict[str, Any] = {
            "name": a.name,
            "replicates": a.replicates,
            "concurrency": a.concurrency,
            "cache_dir": a.cache_dir,
            "curation": a.curation,
        }
        if a.consolidator:
            extra["consolidators"] = tuple(a.consolidator)
        if a.mode == "store":
            extra["consolidators"] = ()
            extra["store_mode"] = True
        elif a.mode == "pipeline":
            extra["store_mode"] = False
        elif a.mode == "both":
            extra["store_mode"] = True
        if a.api_base:
            specs = extra.get("consolidators") or ()
            extra["model_options"] = {
                c: {"api_base": a.api_base, "api_key": "sk-local"}
                for c in specs
                if c.startswith("litellm:")
            }
        cfg = _config(a, **extra)
        out = Path(a.out) if a.out else DEFAULT_RUNS / cfg.name
        res = run_eval(cfg, out, quiet=a.quiet, report=not a.no_report)
    except MemkitError as e:
        print(f"memkit eval run: {e}", file=sys.stderr)
        return 2
    print(f"run written to {res.out}")
    if not a.no_report:
        print(f"report: {res.out / 'report.html'}")
    return 0


def sweep_main(argv: list[str]) -> int:
    """memkit eval sweep: a grid over tunables, scored in store mode (pipeline for
    consolidation tunables), with a recommended operating point."""
    p = argparse.ArgumentParser(prog="memkit eval sweep", description=sweep_main.__doc__)
    _common(p)
    p.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="TUNABLE=V1,V2,...",
        help="values to try, e.g. --grid floor=0.1,0.2,0.3 (repeatable: product)",
    )
    p.add_argument(
        "--objective",
        default="default",
        help="'default' (smallest budget_waste whose recall_at_8 is not significantly more "
        "than --margin below the best point's) or any registered metric (its better direction)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="default objective: recall_at_8 a point may lose against the best (default 0.05)",
    )
    p.add_argument("--consolidator", default="heuristic", help="for consolidation tunables")
    p.add_argument("--out", help="folder for sweep.csv, recommended.json and the report")
    a = p.parse_args(argv)
    try:
        from evals.runfolder import now
        from evals.runner import load_any
        from evals.sweep import resolve, sweep

        grid: dict[str, list[Any]] = {}
        for g in a.grid:
            name, sep, vals = g.partition("=")
            if not sep or not vals:
                raise MemkitError(f"--grid wants <tunable>=<v1>,<v2>,..., got {g!r}")
            resolve(name)
            grid[name] = [_value(v) for v in vals.split(",")]
        cfg = _config(a)
        ds = load_any(cfg.dataset, limit=cfg.limit)
        started = now()
        res = sweep(
            ds,
            grid,
            objective=a.objective,
            base={
                "recall": cfg.recall,
                "assembly": cfg.assembly,
                "fold": cfg.fold,
                "consolidation": cfg.consolidation,
            },
            embedder=cfg.embedder,
            consolidator=a.consolidator,
            scopes=cfg.scopes,
            margin=a.margin,
        )
    except MemkitError as e:
        print(f"memkit eval sweep: {e}", file=sys.stderr)
        return 2
    frame = res.frame
    rec = res.recommended
    shown = [rec["metric"], *([rec["constraint"]["metric"]] if "constraint" in rec else [])]
    print(frame[frame["metric"].isin(shown)].to_string(index=False))
    print("recommended:", json.dumps(rec, sort_keys=True))
    point = ", ".join(f"{k}={rec[k]}" for k in res.params)
    ci = "" if rec["lo"] is None else f" [{rec['lo']:.3f}, {rec['hi']:.3f}]"
    print(f"recommended {point}: {rec['metric']} {rec['value']:.3f}{ci} ({rec['rule']})")
    if rec.get("warning"):
        print(f"warning: {rec['warning']}", file=sys.stderr)
    if a.out:
        from evals.report import build_report
        from evals.sweep import write_sweep

        out = Path(a.out)
        write_sweep(out, res, config=cfg, dataset=ds, grid=grid, started_at=started)
        build_report(out)
        print(f"sweep written to {out}")
    return 0


def compare_main(argv: list[str]) -> int:
    """memkit eval compare: paired bootstrap CIs of differences between systems."""
    p = argparse.ArgumentParser(prog="memkit eval compare", description=compare_main.__doc__)
    p.add_argument("run", help="run folder")
    p.add_argument("--a", help="system a (default: every pair of pipeline systems)")
    p.add_argument("--b", help="system b")
    p.add_argument("--b-run", help="run folder of system b (default: the same run)")
    p.add_argument("--metric", action="append", help="metrics to compare (repeatable)")
    p.add_argument("--no-report", action="store_true")
    a = p.parse_args(argv)
    try:
        import pandas as pd

        from evals.compare import compare_runs
        from evals.runfolder import read_jsonl

        run = Path(a.run)
        if a.a and a.b:
            pairs = [(a.a, a.b)]
        else:
            systems = sorted({r["system"] for r in read_jsonl(run / "attempts.jsonl")})
            if len(systems) < 2:
                raise MemkitError(f"{str(run)!r} has fewer than two pipeline systems; use --a/--b")
            pairs = [(x, y) for i, x in enumerate(systems) for y in systems[i + 1 :]]
        metrics = tuple(a.metric) if a.metric else None
        frame = pd.concat(
            [compare_runs(run, x, a.b_run, y, metrics=metrics) for x, y in pairs],
            ignore_index=True,
        )
    except MemkitError as e:
        print(f"memkit eval compare: {e}", file=sys.stderr)
        return 2
    cols = ["metric", "a", "b", "value", "lo", "hi", "n", "clusters", "method", "unit"]
    print(frame[cols].rename(columns={"n": "pairs"}).to_string(index=False))
    if not a.b_run:
        frame.to_csv(run / "compare.csv", index=False, float_format="%.6f")
        if not a.no_report:
            from evals.report import build_report

            build_report(run)
    return 0


def report_main(argv: list[str]) -> int:
    """memkit report: rebuild report.md and report.html from a run folder's files."""
    p = argparse.ArgumentParser(prog="memkit report", description=report_main.__doc__)
    p.add_argument("run", help="run folder")
    a = p.parse_args(argv)
    try:
        from evals.report import build_report

        md, html_ = build_report(a.run)
    except MemkitError as e:
        print(f"memkit report: {e}", file=sys.stderr)
        return 2
    print(f"{md}\n{html_}")
    return 0
