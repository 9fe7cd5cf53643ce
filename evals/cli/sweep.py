"""`memkit eval sweep`: a grid of tunables scored through `evals.sweep.sweep`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from evals.cli.base import guarded, parser
from evals.cli.flags import (
    check_provider_values,
    common,
    config_from,
    experiment_of,
    load_checked,
    model_options,
    progress_bar,
    provider_flags,
)
from memkit.errors import ConfigError


def _sweep_parser() -> argparse.ArgumentParser:
    p = parser("memkit eval sweep", sweep_main.__doc__)
    common(p)
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
    p.add_argument(
        "--consolidator",
        metavar="SPEC",
        help="consolidator for consolidation tunables (default: the experiment file's one "
        "model, else heuristic)",
    )
    p.add_argument(
        "--concurrency", type=int, help="requests in flight for a litellm consolidator (default 4)"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for sweep.csv, recommended.json and the report (an existing one is "
        "refused unless --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="clear the --out folder first")
    provider_flags(p)
    return p


@guarded("memkit eval sweep")
def sweep_main(argv: list[str]) -> int:
    """Sweep a grid of tunables and recommend an operating point.

    Scored in store mode (pipeline mode for consolidation tunables)."""
    with contextlib.ExitStack() as held:  # the --out folder's lock, once it is claimed
        return _sweep_main(argv, held)


def _sweep_main(argv: list[str], held: contextlib.ExitStack) -> int:
    a = _sweep_parser().parse_args(argv)
    from evals.checks import check_share
    from evals.experiment import sweep_consolidator
    from evals.plan import needs_pipeline
    from evals.providers import consolidator_kwargs, preflight
    from evals.runfolder import mark_finished, mark_incomplete, now
    from evals.runs import claim_run_dir
    from evals.stats import fmt_interval
    from evals.sweep import objective_metrics, sweep
    from evals.tunables import EMBEDDER_AXIS, parse_grid

    grid = parse_grid(a.grid)
    objective_metrics(a.objective)
    check_share("--margin", a.margin)
    check_provider_values(a)
    exp = experiment_of(a)
    spec = sweep_consolidator(exp, a.consolidator)
    opts = model_options(a, (spec,), exp).get(spec, {})
    if needs_pipeline({k: v for k, v in grid.items() if k != EMBEDDER_AXIS}):
        preflight(spec, opts)  # the model is called
    concurrency = a.concurrency or (exp.concurrency if exp else None) or 4
    extra = {"dataset": exp.datasets[0]} if exp and exp.datasets and not a.dataset else {}
    cfg = config_from(a, **extra)
    if cfg.embedders:
        raise ConfigError("eval sweep takes one --embedder; sweep several with --grid embedder=A,B")
    ds = load_checked(cfg)
    started = now()
    if a.out:
        held.enter_context(claim_run_dir(Path(a.out), cfg.to_dict(), None, overwrite=a.overwrite))
        mark_incomplete(Path(a.out), "sweep", started)  # until the report is written
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
        consolidator=spec,
        consolidator_options=consolidator_kwargs(spec, opts, concurrency),
        scopes=cfg.scopes,
        margin=a.margin,
        progress=None if a.quiet else progress_bar("sweep"),
    )
    from evals.report import sweep_text

    frame = res.frame
    rec = res.recommended
    shown = [rec["metric"], *([rec["constraint"]["metric"]] if "constraint" in rec else [])]
    if not a.quiet:  # --quiet keeps only the summary below
        print("recommended:", json.dumps(rec, sort_keys=True))
    print(sweep_text(frame, list(res.params), shown, rec.get("point_index")))
    point = ", ".join(f"{k}={rec[k]}" for k in res.params)
    value = fmt_interval(rec["value"], rec["lo"], rec["hi"])
    print(f"recommended {point}: {rec['metric']} {value} ({rec['rule']})")
    for spec, r in (rec.get("by_embedder") or {}).items():  # a point per embedder
        at = ", ".join(f"{k}={r[k]}" for k in res.params)
        got = fmt_interval(r["value"], r["lo"], r["hi"])
        print(f"recommended for {spec}: {at}: {r['metric']} {got}")
    if rec.get("warning"):
        print(f"warning: {rec['warning']}", file=sys.stderr)
    if a.out:
        from evals.report import build_report
        from evals.sweep import write_sweep

        out = Path(a.out)
        write_sweep(out, res, config=cfg, dataset=ds, grid=grid, started_at=started)
        build_report(out)
        mark_finished(out)
        print(f"sweep written to {out}")
    return 0
