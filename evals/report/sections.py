"""The report's sections below the plots, one small builder each.

`read` loads a run folder once into a `Run`; every builder in `BUILDERS` takes it
and returns its sections as (title, header, rows), none when the run lacks the
file it reads. The report shows them in `BUILDERS`' order, each collapsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals import registry
from evals.labels import labels
from evals.report.fmt import cell, ci, fmt, fmt_metric, load, n_text, named, point_text, usd
from memkit.errors import ConfigError

Section = tuple[str, list[str], list[list[str]]]


def source_sections(d: Path, manifest: dict[str, Any]) -> list[tuple[str, list[str], list]]:
    """Per-group tables (`groups.json`) and what the source's adapter normalised or
    could not resolve (`manifest.dataset.info`)."""
    from evals.groups import table_rows

    out = _retrieval_tables(d) + table_rows((load(d, "groups.json") or {}).get("rows", []))
    ingest = (load(d, "ingest.json") or {}).get("store")
    if ingest:
        head = ["scopes", "writes", "seconds writing", "writes per second", "seconds probing"]
        cells = [ingest.get(k) for k in ("scopes", "writes", "ingest_s", "writes_per_s", "probe_s")]
        out.append(
            (
                "Store-mode ingestion (wall clock; not in metrics.json)",
                head,
                [[str(c) for c in cells]],
            )
        )
    evidence = (load(d, "evidence.json") or {}).get("systems", {})
    if evidence:
        head = ["system", "runs", "runs cut", "bytes offered", "bytes kept", "bytes dropped"]
        head += ["kept share", "messages offered", "messages kept"]
        keys: tuple[str, ...] = (
            "runs",
            "runs_cut",
            "bytes_offered",
            "bytes_kept",
            "bytes_dropped",
            "kept_share",
        )
        keys += ("messages_offered", "messages_kept")
        rows = [[s, *(str(v.get(k)) for k in keys)] for s, v in sorted(evidence.items())]
        out.append(("Evidence kept by the SPEC §7 staging bounds (per staged run)", head, rows))
    info = (manifest.get("dataset") or {}).get("info") or {}
    notes = [[k, str(v)] for k, v in sorted(info.items()) if isinstance(v, str | int | float)]
    amb = info.get("ambiguous_text") or []
    if "ambiguous_text" in info:
        notes.append(["ambiguous_text", f"{len(amb)} texts shared by several gold facts"])
    if notes:
        out.append(("Source notes (from the adapter)", ["note", "value"], notes))
    if amb:
        rows = [[a["scope_id"], a["text"], ", ".join(a["facts"])] for a in amb]
        out.append(
            (
                "Gold facts sharing one text (a text matcher cannot tell them apart, so "
                "they cap every extraction score below 1.0)",
                ["scope", "text", "facts"],
                rows,
            )
        )
    return out


BASELINE_ROWS: tuple[tuple[str, str], ...] = (
    ("", ""),
    ("_full", " · full ranking"),
    ("_random", " · random order"),
)
"""A retrieval statistic's three rows: the store's figure, then its two baselines."""


def _retrieval_tables(d: Path) -> list[tuple[str, list[str], list]]:
    """LongMemEval's session- and turn-level table per system, as the authors lay it out."""
    from evals.retrieval import K_VALUES, LEVELS, STATS

    rows = (load(d, "metrics.json") or {}).get("metrics", [])
    at = {(r["system"], r["metric"]): r for r in rows}
    out = []
    for system in sorted({r["system"] for r in rows}):
        if (system, f"turn_recall_any_at_{K_VALUES[0]}") not in at:
            continue
        cols = [(lv, k) for lv in LEVELS for k in K_VALUES]
        body = []
        for stat in STATS:
            for suffix, label in BASELINE_ROWS:
                cells = []
                for lv, k in cols:
                    r = at.get((system, f"{lv}_{stat}_at_{k}{suffix}"))
                    cells.append(
                        "—" if r is None else f"{fmt(r['value'], r['lo'], r['hi'])} (n={r['n']})"
                    )
                body.append([f"{stat}{label}", *cells])
        out.append(
            (
                f"LongMemEval retrieval, `{system}` (non-abstention questions; turn level is the "
                "headline; each statistic on the store's ranking at its floor, then on the "
                "full ranking with the floor off, then its expectation over a random order of "
                "the same turns; definitions: the authors' src/retrieval/eval_utils.py, "
                "restated in evals/retrieval.py)",
                ["statistic", *(f"{lv} @{k}" for lv, k in cols)],
                body,
            )
        )
    return out


