"""Flags `eval run` and `eval sweep` share, and how they become a `RunConfig`.

Every value is checked before any work starts (`evals.checks`,
`evals.tunables`); per-model provider options come from the experiment file,
then the flags, then `--model-option` (`evals.experiment`, `evals.providers`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from memkit.errors import ConfigError


def common(p: argparse.ArgumentParser) -> None:
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


def provider_flags(p: argparse.ArgumentParser) -> None:
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


def check_provider_values(a: argparse.Namespace) -> None:
    """The counts and durations run and sweep share, checked before any work."""
    from evals.checks import check_count, check_positive

    for flag in ("concurrency", "max_tokens", "context_tokens", "max_request_bytes"):
        check_count(f"--{flag.replace('_', '-')}", getattr(a, flag))
    check_positive("--timeout", a.timeout)


def experiment_of(a: argparse.Namespace) -> Any:
    if not getattr(a, "experiment", None):
        return None
    from evals.experiment import load_experiment

    return load_experiment(a.experiment)


def model_options(
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
        "response_format": None if a.response_format is None else json_arg(a.response_format),
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
        out[spec][key] = json_arg(val)
    for spec, opts in out.items():
        validate_options(spec, opts)
    return {k: v for k, v in out.items() if v}


def json_arg(text: str) -> Any:
    """A value from the command line: JSON when it parses, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def config_from(a: argparse.Namespace, **extra: Any) -> Any:
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


def load_checked(cfg: Any) -> Any:
    """The dataset of `cfg`, with its `--scope` names checked against it."""
    from evals.replay import scopes_of
    from evals.runner import load_any

    ds = load_any(cfg.dataset, limit=cfg.limit)
    scopes_of(ds, cfg.scopes)  # unknown scope names are refused here, before any work
    return ds


def progress_bar(label: str) -> Callable[[int, int, str], None]:
    """A `progress(done, total, what)` callback drawing `evals.runner.Progress`."""
    from evals.runner import Progress

    bar: list[Progress] = []

    def step(done: int, total: int, what: str) -> None:
        if not bar:
            bar.append(Progress(total, label=label))
        bar[0].step(what)

    return step
