"""`memkit eval run`: one run folder per dataset, through `evals.runner.run_eval`.

The flags and the experiment file become a `RunConfig` (`evals.cli.flags`,
`evals.experiment.run_overrides`); the run's units are planned and executed in
`evals.runner`; this module only claims the folder, handles Ctrl-C (the
command that resumes) and the local server, and judges the finished run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from evals.cli.base import DEFAULT_CACHE, DEFAULT_RUNS, RunFailed, guarded, parser
from evals.cli.flags import (
    check_provider_values,
    common,
    config_from,
    experiment_of,
    load_checked,
    model_options,
    provider_flags,
)
from evals.cli.record import print_recorded
from evals.providers import is_llm
from memkit.errors import ConfigError


def _run_parser() -> argparse.ArgumentParser:
    p = parser("memkit eval run", run_main.__doc__)
    common(p)
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
    provider_flags(p)
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
    check_provider_values(a)
    if a.mode == "store" and a.consolidator:
        raise ConfigError(
            "--consolidator applies to pipeline mode; --mode store runs none "
            "(use --mode both or --mode pipeline)"
        )
    exp = experiment_of(a)
    if exp and len(exp.datasets) > 1 and not (a.dataset or a.preset):
        # one run folder per dataset of the experiment, under --out
        root = Path(a.out) if a.out else DEFAULT_RUNS / (a.name or exp.name or default_name("run"))
        from evals.experiment import dataset_folders

        runs = dataset_folders(exp, root)
        return max(run_main([*argv, "--dataset", d, "--out", str(out)]) for d, out in runs)
    if a.local_server:
        return _with_local_server(a, argv, exp)
    return _run_one(a, argv, exp)


def _with_local_server(a: argparse.Namespace, argv: list[str], exp: Any) -> int:
    """`--local-server`: one run against a server started for it and stopped after it."""
    from memkit import local_server
    from memkit.errors import LocalServerError

    specs = a.consolidator or (exp.consolidators if exp else ())
    if not any(is_llm(str(c)) for c in specs):
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
    from evals.experiment import run_overrides
    from evals.providers import below_floors, parse_floors
    from evals.record import record_run
    from evals.runner import preflight, resume_key, run_eval
    from evals.runs import claim_run_dir, default_name

    floors = parse_floors(a.fail_under)
    extra: dict[str, Any] = {
        "cache_dir": a.cache_dir,
        "curation": a.curation,
        "store": a.store,
        "max_failure_share": a.max_failure_share,
        **run_overrides(
            exp,
            name=a.name,
            replicates=a.replicates,
            concurrency=a.concurrency,
            dataset_given=bool(a.dataset or a.preset),
            consolidators=a.consolidator,
            mode=a.mode,
        ),
    }
    if not extra.get("name"):
        extra["name"] = Path(a.out).name if a.out else default_name(a.preset or "run")
    cfg = config_from(a, **extra)
    _refuse_inapplicable(a, cfg)
    cfg = dataclasses.replace(cfg, model_options=model_options(a, cfg.consolidators, exp))
    llms = [c for c in cfg.consolidators if is_llm(c)]
    if a.record and len(llms) != 1:
        raise ConfigError(
            f"--record writes the recording of one litellm:<model> consolidator; this run has "
            f"{len(llms)} ({', '.join(llms) or 'none'}); record the run afterwards with "
            "`memkit eval record RUN --system SPEC --out FILE`"
        )
    preflight(cfg)  # before any data is read or any folder made: a dead provider fails in seconds
    ds = load_checked(cfg)
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
        print_recorded(record_run(res.out, a.record, system=f"pipeline:{llms[0]}"))
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
    elif a.api_base and not any(is_llm(c) for c in cfg.consolidators):
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
