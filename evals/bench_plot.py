"""`memkit bench plot ROWS.json... --out DIR`: the Postgres bench's rows at a glance.

Reads the JSON rows `memkit bench store --backend postgres --json` wrote (one
file or several, e.g. the dated `docs/bench-*.json`) and draws what the
tables make a reader assemble by eye:

- `ann.png`: HNSW recall@8 against p50 latency, one line per row and scope
  (the big scope, the 1 % scope) through its `ef_search` sweep, the issue's
  target (p50 <= 10 ms, recall@8 >= 0.95) shaded, each point's 95 % interval
  of recall@8 over its queries as a bar where the row has one, and the two
  baselines every
  recall stands beside: the exact answer (1.0) and a random ranking (8 / rows);
- `writes.png`: each row's remembers/s by race, the bare-INSERT and lock-shape
  ceilings measured in the same run beside them, and the 1,000/s target.

A value the bench could not measure (None: "undefined" in its tables) is left
out and counted in the figure's legend, never drawn as 0. A file with nothing
to draw is an error naming it. Leaves out measuring: it draws rows only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from memkit.errors import ConfigError

TARGET_MS, TARGET_RECALL, TARGET_WRITES = 10.0, 0.95, 1000.0
"""Issue #36's acceptance: HNSW p50 <= 10 ms at recall@8 >= 0.95; >= 1,000
durable remembers/s from 4 processes."""

RACES: tuple[tuple[str, str], ...] = (
    ("rem_1", "remember, 1 process"),
    ("rem_4", "4 processes, one scope"),
    ("rem_4_own", "4 processes, own scopes"),
    ("many_1", "remember_many"),
    ("shape_4", "ceiling: lock shape, 4"),
    ("bare_4", "ceiling: bare INSERT, 4"),
)
"""The write races drawn, in order (keys of a bench row)."""


class Curve(NamedTuple):
    """One scope's sweep: (p50 ms, recall@8, ef_search) points, ef ascending,
    how many sweep points had an undefined value (left out), and each point's
    95 % interval of recall@8 over its queries (None: the row has none)."""

    label: str
    rows: int
    points: list[tuple[float, float, int]]
    undefined: int
    intervals: tuple[tuple[float, float] | None, ...] = ()


def ann_curves(rows: Sequence[dict[str, Any]]) -> list[Curve]:
    """The recall-latency curves of every row with an `ef_sweep`: the big scope
    and, where measured, the 1 % scope."""
    out = []
    for r in rows:
        sweep = r.get("ef_sweep") or []
        graph = r.get("hnsw_graph")
        tag = f"{r.get('texts', 'synthetic')} texts, " + (
            f"m {graph[0]}/{graph[1]}" if graph else "the default graph"
        )
        scopes = [("hnsw", r["rows"], "")]
        if r.get("small_rows"):
            scopes.append(("small_hnsw", r["small_rows"], " (1 % scope)"))
        for prefix, n, what in scopes:
            pts, bad = [], 0
            for e in sweep:
                p50, rec = e.get(f"{prefix}_p50"), e.get(f"{prefix}_recall8")
                if p50 is None or rec is None:
                    bad += 1
                    continue
                lo, hi = e.get(f"{prefix}_recall8_ci") or (None, None)
                ci = None if lo is None or hi is None else (float(lo), float(hi))
                pts.append(((float(p50), float(rec), int(e["ef_search"])), ci))
            if pts or bad:
                label = f"{n:,} rows{what}, {tag}"
                pts.sort(key=lambda p: p[0][2])
                out.append(Curve(label, n, [p for p, _ in pts], bad, tuple(c for _, c in pts)))
    return _numbered(out)


def _numbered(curves: list[Curve]) -> list[Curve]:
    """Curves whose labels repeat (two runs of one configuration) told apart by
    their row's order in the files: 'run 1', 'run 2'."""
    seen: dict[str, int] = {}
    total = {c.label: sum(d.label == c.label for d in curves) for c in curves}
    out = []
    for c in curves:
        if total[c.label] > 1:
            seen[c.label] = seen.get(c.label, 0) + 1
            c = c._replace(label=f"{c.label}, run {seen[c.label]}")
        out.append(c)
    return out


def write_bars(rows: Sequence[dict[str, Any]]) -> list[tuple[str, list[float | None]]]:
    """(row label, one rate per `RACES` entry: None where the row has none or it
    was undefined) for every row with a write race."""
    out = []
    for r in rows:
        if not any(k in r for k, _ in RACES):
            continue
        label = f"{r['rows']:,} rows, load {r.get('load', '?')}"
        out.append((label, [None if r.get(k) is None else float(r[k]) for k, _ in RACES]))
    return out


