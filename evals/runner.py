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

The units come from `evals.plan.run_plan` and run in `evals.execute` (the
runner `eval sweep` uses too); this module keeps them resumable and writes the
run files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evals import kinds
from evals.aggregate import metrics_from_run, write_breakdown
from evals.config import ADAPTERS, PRESETS, RunConfig, load_any, preset
from evals.execute import Runtime, execute
from evals.groups import write_groups
from evals.matcher import Matcher, pair_accuracy, pair_predictions
from evals.plan import STORE, Unit, run_plan
from evals.progress import Progress
from evals.providers import banner_lines, failure_summary, log_to
from evals.replay import CachingEmbedder, scopes_of
from evals.rows import AttemptRow, PassRow, ProbeRow, rows_of
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

__all__ = [  # the run's own names, and the config's kept importable from here
    "ADAPTERS",
    "PRESETS",
    "REPO",
    "Progress",
    "RunConfig",
    "RunResult",
    "UnitFiles",
    "gather",
    "load_any",
    "preflight",
    "preset",
    "resume_key",
    "run_eval",
    "run_matrix",
]


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


def runtime_options(config: RunConfig) -> tuple[dict[str, Any], dict[str, int]]:
    """Per consolidator spec: its `get_consolidator` keyword arguments and its units'
    concurrency (the model's own option, else the run's)."""
    from evals.providers import concurrency_of, consolidator_kwargs

    options, concurrency = {}, {}
    for spec in config.consolidators:
        opts = config.model_options.get(spec, {})
        concurrency[spec] = concurrency_of(spec, opts, config.concurrency)
        options[spec] = consolidator_kwargs(spec, opts, concurrency[spec])
    return options, concurrency


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
    on_pass: Callable[[PassRow], None] | None = None,
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
    from evals.kinds import calls_model

    uses_litellm = any(calls_model(c) for c in config.consolidators)
    with log_to(out / "llm.log", litellm=uses_litellm):
        result = _run(config, out, started, quiet, dataset, embedder, on_pass, report)
    mark_finished(out)
    return result


class UnitFiles:
    """A run's finished units, one JSON file each under `units/<resume key>/`, so a
    killed run resumes where it stopped (`finished`) and keeps every new one (`keep`)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, u: Unit) -> Path:
        return self.folder / _unit_name(u.system.name, u.replicate, u.scope)

    def finished(self, u: Unit) -> dict[str, Any] | None:
        p = self.path(u)
        return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

    def keep(self, u: Unit, r: Any) -> dict[str, Any]:
        got = {"system": u.system.name, "replicate": u.replicate, "scope_id": u.scope}
        got.update(r.to_json())  # the typed rows as JSON (evals.rows)
        write_json(self.path(u), got)
        return got


ROW_FILES = ("probes", "writes", "attempts", "passes", "extraction")
"""The run files gathered from every unit's rows, each row tagged with its unit."""


def gather(units: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every unit's rows per run file, in (system, replicate, scope) order."""
    order = sorted(units, key=lambda u: (u["system"], u["replicate"], u["scope_id"]))
    files: dict[str, list[dict[str, Any]]] = {k: [] for k in ROW_FILES}
    for u in order:
        tag = {"system": u["system"], "replicate": u["replicate"]}
        for k in files:
            files[k].extend({**row, **tag} for row in u.get(k, ()))
    files["timing"] = [u["timing"] for u in order if u.get("timing")]
    files["evidence"] = [{**e, "system": u["system"]} for u in order for e in u.get("evidence", ())]
    return files


def _runtime(
    config: RunConfig,
    ds: Any,
    emb: Any,
    scopes: Sequence[Any],
    stores: Sequence[tuple[str, Any]],
    on_pass: Callable[[PassRow], None] | None,
    quiet: bool,
) -> Runtime:
    matcher = Matcher(ds.facts, threshold=config.matcher_threshold, margin=config.matcher_margin)
    options, concurrency = runtime_options(config)
    return Runtime(
        scopes={s.scope_id: s for s in scopes},
        embedder=emb,
        context=kinds.Context(ds, matcher, config.cache_dir),
        options=options,
        concurrency=concurrency,
        store_embedders=dict(stores),
        curation=config.curation,
        store_url=config.store,
        on_pass=on_pass,
        stop_on_fatal=True,
        quiet=quiet,
    )


def _run(
    config: RunConfig,
    out: Path,
    started: str,
    quiet: bool,
    dataset: Any,
    embedder: Any,
    on_pass: Callable[[PassRow], None] | None,
    report: bool,
) -> RunResult:
    from memkit.embed import get_embedder

    ds = dataset if dataset is not None else load_any(config.dataset, limit=config.limit)
    units = UnitFiles(out / "units" / resume_key(config, ds))
    if embedder is None:
        inner = get_embedder(config.embedder)
        embedder = CachingEmbedder(inner) if inner is not None else None  # None: keyword only
    emb = embedder
    scopes = scopes_of(ds, config.scopes)
    plan = run_plan(config, [s.scope_id for s in scopes])
    stores = store_systems(config, emb) if config.store_mode else []
    progress = Progress(len(plan.units), quiet)

    def step(u: Unit, what: str) -> None:
        label = u.system.name if u.system.mode == STORE else u.system.spec
        progress.step(f"{label} {u.scope}" + (f" ({what})" if what else ""))

    rt = _runtime(config, ds, emb, scopes, stores, on_pass, quiet)
    ran = execute(plan, rt, finished=units.finished, keep=units.keep, step=step)
    files = gather(ran.results.values())
    for k in ROW_FILES:
        write_jsonl(out / f"{k}.jsonl", files[k])
    pairs = list(getattr(ds, "pairs", ()) or ())
    write_json(out / "matcher.json", matcher_accuracy(pairs, config))
    # the summaries read the files just written, typed (a malformed row is a RowError)
    health = failure_summary(rows_of(out, AttemptRow), config.max_failure_share, ran.stopped)
    write_manifest(
        out,
        name=config.name,
        config=config.to_dict(),
        dataset=ds,
        dataset_path=config.dataset,
        embedder=getattr(emb, "name", None),
        seed=config.seed,
        systems=[s.name for s in plan.systems],
        started_at=started,
        **(
            {"embedders": {n: getattr(e, "name", None) for n, e in stores}}
            if len(stores) > 1
            else {}
        ),
        embedder_errors=embedder_errors(rows_of(out, ProbeRow), emb),
        recall_floors=recall_floors(config, stores or [("store", emb)]),
        providers={"failures": health, "limits": ran.limits},
    )
    table = metrics_from_run(out)
    write_metrics(out, table)
    write_latency(out)
    write_ingest(out, files["timing"])
    write_evidence(out, files["evidence"])
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


def recall_floors(config: RunConfig, stores: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The recall floor each store system used: the run's `recall.floor` when set, else
    its embedder's own default (`RecallParams(floor=None)`), so a manifest read later
    says which floor made the numbers even after an embedder's default moves. None: a
    keyword-only system (no vector path, no floor)."""
    from memkit.embed import default_floor_of

    set_floor = dict(config.recall).get("floor")
    return {
        name: None if e is None else (set_floor if set_floor is not None else default_floor_of(e))
        for name, e in stores
    }


def embedder_errors(probes: Sequence[ProbeRow], emb: Any) -> dict[str, Any]:
    """How often the embedder failed: probes whose recall fell back to keywords because
    embedding the query raised, of all probes, and the last error seen this process."""
    return {
        "probes": sum(1 for r in probes if r.fallback == "embed_error"),
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
