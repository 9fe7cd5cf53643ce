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

import contextlib
import glob as _glob
import json
import os
import re
import warnings
from collections.abc import Iterable, Iterator
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


LOCK_FILE = ".memkit-lock"
"""Held (flock) in a run folder while a run or sweep writes it; holds the writer's pid."""


@contextlib.contextmanager
def claim_run_dir(
    out: Path,
    config: dict[str, Any],
    resume_key: str | None,
    *,
    resume: bool = False,
    overwrite: bool = False,
) -> Iterator[None]:
    """Hold `out` for one run or sweep, then `prepare_run_dir` it, under one lock.

    Was: two `--overwrite` runs into one folder cleared each other's files and one
    died on a raw `.json.tmp` error. Now the second is refused with one line naming
    the folder and the holder's pid; a killed holder's lock is free again (flock)."""
    _check_target(out, resume=resume, overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    fd = _lock(out / LOCK_FILE)
    try:
        prepare_run_dir(out, config, resume_key, resume=resume, overwrite=overwrite)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out / LOCK_FILE)  # before the unlock: a waiter re-checks the inode
        os.close(fd)


def _check_target(out: Path, *, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    if resume and not out.exists():
        raise ConfigError(f"nothing to resume: {str(out)!r} does not exist")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{str(out)!r} is a file, not a run folder")


def _lock(path: Path) -> int:
    """An fd holding an exclusive flock on `path` (created), or ConfigError if taken."""
    import fcntl

    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"{str(path.parent)!r} is being written by another memkit run (pid {holder}); "
                "wait for it to finish or give another --out"
            ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:  # not unlinked by its last holder
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                return fd
        os.close(fd)


def _foreign(out: Path) -> list[str]:
    """Entries of `out` that memkit does not write (sorted), by name and type."""
    from evals.runfolder import RUN_DIRS, RUN_FILES

    bad = []
    for e in os.scandir(out):
        name = e.name
        if e.is_symlink():
            bad.append(name)
        elif e.is_dir():
            if name not in RUN_DIRS:
                bad.append(name + "/")
        elif not (
            name in RUN_FILES
            or name.removesuffix(".tmp") in RUN_FILES
            or name.startswith(".memkit-")
        ):
            bad.append(name)
    return sorted(bad)


def _signed(out: Path) -> bool:
    """Whether `out` carries memkit's signature: a manifest memkit wrote (this format,
    its config and package versions), the INCOMPLETE marker of a run or sweep that
    started there, or a killed run's `units/<resume key>/`."""
    from evals.runfolder import INCOMPLETE, RUN_VERSION

    marker = out / INCOMPLETE
    if marker.is_file() and not marker.is_symlink():  # a run or sweep started here
        return True
    try:
        m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        m = None
    if (
        isinstance(m, dict)
        and m.get("version") == RUN_VERSION
        and isinstance(m.get("config"), dict)
        and isinstance(m.get("packages"), dict)
        and "memkit" in m["packages"]
    ):
        return True
    units = out / "units"
    return (
        units.is_dir()
        and not units.is_symlink()
        and any(units.iterdir())
        and all(u.is_dir() and re.fullmatch(r"[0-9a-f]{16,64}", u.name) for u in units.iterdir())
    )


def clear_run_dir(out: Path) -> None:
    """Delete what a memkit run wrote in `out`, and nothing else.

    Refused (ConfigError, nothing deleted) unless `out` carries memkit's signature
    and holds only the files and folders a run writes: never a `.git`, a source
    file or a note of the user's. Was: any folder holding a `manifest.json` was
    deleted whole."""
    import shutil

    foreign = _foreign(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" (+{len(foreign) - 5} more)" if len(foreign) > 5 else ""
        )
        raise ConfigError(
            f"refusing to clear {str(out)!r}: it holds files memkit did not write ({shown}); "
            "choose another --out"
        )
    if not _signed(out):
        raise ConfigError(
            f"refusing to clear {str(out)!r}: it is not a memkit run folder (no manifest.json "
            "memkit wrote, no units/ of a killed run); choose another --out"
        )
    for e in os.scandir(out):
        if e.name == LOCK_FILE:
            continue
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path)
        else:
            os.unlink(e.path)


def prepare_run_dir(
    out: Path,
    config: dict[str, Any],
    resume_key: str | None,
    *,
    resume: bool = False,
    overwrite: bool = False,
) -> None:
    """Refuse to write a run into a folder that holds another one.

    An empty or missing folder is fine. Otherwise `overwrite` clears what a run
    wrote there (`clear_run_dir`: refused for a folder memkit did not write), and
    `resume` continues it only when it holds this very configuration: a killed
    run's `units/<resume_key>` or a finished run's manifest with the same config.
    Call it through `claim_run_dir`, which holds the folder's lock meanwhile.
    """
    _check_target(out, resume=resume, overwrite=overwrite)
    if not out.exists():
        return
    if not any(p.name != LOCK_FILE for p in out.iterdir()):
        return
    if overwrite:
        clear_run_dir(out)
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