def _png(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def draw_ann(curves: Sequence[Curve], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    ax.fill_between(
        [0, TARGET_MS],
        TARGET_RECALL,
        1.0,
        color="tab:green",
        alpha=0.15,
        label="target: p50 <= 10 ms, recall@8 >= 0.95",
    )
    for c in curves:
        xs, ys = [p[0] for p in c.points], [p[1] for p in c.points]
        extra = f" ({c.undefined} undefined, not drawn)" if c.undefined else ""
        (line,) = ax.plot(xs, ys, marker="o", label=c.label + extra)
        for (x, y, _), ci in zip(c.points, c.intervals or (None,) * len(c.points), strict=True):
            if ci is not None:  # the 95 % interval over the queries
                ax.errorbar(x, y, yerr=[[y - ci[0]], [ci[1] - y]], fmt="none",
                            color=line.get_color(), capsize=2, lw=0.8)  # fmt: skip
        for x, y, ef in c.points:
            ax.annotate(str(ef), (x, y), fontsize=7, xytext=(3, -9), textcoords="offset points")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="exact (full ranking): 1.0")
    low = min((p[1] for c in curves for p in c.points), default=TARGET_RECALL)
    ax.set_ylim(max(0.0, min(low, TARGET_RECALL) - 0.05), 1.01)
    worst = max((c.rows for c in curves), default=0)
    if worst:  # far below the axis: named in the legend, not drawn
        ax.plot([], [], " ", label=f"random ranking: 8/{worst:,} = {8 / worst:.6f}")
    ax.set_xlabel("HNSW recall p50, ms (points: ef_search; bars: 95 % interval over queries)")
    ax.set_ylabel("recall@8 against exact")
    ax.set_title("Postgres HNSW: recall against latency")
    ax.legend(fontsize=7, loc="lower right")
    _png(fig, path)


def draw_writes(bars: Sequence[tuple[str, list[float | None]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 0.22 * len(RACES) * max(len(bars), 1) + 2))
    h = 0.8 / max(len(bars), 1)
    y = np.arange(len(RACES))
    for i, (label, rates) in enumerate(bars):
        vals = [0.0 if v is None else v for v in rates]
        undefined = sum(v is None for v in rates)
        pos = y + i * h
        bars_ = ax.barh(pos, vals, height=h, label=label)
        for b, v in zip(bars_, rates, strict=True):
            text = "not measured" if v is None else f"{v:,.0f}"
            ax.text(b.get_width(), b.get_y() + h / 2, f" {text}", va="center", fontsize=7)
        if undefined:
            bars_.set_label(f"{label} ({undefined} not measured)")
    ax.axvline(TARGET_WRITES, color="tab:red", ls="--", lw=1, label="target: 1,000/s, 4 processes")
    ax.set_yticks(y + h * (len(bars) - 1) / 2, [name for _, name in RACES])
    ax.invert_yaxis()
    ax.set_xlabel("durable writes per second")
    ax.set_title("Postgres writes at 100k rows: memkit's races and the same run's ceilings")
    ax.legend(fontsize=7, loc="upper right")  # the ceilings' long bars are at the bottom
    _png(fig, path)


def load_rows(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Every row of every file (a file holds a list of rows or one row)."""
    rows: list[dict[str, Any]] = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{p}: not a bench rows file ({e})") from None
        got = data if isinstance(data, list) else [data]
        if not all(isinstance(r, dict) and "rows" in r for r in got):
            raise ConfigError(f"{p}: not a bench rows file (want rows with a 'rows' count)")
        rows += got
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="memkit bench plot", description="Draw the Postgres bench's JSON rows."
    )
    ap.add_argument("rows", nargs="+", help="JSON rows from `memkit bench store ... --json`")
    ap.add_argument("--out", required=True, help="folder for ann.png and writes.png")
    args = ap.parse_args(argv)
    rows = load_rows(args.rows)
    curves, bars = ann_curves(rows), write_bars(rows)
    if not any(c.points for c in curves) and not bars:
        raise ConfigError(f"nothing to plot in {', '.join(args.rows)}: no ef sweep, no write race")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if any(c.points for c in curves):
        draw_ann(curves, out / "ann.png")
        print(f"wrote {out / 'ann.png'} ({len(curves)} curves)")
    if bars:
        draw_writes(bars, out / "writes.png")
        print(f"wrote {out / 'writes.png'} ({len(bars)} rows)")
    return 0
