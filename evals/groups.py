"""Probe metrics per probe group: LoCoMo categories, LongMemEval question types.

Published results on these benchmarks are read per group, so a run whose
probes carry a `group` gets `groups.json`: for each system, group and metric
the value with its 95% CI (`evals.stats.interval`, probes clustered by
conversation) and n (the probes the value is defined on) for every registered
probe metric defined on the group's probes (and LongMemEval's ranking metrics),
beside the group's probe count and its undefined probes by reason (LoCoMo
`unmapped`, LongMemEval `abstention`). Groups marked `apart` (LoCoMo's
adversarial category) are here and nowhere in the overall table. Reads and
writes run files only; `table_rows` renders it for the report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.rows import ProbeRow, by_system, rows_of
from evals.stats import approximate, fmt_interval

FIRST: tuple[str, ...] = (
    "p_at_1",
    "recall_at_3",
    "recall_at_8",
    "mrr",
    "ndcg_at_8",
    "budget_waste",
)
"""The metrics read first (the headline's); every other registered probe metric follows."""


def group_metrics() -> tuple[str, ...]:
    """Every registered probe and ranking metric (issue #18: every probe metric has a
    per-group table), the headline's first, then registration order."""
    from evals import registry

    rest = (*registry.names(unit="probe"), *registry.names(unit="ranking"))
    return (*FIRST, *(m for m in rest if m not in FIRST))


DIGITS = 6


def group_rows(probes: Sequence[ProbeRow]) -> list[dict[str, Any]]:
    """One record per (system, group, metric), plus `probes` and `undefined_<reason>`
    counts per (system, group); empty when no probe carries a group."""
    from evals.aggregate import estimate, probe_units, ranking_units, unit_values

    by: dict[tuple[str, str], list[ProbeRow]] = {}
    for system, rows in by_system(probes).items():
        for r in rows:
            if r.group is not None:
                by.setdefault((system, str(r.group)), []).append(r)
    out: list[dict[str, Any]] = []
    for (system, group), rows in sorted(by.items()):
        base = {"system": system, "group": group, "apart": any(r.apart for r in rows)}
        out.append({**base, "metric": "probes", "value": len(rows), "n": len(rows)})
        reasons = sorted({r.undefined for r in rows if r.undefined})
        for reason in reasons:
            count = sum(r.undefined == reason for r in rows)
            out.append({**base, "metric": f"undefined_{reason}", "value": count, "n": len(rows)})
        wanted = group_metrics()
        values = unit_values("probe", probe_units(rows, include_apart=True), wanted)
        ranked = ranking_units(rows, include_apart=True)
        if ranked:
            values.update(unit_values("ranking", ranked, wanted))
        for m in wanted:
            if m in values:
                e = estimate(values[m]).as_dict(DIGITS)
                if e.get("n"):  # a metric no probe of the group defines has no row
                    out.append({**base, "metric": m, **e})
    return out


def write_groups(run_dir: Path) -> None:
    """`groups.json` for a run folder whose probes carry groups (else nothing)."""
    from evals.runfolder import RUN_VERSION, write_json

    rows = group_rows(rows_of(run_dir, ProbeRow))
    if rows:
        write_json(run_dir / "groups.json", {"version": RUN_VERSION, "rows": rows})


def _cell(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "—"
    v = r.get("value")
    if r["metric"] == "probes" or r["metric"].startswith("undefined_"):
        return str(v)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"undefined (n={r.get('n')})"
    k = r.get("clusters")
    size = f"n={r.get('n')}" + (f"/{k}" if k and k != r.get("n") else "")
    approx = "≈" if approximate(r.get("method"), v, k) else ""
    return f"{fmt_interval(v, r.get('lo'), r.get('hi'))} ({size}{approx}, {r.get('method', '')})"


def table_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Report sections: per system, metrics down, groups across, n beside each value."""
    sections = []
    for system in sorted({r["system"] for r in rows}):
        sub = [r for r in rows if r["system"] == system]
        groups = sorted({r["group"] for r in sub})
        apart = {r["group"] for r in sub if r.get("apart")}
        metrics = list(dict.fromkeys(r["metric"] for r in sub))
        at = {(r["group"], r["metric"]): r for r in sub}
        head = ["metric", *(f"{g} (apart)" if g in apart else g for g in groups)]
        body = [[m, *(_cell(at.get((g, m))) for g in groups)] for m in metrics]
        sections.append((f"Per probe group: `{system}`", head, body))
    return sections
