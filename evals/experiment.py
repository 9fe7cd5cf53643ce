"""An experiment file: models with their options, datasets, modes and replicates, in TOML.

Read with the standard library (`tomllib`) by both `memkit eval run` and
`memkit eval sweep` (`--experiment FILE`); flags given on the command line
win over the file. The file holds no key: a model names the environment
variable its key is in (`api_key_env`), or the provider's usual one is used.

    name = "local-vs-hosted"
    datasets = ["datasets/bundled"]      # or: dataset = "..."
    modes = ["pipeline"]                 # store, pipeline (both: ["store", "pipeline"])
    replicates = 3
    concurrency = 8                      # requests in flight per model (default 4)

    [models."litellm:openai/gpt-4o-mini"]
    temperature = 0
    seed = 7

    [models."litellm:hosted_vllm/Qwen2.5-7B-Instruct"]
    api_base = "http://localhost:8000/v1"
    json_mode = false
    concurrency = 16

    [models.heuristic]                   # a baseline: no options

This module reads and checks the file and merges it with the command line
(pure: `run_overrides`, `sweep_consolidator`, `dataset_folders`); the result is
a `RunConfig` that `evals.plan.run_plan` turns into units like any other run.
`evals.providers` turns model options into consolidator arguments.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.providers import is_llm, validate_options
from memkit.errors import ConfigError

KEYS = ("name", "dataset", "datasets", "modes", "replicates", "concurrency", "models")
MODES = ("store", "pipeline")


@dataclass(frozen=True)
class Experiment:
    """What an experiment file asks for (empty fields: not given)."""

    path: str
    name: str | None = None
    datasets: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    replicates: int | None = None
    concurrency: int | None = None
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def consolidators(self) -> tuple[str, ...]:
        return tuple(self.models)

    def model_options(self) -> dict[str, dict[str, Any]]:
        return {spec: dict(opts) for spec, opts in self.models.items() if opts}


def _positive(path: str, key: str, v: Any) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ConfigError(f"{path}: {key} must be an integer >= 1, got {v!r}")
    return v


def load_experiment(path: str | Path) -> Experiment:
    """Parse and check an experiment file; every problem is a ConfigError naming it."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"experiment file {str(p)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    where = str(p)
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})"
        )
    if "dataset" in doc and "datasets" in doc:
        raise ConfigError(f"{where}: give dataset or datasets, not both")
    datasets = doc.get("datasets", [doc["dataset"]] if "dataset" in doc else [])
    if not isinstance(datasets, list) or not all(isinstance(d, str) and d for d in datasets):
        raise ConfigError(f"{where}: datasets must be a list of dataset specs, got {datasets!r}")
    modes = doc.get("modes", [])
    if isinstance(modes, str):
        modes = ["store", "pipeline"] if modes == "both" else [modes]
    bad = [m for m in modes if m not in MODES]
    if not isinstance(modes, list) or bad:
        raise ConfigError(f"{where}: modes must be a list of {' / '.join(MODES)}, got {modes!r}")
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f'{where}: models must be tables, e.g. [models."litellm:openai/x"]')
    checked: dict[str, dict[str, Any]] = {}
    for spec, opts in models.items():
        if not isinstance(opts, dict):
            raise ConfigError(f"{where}: models.{spec!r} must be a table of options")
        validate_options(spec, opts)
        if opts and not is_llm(spec):
            raise ConfigError(f"{where}: {spec!r} takes no options (only litellm:<model> does)")
        checked[spec] = dict(opts)
    name = doc.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where}: name must be a non-empty string, got {name!r}")
    return Experiment(
        path=where,
        name=name,
        datasets=tuple(datasets),
        modes=tuple(modes),
        replicates=_positive(where, "replicates", doc.get("replicates")),
        concurrency=_positive(where, "concurrency", doc.get("concurrency")),
        models=checked,
    )


MODE_FLAGS: dict[str, tuple[str, ...]] = {
    "store": ("store",),
    "pipeline": ("pipeline",),
    "both": ("store", "pipeline"),
}
"""`--mode` -> the modes it runs."""


def run_overrides(
    exp: Experiment | None,
    *,
    name: str | None = None,
    replicates: int | None = None,
    concurrency: int | None = None,
    dataset_given: bool = False,
    consolidators: Sequence[str] | None = None,
    mode: str | None = None,
) -> dict[str, Any]:
    """`RunConfig` fields from an experiment file under the command line's flags (a
    flag given wins; None: not given). A field neither gives is left out."""
    out: dict[str, Any] = {
        "name": name or (exp.name if exp else None),
        "replicates": replicates or (exp.replicates if exp else None),
        "concurrency": concurrency or (exp.concurrency if exp else None),
    }
    if exp and exp.datasets and not dataset_given:
        out["dataset"] = exp.datasets[0]
    if consolidators:
        out["consolidators"] = tuple(consolidators)
    elif exp and exp.models:
        out["consolidators"] = exp.consolidators
    modes = MODE_FLAGS.get(mode or "", exp.modes if exp else ())
    if modes:
        out["store_mode"] = "store" in modes
        if "pipeline" not in modes:
            out["consolidators"] = ()
    return {k: v for k, v in out.items() if v is not None}


def sweep_consolidator(exp: Experiment | None, flag: str | None) -> str:
    """The one consolidator a sweep scores: the flag's, else the file's only model,
    else the heuristic; a file with several models needs the flag."""
    if flag is not None:
        return flag
    if exp and exp.models:
        if len(exp.models) > 1:
            raise ConfigError(
                f"{exp.path} lists {len(exp.models)} models; a sweep scores one: pick it with "
                f"--consolidator ({', '.join(exp.models)})"
            )
        return exp.consolidators[0]
    return "heuristic"


def dataset_folders(exp: Experiment, root: Path) -> list[tuple[str, Path]]:
    """(dataset spec, its run folder under `root`) per dataset of an experiment."""
    out = []
    for spec in exp.datasets:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_.") or "dataset"
        out.append((spec, root / slug))
    return out