@dataclass(frozen=True)
class Run:
    """A run folder's files as every builder reads them (loaded once)."""

    d: Path
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]
    """metrics.json's rows."""
    table: pd.DataFrame
    systems: list[str]
    """Sorted, without the gold matcher's pseudo-system."""
    names: dict[str, str]
    """system -> its short label (`evals.labels`)."""
    latency: dict[str, Any]
    matcher: dict[str, Any] | None
    sweep: pd.DataFrame | None
    compare: pd.DataFrame | None
    recommended: dict[str, Any] | None
    spend: dict[str, Any]


def read(run_dir: str | Path) -> Run:
    """Load a run folder; one without manifest.json and metrics.json is an error."""
    d = Path(run_dir)
    manifest, metrics = load(d, "manifest.json"), load(d, "metrics.json")
    if manifest is None or metrics is None:
        raise ConfigError(f"{str(d)!r} is not a run folder (manifest.json/metrics.json missing)")
    table = pd.DataFrame.from_records(metrics["metrics"])
    compare = pd.read_csv(d / "compare.csv") if (d / "compare.csv").is_file() else None
    if compare is not None:  # only pairs of this run's systems (never a stale file's)
        ran = set(manifest.get("systems") or [])
        compare = compare[compare["a"].isin(ran) & compare["b"].isin(ran)]
    systems = [x for x in sorted(table["system"].unique()) if x != "matcher"]
    return Run(
        d=d,
        manifest=manifest,
        rows=metrics["metrics"],
        table=table,
        systems=systems,
        names=labels(systems),
        latency=(load(d, "latency.json") or {}).get("systems", {}),
        matcher=load(d, "matcher.json"),
        sweep=pd.read_csv(d / "sweep.csv") if (d / "sweep.csv").is_file() else None,
        compare=compare,
        recommended=load(d, "recommended.json"),
        spend=(load(d, "spend.json") or {}).get("systems", {}),
    )


def system_tables(run: Run) -> list[Section]:
    """Every metric of each system with its interval, unit and definition."""
    head = ["metric", "value [95% CI]", "n (units/clusters)", "interval", "unit", "definition"]
    out = []
    for sys_ in sorted(run.table["system"].unique()):
        sub = run.table[run.table["system"] == sys_]
        rows = [
            [
                named(r["metric"]),
                fmt_metric(r["metric"], r["value"], r["lo"], r["hi"]),
                n_text(r).partition("n=")[2],
                str(r.get("method") or ""),
                registry.get(r["metric"]).unit,
                registry.get(r["metric"]).definition,
            ]
            for r in sub.to_dict("records")
        ]
        label = run.names.get(sys_, sys_)
        full = f" (`{sys_}`)" if label != sys_ else ""
        out.append((f"System `{label}`{full}", head, rows))
    return out


def per_scope(run: Run) -> list[Section]:
    """`breakdown.json`: each system's breakdown metrics per scope."""
    breakdown = (load(run.d, "breakdown.json") or {}).get("rows", [])
    if not breakdown:
        return []
    bt = pd.DataFrame.from_records(breakdown)
    out = []
    for sys_ in sorted(bt["system"].unique()):
        sub = bt[bt["system"] == sys_]
        metrics_here = list(dict.fromkeys(sub["metric"]))
        rows = []
        for scope in sorted(sub["scope_id"].unique()):
            cells = []
            for m in metrics_here:
                r = sub[(sub["scope_id"] == scope) & (sub["metric"] == m)]
                cells.append("—" if r.empty else cell(r.iloc[0].to_dict(), 2))
            rows.append([scope, *cells])
        out.append(
            (
                f"Per scope: `{run.names.get(sys_, sys_)}` (units within one scope taken as "
                "independent)",
                ["scope", *map(named, metrics_here)],
                rows,
            )
        )
    return out


def sources(run: Run) -> list[Section]:
    return source_sections(run.d, run.manifest)


