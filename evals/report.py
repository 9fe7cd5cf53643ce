"""Markdown + self-contained HTML report, built only from a run folder's files.

Reads `manifest.json`, `metrics.json`, `latency.json`, `spend.json`, `matcher.json` and
(when present) `sweep.csv` / `compare.csv`; writes `report.md`, `report.html`
(plots inlined as base64 PNG, no external assets) and the PNGs themselves.
Every number is "value [95% CI]" with the interval's method (a short code,
`METHOD_CODES`), n as units/clusters and "≈" when fewer than 10 clusters make
the interval approximate; every metric name carries its direction mark (↑
higher is better, ↓ lower is better, · neither) and the per-system tables its
definition. Every plot has a title, labelled axes with units and a legend when
it has more than one series. A metric name that is not registered is an error.

Why over 600 lines: `build_report` lays out every section of the report
(tables, plots, banners, per-source sections) from the run files, with the
formatting helpers they share. Issue #35 plans a list of small section
builders.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from evals import registry
from evals.stats import NO_SPREAD, WORST_COVERAGE, approximate, fmt_interval, no_spread
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


def usd(x: float) -> str:
    """Dollars with three significant figures, never rounded to zero: $0.000289, $1.50."""
    if not x:
        return "$0"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"${x:,.{decimals}f}"


def _fmt_metric(metric: str, v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    """`_fmt`, with money in significant figures (a cost shown as 0.000 hides it)."""
    if registry.get(metric).family != "usd" or v is None or v != v:
        return _fmt(v, lo, hi, digits)
    if lo is None or hi is None or lo != lo:
        return usd(v)
    if no_spread(v, lo, hi):
        return f"{usd(v)} [{NO_SPREAD}]"
    return f"{usd(v)} [{usd(lo)}, {usd(hi)}]"


METHOD_CODES: dict[str, str] = {
    "Wilson": "W",
    "Wilson, design effect": "Wd",
    "cluster-robust t": "t",
    "cluster-robust t, log scale": "lt",
    "paired cluster-robust t": "pt",
    "paired MOVER (Wilson, design effect)": "M",
    "percentile bootstrap": "B",
    "no interval (1 cluster)": "no CI",
    "undefined (no unit defines it)": "undefined",
}
LEGEND = (
    "Intervals are 95%, chosen per metric (evals/stats.py): "
    + ", ".join(f"{c} = {m}" for m, c in METHOD_CODES.items())
    + ". n is units/clusters (units: probes, attempts, ...; clusters: scopes, the independent "
    "draws; one number: independent units); ≈ marks an approximate interval (fewer than 10 "
    "clusters, or a clustered share below 0.1 or above 0.9), whose simulated coverage fell to "
    f"{WORST_COVERAGE:.3f} in the hardest regime (docs/coverage.md). [no spread]: every unit "
    "agreed, so there is no interval to draw (metrics.json keeps its ends, equal to the value)."
)


def _n(r: Any) -> str:
    """Method code, n as units/clusters and the approximate mark of one row."""
    get = r.get if isinstance(r, dict) else (lambda k, d=None: getattr(r, k, d))
    method, n, k = get("method", ""), get("n", None), get("clusters", None)
    if n is None or (isinstance(n, float) and math.isnan(n)) or int(n) == 0:
        return ""
    code = METHOD_CODES.get(str(method), str(method) if method else "")
    k = None if k is None or (isinstance(k, float) and math.isnan(k)) else int(k)
    size = f"{int(n)}" if not k or k == int(n) else f"{int(n)}/{k}"
    approx = "≈" if approximate(str(method), get("value", None), k) else ""
    return " ".join(x for x in (code, f"n={size}{approx}") if x)


def _cell(r: Any, digits: int = 3) -> str:
    get = r.get if isinstance(r, dict) else (lambda k, d=None: getattr(r, k, d))
    metric = get("metric")
    v, lo, hi = get("value"), get("lo"), get("hi")
    text = _fmt_metric(metric, v, lo, hi, digits) if metric else _fmt(v, lo, hi, digits)
    return f"{text} {_n(r)}".strip()


def _fmt(v: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    return fmt_interval(v, lo, hi, digits)


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
    ax.set_xticks(x, present, rotation=30, ha="right")
    ax.set_title(title)
    ax.set_xlabel("metric")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    if len(systems) > 1:
        ax.legend(fontsize=8)
    return _figure_png(fig)


def _recommendation(rec: dict[str, Any], sweep: pd.DataFrame) -> str:
    """The sweep's recommendation in one sentence: point, objective, CI, caveats."""
    params = str(sweep["param"].iloc[0]).split(",")
    point = ", ".join(f"{p}={rec.get(p)}" for p in params)
    text = (
        f"Recommended {point} (objective `{rec['objective']}`: {rec.get('rule', '')}): "
        f"{_named(rec['metric'])} {_cell(rec)}"
    )
    c = rec.get("constraint")
    if c:
        diff = c.get("difference") or {}
        text += (
            f"; {_named(c['metric'])} {_cell(c['at_point'])} against the best point's "
            f"{_cell(c['best'])}"
        )
        if diff:
            text += f", paired difference {_cell(diff)}"
        q = _qualifying(c, params)
        text += f". {q}" if q else ""
    text += "" if text.endswith(".") else "."
    if rec.get("warning"):
        text += f" Warning: recommendation {rec['warning']}."
    for spec, r in (rec.get("by_embedder") or {}).items():
        at = ", ".join(f"{p}={r.get(p)}" for p in params)
        text += f" For `{spec}`: {at}, {_named(r['metric'])} {_cell(r)}."
    return text


