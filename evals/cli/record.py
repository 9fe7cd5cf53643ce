"""`memkit eval record`: a run's real-model answers as a recording (docs/cli.md)."""

from __future__ import annotations

import argparse
from typing import Any

from evals.cli.base import guarded, parser
from memkit.errors import ConfigError


def print_recorded(summary: dict[str, Any]) -> None:
    left = ", ".join(f"{k} {v}" for k, v in sorted(summary["left_out"].items()))
    print(
        f"recorded {summary['system']}: {summary['entries']} requests ({summary['answered']} "
        f"answered, {summary['errors']} provider errors"
        + (f"; left out: {left}" if left else "")
        + f"; request budget {summary['request_budget']} bytes) -> {summary['out']}"
    )


def _record_parser() -> argparse.ArgumentParser:
    p = parser("memkit eval record", record_main.__doc__)
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
    print_recorded(record_run(list(a.run), a.out, system=a.system, note=a.note))
    return 0
