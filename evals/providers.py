"""LLM providers as a run sees them: per-model options, the preflight, failure shares.

A researcher configures a model the way LiteLLM users do: the key from the
provider's usual environment variable (or `api_key_env`, the name of another
one; a key itself is never written into a run folder), an `api_base` for a
local server or gateway, and per-model request options. This module turns
those options into `get_consolidator` keyword arguments, runs
`memkit.llm.preflight` for each LiteLLM model before any pass, and judges a
finished run: the share of each system's attempts that got no answer (a run
above the threshold must not look like a result) and `--fail-under` floors.
What a model answers is scored elsewhere (`evals.scorers`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from evals.rows import AttemptRow
from memkit.errors import ConfigError

DEFAULT_MAX_FAILURE_SHARE = 0.5
"""A system whose share of attempts without an answer exceeds this fails the run."""

REQUEST_OPTIONS = ("temperature", "max_tokens", "seed", "timeout", "response_format")
"""Per-model options sent with every request (LiteLLM kwargs)."""
SHAPING_OPTIONS = ("structured_output", "max_request_bytes", "context_tokens")
"""Per-model options the consolidator itself applies: the proposal schema as
`response_format`, and the request budget (`memkit.consolidate.budget`)."""
MODEL_OPTIONS = (
    "api_base",
    "api_key_env",
    "json_mode",
    "concurrency",
    *REQUEST_OPTIONS,
    *SHAPING_OPTIONS,
)
"""Every per-model option a user may set (CLI flags and the experiment file)."""
MOCK_KEYS = ("mock_response", "mock_timeout")


def is_llm(spec: str) -> bool:
    """A consolidator that calls a model (`evals.kinds`): it takes provider options."""
    from evals.kinds import calls_model

    return calls_model(spec)


def validate_options(spec: str, opts: Mapping[str, Any]) -> None:
    """Refuse unknown per-model options and a literal key (it would be recorded)."""
    if "api_key" in opts and "api_key_env" not in opts:
        raise ConfigError(
            f"{spec}: give the key's environment variable (api_key_env), not the key itself"
        )
    unknown = sorted(set(opts) - set(MODEL_OPTIONS))
    if unknown:
        raise ConfigError(
            f"{spec}: unknown model option(s) {', '.join(unknown)} "
            f"(known: {', '.join(MODEL_OPTIONS)})"
        )
    from memkit.proposal import RESPONSE_FORMS

    form = opts.get("structured_output")
    if form is not None and form not in RESPONSE_FORMS:
        raise ConfigError(
            f"{spec}: structured_output must be one of {', '.join(RESPONSE_FORMS)}, got {form!r}"
        )
    if form is not None and opts.get("response_format") is not None:
        raise ConfigError(f"{spec}: give structured_output or response_format, not both")
    for key in ("max_request_bytes", "context_tokens"):
        n = opts.get(key)
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise ConfigError(f"{spec}: {key} must be an integer >= 1, got {n!r}")


def consolidator_kwargs(spec: str, opts: Mapping[str, Any], concurrency: int) -> dict[str, Any]:
    """`get_consolidator` keyword arguments from a model's options.

    User-level options (MODEL_OPTIONS) are translated; anything else (library
    callers' `api_key`, `extra`, `max_attempts`, ...) passes through.
    """
    kw = {k: v for k, v in opts.items() if k not in MODEL_OPTIONS}
    if not is_llm(spec):
        return kw
    extra = dict(kw.pop("extra", None) or {})
    for k in REQUEST_OPTIONS:
        if opts.get(k) is not None:
            extra[k] = opts[k]
    if "response_format" in extra:
        kw["json_mode"] = False  # the user's response_format wins over JSON mode
    elif opts.get("json_mode") is not None:
        kw["json_mode"] = bool(opts["json_mode"])
    if extra:
        kw["extra"] = extra
    for k in SHAPING_OPTIONS:
        if opts.get(k) is not None:
            kw[k] = opts[k]
    if "structured_output" in kw:
        kw.pop("json_mode", None)  # the schema is the response_format
    if opts.get("api_base"):
        kw["api_base"] = opts["api_base"]
    var = opts.get("api_key_env")
    if var:
        if not os.environ.get(var):
            raise ConfigError(f"{spec}: environment variable {var} (api_key_env) is not set")
        kw["api_key"] = os.environ[var]
    kw["concurrency"] = int(opts.get("concurrency") or concurrency)
    return kw


def concurrency_of(spec: str, opts: Mapping[str, Any], default: int) -> int:
    n = opts.get("concurrency") or default
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"{spec}: concurrency must be an integer >= 1, got {n!r}")
    return n


def preflight(spec: str, opts: Mapping[str, Any]) -> None:
    """`memkit.llm.preflight` for a LiteLLM consolidator (mocked models need nothing)."""
    if not is_llm(spec):
        return
    extra = opts.get("extra") or {}
    if any(k in extra for k in MOCK_KEYS):
        return
    from memkit import llm

    kw = consolidator_kwargs(spec, opts, 1)
    llm.preflight(
        spec.split(":", 1)[1],
        api_base=kw.get("api_base"),
        api_key=kw.get("api_key"),
        key_name=opts.get("api_key_env"),
    )


LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "memkit", "httpx", "openai")
"""Loggers whose records belong in the run's log file, not on the console."""


@contextlib.contextmanager
def log_to(path: str | os.PathLike[str], *, litellm: bool = False) -> Iterator[None]:
    """For the duration, LiteLLM's and memkit's log records go to `path`, once each.

    LiteLLM gives its loggers their own stderr handler and lets them propagate
    too (so each line printed twice when the root logger has a handler); here
    both are replaced by one file handler and restored afterwards. With
    `litellm`, LiteLLM is imported first so its import cannot add a handler.
    """
    if litellm:
        from memkit.llm import litellm as load

        load()
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, lg.handlers[:], lg.propagate))
        lg.handlers = [handler]
        lg.propagate = False
    try:
        yield
    finally:
        for lg, handlers, propagate in saved:
            lg.handlers = handlers
            lg.propagate = propagate
        handler.close()


