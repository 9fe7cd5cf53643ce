"""Sweep figures for grids the one-axis plot cannot show (issue #31 item 4).

- an embedder axis and one numeric tunable: one panel per headline metric of
  the sweep, one line per embedder (95% CI band), each embedder's recommended
  point starred: the floors of different embedders sit on different scales;
- two numeric tunables (per embedder when the grid has an embedder axis): a
  heatmap of the objective's constraint and target metric over the two.

`sweep_figure` returns None for any other grid; the report then draws its
one-axis plot (`evals.report`). Reads only the sweep frame (`sweep.csv`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import pandas as pd

from evals import registry
from evals.tunables import EMBEDDER_AXIS

PANELS: tuple[str, ...] = ("recall_at_8", "budget_waste", "mrr", "offtopic_silence")
"""Metrics drawn against one tunable, a panel each, when the sweep scored them."""


def _axes(sweep: pd.DataFrame) -> tuple[list[str], bool]:
    """The numeric grid columns, and whether the grid has an embedder axis."""
    params = str(sweep["param"].iloc[0]).split(",")
    numeric = [
        p
        for p in params
        if p != EMBEDDER_AXIS and p in sweep and pd.api.types.is_numeric_dtype(sweep[p])
    ]
    return numeric, EMBEDDER_AXIS in params


def sweep_figure(sweep: pd.DataFrame, rec: Mapping[str, Any] | None = None) -> bytes | None:
    """The figure for this grid's shape (module docstring), or None."""
    if sweep.empty or "param" not in sweep:
        return None
    numeric, by_embedder = _axes(sweep)
    if by_embedder and len(numeric) == 1:
        return _lines(sweep, numeric[0], rec or {})
    if len(numeric) == 2:
        return _heatmaps(sweep, numeric, by_embedder, rec or {})
    return None


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _lines(sweep: pd.DataFrame, x: str, rec: Mapping[str, Any]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [m for m in PANELS if m in set(sweep["metric"])]
    specs = list(dict.fromkeys(sweep[EMBEDDER_AXIS]))
    colours = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7, 2.3 * len(panels) + 0.6), sharex=True, squeeze=False
    )
    picked = rec.get("by_embedder") or {}
    for ax, m in zip(axes[:, 0], panels, strict=True):
        for i, spec in enumerate(specs):
            s = sweep[(sweep["metric"] == m) & (sweep[EMBEDDER_AXIS] == spec)].sort_values(x)
            c = colours[i % len(colours)]
            ax.plot(s[x], s["value"], marker="o", ms=3, color=c, label=spec)
            ax.fill_between(s[x], s["lo"], s["hi"], color=c, alpha=0.15)
            r = picked.get(spec)
            if r is not None:
                hit = s[s["point_index"] == r["point_index"]]
                if not hit.empty:
                    ax.plot(hit[x], hit["value"], "*", ms=12, color=c, markeredgecolor="black")
        ax.set_ylabel(f"{m} {registry.get(m).mark}", fontsize=8)
        ax.legend(fontsize=7, loc="best")
    axes[0, 0].set_title(
        f"Sweep over {x}, one line per embedder (95% CI bands; * each one's recommended point)",
        fontsize=9,
    )
    axes[-1, 0].set_xlabel(x)
    return _png(fig)


def _heatmaps(
    sweep: pd.DataFrame, xy: list[str], by_embedder: bool, rec: Mapping[str, Any]
) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = xy
    metrics = [
        m for m in (rec.get("metric"), (rec.get("constraint") or {}).get("metric")) if m
    ] or ["recall_at_8"]
    metrics = [m for m in dict.fromkeys(metrics) if m in set(sweep["metric"])]
    specs = list(dict.fromkeys(sweep[EMBEDDER_AXIS])) if by_embedder else [None]
    fig, axes = plt.subplots(
        len(metrics),
        len(specs),
        figsize=(4.2 * len(specs) + 0.8, 3.4 * len(metrics)),
        squeeze=False,
    )
    for row, m in enumerate(metrics):
        for col, spec in enumerate(specs):
            ax = axes[row, col]
            s = sweep[sweep["metric"] == m]
            if spec is not None:
                s = s[s[EMBEDDER_AXIS] == spec]
            grid = s.pivot_table(index=y, columns=x, values="value", aggfunc="first")
            im = ax.imshow(grid.values, origin="lower", aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(grid.columns)), [f"{v:g}" for v in grid.columns], fontsize=7)
            ax.set_yticks(range(len(grid.index)), [f"{v:g}" for v in grid.index], fontsize=7)
            for i in range(grid.shape[0]):
                for j in range(grid.shape[1]):
                    ax.text(j, i, f"{grid.values[i, j]:.2f}", ha="center", va="center", fontsize=6)
            ax.set_xlabel(x, fontsize=8)
            ax.set_ylabel(y, fontsize=8)
            where = f" ({spec})" if spec is not None else ""
            ax.set_title(f"{m} {registry.get(m).mark}{where}", fontsize=8)
            fig.colorbar(im, ax=ax)
    return _png(fig)
