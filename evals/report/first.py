"""What the first screen says: the run line, the headline cells (best in bold), the
run totals, the banners, what failed per system and what each system is."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals.headline import best_in, flags, headline
from evals.labels import labels
from evals.report.fmt import cell, fmt_metric, n_text, named, usd
from evals.report.sections import Run


def recommendation(rec: dict[str, Any], sweep: pd.DataFrame) -> str:
    """The sweep's recommendation in one sentence: point, objective, CI, caveats."""
    params = str(sweep["param"].iloc[0]).split(",")
    point = ", ".join(f"{p}={rec.get(p)}" for p in params)
    text = (
        f"Recommended {point} (objective `{rec['objective']}`: {rec.get('rule', '')}): "
        f"{named(rec['metric'])} {cell(rec)}"
    )
    c = rec.get("constraint")
    if c:
        diff = c.get("difference") or {}
        text += (
            f"; {named(c['metric'])} {cell(c['at_point'])} against the best point's "
            f"{cell(c['best'])}"
        )
        if diff:
            text += f", paired difference {cell(diff)}"
        q = _qualifying(c, params)
        text += f". {q}" if q else ""
    text += "" if text.endswith(".") else "."
    if rec.get("warning"):
        text += f" Warning: recommendation {rec['warning']}."
    for spec, r in (rec.get("by_embedder") or {}).items():
        at = ", ".join(f"{p}={r.get(p)}" for p in params)
        text += f" For `{spec}`: {at}, {named(r['metric'])} {cell(r)}."
    return text


def _qualifying(c: dict[str, Any], params: list[str]) -> str:
    """Which points passed the non-inferiority rule, and why the others did not."""
    points = c.get("points") or []
    if not points:
        return ""
    name = {v["point_index"]: ", ".join(f"{p}={v.get(p)}" for p in params) for v in points}
    yes = [name[v["point_index"]] for v in points if v["qualifies"]]
    no = [f"{name[v['point_index']]} ({v['why']})" for v in points if not v["qualifies"]]
    text = f"Qualifying points ({len(yes)} of {len(points)}): {'; '.join(yes)}"
    if c.get("only_best"):
        text += " — none but the best point qualifies"
    if no:
        text += f". Not qualifying: {'; '.join(no)}"
    return text + "."


def headline_cells(
    rows: list[dict[str, Any]], systems: list[str]
) -> list[list[tuple[str, str, bool]]]:
    """Headline rows: the metric, then per system (value [CI], method and n, best?)."""
    out = []
    for m, have in headline(rows, systems):
        top = best_in(m, {s: r.get("value") for s, r in have.items()})
        line: list[tuple[str, str, bool]] = [(named(m), "", False)]
        for s in systems:
            r = have.get(s)
            if r is None:
                line.append(("—", "", False))
                continue
            text = fmt_metric(m, r.get("value"), r.get("lo"), r.get("hi"))
            line.append((text, n_text(r), s in top))
        out.append(line)
    return out


def totals(systems: list[str], spend: dict[str, Any]) -> list[list[str]]:
    """Headline rows: tokens and USD per system over the whole run; "unknown price"
    (never $0) for attempts LiteLLM could not price."""
    if not any(spend.get(s, {}).get("attempts") for s in systems):
        return []
    tokens, cost = [], []
    for s_ in systems:
        v = spend.get(s_)
        if not v or not v.get("attempts"):
            tokens.append("—")
            cost.append("—")
            continue
        tin, tout = v.get("input_tokens", 0), v.get("output_tokens", 0)
        tokens.append(f"{tin + tout:,} ({tin:,} in, {tout:,} out)")
        total = v["cost_usd_spent"] + v["cost_usd_cached"]
        unpriced = v.get("unpriced_attempts", 0)
        if unpriced and not total:
            cost.append("unknown price")
        elif unpriced:
            cost.append(f"{usd(total)} + unknown price for {unpriced} attempts")
        else:
            cost.append(usd(total))
    return [["tokens (run total)", *tokens], ["cost (run total, spent + replayed)", *cost]]


def price_source(manifest: dict[str, Any]) -> str:
    llm = manifest.get("llm") or {}
    return f"LiteLLM {llm.get('litellm_version', '?')} {llm.get('price_map', '?')} price map"


def banner(manifest: dict[str, Any]) -> list[str]:
    from evals.providers import banner_lines

    failures = (manifest.get("providers") or {}).get("failures") or {}
    lines = [f"**{x}**" for x in banner_lines(failures)]
    e = manifest.get("embedder_errors") or {}
    if not e.get("probes"):
        return lines
    every = e["probes"] == e.get("probes_total")
    return [
        *lines,
        f"**Warning: the embedder failed** on {e['probes']} of {e.get('probes_total')} probes"
        f"{' (every probe)' if every else ''}: those recalls took the keyword path, so "
        f"these numbers do not measure embedder `{manifest.get('embedder')}`. "
        f"Last error: {e.get('last')}",
    ]


