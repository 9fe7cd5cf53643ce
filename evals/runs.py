"""Many run folders at once: find them, list them, load their metrics as one DataFrame.

`load_runs` is the suite's `evals_df`: one long table of every (run, system,
metric) with its interval, n, unit and direction, ready for pandas
(`pivot_table`, `groupby`, plotting). It reads only each folder's
`manifest.json` and `metrics.json`, so it works on runs copied from another
machine; a folder without them is an error naming it, never skipped quietly.

A run or sweep that has not finished cleanly is *incomplete*: its folder holds
the marker `runfolder.INCOMPLETE` (written when it starts, removed at its clean
finish), or the `units/` a killed run keeps, or a manifest without metrics.
`find_runs` finds both kinds (`runs`: every run folder under a folder, at any
depth); `memkit eval list` lists both; `load_runs` leaves incomplete ones out
unless asked and says how many.
"""

from __future__ import annotations

import glob as _glob
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from evals.runfolder import INCOMPLETE
from memkit.errors import ConfigError

COLUMNS = ("run", "system", "metric", "value", "lo", "hi", "n", "unit", "direction")
"""The columns of `load_runs`, in order (`path`, `dataset` and `complete` follow them)."""
HEADLINE = ("recall_at_8", "budget_waste", "extraction_recall")
"""What `memkit eval list` shows of each run: the first of these each system has."""
FINISHED, UNFINISHED = "finished", "incomplete"


def status(d: Path) -> str | None:
    """ "finished", "incomplete" (started, not finished cleanly) or None (not a run folder)."""
    if not d.is_dir():
        return None
    manifest, metrics = (d / "manifest.json").is_file(), (d / "metrics.json").is_file()
    if (d / INCOMPLETE).is_file() or (d / "units").is_dir() or manifest != metrics:
        return UNFINISHED
    return FINISHED if manifest else None


def _under(root: Path) -> list[Path]:
    """Every run folder below `root` at any depth (not inside a run folder), sorted."""
    out = []
    for here, dirs, _ in os.walk(root):
        dirs.sort()
        keep = []
        for name in dirs:
            d = Path(here) / name
            if status(d):
                out.append(d)
            elif not name.startswith("."):
                keep.append(name)
        dirs[:] = keep
    return sorted(out)


def find_runs(
    paths_or_glob: str | Path | Iterable[str | Path], *, incomplete: bool = True
) -> list[Path]:
    """Run folders named by a path, a glob, a folder of runs, or an iterable of those.

    A folder that is itself a run is taken; otherwise every run folder below it is
    (so `reports` finds reports/latest and every run in reports/runs). Sorted, no
    repeats; `incomplete=False` leaves unfinished runs out (`status`).
    """
    items = [paths_or_glob] if isinstance(paths_or_glob, str | Path) else list(paths_or_glob)
    out: list[Path] = []
    for item in items:
        text = str(item)
        matches = sorted(_glob.glob(text)) if _glob.has_magic(text) else [text]
        if not matches:
            raise ConfigError(f"no run folder matches {text!r}")
        for m in map(Path, matches):
            if status(m):
                out.append(m)
            elif m.is_dir() and _under(m):
                out += _under(m)
            elif not _glob.has_magic(text):
                raise ConfigError(
                    f"{str(m)!r} is not a run folder (no manifest.json and metrics.json, "
                    f"no {INCOMPLETE} marker) and holds none"
                )
    out = list(dict.fromkeys(out))
    return out if incomplete else [d for d in out if status(d) == FINISHED]


def read_run(d: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(manifest, metric rows) of one run folder ({} and [] for what it lacks)."""
    m, r = d / "manifest.json", d / "metrics.json"
    manifest = json.loads(m.read_text(encoding="utf-8")) if m.is_file() else {}
    rows = json.loads(r.read_text(encoding="utf-8"))["metrics"] if r.is_file() else []
    return manifest, rows


def load_runs(
    paths_or_glob: str | Path | Iterable[str | Path], *, incomplete: bool = False
) -> pd.DataFrame:
    """Every metric of every run as one long DataFrame.

    Columns: run (the folder name), system, metric, value, lo, hi, n, unit
    (what one observation is), direction ("higher"/"lower" is better, when
    the run recorded it), then path, dataset and complete. Incomplete runs
    (`status`) are left out unless `incomplete=True`; a warning says how many
    were, and `frame.attrs["left_out"]` lists their folders. An included
    incomplete run without metrics.json is one row with no metric. Example::

        df = load_runs("reports/runs/*")
        df.pivot_table(index=["run", "system"], columns="metric", values="value")
    """
    found = find_runs(paths_or_glob)
    left = [] if incomplete else [d for d in found if status(d) != FINISHED]
    if left:
        warnings.warn(
            f"load_runs left out {len(left)} incomplete run(s) "
            f"({', '.join(str(d) for d in left)}): pass incomplete=True to include them",
            stacklevel=2,
        )
    records = []
    for d in (d for d in found if d not in left):
        manifest, rows = read_run(d)
        ds = (manifest.get("dataset") or {}).get("name")
        done = status(d) == FINISHED
        for r in rows or [{}]:
            records.append(
                {
                    "run": d.name,
                    **{c: r.get(c) for c in COLUMNS[1:]},
                    "path": str(d),
                    "dataset": ds,
                    "complete": done,
                }
            )
    frame = pd.DataFrame.from_records(records, columns=[*COLUMNS, "path", "dataset", "complete"])
    for c in ("value", "lo", "hi"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    frame.attrs["left_out"] = [str(d) for d in left]
    return frame


def summary(d: Path) -> dict[str, Any]:
    """One line's worth of a run: name, status, when, dataset, systems (short labels),
    headline numbers. An unreadable run is listed as such, never skipped."""
    from evals.labels import labels

    try:
        manifest, rows = read_run(d)
    except (OSError, ValueError, KeyError, TypeError) as e:
        manifest, rows = {}, []
        state = f"unreadable: {type(e).__name__}: {e}"[:120]
    else:
        state = status(d) or UNFINISHED
    systems = list(manifest.get("systems") or sorted({r["system"] for r in rows}))
    name = labels(systems)
    head = []
    for sys_ in systems:
        mine = {r["metric"]: r for r in rows if r["system"] == sys_}
        metric = next((m for m in HEADLINE if m in mine and mine[m].get("value") is not None), None)
        if metric:
            head.append(f"{name[sys_]} {metric} {mine[metric]['value']:.3f}")
    return {
        "run": d.name,
        "status": state,
        "started": manifest.get("started_at") or _marker_started(d),
        "dataset": (manifest.get("dataset") or {}).get("name") or "",
        "systems": ", ".join(name[s] for s in systems),
        "headline": "; ".join(head),
        "path": str(d),
    }


def _marker_started(d: Path) -> str:
    """When an incomplete run started, from its marker ("" without one)."""
    p = d / INCOMPLETE
    if not p.is_file():
        return ""
    try:
        return str(json.loads(p.read_text(encoding="utf-8")).get("started_at") or "")
    except (OSError, ValueError, AttributeError):
        return ""


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
    is_run = any((out / f).exists() for f in ("manifest.json", "units", INCOMPLETE))
    if overwrite:
        if not is_run:
            raise ConfigError(
                f"{str(out)!r} is not a run folder (no manifest.json, units/ or {INCOMPLETE}); "
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
