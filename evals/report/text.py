"""The report's headline as plain text, for the summary a run or sweep prints at its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from evals.headline import best_in, headline
from evals.labels import labels
from evals.report.fmt import fmt_metric, load, named
from memkit.errors import ConfigError


def headline_text(run_dir: str | Path) -> str:
    """The headline as plain text for a terminal: metrics down, systems (short labels)
    across, "value [95% CI]" with the best marked *, then what each label stands for.
    What `memkit eval run` and `sweep` print at their end."""
    d = Path(run_dir)
    manifest, metrics = load(d, "manifest.json"), load(d, "metrics.json")
    if manifest is None or metrics is None:
        raise ConfigError(f"{str(d)!r} is not a run folder (manifest.json/metrics.json missing)")
    rows = [r for r in metrics["metrics"] if r.get("system") != "matcher"]
    systems = sorted(manifest.get("systems") or {r["system"] for r in rows})
    name = labels(systems)
    table = [["metric", *(name[s] for s in systems)]]
    for m, have in headline(rows, systems):
        top = best_in(m, {s: r.get("value") for s, r in have.items()})
        cells = [
            "—"
            if s not in have
            else fmt_metric(m, have[s].get("value"), have[s].get("lo"), have[s].get("hi"))
            + ("*" if s in top else "")
            for s in systems
        ]
        table.append([named(m), *cells])
    lines = text_table(table).splitlines()
    lines.append("value [95% CI]; * best; ↑ higher is better, ↓ lower is better")
    lines += [f"  {name[s]} = {s}" for s in systems if name[s] != s]
    return "\n".join(lines)


def sweep_text(frame: pd.DataFrame, params: list[str], metrics: list[str], chosen: Any) -> str:
    """A sweep's headline as plain text: one line per grid point, its parameter values and
    "value [95% CI]" of each of `metrics`, the recommended point (`chosen`, a
    point_index) marked <-."""
    table = [[*params, *map(named, metrics), ""]]
    for i, point in frame.groupby("point_index", sort=True):
        first = point.iloc[0]
        cells = [f"{first[p]:g}" if isinstance(first[p], float) else str(first[p]) for p in params]
        for m in metrics:
            r = point[point["metric"] == m]
            cells.append(
                "—"
                if r.empty
                else fmt_metric(m, r.iloc[0]["value"], r.iloc[0]["lo"], r.iloc[0]["hi"])
            )
        table.append([*cells, "<- recommended" if i == chosen else ""])
    return text_table(table)


def text_table(table: list[list[str]]) -> str:
    """Rows of cells as aligned plain-text columns (two spaces apart)."""
    width = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip() for r in table
    )
