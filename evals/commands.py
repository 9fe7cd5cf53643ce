"""`memkit eval run|sweep|compare|list`, `memkit bench ...` and `memkit report`.

The evaluation suite's commands, plugged into `memkit` through the
`memkit.commands` entry points in pyproject.toml (`eval_main`, `bench_main`,
`report_main`). Each `*_main(argv) -> int` parses its flags, checks every
value before any work starts (`evals.checks`), maps them onto a library
function in `evals.runner`, `evals.sweep` or `evals.report`, and prints where
the results went.

Exit status: 0 ok; 1 a failed run (e.g. the embedder failed on every probe),
a missing optional extra or an I/O error (naming the path); 2 a usage error
(bad flag, value, name or configuration); 130 interrupted (with the command
that resumes).

Why over 600 lines: every `memkit eval|bench|report` subcommand's flags
(60-odd options, each with its help text) and value checks; argparse
declarations are long but flat. Issue #35 plans thinner commands over one
execution plan.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memkit.errors import ConfigError, MemkitError, MissingExtra, did_you_mean

DEFAULT_ROOT = Path("reports")
"""Where `memkit eval list` looks by default: every run folder under it, at any depth."""
DEFAULT_RUNS = DEFAULT_ROOT / "runs"
DEFAULT_CACHE = Path("reports") / "cache"
EXTRAS = {"faiss": "pip install -e '.[bench]' (or: pip install faiss-cpu)"}
"""Optional imports -> the install command that brings them."""


class RunFailed(MemkitError):
    """The command ran but its result must not be trusted (exit 1)."""


def guarded(prog: str) -> Callable:
    """Turn a command's expected failures into one line on stderr and an exit code."""

    def wrap(fn: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
        @functools.wraps(fn)
        def main(argv: list[str] | None = None) -> int:
            argv = list(sys.argv[1:] if argv is None else argv)
            try:
                return int(fn(argv) or 0)
            except (RunFailed, MissingExtra) as e:
                print(f"{prog}: {e}", file=sys.stderr)
                return 1
            except MemkitError as e:  # bad values, names, datasets, configuration
                print(f"{prog}: {e}", file=sys.stderr)
                return 2
            except ModuleNotFoundError as e:
                root = (e.name or "").split(".")[0]
                if root not in EXTRAS:
                    raise
                print(
                    f"{prog}: needs the optional package {root!r}: {EXTRAS[root]}", file=sys.stderr
                )
                return 1
            except OSError as e:
                path = e.filename or "?"
                print(f"{prog}: {e.strerror or e}: {path}", file=sys.stderr)
                return 1

        return main

    return wrap


def _parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=prog,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        metavar="SPEC",
        help="dataset folder in memkit's format, or <adapter>:<datasets dir> with adapter "
        "locomo, longmemeval, longmemeval_s, msc, tau_bench or swe_agent (docs/datasets.md)",
    )
    p.add_argument("--preset", help="a named configuration: bundled (datasets/bundled)")
    p.add_argument(
        "--limit", type=int, help="adapters only: keep the first N conversations/questions"
    )
    p.add_argument(
        "--scope", action="append", metavar="ID", help="only this scope (repeatable; default all)"
    )
    p.add_argument(
        "--embedder",
        action="append",
        help="wordllama (default, offline), minilm (offline, the embed extra), hashing, "
        "litellm:<model>, or none (keyword only); eval run takes it repeated: one store "
        "system per embedder (store@<name>) on the same probes, compared pairwise",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="TUNABLE=VALUE",
        help="override a tunable, e.g. --set recall.floor=0.3 (repeatable; typed and "
        "range-checked)",
    )
    p.add_argument("--seed", type=int, help="seed of the latency bootstrap (default 0)")
    p.add_argument(
        "--resamples", type=int, help="bootstrap resamples for latency quantiles (default 1000)"
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress on stderr (results still print)"
    )


