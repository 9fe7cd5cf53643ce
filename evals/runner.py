"""Run matrix: systems (store mode, pipeline mode per consolidator) x replicates x scopes.

A run writes a folder (DESIGN.md "Run outputs") through `evals.runfolder`;
reports are built from those files only:

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
    spend.json        per system: USD actually spent vs replayed from the cache
                      (differs between a run and its cached rerun, kept apart)
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

Why over 600 lines: the run matrix, its resumable units and the per-model
concurrency and preflight are the one place a run is orchestrated. Issue #35
plans one execution plan shared with `sweep`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evals.aggregate import metrics_from_run, write_breakdown
from evals.groups import write_groups
from evals.matcher import Matcher, pair_accuracy, pair_predictions
from evals.providers import ModelStopped, StopOnFatal, banner_lines, failure_summary, log_to
from evals.replay import (
    CachingEmbedder,
    Variant,
    oracle_gold,
    replay_pipeline_scope,
    replay_store_scope,
    scopes_of,
)
from evals.runfolder import (
    DIGITS,
    REPO,
    RUN_VERSION,
    dumps,
    mark_finished,
    mark_incomplete,
    now,
    write_evidence,
    write_ingest,
    write_json,
    write_jsonl,
    write_latency,
    write_manifest,
    write_metrics,
    write_spend,
)
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, ConsolidationParams, FoldParams, RecallParams
from memkit.store import is_postgres_url, redacted_url

PRESETS: dict[str, dict[str, Any]] = {
    "bundled": {
        "dataset": "datasets/bundled",
        "store_mode": True,
        # SmolLM2-135M recorded free-form and schema-constrained (docs/cli.md: "Recorded
        # runs"), replayed offline beside the heuristic and the oracle
        "consolidators": (
            "heuristic",
            "oracle",
            "replay:datasets/bundled/recordings/smollm2-135m-free.jsonl",
            "replay:datasets/bundled/recordings/smollm2-135m-schema.jsonl",
        ),
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
    embedders: tuple[str, ...] = ()
    """(memkit) Two or more: store mode runs once per embedder, as systems
    `store@<name>` on the same probes, compared pairwise in compare.csv;
    pipeline systems use `embedder` (the first)."""
    replicates: int = 1
    seed: int = 0
    resamples: int = 1000
    scopes: tuple[str, ...] | None = None
    recall: Mapping[str, Any] = field(default_factory=dict)
    assembly: Mapping[str, Any] = field(default_factory=dict)
    fold: Mapping[str, Any] = field(default_factory=dict)
    consolidation: Mapping[str, Any] = field(default_factory=dict)
    curation: str = "latest_row"
    store: str | None = None
    """Where each scope's fresh store lives: None, in memory (SQLite); a
    postgresql:// URL, a schema of its own on that server, dropped afterwards.
    The results are the same (a test and docs/behaviour.md say so)."""
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
        if self.embedders and (
            len(set(self.embedders)) != len(self.embedders) or self.embedders[0] != self.embedder
        ):
            raise ConfigError(
                f"embedders {list(self.embedders)!r}: want distinct specs, the first being "
                f"embedder={self.embedder!r}"
            )
        if not self.store_mode and not self.consolidators:
            raise ConfigError("nothing to run: store mode off and no consolidators")
        if self.store is not None and not is_postgres_url(self.store):
            raise ConfigError(
                f"store={redacted_url(self.store)!r}: want a postgresql:// URL "
                "(the default, None, keeps each scope's store in memory)"
            )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["consolidators"] = list(self.consolidators)
        d["embedders"] = list(self.embedders)
        d["scopes"] = None if self.scopes is None else list(self.scopes)
        d["store"] = redacted_url(self.store)  # a password never reaches a run file
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


ADAPTERS = ("locomo", "longmemeval", "longmemeval_s", "msc", "tau_bench", "swe_agent")
ADAPTER_FILES: tuple[tuple[str, str], ...] = (
    ("longmemeval_oracle*.json", "longmemeval"),
    ("longmemeval_s*.json", "longmemeval_s"),
    ("locomo*.json", "locomo"),
    ("msc_*.jsonl", "msc"),
    ("*-airline.json", "tau_bench"),
    ("*-retail.json", "tau_bench"),
    ("*.traj", "swe_agent"),
)
"""File names the public benchmarks publish -> the adapter that reads them (for the
hint when such a file is given as a dataset folder)."""


def adapter_for_file(path: str | Path) -> str | None:
    """The adapter whose published file name `path` has, or None."""
    import fnmatch

    name = Path(path).name
    return next((a for pat, a in ADAPTER_FILES if fnmatch.fnmatch(name, pat)), None)


def load_any(spec: str, *, limit: int | None = None) -> Any:
    """A dataset from a folder in the bundled format, or `<adapter>:<path>`.

    A relative folder is looked up from the working directory, then from the
    repository root (so `--preset bundled` works from anywhere).

    Adapters (`evals.adapters`): locomo, longmemeval (oracle split),
    longmemeval_s, msc, tau_bench, swe_agent; `limit` keeps the first
    conversations/questions/trajectories.
    """
    kind, sep, path = spec.partition(":")
    if sep and kind in ADAPTERS:
        from evals import adapters

        if kind == "locomo":
            return adapters.load_locomo(path, limit=limit)
        if kind == "msc":
            return adapters.load_msc(path, limit=limit)
        if kind == "tau_bench":
            return adapters.load_tau_bench(path, limit=limit)
        if kind == "swe_agent":
            return adapters.load_swe_agent(path, limit=limit)
        variant = "s" if kind == "longmemeval_s" else "oracle"
        return adapters.load_longmemeval(path, variant, limit=limit)
    if sep and kind.isidentifier() and not Path(spec).exists():
        from evals.checks import unknown

        raise unknown("dataset adapter", kind, ADAPTERS)
    if limit is not None:
        raise ConfigError(
            f"limit applies to the adapters ({', '.join(ADAPTERS)}), not to the "
            f"dataset folder {spec!r}: it would be ignored"
        )
    from evals.datasets import load_dataset

    folder = Path(spec)
    if not folder.exists() and not folder.is_absolute() and (REPO / folder).exists():
        folder = REPO / folder  # repo-relative (presets), whatever the working directory
    if folder.is_file():
        adapter = adapter_for_file(folder)
        hint = (
            f"; it looks like {adapter} data: use --dataset {adapter}:{folder.parent}"
            if adapter
            else f"; a public benchmark's file is read by an adapter: <adapter>:{folder.parent} "
            f"({', '.join(ADAPTERS)})"
        )
        raise ConfigError(f"{spec!r} is a file, not a dataset folder{hint}")
    return load_dataset(folder)


# --- progress -------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr; silent when `quiet`. Without a TTY, plain
    lines: the first and last step, and one at most every `every_s` seconds."""

    def __init__(self, total: int, quiet: bool = False, label: str = "eval", every_s: float = 10.0):
        self.total, self.done, self.quiet, self.label = max(total, 1), 0, quiet, label
        self.every_s, self._last = every_s, -math.inf

    def step(self, what: str = "") -> None:
        self.done += 1
        if self.quiet:
            return
        if not sys.stderr.isatty():  # a log file or a pipe: plain periodic lines, no \r
            now = time.monotonic()
            if self.done in (1, self.total) or now - self._last >= self.every_s:
                self._last = now
                sys.stderr.write(f"{self.label} {self.done}/{self.total} {what}\n")
                sys.stderr.flush()
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