def _qualifying(c: dict[str, Any], params: list[str]) -> str:
    """Which points passed the non-inferiority rule, and why the others did not."""
    points = c.get("points") or []
    if not points:
        return ""
    name = {v["point_index"]: ", ".join(f"{p}={v.get(p)}" for p in params) for v in points}
    yes = [name[v["point_index"]] for v in points if v["qualifies"]]
    no = [f"{name[v['point_index']]} ({v['why']})" for v in points if not v["qualifies"]]
    text = f"Qualifying points ({len(yes)} of {len(points)}): {'; '.join(yes)}"
    if c.get("only_best"):
        text += " — none but the best point qualifies"
    if no:
        text += f". Not qualifying: {'; '.join(no)}"
    return text + "."


def _sweep_png(sweep: pd.DataFrame, rec: dict[str, Any] | None) -> bytes | None:
    """Lines per embedder or heatmaps for the grids that need them, else one axis."""
    from evals.sweep_plots import sweep_figure

    return sweep_figure(sweep, rec) or _sweep_plot(sweep, rec)


def _sweep_plot(sweep: pd.DataFrame, rec: dict[str, Any] | None = None) -> bytes | None:
    """One panel per metric family (one scale per axis), a colour per metric that
    no other series repeats, 95% CI bands and the recommended point drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if sweep.empty or "param" not in sweep:
        return None
    param = sweep["param"].iloc[0]
    order = list(registry.all_metrics())
    metrics = sorted(dict.fromkeys(sweep["metric"]), key=order.index)
    families = list(dict.fromkeys(registry.get(m).family for m in metrics))
    palette = [*plt.get_cmap("tab10").colors, *plt.get_cmap("Dark2").colors]
    colour = {m: palette[i % len(palette)] for i, m in enumerate(metrics)}  # 18 distinct
    fig, axes = plt.subplots(
        len(families), 1, figsize=(7, 2.4 * len(families) + 0.6), sharex=True, squeeze=False
    )
    x_rec = None
    if rec and "point_index" in rec:
        hit = sweep[sweep["point_index"] == rec["point_index"]]
        x_rec = float(hit["point"].iloc[0]) if not hit.empty else None
    for ax, fam in zip(axes[:, 0], families, strict=True):
        for m in (m for m in metrics if registry.get(m).family == fam):
            s = sweep[sweep["metric"] == m].sort_values("point")
            ax.plot(s["point"], s["value"], marker="o", ms=3, color=colour[m], label=_named(m))
            ax.fill_between(s["point"], s["lo"], s["hi"], color=colour[m], alpha=0.15)
            if rec and m == rec.get("metric") and x_rec is not None:
                lo, hi = rec.get("lo"), rec.get("hi")
                err = None
                if lo is not None and hi is not None:
                    err = [[rec["value"] - lo], [hi - rec["value"]]]
                ax.errorbar(
                    [x_rec],
                    [rec["value"]],
                    yerr=err,
                    fmt="*",
                    ms=12,
                    color="black",
                    capsize=4,
                    label="recommended",
                    zorder=5,
                )
        if x_rec is not None:
            ax.axvline(x_rec, color="black", linestyle="--", linewidth=0.8)
        ax.set_ylabel(registry.axis(fam), fontsize=8)
        ax.legend(fontsize=7, loc="best")
    title = f"Sweep over {param} (95% CI bands)"
    if rec:
        title += f"; recommended {param}={x_rec:g}" if x_rec is not None else ""
        if rec.get("warning"):
            title += " (grid edge: extend the grid)"
    axes[0, 0].set_title(title, fontsize=9)
    axes[-1, 0].set_xlabel(f"{param} (parameter value)")
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
    methods = sorted({str(m) for m in c.get("method", pd.Series(dtype=str)).dropna()})
    how = ", ".join(methods) or "method not recorded"
    ax.set_title(f"Paired differences a − b (95% CI: {how}; ↑/↓ the better direction)")
    ax.set_xlabel("difference (metric units: shares, or counts per unit)")
    ax.set_ylabel("metric and pair")
    return _figure_png(fig)


def _md_table(rows: list[list[str]], head: list[str]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def _html_table(rows: list[list[str]], head: list[str], id_: str | None = None) -> str:
    th = "".join(f"<th>{_inline(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
    attr = f' id="{id_}"' if id_ else ""
    return f"<table{attr}><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _inline(text: str) -> str:
    """HTML for one line of the report's markdown: escaped, `code` and **bold** rendered."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _direction(metric: str) -> str:
    return registry.get(metric).direction