def latency(run: Run) -> list[Section]:
    """`latency.json`: wall-clock quantiles per attempt and per pass."""
    rows = [
        [s, fmt(v[m]["value"], v[m]["lo"], v[m]["hi"], 4), named(m), n_text(v[m])]
        for s, v in run.latency.items()
        for m in ("latency_p50_s", "latency_p95_s", "pass_wall_p50_s", "pass_wall_p95_s")
        if m in v
    ]
    if not run.latency:
        return []
    return [
        (
            "Latency (wall-clock seconds per attempt and per pass; not in metrics.json)",
            ["system", "value [95% CI]", "statistic", "interval, n"],
            rows,
        )
    ]


def provider_limits(run: Run) -> list[Section]:
    """The manifest's provider limits: the concurrency each model achieved."""
    limits = ((run.manifest.get("providers") or {}).get("limits")) or {}
    if not limits:
        return []
    from evals.providers import LIMIT_STATS

    stats = [n for n, _, _ in LIMIT_STATS]
    rows = [
        [f"`{m}`", str(v.get("concurrency_limit")), str(v.get("requests"))]
        + ["n/a" if v.get(n) is None else f"{v[n]:g}" for n in stats]
        for m, v in sorted(limits.items())
    ]
    return [
        (
            "Provider concurrency achieved (wall clock, not in metrics.json; "
            "definitions in the metric registry)",
            ["model", "concurrency limit", "requests", *map(named, stats)],
            rows,
        )
    ]


def spend(run: Run) -> list[Section]:
    """`spend.json`: USD spent on provider calls vs replayed from the cache."""
    rows = [
        [
            s,
            str(v["attempts"]),
            str(v["cached_attempts"]),
            usd(v["cost_usd_spent"]),
            usd(v["cost_usd_cached"]),
        ]
        for s, v in run.spend.items()
    ]
    if not rows:
        return []
    return [
        (
            "Spend (provider calls made in this run vs attempts replayed from the cache)",
            ["system", "attempts", "replayed", "USD spent", "USD replayed (not spent)"],
            rows,
        )
    ]


def matcher(run: Run) -> list[Section]:
    """`matcher.json`: the gold matcher's precision and recall, or why not measured."""
    m = run.matcher
    if not m:
        return []
    if not m.get("n"):
        info = (run.manifest.get("dataset") or {}).get("info") or {}
        why = info.get("matcher") or "the dataset has no labelled pairs to measure it on"
        return [("Gold matcher accuracy", ["figure", "reason"], [["not measured", why]])]
    return [
        (
            "Gold matcher accuracy on labelled pairs",
            ["threshold", "margin", "precision [95% CI]", "recall [95% CI]", "n pairs"],
            [
                [
                    str(m.get("threshold")),
                    str(m.get("margin")),
                    f"{fmt(*ci(m, 'precision'))} {n_text(m.get('precision_ci') or {})}",
                    f"{fmt(*ci(m, 'recall'))} {n_text(m.get('recall_ci') or {})}",
                    str(m.get("n")),
                ]
            ],
        )
    ]


def comparisons(run: Run) -> list[Section]:
    """`compare.csv`: paired differences between this run's systems."""
    if run.compare is None or run.compare.empty:
        return []
    rows = [
        [
            named(r["metric"]),
            f"{r['a']} − {r['b']}",
            fmt(r["value"], r["lo"], r["hi"]),
            n_text(r).partition("n=")[2],
            str(r.get("method") or ""),
            str(r["unit"]),
        ]
        for r in run.compare.to_dict("records")
    ]
    head = ["metric", "pair", "difference [95% CI]", "pairs/clusters", "interval", "paired unit"]
    title = "Paired comparisons (difference a − b over the units defined on both sides)"
    return [(title, head, rows)]


def sweep_points(run: Run) -> list[Section]:
    """`sweep.csv`: every grid point's metrics."""
    if run.sweep is None or run.sweep.empty:
        return []
    rows = [
        [str(r["param"]), point_text(r["point"]), named(r["metric"]), cell(r)]
        for r in run.sweep.to_dict("records")
    ]
    return [("Sweep", ["param", "point", "metric", "value [95% CI] interval n"], rows)]


BUILDERS = (
    system_tables,
    per_scope,
    sources,
    latency,
    provider_limits,
    spend,
    matcher,
    comparisons,
    sweep_points,
)
"""The sections below the plots, in the order the report shows them."""
