"""Markdown + self-contained HTML report, built only from a run folder's files.

Reads `manifest.json`, `metrics.json`, `latency.json`, `spend.json`, `matcher.json` and
(when present) `sweep.csv` / `compare.csv`; writes `report.md`, `report.html`
(plots inlined as base64 PNG, no external assets) and the PNGs themselves.
Every table cell is "value [95% CI]" with its n and the metric's definition;
every plot has a title, labelled axes with units and a legend when it has
more than one series.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from evals import registry
from memkit.errors import ConfigError

RECALL_PLOT = ("p_at_1", "p_at_3", "recall_at_8", "mrr", "ndcg_at_8")
WASTE_PARTS = ("waste_irrelevant", "waste_duplicate", "waste_superseded")
VALIDITY_PLOT = ("strict_validity", "valid_after_repair", "extraction_recall")


def _named(metric: str) -> str:
    """A metric name with its direction mark; an unregistered name is an error."""
    return f"{metric} {registry.get(metric).mark}"


def _load(run_dir: Path, name: str) -> Any:
    p = run_dir / name
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _fmt(v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _ci(m: dict[str, Any], key: str) -> tuple[Any, Any, Any]:
    ci = m.get(f"{key}_ci") or {}
    return m.get(key), ci.get("lo"), ci.get("hi")


def _figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _bars(table: pd.DataFrame, metrics: tuple[str, ...], title: str, ylabel: str) -> bytes | None:
    """Grouped bars (metric groups, one bar per system) with 95% CI whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sub = table[table["metric"].isin(metrics) & table["value"].notna()]
    if sub.empty:
        return None
    systems = sorted(sub["system"].unique())
    present = [m for m in metrics if m in set(sub["metric"])]
    x = np.arange(len(present))
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, s in enumerate(systems):
        vals, errs = [], [[], []]
        for m in present:
            r = sub[(sub["system"] == s) & (sub["metric"] == m)]
            if r.empty:
                vals.append(np.nan)
                errs[0].append(0)
                errs[1].append(0)
                continue
            v, lo, hi = (
                float(r.iloc[0][c]) if r.iloc[0][c] is not None else np.nan
                for c in ("value", "lo", "hi")
            )
            vals.append(v)
            errs[0].append(0 if np.isnan(lo) else max(v - lo, 0))
            errs[1].append(0 if np.isnan(hi) else max(hi - v, 0))
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, yerr=errs, capsize=3, label=s)
    ax.set_xticks(x, present, rotation=15)
    ax.set_title(title)
    ax.set_xlabel("metric")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    if len(systems) > 1:
        ax.legend(fontsize=8)
    return _figure_png(fig)


def _sweep_plot(sweep: pd.DataFrame) -> bytes | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if sweep.empty or "param" not in sweep:
        return None
    param = sweep["param"].iloc[0]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    metrics = sorted(sweep["metric"].unique())
    for m in metrics:
        s = sweep[sweep["metric"] == m].sort_values("point")
        ax.plot(s["point"], s["value"], marker="o", label=m)
        ax.fill_between(s["point"], s["lo"], s["hi"], alpha=0.15)
    ax.set_title(f"Sweep over {param} (store mode, 95% CI bands)")
    ax.set_xlabel(f"{param} (parameter value)")
    ax.set_ylabel("metric value (share)")
    if len(metrics) > 1:
        ax.legend(fontsize=8)
    return _figure_png(fig)


