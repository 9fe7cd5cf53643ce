"""Commands that read finished run folders: `eval compare`, `eval list`, `report`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evals.cli.base import DEFAULT_ROOT, RunFailed, guarded, parser
from memkit.errors import ConfigError


def _compare_parser() -> argparse.ArgumentParser:
    p = parser("memkit eval compare", compare_main.__doc__)
    p.add_argument("run", help="run folder")
    p.add_argument("--a", metavar="SYSTEM", help="system a (default: every pair of systems)")
    p.add_argument("--b", metavar="SYSTEM", help="system b")
    p.add_argument("--b-run", metavar="DIR", help="run folder of system b (default: the same run)")
    p.add_argument("--metric", action="append", help="metric to compare (repeatable; default: all)")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="pair runs on different datasets, probe sets or code anyway (says what differs)",
    )
    p.add_argument("--no-report", action="store_true", help="do not rebuild the run's report")
    p.add_argument("--quiet", action="store_true", help="print only where the results went")
    return p


@guarded("memkit eval compare")
def compare_main(argv: list[str]) -> int:
    """Paired CIs of differences between systems of a run (or two runs), over the
    units defined on both sides."""
    a = _compare_parser().parse_args(argv)
    import pandas as pd

    from evals.checks import check_metric, check_names
    from evals.compare import check_pairable, compare_runs
    from evals.rows import AttemptRow, by_system, rows_of

    run = Path(a.run)
    if not (run / "manifest.json").is_file():
        raise ConfigError(f"{str(run)!r} is not a run folder (no manifest.json)")
    if bool(a.a) != bool(a.b):
        raise ConfigError("give both --a and --b, or neither (every pair)")
    systems = _systems(run)
    if a.a and a.b:
        check_names("system", [a.a], systems)
        check_names("system", [a.b], _systems(Path(a.b_run)) if a.b_run else systems)
        pairs = [(a.a, a.b)]
    else:
        systems = sorted(by_system(rows_of(run, AttemptRow)))
        if len(systems) < 2:
            raise ConfigError(f"{str(run)!r} has fewer than two pipeline systems; use --a/--b")
        pairs = [(x, y) for i, x in enumerate(systems) for y in systems[i + 1 :]]
    metrics = tuple(check_metric(m) for m in a.metric) if a.metric else None
    allow = a.allow_mismatch
    for x, y in pairs:
        for why in check_pairable(run, x, Path(a.b_run or run), y, allow_mismatch=allow):
            print(f"warning: {x} vs {y}: {why}; only matching units are paired", file=sys.stderr)
    frame = pd.concat(
        [compare_runs(run, x, a.b_run, y, metrics=metrics, allow_mismatch=allow) for x, y in pairs],
        ignore_index=True,
    )
    if frame.empty:
        raise RunFailed(
            f"no metric of {', '.join(metrics or ['the defaults'])} is recorded for both "
            "systems of each pair "
            f"({', '.join(f'{x} vs {y}' for x, y in pairs)})"
        )
    cols = ["metric", "a", "b", "value", "lo", "hi", "n", "clusters", "method", "unit"]
    if not a.quiet:
        print(frame[cols].rename(columns={"n": "pairs"}).to_string(index=False))
    if not a.b_run:
        frame.to_csv(run / "compare.csv", index=False, float_format="%.6f")
        print(f"comparison written to {run / 'compare.csv'}")
        if not a.no_report:
            from evals.report import build_report

            build_report(run)
    return 0


def _systems(run: Path) -> list[str]:
    if not (run / "manifest.json").is_file():
        raise ConfigError(f"{str(run)!r} is not a run folder (no manifest.json)")
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    return list(manifest.get("systems") or [])


def _report_parser() -> argparse.ArgumentParser:
    p = parser("memkit report", report_main.__doc__)
    p.add_argument("run", help="run folder")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


@guarded("memkit report")
def report_main(argv: list[str]) -> int:
    """Rebuild report.md and report.html from a run folder's files."""
    a = _report_parser().parse_args(argv)
    from evals.report import build_report

    md, html_ = build_report(a.run)
    if not a.quiet:
        print(f"{md}\n{html_}")
    return 0


def _list_parser() -> argparse.ArgumentParser:
    p = parser("memkit eval list", list_main.__doc__)
    p.add_argument(
        "runs",
        nargs="*",
        default=[str(DEFAULT_ROOT)],
        help="run folders, folders holding runs at any depth, or globs (default %(default)s: "
        "reports/latest, reports/runs/*, ...)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument(
        "--html",
        nargs="?",
        const=str(DEFAULT_ROOT / "index.html"),
        metavar="FILE",
        help="also write one self-contained, sortable page of the runs with their headline "
        "metrics, each linking its report (default FILE %(const)s)",
    )
    return p


@guarded("memkit eval list")
def list_main(argv: list[str]) -> int:
    """List run folders: status (finished or incomplete), when, dataset, systems and
    headline numbers."""
    a = _list_parser().parse_args(argv)
    from evals.runs import find_runs, summary

    if a.runs == [str(DEFAULT_ROOT)] and not DEFAULT_ROOT.is_dir():
        print(f"no runs yet in {DEFAULT_ROOT}/ (memkit eval run ... writes them there)")
        return 0
    runs = find_runs(a.runs) if a.runs != [str(DEFAULT_ROOT)] else _default_runs()
    rows = sorted((summary(d) for d in runs), key=lambda r: (r["started"], r["path"]))
    if a.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
    elif not rows:
        print(f"no runs in {', '.join(a.runs)}")
    else:
        from evals.report import text_table

        cols = ("path", "status", "started", "dataset", "headline")
        print(text_table([list(cols), *([str(r[c]) for c in cols] for r in rows)]))
    if a.html:
        from evals.run_index import write_index

        page = write_index([Path(r["path"]) for r in rows], Path(a.html))
        print(f"index of {len(rows)} runs written to {page}")
    return 0


def _default_runs() -> list[Path]:
    """Every run under reports/ (an empty reports/ holds none: not an error)."""
    from evals.runs import find_runs

    try:
        return find_runs(DEFAULT_ROOT)
    except ConfigError:
        return []
