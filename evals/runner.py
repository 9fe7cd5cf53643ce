"""Run matrix: systems (store mode, pipeline mode per consolidator) x replicates x scopes.

A run writes a folder (DESIGN.md "Run outputs"); reports are built from
those files only:

    manifest.json     config, package versions, git revision, dataset fingerprint,
                      seed, start/end (the only place timestamps live)
    probes.jsonl      per probe and system: recalled ids/facts/scores, block account
    writes.jsonl      store mode: every fact write and where it landed (fold-in)
    attempts.jsonl    every consolidation attempt (Attempt.to_dict() + scope,
                      snapshot ids, parsed changes); `replay:<run-dir>` reads it
    passes.jsonl      every consolidation pass outcome
    extraction.jsonl  live rows at the end of each scope, matched to gold
    matcher.json      the matcher's own precision/recall on labelled pairs
    metrics.json      deterministic: sorted keys, rounded floats, no timestamps
    metrics.csv       the same table
    latency.json      wall-clock latency p50/p95 (not deterministic, kept apart)
    breakdown.json    key metrics per (system, scope) with CIs
    units/<key>/      while running: one file per finished (system, replicate,
                      scope) unit; removed when the run completes

Resumability: a unit's rows are written to `units/<key>/` only when the unit
is complete, where the key hashes the config, the dataset fingerprint and the
source of memkit and evals; a rerun into the same folder with the same key
loads finished units and replays only the rest, and the consolidation
response cache (`cache_dir`) makes any model call the killed run already paid
for a cache hit.

Concurrency: pipeline units run as asyncio tasks; at most `concurrency` units
of a model are open at once (one scope's passes in order, different scopes in
parallel), and `memkit.llm` bounds the model's requests in flight by the same
number, lowered on 429 and raised back after successes. Every LiteLLM model
is preflighted before any pass; the first unfixable error (auth, permission,
not found, bad request) stops that model. The manifest records, per model,
the achieved concurrency and time spent waiting on limits, and per system the
share of attempts without an answer (above `max_failure_share` the run fails).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evals import scorers
from evals.matcher import Matcher, pair_accuracy, pair_predictions
from evals.providers import ModelStopped, StopOnFatal, banner_lines, failure_summary
from evals.replay import (
    CachingEmbedder,
    Variant,
    oracle_gold,
    replay_pipeline_scope,
    replay_store_scope,
    scopes_of,
)
from evals.stats import bootstrap_mean, bootstrap_quantile
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, ConsolidationParams, FoldParams, RecallParams

RUN_VERSION = 1
"""Version of every file in a run folder."""
DIGITS = 6
REPO = Path(__file__).resolve().parents[1]
PRESETS: dict[str, dict[str, Any]] = {
    "bundled": {
        "dataset": "datasets/bundled",
        "store_mode": True,
        "consolidators": ("heuristic", "oracle"),
    },
}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's results (recorded in the manifest)."""

    dataset: str
    name: str = "run"
    store_mode: bool = True
    consolidators: tuple[str, ...] = ("heuristic", "oracle")
    embedder: str = "wordllama"
    replicates: int = 1
    seed: int = 0
    resamples: int = 1000
    scopes: tuple[str, ...] | None = None
    recall: Mapping[str, Any] = field(default_factory=dict)
    assembly: Mapping[str, Any] = field(default_factory=dict)
    fold: Mapping[str, Any] = field(default_factory=dict)
    consolidation: Mapping[str, Any] = field(default_factory=dict)
    curation: str = "latest_row"
    cache_dir: str | None = None
    model_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per consolidator spec, options for `get_consolidator` (api_base, ...)."""
    concurrency: int = 4
    max_failure_share: float = 0.5
    """A system whose share of attempts without an answer exceeds this fails the run."""
    matcher_threshold: float = 0.5
    matcher_margin: float = 0.05
    limit: int | None = None
    """Adapters only: keep the first `limit` conversations/questions."""

    def __post_init__(self) -> None:
        if self.replicates < 1:
            raise ConfigError(f"replicates must be >= 1, got {self.replicates!r}")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency!r}")
        if not self.store_mode and not self.consolidators:
            raise ConfigError("nothing to run: store mode off and no consolidators")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["consolidators"] = list(self.consolidators)
        d["scopes"] = None if self.scopes is None else list(self.scopes)
        d["model_options"] = {  # a key given directly never reaches a run file
            spec: {k: ("<redacted>" if k == "api_key" else v) for k, v in opts.items()}
            for spec, opts in self.model_options.items()
        }
        return json.loads(json.dumps(d, default=str))

    def params(self) -> tuple[RecallParams, AssemblyParams, FoldParams, ConsolidationParams]:
        try:
            return (
                RecallParams(**self.recall),
                AssemblyParams(**self.assembly),
                FoldParams(**self.fold),
                ConsolidationParams(**self.consolidation),
            )
        except TypeError as e:
            raise ConfigError(f"unknown tunable in run config: {e}") from None


def preset(preset_name: str, /, **overrides: Any) -> RunConfig:
    """A named configuration; `overrides` (including `name`) replace its fields."""
    if preset_name not in PRESETS:
        raise ConfigError(f"unknown preset {preset_name!r} (known: {', '.join(sorted(PRESETS))})")
    return RunConfig(**{"name": preset_name, **PRESETS[preset_name], **overrides})


ADAPTERS = ("locomo", "longmemeval", "longmemeval_s", "msc")


def load_any(spec: str, *, limit: int | None = None) -> Any:
    """A dataset from a folder in the bundled format, or `<adapter>:<path>`.

    A relative folder is looked up from the working directory, then from the
    repository root (so `--preset bundled` works from anywhere).

    Adapters (`evals.adapters`): locomo, longmemeval (oracle split),
    longmemeval_s, msc; `limit` keeps the first conversations/questions.
    """
    kind, sep, path = spec.partition(":")
    if sep and kind in ADAPTERS:
        from evals import adapters

        if kind == "locomo":
            return adapters.load_locomo(path, limit=limit)
        if kind == "msc":
            return adapters.load_msc(path, limit=limit)
        variant = "s" if kind == "longmemeval_s" else "oracle"
        return adapters.load_longmemeval(path, variant, limit=limit)
    from evals.datasets import load_dataset

    path = Path(spec)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path  # repo-relative (presets), whatever the working directory
    return load_dataset(path)


# --- small file helpers -------------------------------------------------------------


def dumps(obj: Any) -> str:
    """Canonical JSON for run files: sorted keys, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, allow_nan=False)


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(dumps({"version": RUN_VERSION, **r}) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(dumps(obj) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _git_revision() -> str | None:
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


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for pkg in ("memkit", "numpy", "pandas", "litellm", "wordllama", "scikit-learn", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _llm_info() -> dict[str, str]:
    """litellm version and price-map source, without importing litellm."""
    from memkit.llm import runtime_info

    return runtime_info()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# --- progress -------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr; silent when `quiet`."""

    def __init__(self, total: int, quiet: bool = False, label: str = "eval"):
        self.total, self.done, self.quiet, self.label = max(total, 1), 0, quiet, label

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.quiet:
            return
        width = 24
        fill = int(width * self.done / self.total)
        bar = "#" * fill + "-" * (width - fill)
        sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {what[:40]:<40}")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


# --- the run ------------------------------------------------------------------------------


@dataclass
class RunResult:
    out: Path
    metrics: pd.DataFrame
    failures: list[str] = field(default_factory=list)
    """One line per system whose provider failures fail the run (empty: none)."""


def _unit_name(system: str, replicate: int, scope: str) -> str:
    safe = "".join(
        c if c.isalnum() or c in "-_." else "_" for c in f"{system}__r{replicate}__{scope}"
    )
    return safe[:150] + "-" + hashlib.sha256(safe.encode()).hexdigest()[:8] + ".json"


def _code_hash() -> str:
    """Hash of memkit's and the suite's sources: a resumed unit must come from this code."""
    h = hashlib.sha256()
    for pkg in ("memkit", "evals"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            h.update(f.relative_to(REPO).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _resume_key(config: RunConfig, ds: Any) -> str:
    """Finished units are reused only by a rerun of the same config, data and code."""
    cfg = config.to_dict()
    cfg.pop("name", None)
    fp = ds.fingerprint() if hasattr(ds, "fingerprint") else getattr(ds, "name", "")
    key = dumps({"config": cfg, "dataset": fp, "code": _code_hash()})
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _concurrency(spec: str, config: RunConfig) -> int:
    from evals.providers import concurrency_of

    return concurrency_of(spec, config.model_options.get(spec, {}), config.concurrency)


def _consolidator(spec: str, config: RunConfig, dataset: Any, matcher: Matcher) -> Any:
    from evals.providers import consolidator_kwargs
    from memkit.consolidate import get_consolidator

    opts = consolidator_kwargs(spec, config.model_options.get(spec, {}), _concurrency(spec, config))
    if spec == "oracle":
        opts["gold"] = oracle_gold(dataset, matcher)
    if spec.startswith("litellm:") and config.cache_dir and "cache_dir" not in opts:
        opts["cache_dir"] = config.cache_dir
    return get_consolidator(spec, **opts)


def preflight(config: RunConfig) -> None:
    """Check every LiteLLM model of `config` (credentials, model string, endpoint)
    before any pass; raises ProviderError naming the model and the cause."""
    from evals.providers import preflight as check

    for spec in config.consolidators:
        check(spec, config.model_options.get(spec, {}))


def run_eval(
    config: RunConfig,
    out: str | Path,
    *,
    quiet: bool = False,
    dataset: Any = None,
    embedder: Any = None,
    on_pass: Callable[[dict], None] | None = None,
    report: bool = True,
) -> RunResult:
    """Run (or resume) the evaluation `config` into folder `out`; see module docstring.

    `dataset` and `embedder` may be passed in to share them across runs (sweeps,
    tests); `on_pass` is called after every consolidation pass.
    """
    from memkit.embed import get_embedder

    out = Path(out)
    started = _now()
    preflight(config)
    ds = dataset if dataset is not None else load_any(config.dataset, limit=config.limit)
    units_dir = out / "units" / _resume_key(config, ds)
    units_dir.mkdir(parents=True, exist_ok=True)
    emb = embedder if embedder is not None else CachingEmbedder(get_embedder(config.embedder))
    recall, assembly, fold, cparams = config.params()
    variant = Variant("default", recall, assembly)
    matcher = Matcher(ds.facts, threshold=config.matcher_threshold, margin=config.matcher_margin)
    scopes = scopes_of(ds, config.scopes)
    systems = (["store"] if config.store_mode else []) + [
        f"pipeline:{c}" for c in config.consolidators
    ]
    n_units = sum(len(scopes) * (1 if s == "store" else config.replicates) for s in systems)
    progress = Progress(n_units, quiet)
    results: dict[str, dict[str, Any]] = {}

    def finished(name: str) -> dict[str, Any] | None:
        p = units_dir / name
        if p.is_file():
            return json.loads(p.read_text(encoding="utf-8"))
        return None

    # store mode: synchronous and model-free
    if config.store_mode:
        for s in scopes:
            name = _unit_name("store", 0, s.scope_id)
            got = finished(name)
            if got is None:
                r = replay_store_scope(
                    s, embedder=emb, fold=fold, variants=(variant,), curation=config.curation
                )
                got = {
                    "system": "store",
                    "replicate": 0,
                    "scope_id": s.scope_id,
                    "probes": r.probes,
                    "writes": r.writes,
                }
                write_json(units_dir / name, got)
            results[name] = got
            progress.step(f"store {s.scope_id}")

    # pipeline mode: one task per (consolidator, replicate, scope). A model's
    # units hold one of `concurrency` slots while open (a scope's passes run in
    # order, different scopes in parallel; open stores stay few whatever the
    # number of scopes); its requests in flight are bounded by memkit.llm's
    # one limit per model, which 429s lower.
    stopped: dict[str, str] = {}
    limits: dict[str, dict[str, Any]] = {}

    async def pipeline() -> None:
        from memkit import llm

        tasks = []
        for spec in config.consolidators:
            cons = _consolidator(spec, config, ds, matcher)
            if spec.startswith("litellm:"):
                cons = StopOnFatal(cons, f"pipeline:{spec}", stopped, quiet)
            slots = asyncio.Semaphore(_concurrency(spec, config))
            for rep in range(config.replicates):
                for s in scopes:
                    name = _unit_name(f"pipeline:{spec}", rep, s.scope_id)
                    got = finished(name)
                    if got is not None:
                        results[name] = got
                        progress.step(f"{spec} {s.scope_id} (done)")
                        continue
                    tasks.append(unit(spec, cons, slots, rep, s, name))
        for coro in asyncio.as_completed(tasks):
            await coro
        limits.update(llm.limit_stats())

    async def unit(spec, cons, slots, rep, s, name) -> None:
        async with slots:
            if f"pipeline:{spec}" in stopped:
                progress.step(f"{spec} {s.scope_id} (stopped)")
                return
            try:
                r = await replay_pipeline_scope(
                    s,
                    cons,
                    embedder=emb,
                    matcher=matcher,
                    params=cparams,
                    fold=fold,
                    variants=(variant,),
                    on_pass=on_pass,
                    replicate=rep,
                )
            except ModelStopped:
                progress.step(f"{spec} {s.scope_id} (stopped)")
                return
        got = {
            "system": f"pipeline:{spec}",
            "replicate": rep,
            "scope_id": s.scope_id,
            "probes": r.probes,
            "attempts": r.attempts,
            "passes": r.passes,
            "extraction": r.extraction,
        }
        write_json(units_dir / name, got)
        results[name] = got
        progress.step(f"{spec} {s.scope_id}")

    if config.consolidators:
        asyncio.run(pipeline())

    # gather unit rows into the run files, in a deterministic order
    order = sorted(results.values(), key=lambda u: (u["system"], u["replicate"], u["scope_id"]))
    files: dict[str, list[dict]] = {
        k: [] for k in ("probes", "writes", "attempts", "passes", "extraction")
    }
    for u in order:
        tag = {"system": u["system"], "replicate": u["replicate"]}
        for k in files:
            files[k].extend({**row, **tag} for row in u.get(k, ()))
    for k, rows in files.items():
        write_jsonl(out / f"{k}.jsonl", rows)
    pairs = list(getattr(ds, "pairs", ()) or ())
    write_json(out / "matcher.json", matcher_accuracy(pairs, config))
    fingerprint = ds.fingerprint() if hasattr(ds, "fingerprint") else None
    health = failure_summary(files["attempts"], config.max_failure_share, stopped)
    write_json(
        out / "manifest.json",
        {
            "version": RUN_VERSION,
            "name": config.name,
            "config": config.to_dict(),
            "packages": _versions(),
            "git_revision": _git_revision(),
            "dataset": {
                "name": getattr(ds, "name", None),
                "version": getattr(ds, "version", None),
                "fingerprint": fingerprint,
                "path": config.dataset,
            },
            "embedder": getattr(emb, "name", None),
            "llm": _llm_info(),
            "seed": config.seed,
            "systems": systems,
            "providers": {"failures": health, "limits": limits},
            "started_at": started,
            "ended_at": _now(),
        },
    )
    table = metrics_from_run(out)
    write_metrics(out, table)
    write_latency(out)
    write_breakdown(out)
    shutil.rmtree(out / "units", ignore_errors=True)  # only a killed run needs them
    if report:
        from evals.report import build_report

        build_report(out)
    return RunResult(out, table, banner_lines(health))


def matcher_accuracy(pairs: Sequence[Any], config: RunConfig) -> dict[str, Any]:
    """The matcher's precision/recall on labelled pairs, with bootstrap CIs over pairs."""
    from evals.stats import bootstrap_ratio

    preds = pair_predictions(pairs, threshold=config.matcher_threshold)
    acc = pair_accuracy(pairs, threshold=config.matcher_threshold)
    hit = [float(p and g) for p, g in preds]
    kw = {"seed": config.seed, "resamples": config.resamples}
    prec = bootstrap_ratio(hit, [float(p) for p, _ in preds], **kw)
    rec = bootstrap_ratio(hit, [float(g) for _, g in preds], **kw)
    return {
        "version": RUN_VERSION,
        **acc.as_dict(),
        "margin": config.matcher_margin,
        "precision_ci": prec.as_dict(DIGITS),
        "recall_ci": rec.as_dict(DIGITS),
    }


# --- metrics from run files -------------------------------------------------------------


def _by_system(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["system"], []).append(r)
    return out


def metrics_from_run(run_dir: str | Path, *, seed: int | None = None) -> pd.DataFrame:
    """The metrics table of a run folder: one row per (system, metric)."""
    d = Path(run_dir)
    manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    cfg = manifest["config"]
    seed = cfg.get("seed", 0) if seed is None else seed
    resamples = cfg.get("resamples", 1000)
    groups: dict[str, dict[str, tuple[list, list | None]]] = {}
    for sys_, rows in _by_system(read_jsonl(d / "probes.jsonl")).items():
        groups.setdefault(sys_, {}).update(scorers.probe_metrics(rows))
    for sys_, rows in _by_system(read_jsonl(d / "writes.jsonl")).items():
        groups.setdefault(sys_, {}).update(scorers.write_metrics(rows))
    for sys_, rows in _by_system(read_jsonl(d / "attempts.jsonl")).items():
        m = scorers.attempt_metrics(rows)
        m.pop("latency_s", None)  # wall-clock: kept out of the deterministic table
        m.update(scorers.pass_metrics(rows))
        groups.setdefault(sys_, {}).update(m)
    for sys_, rows in _by_system(read_jsonl(d / "extraction.jsonl")).items():
        groups.setdefault(sys_, {}).update(scorers.extraction_metrics(rows))
    records = []
    for sys_ in sorted(groups):
        for metric in sorted(groups[sys_]):
            e = scorers.estimate(groups[sys_][metric], seed=seed, resamples=resamples)
            records.append(
                {
                    "system": sys_,
                    "metric": metric,
                    **e.as_dict(DIGITS),
                    "definition": scorers.definition(metric),
                }
            )
    mpath = d / "matcher.json"
    if mpath.is_file() and any(s.startswith("pipeline:") for s in groups):
        m = json.loads(mpath.read_text(encoding="utf-8"))
        for key in ("precision", "recall"):
            records.append(
                {
                    "system": "matcher",
                    "metric": f"matcher_{key}",
                    **(
                        m.get(f"{key}_ci") or {"value": m[key], "lo": None, "hi": None, "n": m["n"]}
                    ),
                    "definition": scorers.definition(f"matcher_{key}"),
                }
            )
    return pd.DataFrame.from_records(
        records, columns=["system", "metric", "value", "lo", "hi", "n", "definition"]
    )


def write_metrics(run_dir: Path, table: pd.DataFrame) -> None:
    rows = json.loads(table.to_json(orient="records", double_precision=10))
    write_json(run_dir / "metrics.json", {"version": RUN_VERSION, "metrics": rows})
    table.assign(version=RUN_VERSION).to_csv(
        run_dir / "metrics.csv", index=False, float_format=f"%.{DIGITS}f"
    )


BREAKDOWN_METRICS: tuple[str, ...] = (
    "p_at_1",
    "recall_at_8",
    "mrr",
    "ndcg_at_8",
    "budget_waste",
    "supersede_leakage",
    "extraction_recall",
    "extraction_precision",
)


def breakdown_from_run(
    run_dir: str | Path, *, seed: int = 0, resamples: int = 1000
) -> pd.DataFrame:
    """Key metrics per (system, scope), each with its CI: where a system wins or fails."""
    d = Path(run_dir)
    recs = []
    for fname, fn in (
        ("probes.jsonl", scorers.probe_metrics),
        ("extraction.jsonl", scorers.extraction_metrics),
    ):
        by: dict[tuple[str, str], list] = {}
        for r in read_jsonl(d / fname):
            by.setdefault((r["system"], r["scope_id"]), []).append(r)
        for (sys_, scope), rows in sorted(by.items()):
            groups = fn(rows)
            for m in BREAKDOWN_METRICS:
                if m in groups:
                    e = scorers.estimate(groups[m], seed=seed, resamples=resamples)
                    recs.append(
                        {"system": sys_, "scope_id": scope, "metric": m, **e.as_dict(DIGITS)}
                    )
    return pd.DataFrame.from_records(
        recs, columns=["system", "scope_id", "metric", "value", "lo", "hi", "n"]
    )


def write_breakdown(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    cfg = manifest.get("config", {})
    t = breakdown_from_run(run_dir, seed=cfg.get("seed", 0), resamples=cfg.get("resamples", 1000))
    rows = json.loads(t.to_json(orient="records", double_precision=10))
    write_json(run_dir / "breakdown.json", {"version": RUN_VERSION, "rows": rows})


def write_latency(run_dir: Path) -> None:
    """Latency p50/p95 per system (wall clock; deliberately not in metrics.json)."""
    out = {}
    for sys_, rows in sorted(_by_system(read_jsonl(run_dir / "attempts.jsonl")).items()):
        lat = [float(r.get("latency_s") or 0.0) for r in rows]
        out[sys_] = {
            "latency_p50_s": bootstrap_quantile(lat, 0.5).as_dict(DIGITS),
            "latency_p95_s": bootstrap_quantile(lat, 0.95).as_dict(DIGITS),
            "latency_mean_s": bootstrap_mean(lat).as_dict(DIGITS),
        }
    for sys_, rows in sorted(_by_system(read_jsonl(run_dir / "passes.jsonl")).items()):
        wall = [float(r.get("wall_s") or 0.0) for r in rows]
        out.setdefault(sys_, {}).update(
            {
                "pass_wall_p50_s": bootstrap_quantile(wall, 0.5).as_dict(DIGITS),
                "pass_wall_p95_s": bootstrap_quantile(wall, 0.95).as_dict(DIGITS),
            }
        )
    write_json(run_dir / "latency.json", {"version": RUN_VERSION, "systems": out})


# --- paired comparison between systems ---------------------------------------------------

COMPARE_METRICS: tuple[str, ...] = (
    "strict_validity",
    "valid_after_repair",
    "hallucinated_ids",
    "changes_per_proposal",
    "extraction_recall",
    "extraction_precision",
    "precision_returned",
    "p_at_1",
    "recall_at_8",
    "mrr",
    "ndcg_at_8",
    "budget_waste",
    "supersede_leakage",
)


def _unit_sums(groups: dict[str, tuple[list, list | None]]) -> dict[str, tuple[float, float]]:
    """Collapse one unit's per-metric lists to (numerator, denominator) sums."""
    import numpy as np

    out = {}
    for m, (nums, dens) in groups.items():
        a = np.asarray(nums, dtype=float)
        if dens is None:
            ok = ~np.isnan(a)
            out[m] = (float(a[ok].sum()), float(ok.sum()))
        else:
            out[m] = (float(a.sum()), float(np.asarray(dens, dtype=float).sum()))
    return out


def _units(run_dir: Path, system: str) -> dict[str, dict[Any, tuple[float, float]]]:
    """metric -> unit key -> (num, den) for one system of one run.

    Paired units: probes by (scope, probe, replicate); attempts by (scope,
    replicate), since two consolidators see the same transcripts of a scope
    but not the same snapshots; extraction by (scope, replicate).
    """
    out: dict[str, dict[Any, tuple[float, float]]] = {}

    def put(key: Any, groups: dict[str, tuple[list, list | None]]) -> None:
        for m, nd in _unit_sums(groups).items():
            out.setdefault(m, {})[key] = nd

    for r in read_jsonl(run_dir / "probes.jsonl"):
        if r["system"] == system:
            put(("probe", r["scope_id"], r["probe_id"], r["replicate"]), scorers.probe_metrics([r]))
    for fname, fn in (
        ("attempts.jsonl", scorers.attempt_metrics),
        ("extraction.jsonl", scorers.extraction_metrics),
    ):
        by: dict[Any, list] = {}
        for r in read_jsonl(run_dir / fname):
            if r["system"] == system:
                by.setdefault((r["scope_id"], r["replicate"]), []).append(r)
        for key, rows in sorted(by.items()):
            put(("scope", *key), fn(rows))
    return out


def compare_runs(
    a_run: str | Path,
    a_system: str,
    b_run: str | Path | None = None,
    b_system: str | None = None,
    *,
    metrics: Sequence[str] = COMPARE_METRICS,
    seed: int = 0,
    resamples: int = 1000,
) -> pd.DataFrame:
    """Paired bootstrap CI of (a - b) per metric over the units both systems share.

    `b_run` defaults to `a_run` (two systems of one run). Each metric is the
    pooled ratio sum(num)/sum(den) over shared units, so the difference is
    exactly the difference of the two systems' pooled values on those units.
    """
    from evals.stats import paired_ratio_difference

    if b_system is None:
        raise ConfigError("compare needs two systems")
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
        e = paired_ratio_difference(*cols, seed=seed, resamples=resamples)
        unit = keys[0][0] if keys else ""
        recs.append(
            {
                "metric": m,
                "a": a_system,
                "b": b_system,
                **e.as_dict(DIGITS),
                "unit": {"probe": "probe", "scope": "scope x replicate"}.get(unit, unit),
                "definition": scorers.definition(m),
            }
        )
    return pd.DataFrame.from_records(
        recs, columns=["metric", "a", "b", "value", "lo", "hi", "n", "unit", "definition"]
    )


def load_run(run_dir: str | Path) -> dict[str, pd.DataFrame]:
    """Every table of a run folder as DataFrames (for notebooks): `metrics`,
    `probes`, `writes`, `attempts`, `passes`, `extraction` (one row per line)."""
    d = Path(run_dir)
    if not (d / "metrics.json").is_file():
        raise ConfigError(f"{str(d)!r} is not a finished run folder (no metrics.json)")
    metrics = json.loads((d / "metrics.json").read_text(encoding="utf-8"))["metrics"]
    out = {"metrics": pd.DataFrame.from_records(metrics)}
    for k in ("probes", "writes", "attempts", "passes", "extraction"):
        out[k] = pd.DataFrame.from_records(read_jsonl(d / f"{k}.jsonl"))
    return out


def run_matrix(
    datasets: Sequence[str],
    consolidators: Sequence[str],
    params: Sequence[Mapping[str, Mapping[str, Any]]] = ({},),
    *,
    out_root: str | Path,
    quiet: bool = False,
    **config: Any,
) -> pd.DataFrame:
    """Run datasets x params (each run holding every consolidator as a system).

    `params` items are tunable overrides by group, e.g. `{"recall": {"floor": 0.3}}`.
    Runs go to `<out_root>/<dataset name>-p<i>/`; the embedder is shared. Returns
    every run's metrics table stacked, with `dataset` and `params` columns.
    """
    from memkit.embed import get_embedder

    emb_spec = config.pop("embedder", "wordllama")
    emb = CachingEmbedder(get_embedder(emb_spec))
    frames = []
    for spec in datasets:
        ds = load_any(spec, limit=config.get("limit"))
        for i, p in enumerate(params):
            name = f"{getattr(ds, 'name', 'dataset')}-p{i}"
            cfg = RunConfig(
                dataset=spec,
                name=name,
                consolidators=tuple(consolidators),
                embedder=emb.name,
                **{**config, **p},
            )
            res = run_eval(cfg, Path(out_root) / name, quiet=quiet, dataset=ds, embedder=emb)
            frames.append(res.metrics.assign(dataset=spec, params=dumps(p)))
    return pd.concat(frames, ignore_index=True)