def _compare_plot(compare: pd.DataFrame) -> bytes | None:
    """Forest plot: each paired difference (a - b) with its 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = compare.dropna(subset=["value"])
    if c.empty:
        return None
    labels = [f"{_named(r.metric)}\n{r.a} − {r.b}" for r in c.itertuples()]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(c) + 1.2))
    y = list(range(len(c)))
    lo = (c["value"] - c["lo"].fillna(c["value"])).clip(lower=0)
    hi = (c["hi"].fillna(c["value"]) - c["value"]).clip(lower=0)
    ax.errorbar(c["value"], y, xerr=[lo, hi], fmt="o", capsize=3)
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_title("Paired differences a − b (95% paired bootstrap CI)")
    ax.set_xlabel("difference (metric units: shares, or counts per unit)")
    ax.set_ylabel("metric and pair")
    return _figure_png(fig)


def _md_table(rows: list[list[str]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def _html_table(rows: list[list[str]], head: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def build_report(run_dir: str | Path) -> tuple[Path, Path]:
    """Write report.md and report.html for a run folder; returns their paths."""
    d = Path(run_dir)
    manifest = _load(d, "manifest.json")
    metrics = _load(d, "metrics.json")
    if manifest is None or metrics is None:
        raise ConfigError(f"{str(d)!r} is not a run folder (manifest.json/metrics.json missing)")
    table = pd.DataFrame.from_records(metrics["metrics"])
    latency = (_load(d, "latency.json") or {}).get("systems", {})
    matcher = _load(d, "matcher.json")
    sweep = pd.read_csv(d / "sweep.csv") if (d / "sweep.csv").is_file() else None
    compare = pd.read_csv(d / "compare.csv") if (d / "compare.csv").is_file() else None

    plots: list[tuple[str, str, bytes]] = []
    for name, caption, png in (
        (
            "recall.png",
            "Recall quality per system",
            _bars(table, RECALL_PLOT, "Recall quality per system", "score (0-1, higher is better)"),
        ),
        (
            "waste.png",
            "Budget waste per system",
            _bars(
                table,
                ("budget_waste", *WASTE_PARTS),
                "Budget waste per system",
                "share of admitted entry bytes",
            ),
        ),
        (
            "validity.png",
            "Proposal validity and extraction",
            _bars(table, VALIDITY_PLOT, "Proposal validity and extraction recall", "share (0-1)"),
        ),
        ("sweep.png", "Sweep", None if sweep is None else _sweep_plot(sweep)),
        ("compare.png", "Paired differences", None if compare is None else _compare_plot(compare)),
    ):
        if png:
            (d / name).write_bytes(png)
            plots.append((name, caption, png))

    ds = manifest.get("dataset", {})
    head_lines = [
        f"Run `{manifest.get('name')}` on dataset `{ds.get('name')}` {ds.get('version')} "
        f"(fingerprint `{str(ds.get('fingerprint'))[:16]}`), systems: "
        + ", ".join(f"`{s}`" for s in manifest.get("systems", []))
        + ".",
        f"Embedder `{manifest.get('embedder')}`, seed {manifest.get('seed')}, git "
        f"`{str(manifest.get('git_revision'))[:12]}`, litellm "
        f"{manifest.get('packages', {}).get('litellm')}.",
        "Every number is the point value with its percentile-bootstrap 95% CI "
        "(resampling the unit named in the definition) and n, the number of units.",
    ]
    sections: list[tuple[str, list[str], list[list[str]]]] = []
    systems = [x for x in sorted(table["system"].unique()) if x != "matcher"]
    for m in [*table["metric"], *RECALL_PLOT, *WASTE_PARTS, *VALIDITY_PLOT]:
        registry.get(m)  # a report names registered metrics only
    headline = []
    for m in registry.names(listed="headline"):
        cells = []
        for sys_ in systems:
            r = table[(table["system"] == sys_) & (table["metric"] == m)]
            cells.append(
                "—" if r.empty else _fmt(r.iloc[0]["value"], r.iloc[0]["lo"], r.iloc[0]["hi"])
            )
        if any(c != "—" for c in cells):
            headline.append([_named(m), *cells])
    if headline:
        sections.append(
            (
                "Headline (value [95% CI]; ↑ higher is better, ↓ lower is better; "
                "definitions in the per-system tables)",
                ["metric", *systems],
                headline,
            )
        )
    head = ["metric", "value [95% CI]", "n", "unit", "definition"]
    for sys_ in sorted(table["system"].unique()):
        sub = table[table["system"] == sys_]
        rows = [
            [
                _named(r.metric),
                _fmt(r.value, r.lo, r.hi),
                str(r.n),
                registry.get(r.metric).unit,
                registry.get(r.metric).definition,
            ]
            for r in sub.itertuples()
        ]
        sections.append((f"System `{sys_}`", head, rows))
    breakdown = (_load(d, "breakdown.json") or {}).get("rows", [])
    if breakdown:
        bt = pd.DataFrame.from_records(breakdown)
        for sys_ in sorted(bt["system"].unique()):
            sub = bt[bt["system"] == sys_]
            metrics_here = list(dict.fromkeys(sub["metric"]))
            rows = []
            for scope in sorted(sub["scope_id"].unique()):
                cells = []
                for m in metrics_here:
                    r = sub[(sub["scope_id"] == scope) & (sub["metric"] == m)]
                    cells.append(
                        "—"
                        if r.empty
                        else _fmt(r.iloc[0]["value"], r.iloc[0]["lo"], r.iloc[0]["hi"], 2)
                    )
                rows.append([scope, *cells])
            sections.append((f"Per scope: `{sys_}`", ["scope", *map(_named, metrics_here)], rows))
    if latency:
        rows = [
            [s, _fmt(v[m]["value"], v[m]["lo"], v[m]["hi"], 4), m, str(v[m]["n"])]
            for s, v in latency.items()
            for m in ("latency_p50_s", "latency_p95_s", "pass_wall_p50_s", "pass_wall_p95_s")
            if m in v
        ]
        sections.append(
            (
                "Latency (wall-clock seconds per attempt and per pass; not in metrics.json)",
                ["system", "value [95% CI]", "statistic", "n"],
                rows,
            )
        )
    spend = (_load(d, "spend.json") or {}).get("systems", {})
    if spend:
        rows = [
            [
                s,
                str(v["attempts"]),
                str(v["cached_attempts"]),
                f"${v['cost_usd_spent']:.4g}",
                f"${v['cost_usd_cached']:.4g}",
            ]
            for s, v in spend.items()
        ]
        sections.append(
            (
                "Spend (provider calls made in this run vs attempts replayed from the cache)",
                ["system", "attempts", "replayed", "USD spent", "USD replayed (not spent)"],
                rows,
            )
        )
    if matcher:
        sections.append(
            (
                "Gold matcher accuracy on labelled pairs",
                ["threshold", "margin", "precision [95% CI]", "recall [95% CI]", "n pairs"],
                [
                    [
                        str(matcher.get("threshold")),
                        str(matcher.get("margin")),
                        _fmt(*_ci(matcher, "precision")),
                        _fmt(*_ci(matcher, "recall")),
                        str(matcher.get("n")),
                    ]
                ],
            )
        )
    if compare is not None and not compare.empty:
        rows = [
            [_named(r.metric), f"{r.a} − {r.b}", _fmt(r.value, r.lo, r.hi), str(r.n), r.unit]
            for r in compare.itertuples()
        ]
        sections.append(
            (
                "Paired comparisons (difference a − b, paired bootstrap)",
                ["metric", "pair", "difference [95% CI]", "n", "paired unit"],
                rows,
            )
        )
    if sweep is not None and not sweep.empty:
        rows = [
            [str(r.param), f"{r.point:g}", _named(r.metric), _fmt(r.value, r.lo, r.hi), str(r.n)]
            for r in sweep.itertuples()
        ]
        sections.append(("Sweep", ["param", "point", "metric", "value [95% CI]", "n"], rows))

    md = ["# memkit evaluation report", "", *head_lines, ""]
    for name, caption, _ in plots:
        md += [f"![{caption}]({name})", ""]
    for title, h, rows in sections:
        md += [f"## {title}", "", _md_table(rows, h), ""]
    md_path = d / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")

    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}"
    )
    body = ["<h1>memkit evaluation report</h1>"]
    body += [f"<p>{html.escape(x)}</p>" for x in head_lines]
    for _, caption, png in plots:
        b64 = base64.b64encode(png).decode("ascii")
        body.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{b64}"></figure>'
        )
    for title, h, rows in sections:
        body.append(f"<h2>{html.escape(title)}</h2>{_html_table(rows, h)}")
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'><title>memkit evaluation report"
        f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )
    html_path = d / "report.html"
    html_path.write_text(doc, encoding="utf-8")
    return md_path, html_path