def _flagged(rows: list[dict[str, Any]], system: str) -> list[str]:
    """What of one system's metrics is at its worst value or an undefined headline."""
    at = [f"{named(m)} {v:.3f}" for m, v in flags(rows, system) if v is not None]
    undefined = [named(m) for m, v in flags(rows, system) if v is None]
    out = [f"at its worst value: {', '.join(at)}"] if at else []
    return out + ([f"undefined headline: {', '.join(undefined)}"] if undefined else [])


def failures(d: Path, systems: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """One line per system of what failed: the embedder on probes, the provider on
    attempts, and every metric at its worst value or undefined headline."""
    from evals.rows import AttemptRow, ProbeRow, by_system, rows_of

    name = labels(systems)
    if not any((d / f).is_file() for f in ("probes.jsonl", "attempts.jsonl")):
        lines = [
            "embedder and provider not checked: this folder has no per-row files "
            "(probes.jsonl, attempts.jsonl)"
        ]
        return lines + [
            f"`{name[s]}`: " + "; ".join(_flagged(rows, s)) for s in systems if _flagged(rows, s)
        ]
    probes = {
        s: [sum(r.fallback == "embed_error" for r in probe_rows), len(probe_rows)]
        for s, probe_rows in by_system(rows_of(d, ProbeRow)).items()
    }
    attempts: dict[str, list[Any]] = {}
    missed: dict[str, int] = {}
    for sys_, made in by_system(rows_of(d, AttemptRow)).items():
        for r in made:
            if r.outcome == "replay_miss":
                missed[sys_] = missed.get(sys_, 0) + 1
                continue
            c = attempts.setdefault(sys_, [0, 0, None])
            if not r.answered:
                c[0] += 1
                c[2] = r.error or c[2]
            c[1] += 1
    lines = []
    for sys_ in systems:
        parts = []
        bad, total = probes.get(sys_, [0, 0])
        if bad:
            parts.append(f"embedder failed on {bad}/{total} probes (keyword path instead)")
        bad, total, last = attempts.get(sys_, [0, 0, None])
        if bad:
            why = f"; last error: {str(last)[:160]}" if last else ""
            parts.append(f"provider failed on {bad}/{total} attempts{why}")
        if missed.get(sys_):
            parts.append(f"{missed[sys_]} passes' requests not in the recording")
        parts += _flagged(rows, sys_)
        lines.append(f"`{name[sys_]}`: " + ("; ".join(parts) if parts else "nothing failed"))
    return lines


def what(system: str) -> str:
    """A system in words: which mode, which consolidator."""
    if system == "store":
        return "store mode: the dataset's writes straight into the store"
    spec = system.removeprefix("pipeline:")
    kind, _, rest = spec.partition(":")
    if kind == "replay":
        return f"pipeline mode, a model's recorded answers replayed from `{rest}`"
    if kind == "litellm":
        return f"pipeline mode, model `{rest}` through LiteLLM"
    return f"pipeline mode, consolidator `{spec}`"


@dataclass(frozen=True)
class Front:
    """The first screen: banners, the run lines, the headline cells (metric, then per
    system (value [CI], method and n, best?)), the systems legend and what failed."""

    banner: list[str]
    lines: list[str]
    cells: list[list[tuple[str, str, bool]]]
    legend: list[list[str]]
    failed: list[str]


def front(run: Run) -> Front:
    """The first screen of `run`'s report."""
    manifest, names, systems = run.manifest, run.names, run.systems
    ds = manifest.get("dataset", {})
    ran = manifest.get("systems") or systems
    lines = [
        f"Run `{manifest.get('name')}` on dataset `{ds.get('name')}` {ds.get('version')} "
        f"(fingerprint `{str(ds.get('fingerprint'))[:16]}`), {len(ran)} system"
        f"{'s' if len(ran) != 1 else ''}: "
        + ", ".join(f"`{names.get(s, s)}`" for s in ran)
        + " (full specs in the systems table).",
        f"Embedder `{manifest.get('embedder')}`, seed {manifest.get('seed')}, "
        + (
            f"git `{manifest['git_revision'][:12]}`"
            if manifest.get("git_revision")
            else "git revision unknown (not run from a git checkout)"
        )
        + f", litellm {manifest.get('packages', {}).get('litellm')}"
        + f" (prices: {price_source(manifest)}).",
    ]
    if run.sweep is not None and not run.sweep.empty and run.recommended:
        lines.append(recommendation(run.recommended, run.sweep))
    records = [r for r in run.rows if r.get("system") != "matcher"]
    cells = headline_cells(records, systems)
    cells += [[(c, "", False) for c in row] for row in totals(systems, run.spend)]
    return Front(
        banner=banner(manifest),
        lines=lines,
        cells=cells,
        legend=[[names[s], s, what(s)] for s in systems],
        failed=failures(run.d, systems, records),
    )