# --- judging a finished run ------------------------------------------------------------


def failure_summary(
    attempts: Iterable[AttemptRow],
    threshold: float = DEFAULT_MAX_FAILURE_SHARE,
    stopped: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per system: attempts, failed (no answer), failures by outcome, share, and whether
    it fails the run (share above `threshold`, or the model was stopped)."""
    out: dict[str, dict[str, Any]] = {}
    for a in attempts:
        if a.system is None:
            raise ConfigError(f"attempt {a.request_hash[:12]} names no system (not a run-file row)")
        s = out.setdefault(a.system, {"attempts": 0, "failed": 0, "by_outcome": {}})
        if is_replay_miss(a):  # not the model's failure: the recording lacks the request
            missed = s.setdefault("not_recorded", [])
            if a.request_hash not in missed:
                missed.append(a.request_hash)
            continue
        s["attempts"] += 1
        if not a.answered and a.outcome != "ok":
            s["failed"] += 1
            s["by_outcome"][a.outcome] = s["by_outcome"].get(a.outcome, 0) + 1
    for sys_, reason in (stopped or {}).items():
        out.setdefault(sys_, {"attempts": 0, "failed": 0, "by_outcome": {}})["stopped"] = reason
    for s in out.values():
        s["share"] = round(s["failed"] / s["attempts"], 6) if s["attempts"] else None
        s["threshold"] = threshold
        s["fails_run"] = (
            bool(s.get("stopped"))
            or bool(s.get("not_recorded"))
            or (s["share"] is not None and s["share"] > threshold)
        )
    return out


def is_replay_miss(row: AttemptRow) -> bool:
    """An attempt a replay could not answer: its request is not in the recording."""
    return row.outcome == "replay_miss"


def banner_lines(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per system that fails the run, naming it and its failure counts."""
    lines = []
    for sys_, s in sorted(summary.items()):
        missed = s.get("not_recorded") or ()
        if missed:
            shown = ", ".join(str(h)[:12] for h in missed[:5]) + (", …" if len(missed) > 5 else "")
            lines.append(
                f"NOT IN THE RECORDING: {sys_}: {len(missed)} distinct request(s) are not in "
                f"its recording ({shown}): the prompt, the request shaping or the data changed "
                "since it was recorded. They are not scored as model failures, but each one left "
                "its scope's evidence pending, so that scope's later passes, probes and "
                "extraction no longer reproduce the recorded run: record it again "
                "(docs/cli.md: 'Recorded runs')."
            )
        if not s.get("fails_run") or (missed and not s.get("stopped") and not s["failed"]):
            continue
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(s["by_outcome"].items())) or "none"
        line = (
            f"PROVIDER FAILURE: {sys_}: {s['failed']} of {s['attempts']} attempts got no answer "
            f"({outcomes}); threshold {s['threshold']:g}"
        )
        if s.get("stopped"):
            line += f"; stopped: {s['stopped']}"
        lines.append(line + ". Its numbers measure the failures, not the model.")
    return lines


