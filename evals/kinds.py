"""Consolidator kinds as the suite builds them: one registration per kind.

A consolidator spec is `<kind>` or `<kind>:<argument>` (`heuristic`, `oracle`,
`litellm:<model>`, `replay:<recording>`). What a run needs to know about a kind
lives in its one `Kind` entry here: how it is built from its options and the
run's `Context` (the oracle's gold, the response cache, repo-relative paths),
and whether it calls a model (then the run preflights it, sends it the
provider options, logs LiteLLM and stops it on a fatal error). `eval run`,
`eval sweep` and experiment files all build consolidators through `build`, so
a new kind is one `register` call (CONTRIBUTING: "Adding a consolidator kind").
A spec whose kind is not registered here goes to memkit's `get_consolidator`
unchanged (it names the valid kinds when the spec is wrong).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.matcher import Matcher
from memkit.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Context:
    """What building a consolidator may need from the run that uses it."""

    dataset: Any
    matcher: Matcher | None
    """Gold facts matched to written rows (None: a plan without pipeline units)."""
    cache_dir: str | None = None
    """The LLM response cache (None: no cache; sweeps keep none)."""


Build = Callable[[str, dict[str, Any], Context], Any]
"""(spec, `get_consolidator` keyword arguments, context) -> a consolidator."""


@dataclass(frozen=True)
class Kind:
    name: str
    build: Build
    calls_model: bool = False
    """A LiteLLM model behind it: preflighted, configured by provider options,
    logged to llm.log, stopped on its first fatal error."""


KINDS: dict[str, Kind] = {}


def register(name: str, *, calls_model: bool = False) -> Callable[[Build], Build]:
    """Register the builder of consolidator kind `name` (a decorator)."""

    def add(fn: Build) -> Build:
        KINDS[name] = Kind(name, fn, calls_model)
        return fn

    return add


def _memkit(spec: str, opts: dict[str, Any], ctx: Context) -> Any:
    from memkit.consolidate import get_consolidator

    return get_consolidator(spec, **opts)


MEMKIT = Kind("memkit", _memkit)
"""Every kind not registered here: memkit's `get_consolidator` as it stands."""


def kind_of(spec: str) -> Kind:
    return KINDS.get(spec.partition(":")[0], MEMKIT)


def calls_model(spec: str) -> bool:
    return kind_of(spec).calls_model


def build(spec: str, opts: dict[str, Any], ctx: Context) -> Any:
    """The consolidator `spec` names, built with `opts` for the run described by `ctx`."""
    return kind_of(spec).build(spec, dict(opts), ctx)


register("heuristic")(_memkit)


@register("oracle")
def _oracle(spec: str, opts: dict[str, Any], ctx: Context) -> Any:
    from evals.replay import oracle_gold

    if ctx.matcher is None:
        raise ConfigError(f"{spec}: the oracle needs the run's matcher")
    return _memkit(spec, {**opts, "gold": oracle_gold(ctx.dataset, ctx.matcher)}, ctx)


@register("litellm", calls_model=True)
def _litellm(spec: str, opts: dict[str, Any], ctx: Context) -> Any:
    if ctx.cache_dir and "cache_dir" not in opts:
        opts = {**opts, "cache_dir": ctx.cache_dir}
    return _memkit(spec, opts, ctx)


@register("replay")
def _replay(spec: str, opts: dict[str, Any], ctx: Context) -> Any:
    path = Path(spec.split(":", 1)[1])
    if not path.exists() and not path.is_absolute() and (REPO / path).exists():
        # repo-relative (make eval from anywhere), under the name the spec gives it
        return _memkit(f"replay:{REPO / path}", {"name": spec, **opts}, ctx)
    return _memkit(spec, opts, ctx)
