"""The `memkit` command: `memkit store ...` plus the commands other packages plug in.

The library owns `memkit store` (inspection of a store file) and `memkit
local-server` (a local model server, with the `local` extra). Every
other command (`eval`, `bench`, `report`) is registered by the evaluation
suite as an entry point in the `memkit.commands` group (see pyproject.toml),
so `memkit/` never names the suite: without it installed, `memkit` says
what to install instead. A command is a callable `main(argv) -> int` whose
docstring's first line is its help.

Exit status everywhere: 0 ok, 1 a failed run or threshold, 2 a usage error,
130 interrupted.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import metadata

from memkit.errors import did_you_mean

GROUP = "memkit.commands"
"""Entry-point group through which packages add `memkit <command>`."""

Command = Callable[[list[str]], int]


def _builtin() -> dict[str, Command]:
    from memkit import local_server
    from memkit.store import cli as store_cli

    return {"store": store_cli.main, "local-server": local_server.main}


def _plugins() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def _version() -> str:
    try:
        return metadata.version("memkit")
    except metadata.PackageNotFoundError:
        from memkit import __version__

        return __version__


def _summary(fn: Callable[..., object]) -> str:
    return ((fn.__doc__ or "").strip().splitlines() or [""])[0]


def _usage(plugins: dict[str, metadata.EntryPoint]) -> str:
    lines = [
        "usage: memkit [--version] [-h] <command> [<sub>] [options]",
        "",
        "commands (memkit <command> --help for each):",
    ]
    rows: list[tuple[str, str]] = [(n, _summary(f)) for n, f in _builtin().items()]
    for name, ep in sorted(plugins.items()):
        try:
            rows.append((name, _summary(ep.load())))
        except ImportError as e:  # a broken plugin must not hide the others
            rows.append((name, f"(unavailable: {e})"))
    lines += [f"  {n:<8} {h}" for n, h in rows]
    if not plugins:
        lines += [
            "",
            "eval, bench and report come with the evaluation suite: "
            "pip install -e . from a memkit checkout",
        ]
    return "\n".join(lines)


def _call(fn: Command, argv: list[str]) -> int:
    """Run one command: argparse's exits become return codes, Ctrl-C one line."""
    try:
        return int(fn(argv) or 0)
    except SystemExit as e:  # argparse: --help is 0, a usage error 2
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        print("memkit: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    plugins = _plugins()
    if argv[:1] in (["-h"], ["--help"]):
        print(_usage(plugins))
        return 0
    if argv[:1] == ["--version"]:
        print(f"memkit {_version()}")
        return 0
    if not argv:
        print(_usage(plugins), file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    builtin = _builtin()
    if cmd in builtin:
        return _call(builtin[cmd], rest)
    if cmd in plugins:
        return _call(plugins[cmd].load(), rest)
    known = sorted({*builtin, *plugins})
    print(
        f"memkit: unknown command {cmd!r}{did_you_mean(cmd, known)}; "
        f"commands: {', '.join(known)}\n\n{_usage(plugins)}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