def resume_key(config: RunConfig, ds: Any) -> str:
    """The folder under `units/` where a run of `config` on `ds` keeps its finished
    units until it completes: a hash of the config (without its name), the
    dataset's fingerprint and this code, so `--resume` reuses units only for the
    same config, data and code (`evals.runs.prepare_run_dir`)."""
    cfg = config.to_dict()
    cfg.pop("name", None)
    fp = ds.fingerprint() if hasattr(ds, "fingerprint") else getattr(ds, "name", "")
    key = dumps({"config": cfg, "dataset": fp, "code": _code_hash()})
    return hashlib.sha256(key.encode()).hexdigest()[:16]


OPEN_SCOPES_PER_REQUEST = 2
"""Scopes open per request slot. With exactly `concurrency` scopes open, each
scope's own CPU between two requests (commit, probes, staging, shaping) left its
slot idle: 0.68 of the ideal at concurrency 32 (`memkit bench harness --latency
0.5`). A second open scope per slot has its next request ready when one returns;
the model's requests in flight stay bounded by memkit.llm's one limit."""


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
    if spec.startswith("replay:"):
        path = Path(spec.split(":", 1)[1])
        if not path.exists() and not path.is_absolute() and (REPO / path).exists():
            opts.setdefault("name", spec)  # repo-relative (make eval from anywhere), same name
            return get_consolidator(f"replay:{REPO / path}", **opts)
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
    check_providers: bool = True,
) -> RunResult:
    """Run (or resume) the evaluation `config` into folder `out`; see module docstring.

    `dataset` and `embedder` may be passed in to share them across runs (sweeps,
    tests); `on_pass` is called after every consolidation pass. Every LiteLLM
    model is preflighted first (`check_providers=False`: the caller did it).
    LiteLLM's and memkit's log records go to `<out>/llm.log`, not the console.
    """
    out = Path(out)
    started = now()
    if check_providers:
        preflight(config)
    out.mkdir(parents=True, exist_ok=True)
    mark_incomplete(out, "run", started)  # until the clean finish below
    uses_litellm = any(c.startswith("litellm:") for c in config.consolidators)
    with log_to(out / "llm.log", litellm=uses_litellm):
        result = _run(config, out, started, quiet, dataset, embedder, on_pass, report)
    mark_finished(out)
    return result