def _best(values: dict[str, float], direction: str) -> set[str]:
    """Systems holding the best value (ties all marked); none when fewer than two compete."""
    vals = {k: v for k, v in values.items() if v is not None and not math.isnan(v)}
    if len(vals) < 2 or direction not in ("higher", "lower"):
        return set()
    best = min(vals.values()) if direction == "lower" else max(vals.values())
    return {k for k, v in vals.items() if v == best}


def _failures(d: Path, systems: list[str]) -> list[str]:
    """One line per system of what failed: the embedder on probes, the provider on attempts."""
    from evals.runfolder import read_jsonl

    if not any((d / f).is_file() for f in ("probes.jsonl", "attempts.jsonl")):
        return ["not checked: this folder has no per-row files (probes.jsonl, attempts.jsonl)"]
    probes: dict[str, list[int]] = {}
    for r in read_jsonl(d / "probes.jsonl"):
        c = probes.setdefault(r["system"], [0, 0])
        c[0] += r.get("fallback") == "embed_error"
        c[1] += 1
    attempts: dict[str, list[Any]] = {}
    missed: dict[str, int] = {}
    for r in read_jsonl(d / "attempts.jsonl"):
        if r.get("outcome") == "replay_miss":
            missed[r["system"]] = missed.get(r["system"], 0) + 1
            continue
        c = attempts.setdefault(r["system"], [0, 0, None])
        if r.get("raw_response") is None:
            c[0] += 1
            c[2] = r.get("error") or c[2]
        c[1] += 1
    lines = []
    for sys_ in systems:
        parts = []
        bad, total = probes.get(sys_, [0, 0])
        if bad:
            parts.append(f"embedder failed on {bad}/{total} probes (keyword path instead)")
        bad, total, last = attempts.get(sys_, [0, 0, None])
        if bad:
            why = f"; last error: {str(last)[:160]}" if last else ""
            parts.append(f"provider failed on {bad}/{total} attempts{why}")
        if missed.get(sys_):
            parts.append(f"{missed[sys_]} passes' requests not in the recording")
        lines.append(f"`{sys_}`: " + ("; ".join(parts) if parts else "nothing failed"))
    return lines