def _provider_flags(p: argparse.ArgumentParser) -> None:
    """Flags that configure litellm:<model> consolidators, shared by run and sweep."""
    g = p.add_argument_group(
        "LLM providers",
        "Options for every litellm:<model> consolidator. Keys come from the provider's usual "
        "environment variable (e.g. OPENAI_API_KEY) or --api-key-env; never from a flag.",
    )
    g.add_argument(
        "--experiment",
        metavar="FILE",
        help="experiment file (TOML): models with their options, datasets, modes, replicates; "
        "flags win over it (README: 'LLM providers')",
    )
    g.add_argument("--api-base", metavar="URL", help="OpenAI-compatible server or gateway URL")
    g.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the key (default: the provider's usual one)",
    )
    g.add_argument("--temperature", type=float, help="sampling temperature")
    g.add_argument("--max-tokens", type=int, help="output token cap per request")
    g.add_argument(
        "--json-mode",
        choices=("on", "off"),
        help="ask for JSON mode (response_format json_object); default: when LiteLLM says "
        "the model supports it",
    )
    g.add_argument(
        "--response-format", metavar="JSON", help="a response_format object, sent as given"
    )
    g.add_argument(
        "--structured-output",
        choices=("json_schema", "json_object"),
        help="send memkit's proposal JSON Schema as response_format: json_schema (OpenAI's "
        "form; vLLM, Ollama, llama-server) or json_object (+schema: llama-cpp-python's server)",
    )
    g.add_argument(
        "--context-tokens",
        type=int,
        help="the model's context in tokens: requests are shaped to fit it with the answer "
        "(default: LiteLLM's model map, else the SPEC's 60,000 bytes)",
    )
    g.add_argument(
        "--max-request-bytes", type=int, help="shape requests to at most this many bytes"
    )
    g.add_argument(
        "--model-seed", type=int, help="the provider's sampling seed (--seed is the bootstrap's)"
    )
    g.add_argument("--timeout", type=float, help="seconds per request (default 60)")
    g.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="SPEC:KEY=VALUE",
        help="one option of one model, e.g. litellm:openai/gpt-4o-mini:temperature=0 "
        "(repeatable; wins over the flags above)",
    )


def _check_provider_values(a: argparse.Namespace) -> None:
    """The counts and durations run and sweep share, checked before any work."""
    from evals.checks import check_count, check_positive

    for flag in ("concurrency", "max_tokens", "context_tokens", "max_request_bytes"):
        check_count(f"--{flag.replace('_', '-')}", getattr(a, flag))
    check_positive("--timeout", a.timeout)


def _experiment(a: argparse.Namespace) -> Any:
    if not getattr(a, "experiment", None):
        return None
    from evals.experiment import load_experiment

    return load_experiment(a.experiment)


def _model_options(
    a: argparse.Namespace, specs: tuple[str, ...], exp: Any
) -> dict[str, dict[str, Any]]:
    """Per litellm model: the experiment file's options, then the flags, then --model-option."""
    from evals.providers import is_llm, validate_options

    flags = {
        "api_base": a.api_base,
        "api_key_env": a.api_key_env,
        "temperature": a.temperature,
        "max_tokens": a.max_tokens,
        "json_mode": None if a.json_mode is None else a.json_mode == "on",
        "response_format": None if a.response_format is None else _json_arg(a.response_format),
        "seed": a.model_seed,
        "timeout": a.timeout,
        "structured_output": a.structured_output,
        "context_tokens": a.context_tokens,
        "max_request_bytes": a.max_request_bytes,
    }
    llms = [s for s in specs if is_llm(s)]
    given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
    if given and not llms:
        raise ConfigError(f"{', '.join(given)} configure litellm:<model> consolidators; none given")
    out: dict[str, dict[str, Any]] = {}
    for spec in llms:
        opts = dict((exp.models.get(spec) if exp else None) or {})
        opts.update({k: v for k, v in flags.items() if v is not None})
        out[spec] = opts
    for item in a.model_option:
        left, sep, val = item.partition("=")
        spec, _, key = left.rpartition(":")
        if not sep or not spec or not key:
            raise ConfigError(f"--model-option wants SPEC:KEY=VALUE, got {item!r}")
        if spec not in out:
            raise ConfigError(
                f"--model-option names {spec!r}, not one of the litellm consolidators "
                f"({', '.join(llms) or 'none'})"
            )
        out[spec][key] = _json_arg(val)
    for spec, opts in out.items():
        validate_options(spec, opts)
    return {k: v for k, v in out.items() if v}


