"""What every suite command shares: the exit-status contract, parsers, command groups.

`guarded` turns a command's expected failures into one line on stderr and an
exit code: 0 ok; 1 a failed run (e.g. the embedder failed on every probe), a
missing optional extra or an I/O error (naming the path); 2 a usage error (bad
flag, value, name or configuration); 130 interrupted (with the command that
resumes).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

from memkit.errors import MemkitError, MissingExtra, did_you_mean

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


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=prog,
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def group(prog: str, doc: str, table: dict[str, Callable[[], Callable]], argv: list[str]) -> int:
    """`<prog> <sub> ...`: dispatch to one of `table`, or print the group's help."""
    subs = {name: load() for name, load in table.items()}
    usage = [f"usage: {prog} {{{','.join(subs)}}} [options]", "", doc, "", "commands:"]
    usage += [f"  {n:<9} {first_line(f)}" for n, f in subs.items()]
    usage += ["", f"{prog} <command> --help shows each command's options."]
    if argv[:1] in (["-h"], ["--help"]):
        print("\n".join(usage))
        return 0
    if not argv or argv[0] not in subs:
        what = f"unknown command {argv[0]!r}{did_you_mean(argv[0], subs)}" if argv else "no command"
        print(f"{prog}: {what}\n\n" + "\n".join(usage), file=sys.stderr)
        return 2
    return subs[argv[0]](argv[1:])


def first_line(fn: Callable) -> str:
    return ((fn.__doc__ or "").strip().splitlines() or [""])[0]
