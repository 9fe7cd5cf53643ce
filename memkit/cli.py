"""The `memkit` command: a thin dispatcher over library and evals functions.

Each subcommand lives in the module that owns its logic and parses its own
arguments (`main(argv) -> int`), so this file stays a table and importing it
costs nothing.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[tuple[str, str | None], tuple[str, str]] = {
    ("bench", "store"): ("evals.bench_store", "recall/remember vs FAISS-flat and a row scan"),
    ("bench", "assemble"): ("evals.bench_assemble", "µs per assembled block"),
    ("bench", "harness"): ("evals.bench_harness", "harness passes/s with a mock consolidator"),
    ("eval", "run"): ("evals.commands:run_main", "run an evaluation (store or pipeline mode)"),
    ("eval", "sweep"): ("evals.commands:sweep_main", "sweep a grid of tunables"),
    ("eval", "compare"): ("evals.commands:compare_main", "paired comparison of runs"),
    ("report", None): ("evals.commands:report_main", "build report.md/html from run files"),
    ("store", "stats"): ("memkit.store_cli:stats_main", "counts per scope and kind"),
    ("store", "recall"): ("memkit.store_cli:recall_main", "recall with score breakdown"),
    ("store", "history"): ("memkit.store_cli:history_main", "revision chain of a memory"),
}


def _usage() -> str:
    lines = ["usage: memkit <command> [<sub>] [options]", "", "commands:"]
    for (cmd, sub), (_, help_) in COMMANDS.items():
        lines.append(f"  {cmd + (' ' + sub if sub else ''):<16} {help_}")
    return "\n".join(lines)


def _resolve(target: str):
    mod, _, fn = target.partition(":")
    return getattr(importlib.import_module(mod), fn or "main")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    cmd = argv[0]
    if (cmd, None) in COMMANDS:
        return int(_resolve(COMMANDS[(cmd, None)][0])(argv[1:]) or 0)
    sub = argv[1] if len(argv) > 1 else None
    if (cmd, sub) not in COMMANDS:
        print(f"memkit: unknown command {' '.join(argv[:2])!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return int(_resolve(COMMANDS[(cmd, sub)][0])(argv[2:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