def _run(
    config: RunConfig,
    out: Path,
    started: str,
    quiet: bool,
    dataset: Any,
    embedder: Any,
    on_pass: Callable[[dict], None] | None,
    report: bool,
) -> RunResult:
    from memkit.embed import get_embedder

    ds = dataset if dataset is not None else load_any(config.dataset, limit=config.limit)
    units_dir = out / "units" / resume_key(config, ds)
    units_dir.mkdir(parents=True, exist_ok=True)
    if embedder is None:
        inner = get_embedder(config.embedder)
        embedder = CachingEmbedder(inner) if inner is not None else None  # None: keyword only
    emb = embedder
    recall, assembly, fold, cparams = config.params()
    variant = Variant("default", recall, assembly)
    matcher = Matcher(ds.facts, threshold=config.matcher_threshold, margin=config.matcher_margin)
    scopes = scopes_of(ds, config.scopes)
    stores = store_systems(config, emb) if config.store_mode else []
    systems = [name for name, _ in stores] + [f"pipeline:{c}" for c in config.consolidators]
    n_units = sum(len(scopes) * (1 if s == "store" else config.replicates) for s in systems)
    progress = Progress(n_units, quiet)
    results: dict[str, dict[str, Any]] = {}

    def finished(name: str) -> dict[str, Any] | None:
        p = units_dir / name
        if p.is_file():
            return json.loads(p.read_text(encoding="utf-8"))
        return None

    # store mode: synchronous and model-free
    for system, store_emb in stores:
        for s in scopes:
            name = _unit_name(system, 0, s.scope_id)
            got = finished(name)
            if got is None:
                r = replay_store_scope(
                    s,
                    embedder=store_emb,
                    fold=fold,
                    variants=(variant,),
                    curation=config.curation,
                    store_url=config.store,
                )
                got = {
                    "system": system,
                    "replicate": 0,
                    "scope_id": s.scope_id,
                    "probes": r.probes,
                    "writes": r.writes,
                    "timing": r.timing,
                }
                write_json(units_dir / name, got)
            results[name] = got
            progress.step(f"{system} {s.scope_id}")

    # pipeline mode: one task per (consolidator, replicate, scope). A model's
    # units hold one of OPEN_SCOPES_PER_REQUEST * `concurrency` slots while open
    # (a scope's passes run in order, different scopes in parallel; open stores
    # stay bounded whatever the number of scopes); its requests in flight are
    # bounded by memkit.llm's one limit per model, which 429s lower.
    stopped: dict[str, str] = {}
    limits: dict[str, dict[str, Any]] = {}

    async def pipeline() -> None:
        from memkit import llm

        tasks = []
        for spec in config.consolidators:
            cons = _consolidator(spec, config, ds, matcher)
            if spec.startswith("litellm:"):
                cons = StopOnFatal(cons, f"pipeline:{spec}", stopped, quiet)
            slots = asyncio.Semaphore(OPEN_SCOPES_PER_REQUEST * _concurrency(spec, config))
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
                    store_url=config.store,
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
            "evidence": r.evidence,
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
    health = failure_summary(files["attempts"], config.max_failure_share, stopped)
    write_manifest(
        out,
        name=config.name,
        config=config.to_dict(),
        dataset=ds,
        dataset_path=config.dataset,
        embedder=getattr(emb, "name", None),
        seed=config.seed,
        systems=systems,
        started_at=started,
        **(
            {"embedders": {n: getattr(e, "name", None) for n, e in stores}}
            if len(stores) > 1
            else {}
        ),
        embedder_errors=embedder_errors(files["probes"], emb),
        providers={"failures": health, "limits": limits},
    )
    table = metrics_from_run(out)
    write_metrics(out, table)
    write_latency(out)
    write_ingest(out, [u["timing"] for u in order if u.get("timing")])
    write_evidence(
        out, [{**e, "system": u["system"]} for u in order for e in u.get("evidence", ())]
    )
    write_spend(out)
    write_breakdown(out)
    write_groups(out)
    if len(stores) > 1:
        write_embedder_comparison(out, [name for name, _ in stores])
    shutil.rmtree(out / "units", ignore_errors=True)  # only a killed run needs them
    if report:
        from evals.report import build_report

        build_report(out)
    return RunResult(out, table, banner_lines(health))


