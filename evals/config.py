"""What a run is asked to do: `RunConfig`, the named presets, and loading its dataset.

A `RunConfig` is everything that determines a run's results (recorded in the
manifest); `evals.plan.run_plan` turns one into the units `evals.execute`
runs. `load_any` reads a dataset folder in memkit's format or a public
benchmark through its adapter (`<adapter>:<path>`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.runfolder import REPO
from memkit.errors import ConfigError
from memkit.params import AssemblyParams, ConsolidationParams, FoldParams, RecallParams
from memkit.store import is_postgres_url, redacted_url

PRESETS: dict[str, dict[str, Any]] = {
    "bundled": {
        "dataset": "datasets/bundled",
        "store_mode": True,
        # SmolLM2-135M recorded free-form and schema-constrained (README: "Recorded
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
    The results are the same (a test and the README say so)."""
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
    kind, sep, where = spec.partition(":")
    if sep and kind in ADAPTERS:
        from evals import adapters

        if kind == "locomo":
            return adapters.load_locomo(where, limit=limit)
        if kind == "msc":
            return adapters.load_msc(where, limit=limit)
        if kind == "tau_bench":
            return adapters.load_tau_bench(where, limit=limit)
        if kind == "swe_agent":
            return adapters.load_swe_agent(where, limit=limit)
        variant = "s" if kind == "longmemeval_s" else "oracle"
        return adapters.load_longmemeval(where, variant, limit=limit)
    if sep and kind.isidentifier() and not Path(spec).exists():
        from evals.checks import unknown

        raise unknown("dataset adapter", kind, ADAPTERS)
    if limit is not None:
        raise ConfigError(
            f"limit applies to the adapters ({', '.join(ADAPTERS)}), not to the "
            f"dataset folder {spec!r}: it would be ignored"
        )
    from evals.datasets import load_dataset

    path = Path(spec)
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        path = REPO / path  # repo-relative (presets), whatever the working directory
    if path.is_file():
        adapter = adapter_for_file(path)
        hint = (
            f"; it looks like {adapter} data: use --dataset {adapter}:{path.parent}"
            if adapter
            else f"; a public benchmark's file is read by an adapter: <adapter>:{path.parent} "
            f"({', '.join(ADAPTERS)})"
        )
        raise ConfigError(f"{spec!r} is a file, not a dataset folder{hint}")
    return load_dataset(path)