def _price_source(manifest: dict[str, Any]) -> str:
    llm = manifest.get("llm") or {}
    return f"LiteLLM {llm.get('litellm_version', '?')} {llm.get('price_map', '?')} price map"


def _totals(systems: list[str], spend: dict[str, Any]) -> list[list[str]]:
    """Headline rows: tokens and USD per system over the whole run; "unknown price"
    (never $0) for attempts LiteLLM could not price."""
    if not any(spend.get(s, {}).get("attempts") for s in systems):
        return []
    tokens, cost = [], []
    for s_ in systems:
        v = spend.get(s_)
        if not v or not v.get("attempts"):
            tokens.append("—")
            cost.append("—")
            continue
        tin, tout = v.get("input_tokens", 0), v.get("output_tokens", 0)
        tokens.append(f"{tin + tout:,} ({tin:,} in, {tout:,} out)")
        total = v["cost_usd_spent"] + v["cost_usd_cached"]
        unpriced = v.get("unpriced_attempts", 0)
        if unpriced and not total:
            cost.append("unknown price")
        elif unpriced:
            cost.append(f"{usd(total)} + unknown price for {unpriced} attempts")
        else:
            cost.append(usd(total))
    return [["tokens (run total)", *tokens], ["cost (run total, spent + replayed)", *cost]]