def store_systems(config: RunConfig, emb: Any) -> list[tuple[str, Any]]:
    """(system name, embedder) per store-mode system: `store` with the run's embedder,
    or `store@<spec>` per embedder of `config.embedders` (each text embedded once per
    embedder: every one is wrapped in its own cache)."""
    from memkit.embed import get_embedder

    if not config.embedders:
        return [("store", emb)]
    out = []
    for spec in config.embedders:
        if spec == config.embedder:
            out.append((f"store@{spec}", emb))
        else:
            inner = get_embedder(spec)
            out.append((f"store@{spec}", None if inner is None else CachingEmbedder(inner)))
    return out


def write_embedder_comparison(out: Path, systems: Sequence[str]) -> None:
    """compare.csv of a run with several store embedders: every pair, paired by probe
    over the registry's compare list, plus LongMemEval's headline turn recall when the
    run scored it."""
    from evals import registry
    from evals.compare import compare_runs
    from evals.retrieval import HEADLINE

    rows = json.loads((out / "metrics.json").read_text(encoding="utf-8"))["metrics"]
    scored = {r["metric"] for r in rows if r["system"] in systems}
    metrics = [*registry.names(listed="compare"), *([HEADLINE] if HEADLINE in scored else [])]
    pairs = [(a, b) for i, a in enumerate(systems) for b in systems[i + 1 :]]
    frame = pd.concat(
        [compare_runs(out, a, None, b, metrics=metrics) for a, b in pairs], ignore_index=True
    )
    frame.to_csv(out / "compare.csv", index=False, float_format="%.6f")


def embedder_errors(probes: Sequence[Mapping[str, Any]], emb: Any) -> dict[str, Any]:
    """How often the embedder failed: probes whose recall fell back to keywords because
    embedding the query raised, of all probes, and the last error seen this process."""
    return {
        "probes": sum(1 for r in probes if r.get("fallback") == "embed_error"),
        "probes_total": len(probes),
        "calls": getattr(emb, "errors", 0),
        "last": getattr(emb, "last_error", None),
    }


def matcher_accuracy(pairs: Sequence[Any], config: RunConfig) -> dict[str, Any]:
    """The matcher's precision/recall on labelled pairs, with Wilson CIs over pairs."""
    from evals.stats import interval

    preds = pair_predictions(pairs, threshold=config.matcher_threshold)
    acc = pair_accuracy(pairs, threshold=config.matcher_threshold)
    hit = [float(p and g) for p, g in preds]
    prec = interval(hit, [float(p) for p, _ in preds])
    rec = interval(hit, [float(g) for _, g in preds])
    return {
        "version": RUN_VERSION,
        **acc.as_dict(),
        "margin": config.matcher_margin,
        "precision_ci": prec.as_dict(DIGITS),
        "recall_ci": rec.as_dict(DIGITS),
    }


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
