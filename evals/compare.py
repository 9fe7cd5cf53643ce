"""Paired comparison of two systems on the units both were scored on.

Probes pair by (scope, probe, replicate); attempt, pass, write and
extraction metrics pair by (scope, replicate), since two consolidators see
the same transcripts of a scope but not the same snapshots. Only units
defined on both sides are pairs, and pairs are nested in scopes (the
clusters of the paired interval). Each metric is
the pooled ratio sum(num)/sum(den) over the shared units (a mean is a ratio
with one per defined unit), so a difference is exactly the difference of the
two systems' pooled values on those units.

This module leaves out the intervals themselves (`evals.stats`) and the
metric definitions (`evals.registry`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evals import registry
from evals.aggregate import COLUMNS, UNIT_BUILDERS, Values, unit_values
from evals.rows import TABLE_ROWS, ProbeRow, rows_of
from evals.runfolder import DIGITS
from memkit.errors import ConfigError


def _sums(v: Values) -> tuple[float, float, float]:
    """One unit group's (numerator, denominator) sums and how many units defined
    them (the trials a share's interval counts); NaN units left out."""
    a = np.asarray(v.nums, dtype=float)
    if v.dens is None:
        ok = ~np.isnan(a)
        return float(a[ok].sum()), float(ok.sum()), float(ok.sum())
    d = np.asarray(v.dens, dtype=float)
    ok = ~(np.isnan(a) | np.isnan(d)) & (d > 0)
    return float(a[ok].sum()), float(d[ok].sum()), float(ok.sum())


def _units(run_dir: Path, system: str) -> dict[str, dict[Any, tuple[float, float, float]]]:
    """metric -> paired unit key -> (num, den, units) for one system of one run."""
    out: dict[str, dict[Any, tuple[float, float, float]]] = {}
    files: dict[str, list[Any]] = {}
    for unit, (fname, build) in UNIT_BUILDERS.items():
        if fname not in files:
            files[fname] = [r for r in rows_of(run_dir, TABLE_ROWS[fname]) if r.system == system]
        by: dict[Any, list[Any]] = {}
        for r in files[fname]:
            key: tuple[Any, ...] = (
                ("probe", r.scope_id, r.probe_id, r.replicate)
                if unit == "probe"
                else ("scope", r.scope_id, r.replicate)
            )
            by.setdefault(key, []).append(r)
        for key, rows in sorted(by.items(), key=lambda kv: str(kv[0])):
            for m, v in unit_values(unit, build(rows)).items():
                out.setdefault(m, {})[key] = _sums(v)
    return out


@dataclass(frozen=True)
class RunIdentity:
    """What two runs must share for their units to pair: data, probes and code."""

    fingerprint: str | None
    probes: frozenset[tuple[str, str]]
    revision: str | None


def run_identity(run_dir: Path, system: str) -> RunIdentity:
    """The dataset fingerprint and git revision of a run (its manifest) and the
    (scope, probe) ids one of its systems was probed on."""
    mpath = run_dir / "manifest.json"
    m = json.loads(mpath.read_text(encoding="utf-8")) if mpath.is_file() else {}
    probes = frozenset(
        (r.scope_id, r.probe_id) for r in rows_of(run_dir, ProbeRow) if r.system == system
    )
    return RunIdentity((m.get("dataset") or {}).get("fingerprint"), probes, m.get("git_revision"))


def mismatches(a: RunIdentity, b: RunIdentity) -> list[str]:
    """Why units of two runs cannot be paired as they stand (empty: they can)."""
    out = []
    if a.fingerprint != b.fingerprint:
        out.append(f"dataset fingerprints differ: {a.fingerprint} vs {b.fingerprint}")
    if a.probes != b.probes:
        out.append(
            f"probe sets differ: {len(a.probes)} vs {len(b.probes)} probes, "
            f"{len(a.probes & b.probes)} shared"
        )
    if a.revision != b.revision:
        out.append(f"code versions differ: git {a.revision} vs {b.revision}")
    return out


def check_pairable(
    a_run: Path, a_system: str, b_run: Path, b_system: str, *, allow_mismatch: bool = False
) -> list[str]:
    """The mismatches between two runs; an error naming both sides unless allowed."""
    if a_run.resolve() == b_run.resolve():
        return []
    found = mismatches(run_identity(a_run, a_system), run_identity(b_run, b_system))
    if found and not allow_mismatch:
        raise ConfigError(
            f"cannot pair {a_system!r} of {str(a_run)!r} with {b_system!r} of {str(b_run)!r}: "
            + "; ".join(found)
            + " (--allow-mismatch pairs what matches anyway)"
        )
    return found


def compare_runs(
    a_run: str | Path,
    a_system: str,
    b_run: str | Path | None = None,
    b_system: str | None = None,
    *,
    metrics: Sequence[str] | None = None,
    allow_mismatch: bool = False,
) -> pd.DataFrame:
    """Paired CI of (a - b) per metric over the units defined on both sides.

    A unit where the metric is undefined for either system (no relevant fact,
    an empty list, no answer) is not a pair; `n` is the number of pairs and
    `clusters` the scopes they are nested in (the interval's independent
    draws). `b_run` defaults to `a_run` (two systems of one run); `metrics`
    defaults to the registry's compare list, and an unregistered name is an
    error. Two runs on different datasets, probe sets or code are refused
    (`check_pairable`) unless `allow_mismatch`.
    """
    from evals.stats import paired_interval

    if b_system is None:
        raise ConfigError("compare needs two systems")
    metrics = registry.names(listed="compare") if metrics is None else tuple(metrics)
    for m in metrics:
        registry.get(m)
    check_pairable(
        Path(a_run), a_system, Path(b_run or a_run), b_system, allow_mismatch=allow_mismatch
    )
    ua = _units(Path(a_run), a_system)
    ub = _units(Path(b_run or a_run), b_system)
    if not ua or not ub:
        missing = a_system if not ua else b_system
        raise ConfigError(f"system {missing!r} has no recorded rows to compare")
    recs = []
    for m in metrics:
        if m not in ua or m not in ub:
            continue
        keys = sorted(set(ua[m]) & set(ub[m]), key=str)
        cols = [
            [ua[m][k][0] for k in keys],
            [ua[m][k][1] for k in keys],
            [ub[m][k][0] for k in keys],
            [ub[m][k][1] for k in keys],
        ]
        num_a, den_a, num_b, den_b = cols
        e = paired_interval(
            num_a,
            den_a,
            num_b,
            den_b,
            clusters=[k[1] for k in keys],
            bounded=registry.bounded(m),
            trials_a=[ua[m][k][2] for k in keys],
            trials_b=[ub[m][k][2] for k in keys],
        )
        unit = keys[0][0] if keys else ""
        meta = registry.get(m)
        recs.append(
            {
                "metric": m,
                "a": a_system,
                "b": b_system,
                **e.as_dict(registry.digits(m, DIGITS)),
                "unit": {"probe": "probe", "scope": "scope x replicate"}.get(unit, unit),
                "direction": meta.direction,
                "definition": meta.definition,
            }
        )
    return pd.DataFrame.from_records(
        recs,
        columns=["metric", "a", "b", *COLUMNS[2:]],
    )