def _json_arg(text: str) -> Any:
    """A value from the command line: JSON when it parses, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _config(a: argparse.Namespace, **extra: Any) -> Any:
    from evals.runner import RunConfig, preset
    from evals.tunables import parse_set

    kw: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    for key in ("limit", "seed", "resamples"):
        if getattr(a, key, None) is not None:
            kw[key] = getattr(a, key)
    if a.embedder:
        kw["embedder"] = a.embedder[0]
        if len(a.embedder) > 1:
            kw["embedders"] = tuple(a.embedder)
    for key in ("limit", "resamples"):
        if key in kw and kw[key] < 1:
            raise ConfigError(f"--{key} must be a positive integer, got {kw[key]}")
    if a.scope:
        kw["scopes"] = tuple(a.scope)
    if a.dataset:
        kw["dataset"] = a.dataset
    kw.update(parse_set(a.set))
    if a.preset:
        return preset(a.preset, **kw)
    if "dataset" not in kw:
        raise ConfigError("give --dataset or --preset")
    return RunConfig(**kw)


def _load_checked(cfg: Any) -> Any:
    """The dataset of `cfg`, with its `--scope` names checked against it."""
    from evals.replay import scopes_of
    from evals.runner import load_any

    ds = load_any(cfg.dataset, limit=cfg.limit)
    scopes_of(ds, cfg.scopes)  # unknown scope names are refused here, before any work
    return ds


def _run_parser() -> argparse.ArgumentParser:
    p = _parser("memkit eval run", run_main.__doc__)
    _common(p)
    p.add_argument(
        "--out",
        metavar="DIR",
        help="run folder (default reports/runs/<name>); an existing run folder is refused "
        "unless --resume or --overwrite",
    )
    p.add_argument(
        "--name",
        help="run name, recorded in the manifest (default: the --out folder's name, else "
        "<preset or 'run'>-<UTC time>-<short id>, unique)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out (only with the same configuration)",
    )
    p.add_argument("--overwrite", action="store_true", help="clear the run folder in --out first")
    p.add_argument(
        "--mode",
        choices=("store", "pipeline", "both"),
        help="store mode, pipeline mode, or both (default: both when consolidators are given)",
    )
    p.add_argument(
        "--consolidator",
        action="append",
        metavar="SPEC",
        help="heuristic, oracle, litellm:<model>, replay:<recording.jsonl or run-dir> (repeatable)",
    )
    p.add_argument("--replicates", type=int, help="pipeline replicates per scope (default 1)")
    p.add_argument(
        "--concurrency",
        type=int,
        help="requests in flight per model, lowered on 429 and raised back (default 4)",
    )
    p.add_argument(
        "--fail-under",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="exit 1 when a system's headline METRIC is below VALUE (repeatable; for CI)",
    )
    p.add_argument(
        "--max-failure-share",
        type=float,
        default=0.5,
        help="exit 1 when a system's share of attempts without an answer exceeds this "
        "(default %(default)s)",
    )
    _provider_flags(p)
    p.add_argument(
        "--cache-dir", default=str(DEFAULT_CACHE), help="LLM response cache (default %(default)s)"
    )
    p.add_argument(
        "--curation",
        choices=("latest_row", "all_rows"),
        help="store mode: which rows a curated fact's write lands on (default latest_row)",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="where each scope's fresh store lives: in memory (default) or postgresql://... "
        "(a schema of its own per scope on that server, dropped afterwards; same results)",
    )
    p.add_argument("--no-report", action="store_true", help="skip report.md/report.html")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="after the run, write its one litellm model's answers as a recording "
        "(replay it offline with --consolidator replay:FILE; docs/cli.md 'Recorded runs')",
    )
    p.add_argument(
        "--local-server",
        action="store_true",
        help="start the bundled local model server (the `local` extra) for this run, point the "
        "litellm consolidators at it (e.g. litellm:hosted_vllm/smollm2-135m) and stop it after",
    )
    p.add_argument(
        "--local-server-port",
        type=int,
        default=8090,
        help="its port on 127.0.0.1 (default %(default)s; the response cache keys on it)",
    )
    return p


@guarded("memkit eval run")
def run_main(argv: list[str]) -> int:
    """Run an evaluation (store mode and/or pipeline mode) into a run folder."""
    a = _run_parser().parse_args(argv)
    from evals.checks import check_count, check_floor, check_range, check_share
    from evals.providers import parse_floors
    from evals.runs import default_name

    for m, v in parse_floors(a.fail_under).items():
        check_floor(m, v)
    check_count("--replicates", a.replicates)
    check_share("--max-failure-share", a.max_failure_share)
    check_range("--local-server-port", a.local_server_port, 0, 65535)  # 0: a free port
    _check_provider_values(a)
    if a.mode == "store" and a.consolidator:
        raise ConfigError(
            "--consolidator applies to pipeline mode; --mode store runs none "
            "(use --mode both or --mode pipeline)"
        )
    exp = _experiment(a)
    if exp and len(exp.datasets) > 1 and not (a.dataset or a.preset):
        # one run folder per dataset of the experiment, under --out
        root = Path(a.out) if a.out else DEFAULT_RUNS / (a.name or exp.name or default_name("run"))
        codes = []
        for spec in exp.datasets:
            slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_.") or "dataset"
            codes.append(run_main([*argv, "--dataset", spec, "--out", str(root / slug)]))
        return max(codes)
    if a.local_server:
        return _with_local_server(a, argv, exp)
    return _run_one(a, argv, exp)


def _with_local_server(a: argparse.Namespace, argv: list[str], exp: Any) -> int:
    """`--local-server`: one run against a server started for it and stopped after it."""
    from memkit import local_server
    from memkit.errors import LocalServerError

    specs = a.consolidator or (exp.consolidators if exp else ())
    if not any(str(c).startswith("litellm:") for c in specs):
        raise ConfigError("--local-server serves litellm:<model> consolidators; none is given")
    if a.api_base:
        raise ConfigError("--local-server gives the run its --api-base; pass only one of them")
    try:
        with local_server.running(a.local_server_port) as srv:
            a.api_base = srv.api_base
            if a.context_tokens is None and a.max_request_bytes is None:
                a.context_tokens = local_server.CONTEXT_TOKENS  # shape requests to fit it
            return _run_one(a, argv, exp)
    except LocalServerError as e:
        raise RunFailed(str(e)) from None


def _run_one(a: argparse.Namespace, argv: list[str], exp: Any) -> int:
    """One run folder (run_main after the experiment's datasets are split)."""
    from evals.providers import below_floors, parse_floors
    from evals.record import record_run
    from evals.runner import preflight, resume_key, run_eval
    from evals.runs import claim_run_dir, default_name

    floors = parse_floors(a.fail_under)
    extra: dict[str, Any] = {
        "name": a.name or (exp.name if exp else None),
        "replicates": a.replicates or (exp.replicates if exp else None),
        "concurrency": a.concurrency or (exp.concurrency if exp else None),
        "cache_dir": a.cache_dir,
        "curation": a.curation,
        "store": a.store,
        "max_failure_share": a.max_failure_share,
    }
    if exp and exp.datasets and not (a.dataset or a.preset):
        extra["dataset"] = exp.datasets[0]
    if a.consolidator:
        extra["consolidators"] = tuple(a.consolidator)
    elif exp and exp.models:
        extra["consolidators"] = exp.consolidators
    modes = {"store": ("store",), "pipeline": ("pipeline",), "both": ("store", "pipeline")}.get(
        a.mode or "", exp.modes if exp else ()
    )
    if modes:
        extra["store_mode"] = "store" in modes
        if "pipeline" not in modes:
            extra["consolidators"] = ()
    if not extra["name"]:
        extra["name"] = Path(a.out).name if a.out else default_name(a.preset or "run")
    cfg = _config(a, **extra)
    _refuse_inapplicable(a, cfg)
    cfg = dataclasses.replace(cfg, model_options=_model_options(a, cfg.consolidators, exp))
    llms = [c for c in cfg.consolidators if c.startswith("litellm:")]
    if a.record and len(llms) != 1:
        raise ConfigError(
            f"--record writes the recording of one litellm:<model> consolidator; this run has "
            f"{len(llms)} ({', '.join(llms) or 'none'}); record the run afterwards with "
            "`memkit eval record RUN --system SPEC --out FILE`"
        )
    preflight(cfg)  # before any data is read or any folder made: a dead provider fails in seconds
    ds = _load_checked(cfg)
    out = Path(a.out) if a.out else DEFAULT_RUNS / cfg.name
    claim = claim_run_dir(
        out, cfg.to_dict(), resume_key(cfg, ds), resume=a.resume, overwrite=a.overwrite
    )
    try:
        with claim:
            res = run_eval(
                cfg, out, quiet=a.quiet, report=not a.no_report, dataset=ds, check_providers=False
            )
    except KeyboardInterrupt:
        again = [x for x in argv if x not in ("--resume", "--overwrite")]
        if not a.out:
            again += ["--out", str(out)]
        print(
            f"memkit eval run: interrupted; finished units are kept in {out}: resume with "
            f"`{shlex.join(['memkit', 'eval', 'run', *again, '--resume'])}`",
            file=sys.stderr,
        )
        return 130
    problems = [*res.failures, *below_floors(res.metrics.to_dict("records"), floors)]
    for line in problems:
        print(line, file=sys.stderr)
    if a.record:
        _print_recorded(record_run(res.out, a.record, system=f"pipeline:{llms[0]}"))
    from evals.report import headline_text

    print(headline_text(res.out))  # the summary: the headline, then where the run went
    print(f"run written to {res.out}")
    if not a.no_report:
        print(f"report: {res.out / 'report.html'}")
    if problems:
        raise RunFailed(f"{len(problems)} check(s) failed; see the lines above and the report")
    failed = _embedder_failed(res.out)
    if failed:
        raise RunFailed(failed)
    return 0


def _print_recorded(summary: dict[str, Any]) -> None:
    left = ", ".join(f"{k} {v}" for k, v in sorted(summary["left_out"].items()))
    print(
        f"recorded {summary['system']}: {summary['entries']} requests ({summary['answered']} "
        f"answered, {summary['errors']} provider errors"
        + (f"; left out: {left}" if left else "")
        + f"; request budget {summary['request_budget']} bytes) -> {summary['out']}"
    )


def _record_parser() -> argparse.ArgumentParser:
    p = _parser("memkit eval record", record_main.__doc__)
    p.add_argument(
        "run",
        nargs="+",
        help="finished run folder(s) with a litellm:<model> system; several (e.g. one per "
        "--scope) make one recording when they agree on model, options, budget and dataset",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the recording to write (.jsonl)")
    p.add_argument(
        "--system", metavar="SPEC", help="which litellm system (default: the run's only one)"
    )
    p.add_argument("--note", help="free text kept in the header (server, model file, ...)")
    return p


@guarded("memkit eval record")
def record_main(argv: list[str]) -> int:
    """Write a run's real-model answers as a recording, replayed offline by request hash
    with `--consolidator replay:FILE` (docs/cli.md: 'Recorded runs')."""
    a = _record_parser().parse_args(argv)
    from evals.record import record_run

    if not a.out.endswith(".jsonl"):
        raise ConfigError(f"--out must name a .jsonl file, got {a.out!r}")
    _print_recorded(record_run(list(a.run), a.out, system=a.system, note=a.note))
    return 0


def _refuse_inapplicable(a: argparse.Namespace, cfg: Any) -> None:
    """Options that would be ignored by this run are refused, never recorded as if used."""
    if not cfg.consolidators:
        for flag, value in (
            ("--replicates", a.replicates),
            ("--concurrency", a.concurrency),
            ("--api-base", a.api_base),
        ):
            if value is not None:
                raise ConfigError(f"{flag} applies to pipeline mode; this run has no consolidator")
    elif a.api_base and not any(c.startswith("litellm:") for c in cfg.consolidators):
        raise ConfigError("--api-base applies to litellm:<model> consolidators; none is given")
    if a.curation is not None and not cfg.store_mode:
        raise ConfigError("--curation applies to store mode; this run is pipeline mode only")


def _embedder_failed(run: Path) -> str | None:
    """A message when the run's embedder failed on every probe (its numbers are keyword-only)."""
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    e = manifest.get("embedder_errors") or {}
    if e.get("probes_total") and e.get("probes") == e["probes_total"]:
        return (
            f"the embedder {manifest.get('embedder')!r} failed on every probe "
            f"({e['probes']}/{e['probes_total']}; last error: {e.get('last')}); every "
            "recall took the keyword path, so this run does not measure that embedder"
        )
    return None


def _progress(label: str) -> Callable[[int, int, str], None]:
    """A `progress(done, total, what)` callback drawing `evals.runner.Progress`."""
    from evals.runner import Progress

    bar: list[Progress] = []

    def step(done: int, total: int, what: str) -> None:
        if not bar:
            bar.append(Progress(total, label=label))
        bar[0].step(what)

    return step


def _sweep_parser() -> argparse.ArgumentParser:
    p = _parser("memkit eval sweep", sweep_main.__doc__)
    _common(p)
    p.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="TUNABLE=V1,V2,...",
        help="values to try, e.g. --grid floor=0.1,0.2,0.3 (repeatable: product)",
    )
    p.add_argument(
        "--objective",
        default="default",
        help="'default' (smallest budget_waste whose recall_at_8 is not significantly more "
        "than --margin below the best point's) or any registered metric (its better direction)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.05,
        help="default objective: recall_at_8 a point may lose against the best (default 0.05)",
    )
    p.add_argument(
        "--consolidator",
        metavar="SPEC",
        help="consolidator for consolidation tunables (default: the experiment file's one "
        "model, else heuristic)",
    )
    p.add_argument(
        "--concurrency", type=int, help="requests in flight for a litellm consolidator (default 4)"
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="folder for sweep.csv, recommended.json and the report (an existing one is "
        "refused unless --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="clear the --out folder first")
    _provider_flags(p)
    return p


@guarded("memkit eval sweep")
def sweep_main(argv: list[str]) -> int:
    """Sweep a grid of tunables and recommend an operating point.

    Scored in store mode (pipeline mode for consolidation tunables)."""
    with contextlib.ExitStack() as held:  # the --out folder's lock, once it is claimed
        return _sweep_main(argv, held)


def _sweep_main(argv: list[str], held: contextlib.ExitStack) -> int:
    a = _sweep_parser().parse_args(argv)
    from evals.checks import check_share
    from evals.providers import consolidator_kwargs, preflight
    from evals.runfolder import mark_finished, mark_incomplete, now
    from evals.runs import claim_run_dir
    from evals.stats import fmt_interval
    from evals.sweep import objective_metrics, resolve, sweep
    from evals.tunables import EMBEDDER_AXIS, parse_grid

    grid = parse_grid(a.grid)
    objective_metrics(a.objective)
    check_share("--margin", a.margin)
    _check_provider_values(a)
    exp = _experiment(a)
    spec = a.consolidator
    if spec is None and exp and exp.models:
        if len(exp.models) > 1:
            raise ConfigError(
                f"{exp.path} lists {len(exp.models)} models; a sweep scores one: pick it with "
                f"--consolidator ({', '.join(exp.models)})"
            )
        spec = exp.consolidators[0]
    spec = spec or "heuristic"
    opts = _model_options(a, (spec,), exp).get(spec, {})
    # the model is called
    if any(n != EMBEDDER_AXIS and resolve(n)[0] == "consolidation" for n in grid):
        preflight(spec, opts)
    concurrency = a.concurrency or (exp.concurrency if exp else None) or 4
    extra = {"dataset": exp.datasets[0]} if exp and exp.datasets and not a.dataset else {}
    cfg = _config(a, **extra)
    if cfg.embedders:
        raise ConfigError("eval sweep takes one --embedder; sweep several with --grid embedder=A,B")
    ds = _load_checked(cfg)
    started = now()
    if a.out:
        held.enter_context(claim_run_dir(Path(a.out), cfg.to_dict(), None, overwrite=a.overwrite))
        mark_incomplete(Path(a.out), "sweep", started)  # until the report is written
    res = sweep(
        ds,
        grid,
        objective=a.objective,
        base={
            "recall": cfg.recall,
            "assembly": cfg.assembly,
            "fold": cfg.fold,
            "consolidation": cfg.consolidation,
        },
        embedder=cfg.embedder,
        consolidator=spec,
        consolidator_options=consolidator_kwargs(spec, opts, concurrency),
        scopes=cfg.scopes,
        margin=a.margin,
        progress=None if a.quiet else _progress("sweep"),
    )
    from evals.report import sweep_text

    frame = res.frame
    rec = res.recommended
    shown = [rec["metric"], *([rec["constraint"]["metric"]] if "constraint" in rec else [])]
    if not a.quiet:  # --quiet keeps only the summary below
        print("recommended:", json.dumps(rec, sort_keys=True))
    print(sweep_text(frame, list(res.params), shown, rec.get("point_index")))
    point = ", ".join(f"{k}={rec[k]}" for k in res.params)
    value = fmt_interval(rec["value"], rec["lo"], rec["hi"])
    print(f"recommended {point}: {rec['metric']} {value} ({rec['rule']})")
    for spec, r in (rec.get("by_embedder") or {}).items():  # a point per embedder
        at = ", ".join(f"{k}={r[k]}" for k in res.params)
        got = fmt_interval(r["value"], r["lo"], r["hi"])
        print(f"recommended for {spec}: {at}: {r['metric']} {got}")
    if rec.get("warning"):
        print(f"warning: {rec['warning']}", file=sys.stderr)
    if a.out:
        from evals.report import build_report
        from evals.sweep import write_sweep

        out = Path(a.out)
        write_sweep(out, res, config=cfg, dataset=ds, grid=grid, started_at=started)
        build_report(out)
        mark_finished(out)
        print(f"sweep written to {out}")
    return 0


def _compare_parser() -> argparse.ArgumentParser:
    p = _parser("memkit eval compare", compare_main.__doc__)
    p.add_argument("run", help="run folder")
    p.add_argument("--a", metavar="SYSTEM", help="system a (default: every pair of systems)")
    p.add_argument("--b", metavar="SYSTEM", help="system b")
    p.add_argument("--b-run", metavar="DIR", help="run folder of system b (default: the same run)")
    p.add_argument("--metric", action="append", help="metric to compare (repeatable; default: all)")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="pair runs on different datasets, probe sets or code anyway (says what differs)",
    )
    p.add_argument("--no-report", action="store_true", help="do not rebuild the run's report")
    p.add_argument("--quiet", action="store_true", help="print only where the results went")
    return p


@guarded("memkit eval compare")
def compare_main(argv: list[str]) -> int:
    """Paired CIs of differences between systems of a run (or two runs), over the
    units defined on both sides."""
    a = _compare_parser().parse_args(argv)
    import pandas as pd

    from evals.checks import check_metric, check_names
    from evals.compare import check_pairable, compare_runs
    from evals.runfolder import read_jsonl

    run = Path(a.run)
    if not (run / "manifest.json").is_file():
        raise ConfigError(f"{str(run)!r} is not a run folder (no manifest.json)")
    if bool(a.a) != bool(a.b):
        raise ConfigError("give both --a and --b, or neither (every pair)")
    systems = _systems(run)
    if a.a and a.b:
        check_names("system", [a.a], systems)
        check_names("system", [a.b], _systems(Path(a.b_run)) if a.b_run else systems)
        pairs = [(a.a, a.b)]
    else:
        systems = sorted({r["system"] for r in read_jsonl(run / "attempts.jsonl")})
        if len(systems) < 2:
            raise ConfigError(f"{str(run)!r} has fewer than two pipeline systems; use --a/--b")
        pairs = [(x, y) for i, x in enumerate(systems) for y in systems[i + 1 :]]
    metrics = tuple(check_metric(m) for m in a.metric) if a.metric else None
    allow = a.allow_mismatch
    for x, y in pairs:
        for why in check_pairable(run, x, Path(a.b_run or run), y, allow_mismatch=allow):
            print(f"warning: {x} vs {y}: {why}; only matching units are paired", file=sys.stderr)
    frame = pd.concat(
        [compare_runs(run, x, a.b_run, y, metrics=metrics, allow_mismatch=allow) for x, y in pairs],
        ignore_index=True,
    )
    if frame.empty:
        raise RunFailed(
            f"no metric of {', '.join(metrics or ['the defaults'])} is recorded for both "
            "systems of each pair "
            f"({', '.join(f'{x} vs {y}' for x, y in pairs)})"
        )
    cols = ["metric", "a", "b", "value", "lo", "hi", "n", "clusters", "method", "unit"]
    if not a.quiet:
        print(frame[cols].rename(columns={"n": "pairs"}).to_string(index=False))
    if not a.b_run:
        frame.to_csv(run / "compare.csv", index=False, float_format="%.6f")
        print(f"comparison written to {run / 'compare.csv'}")
        if not a.no_report:
            from evals.report import build_report

            build_report(run)
    return 0


def _systems(run: Path) -> list[str]:
    if not (run / "manifest.json").is_file():
        raise ConfigError(f"{str(run)!r} is not a run folder (no manifest.json)")
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    return list(manifest.get("systems") or [])


def _report_parser() -> argparse.ArgumentParser:
    p = _parser("memkit report", report_main.__doc__)
    p.add_argument("run", help="run folder")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


@guarded("memkit report")
def report_main(argv: list[str]) -> int:
    """Rebuild report.md and report.html from a run folder's files."""
    a = _report_parser().parse_args(argv)
    from evals.report import build_report

    md, html_ = build_report(a.run)
    if not a.quiet:
        print(f"{md}\n{html_}")
    return 0


# --- command groups -------------------------------------------------------------------


def _group(prog: str, doc: str, table: dict[str, Callable[[], Callable]], argv: list[str]) -> int:
    """`<prog> <sub> ...`: dispatch to one of `table`, or print the group's help."""
    subs = {name: load() for name, load in table.items()}
    usage = [f"usage: {prog} {{{','.join(subs)}}} [options]", "", doc, "", "commands:"]
    usage += [f"  {n:<9} {_first_line(f)}" for n, f in subs.items()]
    usage += ["", f"{prog} <command> --help shows each command's options."]
    if argv[:1] in (["-h"], ["--help"]):
        print("\n".join(usage))
        return 0
    if not argv or argv[0] not in subs:
        what = f"unknown command {argv[0]!r}{did_you_mean(argv[0], subs)}" if argv else "no command"
        print(f"{prog}: {what}\n\n" + "\n".join(usage), file=sys.stderr)
        return 2
    return subs[argv[0]](argv[1:])


def _first_line(fn: Callable) -> str:
    return ((fn.__doc__ or "").strip().splitlines() or [""])[0]


def eval_main(argv: list[str] | None = None) -> int:
    """evaluate: run, sweep, compare, list runs, record a model's answers"""
    table = {
        "run": lambda: run_main,
        "sweep": lambda: sweep_main,
        "compare": lambda: compare_main,
        "list": lambda: list_main,
        "record": lambda: record_main,
    }
    return _group("memkit eval", "Evaluate memkit on a dataset.", table, list(argv or []))


def _bench(module: str) -> Callable[[], Callable]:
    def load() -> Callable:
        import importlib

        mod = importlib.import_module(module)
        main = guarded(f"memkit bench {module.rsplit('_', 1)[1]}")(mod.main)
        main.__doc__ = mod.__doc__
        return main

    return load


def bench_main(argv: list[str] | None = None) -> int:
    """benchmarks: store, assemble, harness, redact, embed"""
    table = {
        "store": _bench("evals.bench_store"),
        "assemble": _bench("evals.bench_assemble"),
        "harness": _bench("evals.bench_harness"),
        "redact": _bench("evals.bench_redact"),
        "embed": _bench("evals.bench_embed"),
    }
    return _group(
        "memkit bench", "Speed benchmarks (ratios against baselines).", table, list(argv or [])
    )


def _list_parser() -> argparse.ArgumentParser:
    p = _parser("memkit eval list", list_main.__doc__)
    p.add_argument(
        "runs",
        nargs="*",
        default=[str(DEFAULT_ROOT)],
        help="run folders, folders holding runs at any depth, or globs (default %(default)s: "
        "reports/latest, reports/runs/*, ...)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per run")
    p.add_argument(
        "--html",
        nargs="?",
        const=str(DEFAULT_ROOT / "index.html"),
        metavar="FILE",
        help="also write one self-contained, sortable page of the runs with their headline "
        "metrics, each linking its report (default FILE %(const)s)",
    )
    return p


@guarded("memkit eval list")
def list_main(argv: list[str]) -> int:
    """List run folders: status (finished or incomplete), when, dataset, systems and
    headline numbers."""
    a = _list_parser().parse_args(argv)
    from evals.runs import find_runs, summary

    if a.runs == [str(DEFAULT_ROOT)] and not DEFAULT_ROOT.is_dir():
        print(f"no runs yet in {DEFAULT_ROOT}/ (memkit eval run ... writes them there)")
        return 0
    runs = find_runs(a.runs) if a.runs != [str(DEFAULT_ROOT)] else _default_runs()
    rows = sorted((summary(d) for d in runs), key=lambda r: (r["started"], r["path"]))
    if a.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
    elif not rows:
        print(f"no runs in {', '.join(a.runs)}")
    else:
        from evals.report import text_table

        cols = ("path", "status", "started", "dataset", "headline")
        print(text_table([list(cols), *([str(r[c]) for c in cols] for r in rows)]))
    if a.html:
        from evals.run_index import write_index

        page = write_index([Path(r["path"]) for r in rows], Path(a.html))
        print(f"index of {len(rows)} runs written to {page}")
    return 0


def _default_runs() -> list[Path]:
    """Every run under reports/ (an empty reports/ holds none: not an error)."""
    from evals.runs import find_runs

    try:
        return find_runs(DEFAULT_ROOT)
    except ConfigError:
        return []
