"""`memkit eval ...`, `memkit bench ...` and `memkit report`: the suite's entry points.

Plugged into `memkit` through the `memkit.commands` entry points in
pyproject.toml (`eval_main`, `bench_main`, `report_main`). Each command lives
in its own module under `evals/cli/` (`*_main(argv) -> int`, wrapped by
`evals.cli.base.guarded` for the exit-status contract); the tables below name
them, loaded only when called. A new command is one module and one line in
its group's table (`"name": "module:function"`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from evals.cli.base import group, guarded
from evals.cli.folders import compare_main, list_main, report_main
from evals.cli.record import record_main
from evals.cli.run import run_main
from evals.cli.sweep import sweep_main

__all__ = [
    "bench_main",
    "compare_main",
    "eval_main",
    "list_main",
    "record_main",
    "report_main",
    "run_main",
    "sweep_main",
]

EVAL_COMMANDS: dict[str, str] = {
    "run": "evals.cli.run:run_main",
    "sweep": "evals.cli.sweep:sweep_main",
    "compare": "evals.cli.folders:compare_main",
    "list": "evals.cli.folders:list_main",
    "record": "evals.cli.record:record_main",
    "calibrate": "evals.calibrate:main",
}
"""`memkit eval <name>` -> "module:function" of its command."""
BENCH_COMMANDS: dict[str, str] = {
    name: f"evals.bench_{name.replace('-', '_')}"
    for name in (
        "store",
        "scopes",
        "assemble",
        "harness",
        "redact",
        "embed",
        "plot",
        "fold-server",
        "fold-crossing",
        "corpus",
        "geometry",
        "targets",
    )
}
"""`memkit bench <name>` -> the module whose `main(argv)` runs it (its docstring: the help)."""


def _command(prog: str, target: str) -> Callable[[], Callable]:
    """Load `target` ("module:function") when called, under `guarded(prog)` (a command
    guarded already keeps its own; a plain `main(argv) -> int` gets the exit codes)."""

    def load() -> Callable:
        module, _, name = target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        return fn if hasattr(fn, "__wrapped__") else guarded(prog)(fn)

    return load


def _bench(name: str, module: str) -> Callable[[], Callable]:
    def load() -> Callable:
        mod = importlib.import_module(module)
        main = guarded(f"memkit bench {name}")(mod.main)
        main.__doc__ = mod.__doc__
        return main

    return load


def eval_main(argv: list[str] | None = None) -> int:
    """evaluate: run, sweep, compare, list runs, record a model's answers"""
    table = {name: _command(f"memkit eval {name}", t) for name, t in EVAL_COMMANDS.items()}
    return group("memkit eval", "Evaluate memkit on a dataset.", table, list(argv or []))


def bench_main(argv: list[str] | None = None) -> int:
    """benchmarks: store, scopes, assemble, harness, redact, embed, fold-server, fold-crossing;
    plot, corpus, geometry, targets"""
    table = {name: _bench(name, module) for name, module in BENCH_COMMANDS.items()}
    return group(
        "memkit bench", "Speed benchmarks (ratios against baselines).", table, list(argv or [])
    )
