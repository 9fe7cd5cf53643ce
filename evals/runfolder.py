"""Run-folder I/O: the files a run or a sweep writes and `load_run` reads back.

One place for the canonical JSON of run files (sorted keys, UTF-8, no NaN,
atomic replace), the manifest (config, package versions, git revision,
dataset fingerprint, seed, start/end: the only place timestamps live), the
metrics table files, latency and spend. `evals.runner` and `evals.sweep` both write
through here, so a run folder and a sweep folder have one format.

This module leaves out computing metrics (`evals.aggregate`) and deciding
what to run (`evals.runner`, `evals.sweep`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonlines
import pandas as pd

from evals.rows import TABLE_ROWS, AttemptRow, PassRow, by_system, rows_of
from memkit.errors import ConfigError

RUN_VERSION = 1
"""Version of every file in a run folder."""
DIGITS = 6
REPO = Path(__file__).resolve().parents[1]
TABLES = ("probes", "writes", "attempts", "passes", "extraction")
"""The per-row JSON Lines files of a run folder."""
INCOMPLETE = "incomplete.json"
"""Marker of a run or sweep folder being written: made when it starts, removed at its
clean finish, so an interrupted folder says it is unfinished (`evals.runs.status`)."""
RUN_FILES: frozenset[str] = frozenset(
    {
        *(f"{t}.jsonl" for t in TABLES),
        *("manifest.json", "metrics.json", "metrics.csv", "latency.json", "spend.json"),
        *("evidence.json", "ingest.json", "matcher.json", "breakdown.json", "groups.json"),
        *("compare.csv", "sweep.csv", "recommended.json", "report.md", "report.html", "llm.log"),
        *("recall.png", "waste.png", "validity.png", "sweep.png", "compare.png"),
        INCOMPLETE,
    }
)
"""Every file a run or sweep writes at the top of its folder (and each one's `.tmp`
while it is replaced). `--overwrite` clears a folder only when all it holds is
these, `units/` and `.memkit-*` files: a file memkit writes is named here first."""
RUN_DIRS: frozenset[str] = frozenset({"units"})
"""Folders a run writes: `units/<resume key>/` while it runs."""


def dumps(obj: Any) -> str:
    """Canonical JSON for run files: sorted keys, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=False)


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with jsonlines.open(tmp, "w", dumps=dumps) as out:
        out.write_all({"version": RUN_VERSION, **r} for r in rows)
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file ([] when absent); a bad line raises
    ConfigError naming file:line."""
    if not path.is_file():
        return []
    with jsonlines.open(path) as lines:
        try:
            return list(lines.iter(type=dict, skip_empty=True))
        except jsonlines.InvalidLineError as e:
            raise ConfigError(f"{path}:{e.lineno}: {e}") from None


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(dumps(obj) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def mark_incomplete(out: Path, what: str, started_at: str) -> None:
    """Write the INCOMPLETE marker into `out` (a `what` = "run" or "sweep" starting)."""
    write_json(
        out / INCOMPLETE,
        {
            "version": RUN_VERSION,
            "what": what,
            "started_at": started_at,
            "note": f"this {what} has not finished cleanly (still running, killed or failed); "
            "memkit removes this file when it finishes",
        },
    )


def mark_finished(out: Path) -> None:
    """Remove the INCOMPLETE marker: the run or sweep in `out` finished cleanly."""
    (out / INCOMPLETE).unlink(missing_ok=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in ("memkit", "numpy", "pandas", "litellm", "wordllama", "scikit-learn", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def write_manifest(
    out: Path,
    *,
    name: str,
    config: Mapping[str, Any],
    dataset: Any,
    dataset_path: str | None,
    embedder: str | None,
    seed: int,
    systems: Sequence[str],
    started_at: str,
    **extra: Any,
) -> None:
    """manifest.json of a run or sweep folder; `extra` adds keys (a sweep's grid)."""
    from memkit.llm import runtime_info  # litellm version and price map, no import of litellm

    write_json(
        out / "manifest.json",
        {
            "version": RUN_VERSION,
            "name": name,
            "config": dict(config),
            "packages": versions(),
            "git_revision": git_revision(),
            "dataset": {
                "name": getattr(dataset, "name", None),
                "version": getattr(dataset, "version", None),
                "fingerprint": dataset.fingerprint() if hasattr(dataset, "fingerprint") else None,
                "path": dataset_path,
                "info": json.loads(dumps(dict(getattr(dataset, "info", None) or {}))),
            },
            "embedder": embedder,
            "llm": runtime_info(),
            "seed": seed,
            "systems": list(systems),
            "started_at": started_at,
            "ended_at": now(),
            **extra,
        },
    )


def write_metrics(run_dir: Path, table: pd.DataFrame) -> None:
    """metrics.json and metrics.csv from a metrics table (`evals.aggregate.COLUMNS`)."""
    rows = json.loads(table.to_json(orient="records", double_precision=10))
    write_json(run_dir / "metrics.json", {"version": RUN_VERSION, "metrics": rows})
    table.assign(version=RUN_VERSION).to_csv(
        run_dir / "metrics.csv", index=False, float_format=f"%.{DIGITS}f"
    )


def _made(rows: list[AttemptRow]) -> list[AttemptRow]:
    """Attempt rows a model made: without a replay's requests missing from its recording
    (they took no time and no tokens of the model; the manifest counts them)."""
    return [r for r in rows if r.outcome != "replay_miss"]


def write_latency(run_dir: Path) -> None:
    """Latency p50/p95 per system (wall clock; deliberately not in metrics.json)."""
    from evals.stats import bootstrap_mean, bootstrap_quantile

    out: dict[str, dict[str, Any]] = {}
    for sys_, rows in sorted(by_system(_made(rows_of(run_dir, AttemptRow))).items()):
        lat = [float(r.latency_s) for r in rows]
        out[sys_] = {
            "latency_p50_s": bootstrap_quantile(lat, 0.5).as_dict(DIGITS),
            "latency_p95_s": bootstrap_quantile(lat, 0.95).as_dict(DIGITS),
            "latency_mean_s": bootstrap_mean(lat).as_dict(DIGITS),
        }
    for sys_, passes in sorted(by_system(rows_of(run_dir, PassRow)).items()):
        wall = [float(r.wall_s) for r in passes]
        out.setdefault(sys_, {}).update(
            {
                "pass_wall_p50_s": bootstrap_quantile(wall, 0.5).as_dict(DIGITS),
                "pass_wall_p95_s": bootstrap_quantile(wall, 0.95).as_dict(DIGITS),
            }
        )
    write_json(run_dir / "latency.json", {"version": RUN_VERSION, "systems": out})


def write_ingest(run_dir: Path, timings: Sequence[Mapping[str, float]]) -> None:
    """`ingest.json`: store mode's writes, the wall-clock seconds spent writing them
    (batched per run through `remember_many`) and the rate, plus probing time
    (wall clock, so deliberately not in metrics.json). Nothing when nothing was timed."""
    if not timings:
        return
    writes = sum(t.get("writes", 0.0) for t in timings)
    secs = sum(t.get("ingest_s", 0.0) for t in timings)
    write_json(
        run_dir / "ingest.json",
        {
            "version": RUN_VERSION,
            "store": {
                "scopes": len(timings),
                "writes": int(writes),
                "ingest_s": round(secs, 3),
                "writes_per_s": round(writes / secs, 1) if secs > 0 else None,
                "probe_s": round(sum(t.get("probe_s", 0.0) for t in timings), 3),
            },
        },
    )


def write_evidence(run_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """`evidence.json`: per pipeline system, the evidence bytes and messages the
    SPEC §7 bounds kept vs what the staged runs offered (replicates share the
    transcripts, so replicate 0's staging is counted once per run)."""
    out: dict[str, dict[str, Any]] = {}
    seen: set[tuple[str, str]] = set()
    for r in rows:
        key = (r["system"], r["run_id"])
        if key in seen:
            continue
        seen.add(key)
        s = out.setdefault(
            r["system"],
            {"runs": 0, "runs_cut": 0, **dict.fromkeys(_EVIDENCE_FIELDS, 0)},
        )
        s["runs"] += 1
        s["runs_cut"] += r["bytes_kept"] < r["bytes_offered"]
        for k in _EVIDENCE_FIELDS:
            s[k] += r[k]
    if not out:
        return
    for s in out.values():
        s["bytes_dropped"] = s["bytes_offered"] - s["bytes_kept"]
        s["kept_share"] = (
            round(s["bytes_kept"] / s["bytes_offered"], 6) if s["bytes_offered"] else None
        )
    write_json(run_dir / "evidence.json", {"version": RUN_VERSION, "systems": out})


_EVIDENCE_FIELDS = ("messages_offered", "messages_kept", "bytes_offered", "bytes_kept")


def write_spend(run_dir: Path) -> None:
    """Money spent on provider calls vs answers replayed from the cache, per system.

    Kept out of metrics.json, which must be byte-identical between a run and
    its cached rerun (there `cost_usd` is what the attempts cost when made).
    """
    out = {}
    for sys_, rows in sorted(by_system(_made(rows_of(run_dir, AttemptRow))).items()):
        paid = [r for r in rows if not r.cached]
        replayed = [r for r in rows if r.cached]
        out[sys_] = {
            "attempts": len(rows),
            "cached_attempts": len(replayed),
            "cost_usd_spent": round(sum(float(r.cost_usd) for r in paid), 9),
            "cost_usd_cached": round(sum(float(r.cost_usd) for r in replayed), 9),
            "input_tokens": sum(r.input_tokens for r in rows),
            "output_tokens": sum(r.output_tokens for r in rows),
            "unpriced_attempts": sum(1 for r in rows if r.answered and r.cost_note),
        }
    write_json(run_dir / "spend.json", {"version": RUN_VERSION, "systems": out})


def load_run(run_dir: str | Path) -> dict[str, pd.DataFrame]:
    """Every table of a run folder as DataFrames (for notebooks): `metrics`,
    `probes`, `writes`, `attempts`, `passes`, `extraction` (one row per line)."""
    d = Path(run_dir)
    if not (d / "metrics.json").is_file():
        raise ConfigError(f"{str(d)!r} is not a finished run folder (no metrics.json)")
    metrics = read_json(d / "metrics.json")["metrics"]
    out = {"metrics": pd.DataFrame.from_records(metrics)}
    for k in TABLES:  # every row parsed (a bad one is named), then as its JSON line
        rows = rows_of(d, TABLE_ROWS[k])
        out[k] = pd.DataFrame.from_records([dict(sorted(r.to_json().items())) for r in rows])
    return out
