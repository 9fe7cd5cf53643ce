"""The report's plots as PNG bytes: bars per system (one colour per system, legend
beside the axes), the sweep's panels and the forest plot of paired differences."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from evals import registry
from evals.labels import colours, labels
from evals.report.fmt import named, point_text

RECALL_PLOT = ("p_at_1", "p_at_3", "recall_at_8", "mrr", "ndcg_at_8")


WASTE_PARTS = ("waste_irrelevant", "waste_duplicate", "waste_superseded")


VALIDITY_PLOT = ("strict_validity", "valid_after_repair", "extraction_recall")


def figure_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def bars(
    table: pd.DataFrame,
    metrics: tuple[str, ...],
    title: str,
    ylabel: str,
    systems: list[str],
) -> bytes | None:
    """Grouped bars (metric groups, one bar per system) with 95% CI whiskers; each system
    in its report-wide colour under its short label, the legend outside the axes (so
    it never covers a bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sub = table[table["metric"].isin(metrics) & table["value"].notna()]
    if sub.empty:
        return None
    name, colour = labels(systems), colours(systems)
    systems = [s for s in systems if s in set(sub["system"])]
    present = [m for m in metrics if m in set(sub["metric"])]
    x = np.arange(len(present))
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, s in enumerate(systems):
        vals: list[float] = []
        errs: list[list[float]] = [[], []]
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
        ax.bar(
            x + i * width - 0.4 + width / 2,
            vals,
            width,
            yerr=errs,
            capsize=3,
            label=name[s],
            color=colour[s],
        )
    ax.set_xticks(x, present, rotation=30, ha="right")
    ax.set_title(title)
    ax.set_xlabel("metric")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    if len(systems) > 1:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return figure_png(fig)


def sweep_png(sweep: pd.DataFrame, rec: dict[str, Any] | None) -> bytes | None:
    """Lines per embedder or heatmaps for the grids that need them, else one axis."""
    from evals.sweep_plots import sweep_figure

    return sweep_figure(sweep, rec) or sweep_plot(sweep, rec)


def sweep_plot(sweep: pd.DataFrame, rec: dict[str, Any] | None = None) -> bytes | None:
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
    palette = [*plt.get_cmap("tab10").colors, *plt.get_cmap("Dark2").colors]  # type: ignore[attr-defined]
    colour = {m: palette[i % len(palette)] for i, m in enumerate(metrics)}  # 18 distinct
    fig, axes = plt.subplots(
        len(families), 1, figsize=(7, 2.4 * len(families) + 0.6), sharex=True, squeeze=False
    )
    xs, ticks = sweep_x(sweep)
    sweep = sweep.assign(_x=xs)
    x_rec = None
    if rec and "point_index" in rec:
        hit = sweep[sweep["point_index"] == rec["point_index"]]
        x_rec = float(hit["_x"].iloc[0]) if not hit.empty else None
    for ax, fam in zip(axes[:, 0], families, strict=True):
        for m in (m for m in metrics if registry.get(m).family == fam):
            s = sweep[sweep["metric"] == m].sort_values("_x")
            ax.plot(s["_x"], s["value"], marker="o", ms=3, color=colour[m], label=named(m))
            ax.fill_between(s["_x"], s["lo"], s["hi"], color=colour[m], alpha=0.15)
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
        shown = rec_label(sweep, rec)
        title += f"; recommended {param}={shown}" if shown is not None else ""
        if rec.get("warning"):
            title += " (grid edge: extend the grid)"
    axes[0, 0].set_title(title, fontsize=9)
    if ticks:  # a categorical grid (e.g. snapshot_policy): one tick per value
        axes[-1, 0].set_xticks(range(len(ticks)), ticks)
    axes[-1, 0].set_xlabel(f"{param} (parameter value)")
    return figure_png(fig)


def sweep_x(sweep: pd.DataFrame) -> tuple[list[float], list[str]]:
    """Each row's x position and, for a grid of non-numbers, the tick labels: a
    numeric grid plots at its values; any other (a policy's names) at 0, 1, ...
    in grid order, so a categorical sweep draws instead of failing on float()."""
    try:
        return [float(p) for p in sweep["point"]], []
    except (TypeError, ValueError):
        order = sweep.sort_values("point_index").drop_duplicates("point_index")["point"]
        labels = [str(p) for p in order]
        where = {p: float(i) for i, p in enumerate(labels)}
        return [where[str(p)] for p in sweep["point"]], labels


def rec_label(sweep: pd.DataFrame, rec: dict[str, Any]) -> str | None:
    """The recommended point as the title shows it: `0.25`, or `relevant`."""
    hit = sweep[sweep["point_index"] == rec.get("point_index")]
    return None if hit.empty else point_text(hit["point"].iloc[0])


def compare_plot(compare: pd.DataFrame, names: dict[str, str]) -> bytes | None:
    """Forest plot: each paired difference (a - b) with its 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = compare.dropna(subset=["value"])
    if c.empty:
        return None
    ticks = [
        f"{named(r.metric)}\n{names.get(r.a, r.a)} − {names.get(r.b, r.b)}" for r in c.itertuples()
    ]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(c) + 1.2))
    y = list(range(len(c)))
    lo = (c["value"] - c["lo"].fillna(c["value"])).clip(lower=0)
    hi = (c["hi"].fillna(c["value"]) - c["value"]).clip(lower=0)
    ax.errorbar(c["value"], y, xerr=[lo, hi], fmt="o", capsize=3)
    ax.axvline(0.0, color="grey", linewidth=0.8)
    ax.set_yticks(y, ticks, fontsize=7)
    ax.invert_yaxis()
    methods = sorted({str(m) for m in c.get("method", pd.Series(dtype=str)).dropna()})
    how = ", ".join(methods) or "method not recorded"
    ax.set_title(f"Paired differences a − b (95% CI: {how}; ↑/↓ the better direction)")
    ax.set_xlabel("difference (metric units: shares, or counts per unit)")
    ax.set_ylabel("metric and pair")
    return figure_png(fig)


def draw(run: Any) -> list[tuple[str, str, bytes]]:
    """Every plot `run` has data for, written beside the report: (file, caption, PNG)."""
    t, systems = run.table, run.systems
    out = []
    for name, caption, png in (
        (
            "recall.png",
            "Recall quality per system",
            bars(
                t,
                RECALL_PLOT,
                "Recall quality per system",
                "score (0-1, higher is better)",
                systems,
            ),
        ),
        (
            "waste.png",
            "Budget waste per system",
            bars(
                t,
                ("budget_waste", *WASTE_PARTS),
                "Budget waste per system",
                "share of admitted entry bytes",
                systems,
            ),
        ),
        (
            "validity.png",
            "Proposal validity and extraction",
            bars(
                t, VALIDITY_PLOT, "Proposal validity and extraction recall", "share (0-1)", systems
            ),
        ),
        (
            "sweep.png",
            "Sweep",
            None if run.sweep is None else sweep_png(run.sweep, run.recommended),
        ),
        (
            "compare.png",
            "Paired differences",
            None if run.compare is None else compare_plot(run.compare, run.names),
        ),
    ):
        if png:
            (run.d / name).write_bytes(png)
            out.append((name, caption, png))
    return out