def _banner(manifest: dict[str, Any]) -> list[str]:
    from evals.providers import banner_lines

    failures = (manifest.get("providers") or {}).get("failures") or {}
    lines = [f"**{x}**" for x in banner_lines(failures)]
    e = manifest.get("embedder_errors") or {}
    if not e.get("probes"):
        return lines
    every = e["probes"] == e.get("probes_total")
    return [
        *lines,
        f"**Warning: the embedder failed** on {e['probes']} of {e.get('probes_total')} probes"
        f"{' (every probe)' if every else ''}: those recalls took the keyword path, so "
        f"these numbers do not measure embedder `{manifest.get('embedder')}`. "
        f"Last error: {e.get('last')}",
    ]


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
    recommended = _load(d, "recommended.json")
    if compare is not None:  # only pairs of this run's systems (never a stale file's)
        ran = set(manifest.get("systems") or [])
        compare = compare[compare["a"].isin(ran) & compare["b"].isin(ran)]

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
        ("sweep.png", "Sweep", None if sweep is None else _sweep_png(sweep, recommended)),
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
        f"Embedder `{manifest.get('embedder')}`, seed {manifest.get('seed')}, "
        + (
            f"git `{manifest['git_revision'][:12]}`"
            if manifest.get("git_revision")
            else "git revision unknown (not run from a git checkout)"
        )
        + f", litellm {manifest.get('packages', {}).get('litellm')}"
        + f" (prices: {_price_source(manifest)}).",
        LEGEND,
    ]
    sections: list[tuple[str, list[str], list[list[str]]]] = []
    systems = [x for x in sorted(table["system"].unique()) if x != "matcher"]
    for m in [*table["metric"], *RECALL_PLOT, *WASTE_PARTS, *VALIDITY_PLOT]:
        registry.get(m)  # a report names registered metrics only
    headline = []
    for m in registry.names(listed="headline"):
        cells, values = [], {}
        for sys_ in systems:
            r = table[(table["system"] == sys_) & (table["metric"] == m)]
            if r.empty:
                cells.append("—")
                continue
            values[sys_] = float(r.iloc[0]["value"]) if r.iloc[0]["value"] is not None else None
            cells.append(_cell(r.iloc[0].to_dict()))
        direction = _direction(m)
        best = _best(values, direction)
        cells = [f"**{c}**" if s_ in best else c for s_, c in zip(systems, cells, strict=True)]
        if any(c != "—" for c in cells):
            headline.append([_named(m), *cells])
    spend = (_load(d, "spend.json") or {}).get("systems", {})
    headline += _totals(systems, spend)
    headline_section = (
        "Headline (value [95% CI] interval n=units/clusters; ↑ higher is better, ↓ lower is "
        "better; best in bold; definitions in the per-system tables)",
        ["metric", *systems],
        headline,
    )
    head = ["metric", "value [95% CI]", "n (units/clusters)", "interval", "unit", "definition"]
    for sys_ in sorted(table["system"].unique()):
        sub = table[table["system"] == sys_]
        rows = [
            [
                _named(r["metric"]),
                _fmt_metric(r["metric"], r["value"], r["lo"], r["hi"]),
                _n(r).partition("n=")[2],
                str(r.get("method") or ""),
                registry.get(r["metric"]).unit,
                registry.get(r["metric"]).definition,
            ]
            for r in sub.to_dict("records")
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
                    cells.append("—" if r.empty else _cell(r.iloc[0].to_dict(), 2))
                rows.append([scope, *cells])
            sections.append(
                (
                    f"Per scope: `{sys_}` (units within one scope taken as independent)",
                    ["scope", *map(_named, metrics_here)],
                    rows,
                )
            )
    sections += _source_sections(d, manifest)
    if latency:
        rows = [
            [s, _fmt(v[m]["value"], v[m]["lo"], v[m]["hi"], 4), _named(m), _n(v[m])]
            for s, v in latency.items()
            for m in ("latency_p50_s", "latency_p95_s", "pass_wall_p50_s", "pass_wall_p95_s")
            if m in v
        ]
        sections.append(
            (
                "Latency (wall-clock seconds per attempt and per pass; not in metrics.json)",
                ["system", "value [95% CI]", "statistic", "interval, n"],
                rows,
            )
        )
    limits = ((manifest.get("providers") or {}).get("limits")) or {}
    if limits:
        from evals.providers import LIMIT_STATS

        names = [n for n, _, _ in LIMIT_STATS]
        rows = [
            [f"`{m}`", str(v.get("concurrency_limit")), str(v.get("requests"))]
            + ["n/a" if v.get(n) is None else f"{v[n]:g}" for n in names]
            for m, v in sorted(limits.items())
        ]
        sections.append(
            (
                "Provider concurrency achieved (wall clock, not in metrics.json; "
                "definitions in the metric registry)",
                ["model", "concurrency limit", "requests", *map(_named, names)],
                rows,
            )
        )
    if spend:
        rows = [
            [
                s,
                str(v["attempts"]),
                str(v["cached_attempts"]),
                usd(v["cost_usd_spent"]),
                usd(v["cost_usd_cached"]),
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
    if matcher and not matcher.get("n"):
        info = (manifest.get("dataset") or {}).get("info") or {}
        why = info.get("matcher") or "the dataset has no labelled pairs to measure it on"
        sections.append(("Gold matcher accuracy", ["figure", "reason"], [["not measured", why]]))
    elif matcher:
        sections.append(
            (
                "Gold matcher accuracy on labelled pairs",
                ["threshold", "margin", "precision [95% CI]", "recall [95% CI]", "n pairs"],
                [
                    [
                        str(matcher.get("threshold")),
                        str(matcher.get("margin")),
                        f"{_fmt(*_ci(matcher, 'precision'))} "
                        f"{_n(matcher.get('precision_ci') or {})}",
                        f"{_fmt(*_ci(matcher, 'recall'))} {_n(matcher.get('recall_ci') or {})}",
                        str(matcher.get("n")),
                    ]
                ],
            )
        )
    if compare is not None and not compare.empty:
        rows = [
            [
                _named(r["metric"]),
                f"{r['a']} − {r['b']}",
                _fmt(r["value"], r["lo"], r["hi"]),
                _n(r).partition("n=")[2],
                str(r.get("method") or ""),
                str(r["unit"]),
            ]
            for r in compare.to_dict("records")
        ]
        sections.append(
            (
                "Paired comparisons (difference a − b over the units defined on both sides)",
                [
                    "metric",
                    "pair",
                    "difference [95% CI]",
                    "pairs/clusters",
                    "interval",
                    "paired unit",
                ],
                rows,
            )
        )
    if sweep is not None and not sweep.empty:
        if recommended:
            head_lines.append(_recommendation(recommended, sweep))
        rows = [
            [str(r["param"]), f"{r['point']:g}", _named(r["metric"]), _cell(r)]
            for r in sweep.to_dict("records")
        ]
        sections.append(("Sweep", ["param", "point", "metric", "value [95% CI] interval n"], rows))

    banner = _banner(manifest)
    failed = _failures(d, systems)
    if headline:
        sections.insert(0, headline_section)
    first, rest = sections[:1] if headline else [], sections[1:] if headline else sections
    md = ["# memkit evaluation report", ""]
    md += [f"> {b}\n" for b in banner]
    md += [*head_lines, ""]
    for title, h, rows in first:
        md += [f"## {title}", "", _md_table(rows, h), ""]
    md += ["## What failed", "", *(f"- {x}" for x in failed), ""]
    for name, caption, _ in plots:
        md += [f"![{caption}]({name})", ""]
    for title, h, rows in rest:
        md += [f"## {title}", "", _md_table(rows, h), ""]
    md_path = d / "report.md"
    md_path.write_text("\n".join(md), encoding="utf-8")

    style = (
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}"
        ".banner{background:#fde2e1;border:2px solid #c0392b;padding:0.6em 1em}"
    )
    body = ["<h1>memkit evaluation report</h1>"]
    body += [f'<p class="banner" role="alert">{_inline(b)}</p>' for b in banner]
    body += [f"<p>{_inline(x)}</p>" for x in head_lines]
    for title, h, rows in first:
        body.append(f"<h2>{_inline(title)}</h2>{_html_table(rows, h, 'headline')}")
    body.append("<h2>What failed</h2><ul>" + "".join(f"<li>{_inline(x)}</li>" for x in failed))
    body.append("</ul>")
    for _, caption, png in plots:
        b64 = base64.b64encode(png).decode("ascii")
        body.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{b64}"></figure>'
        )
    for title, h, rows in rest:
        body.append(f"<h2>{_inline(title)}</h2>{_html_table(rows, h)}")
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'><title>memkit evaluation report"
        f"</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )
    html_path = d / "report.html"
    html_path.write_text(doc, encoding="utf-8")
    return md_path, html_path


def _source_sections(d: Path, manifest: dict[str, Any]) -> list[tuple[str, list[str], list]]:
    """Per-group tables (`groups.json`) and what the source's adapter normalised or
    could not resolve (`manifest.dataset.info`)."""
    from evals.groups import table_rows

    out = _retrieval_tables(d) + table_rows((_load(d, "groups.json") or {}).get("rows", []))
    ingest = (_load(d, "ingest.json") or {}).get("store")
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
    evidence = (_load(d, "evidence.json") or {}).get("systems", {})
    if evidence:
        head = ["system", "runs", "runs cut", "bytes offered", "bytes kept", "bytes dropped"]
        head += ["kept share", "messages offered", "messages kept"]
        keys = ("runs", "runs_cut", "bytes_offered", "bytes_kept", "bytes_dropped", "kept_share")
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

    rows = (_load(d, "metrics.json") or {}).get("metrics", [])
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
                        "—" if r is None else f"{_fmt(r['value'], r['lo'], r['hi'])} (n={r['n']})"
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