def parse_floors(items: Sequence[str]) -> dict[str, float]:
    """`--fail-under METRIC=VALUE` items as {metric: floor}."""
    out: dict[str, float] = {}
    for item in items or ():
        name, sep, val = item.partition("=")
        try:
            out[name.strip()] = float(val)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ConfigError(f"--fail-under wants METRIC=VALUE, got {item!r}")
    return out


def below_floors(records: Iterable[Mapping[str, Any]], floors: Mapping[str, float]) -> list[str]:
    """One line per (system, metric) below its floor; an undefined value is below.

    A floor naming a metric no system reports fails too: never a silent pass.
    """
    lines = []
    seen: set[str] = set()
    for r in records:
        m = str(r.get("metric"))
        if m not in floors or r.get("system") == "matcher":
            continue
        seen.add(m)
        v = r.get("value")
        if v is None or v != v or float(v) < floors[m]:
            shown = "undefined" if v is None or v != v else f"{float(v):.6g}"
            lines.append(f"FAIL-UNDER: {r['system']}: {m} = {shown} < {floors[m]:g}")
    for m in sorted(set(floors) - seen):
        lines.append(f"FAIL-UNDER: no system reports {m} (undefined < {floors[m]:g})")
    return lines


# --- registered statistics of a model's requests (wall clock; manifest "providers") -----

LIMIT_STATS: tuple[tuple[str, str, str], ...] = (
    ("in_flight_min", "higher", "fewest requests of the model in flight when one started"),
    ("in_flight_median", "higher", "median requests in flight when one started (itself included)"),
    ("in_flight_max", "higher", "most requests of the model in flight at once"),
    ("in_flight_mean_over_time", "higher", "mean requests in flight over the busy span"),
    ("limit_min", "neutral", "lowest concurrency limit after 429 cuts (the user's is the ceiling)"),
    ("rate_limited", "lower", "429 answers the model got"),
    ("queued_s", "lower", "seconds requests waited for a slot under the model's limit (summed)"),
    ("retry_wait_s", "lower", "seconds waited on Retry-After and backoff before retries (summed)"),
)
"""`memkit.llm.ModelLimit.stats()` keys the report shows, registered as metrics."""


def _register() -> None:
    from evals.registry import add

    for name, direction, text in LIMIT_STATS:
        add(name, unit="attempt", definition=text, direction=direction, family="provider_limit")


_register()


# --- stopping a model at its first unfixable error ---------------------------------------


class ModelStopped(Exception):
    """Raised out of a unit whose model was stopped; the unit is abandoned, not recorded."""


class StopOnFatal:
    """Wraps a LiteLLM consolidator: the first authentication, permission, not-found or
    bad-request error stops that model's run at once (`memkit.llm.FATAL`).

    The error is printed as one line naming the model and the cause (also when
    quiet: it is an error), recorded in `stopped[system]`, and every later
    pass of the model raises ModelStopped before sending anything.
    """

    def __init__(self, inner: Any, system: str, stopped: dict[str, str], quiet: bool = False):
        self.inner, self.system, self.stopped = inner, system, stopped
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def propose(self, request: Any) -> Any:
        from memkit import llm
        from memkit.errors import ProviderError

        if self.system in self.stopped:
            raise ModelStopped(self.stopped[self.system])
        try:
            return await self.inner.propose(request)
        except llm.ModelClosed as e:  # queued behind the request that stopped the model
            raise ModelStopped(self.stopped.get(self.system, str(e))) from e
        except ProviderError as e:
            if getattr(e, "kind", None) not in llm.FATAL or self.system in self.stopped:
                raise
            reason = (
                f"{getattr(e, 'kind', 'error')} (HTTP {getattr(e, 'status', None)}): "
                + (str(e).split("\n", 1)[0][:240])
            )
            self.stopped[self.system] = reason
            model = getattr(self.inner, "model", None)
            if model:  # requests of other scopes already waiting for a slot stay unsent
                await llm.model_limit(model).close(reason)
            import sys

            print(f"{self.system}: stopped: {reason}", file=sys.stderr, flush=True)
            raise ModelStopped(reason) from e
