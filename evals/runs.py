"""Many run folders at once: find them, list them, load their metrics as one DataFrame.

`load_runs` is the suite's `evals_df`: one long table of every (run, system,
metric) with its interval, n, unit and direction, ready for pandas
(`pivot_table`, `groupby`, plotting). It reads only each folder's
`manifest.json` and `metrics.json`, so it works on runs copied from another
machine; a folder without them is an error naming it, never skipped quietly.
"""

from __future__ import annotations

import glob as _glob
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from memkit.errors import ConfigError

COLUMNS = ("run", "system", "metric", "value", "lo", "hi", "n", "unit", "direction")
"""The columns of `load_runs`, in order (`path` and `dataset` follow them)."""
HEADLINE = ("recall_at_8", "budget_waste", "extraction_recall")
"""What `memkit eval list` shows of each run: the first of these each system has."""


def _is_run(d: Path) -> bool:
    return (d / "manifest.json").is_file() and (d / "metrics.json").is_file()


def find_runs(paths_or_glob: str | Path | Iterable[str | Path]) -> list[Path]:
    """Run folders named by a path, a glob, a folder of runs, or an iterable of those.

    A folder that is itself a run is taken; otherwise its direct subfolders that
    are runs are (so `reports/runs` finds every run in it). Sorted, no repeats.
    """
    items = [paths_or_glob] if isinstance(paths_or_glob, str | Path) else list(paths_or_glob)
    out: list[Path] = []
    for item in items:
        text = str(item)
        matches = sorted(_glob.glob(text)) if _glob.has_magic(text) else [text]
        if not matches:
            raise ConfigError(f"no run folder matches {text!r}")
        for m in map(Path, matches):
            if _is_run(m):
                out.append(m)
            elif m.is_dir() and any(_is_run(c) for c in m.iterdir() if c.is_dir()):
                out += sorted(c for c in m.iterdir() if c.is_dir() and _is_run(c))
            elif not _glob.has_magic(text):
                raise ConfigError(
                    f"{str(m)!r} is not a finished run folder (no manifest.json and "
                    "metrics.json) and holds none"
                )
    return list(dict.fromkeys(out))


def read_run(d: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(manifest, metric rows) of one run folder."""
    manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    rows = json.loads((d / "metrics.json").read_text(encoding="utf-8"))["metrics"]
    return manifest, rows


def load_runs(paths_or_glob: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Every metric of every run as one long DataFrame.

    Columns: run (the folder name), system, metric, value, lo, hi, n, unit
    (what one observation is), direction ("higher"/"lower" is better, when
    the run recorded it), then path and dataset. Example::

        df = load_runs("reports/runs/*")
        df.pivot_table(index=["run", "system"], columns="metric", values="value")
    """
    records = []
    for d in find_runs(paths_or_glob):
        manifest, rows = read_run(d)
        ds = (manifest.get("dataset") or {}).get("name")
        for r in rows:
            records.append(
                {
                    "run": d.name,
                    **{c: r.get(c) for c in COLUMNS[1:]},
                    "path": str(d),
                    "dataset": ds,
                }
            )
    frame = pd.DataFrame.from_records(records, columns=[*COLUMNS, "path", "dataset"])
    for c in ("value", "lo", "hi"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    return frame


def summary(d: Path) -> dict[str, Any]:
    """One line's worth of a run: name, when, dataset, systems, headline numbers."""
    manifest, rows = read_run(d)
    systems = list(manifest.get("systems") or sorted({r["system"] for r in rows}))
    head = []
    for sys_ in systems:
        mine = {r["metric"]: r for r in rows if r["system"] == sys_}
        metric = next((m for m in HEADLINE if m in mine and mine[m].get("value") is not None), None)
        if metric:
            head.append(f"{sys_} {metric} {mine[metric]['value']:.3f}")
    return {
        "run": d.name,
        "started": manifest.get("started_at") or "",
        "dataset": (manifest.get("dataset") or {}).get("name") or "",
        "systems": ", ".join(systems),
        "headline": "; ".join(head),
        "path": str(d),
    }
