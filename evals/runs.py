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


# --- a run folder that never lies ------------------------------------------------------


def default_name(base: str) -> str:
    """A run name no other run has: `<base>-<UTC time>-<6 hex>`."""
    import time
    import uuid

    return f"{base}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def prepare_run_dir(
    out: Path,
    config: dict[str, Any],
    resume_key: str | None,
    *,
    resume: bool = False,
    overwrite: bool = False,
) -> None:
    """Refuse to write a run into a folder that holds another one.

    An empty or missing folder is fine. Otherwise `overwrite` clears it first
    (only if it is a run folder: it must hold manifest.json or units/), and
    `resume` continues it only when it holds this very configuration: a killed
    run's `units/<resume_key>` or a finished run's manifest with the same config.
    """
    import shutil

    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    if not out.exists():
        if resume:
            raise ConfigError(f"nothing to resume: {str(out)!r} does not exist")
        return
    if not out.is_dir():
        raise ConfigError(f"{str(out)!r} is a file, not a run folder")
    if not any(out.iterdir()):
        return
    is_run = (out / "manifest.json").is_file() or (out / "units").is_dir()
    if overwrite:
        if not is_run:
            raise ConfigError(
                f"{str(out)!r} is not a run folder (no manifest.json or units/); "
                "refusing to clear it: choose another --out"
            )
        shutil.rmtree(out)
        return
    if not resume:
        raise ConfigError(
            f"{str(out)!r} already holds a run: add --resume to continue it with the same "
            "configuration, --overwrite to clear it first, or give another --out"
        )
    if resume_key is not None and (out / "units" / resume_key).is_dir():
        return
    mpath = out / "manifest.json"
    if mpath.is_file():
        old = dict(json.loads(mpath.read_text(encoding="utf-8")).get("config") or {})
        new = dict(config)
        old.pop("name", None)
        new.pop("name", None)
        if old == new:
            return
        diff = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
        raise ConfigError(
            f"{str(out)!r} holds a run with another configuration ({', '.join(diff)} "
            "differ): --resume continues only the same one; use --overwrite or another --out"
        )
    raise ConfigError(
        f"{str(out)!r} holds an unfinished run of another configuration, dataset or code: "
        "--resume continues only the same one; use --overwrite or another --out"
    )
