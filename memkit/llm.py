"""The only module that imports litellm, lazily (DESIGN "LLM calls").

One chat completion with exact attempt accounting: the OpenAI SDK's own
retries are off (`max_retries=0`) and this module owns a single bounded retry
loop that honours Retry-After, so "3 attempts" in a result means three HTTP
requests. How many requests a model has in flight is decided in one place,
that model's `ModelLimit` (the caller's `concurrency`, lowered adaptively on
429 and raised back after a run of successes; LiteLLM's router would reject
instead of queueing). Authentication, permission, not-found and bad-request
errors are never retried. Tokens, cost from LiteLLM's bundled price map
(offline) and latency are recorded per attempt. `preflight` checks a model
(provider resolvable, credentials present, endpoint reachable) before a run
spends anything on it.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.metadata
import os
import statistics
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memkit.errors import ConfigError, MemkitError, ProviderError

RETRYABLE: frozenset[str] = frozenset({"rate_limit", "server", "timeout", "connection"})
"""Attempt outcomes our retry loop tries again; anything else fails at once."""
FATAL: frozenset[str] = frozenset({"auth", "permission", "not_found", "bad_request"})
"""Outcomes that no retry or later request of the same model can fix: stop that model."""

_litellm_module: Any = None


def litellm() -> Any:
    """Import litellm on first use, with the offline price map and quiet errors.

    `LITELLM_LOCAL_MODEL_COST_MAP` is set (unless the user set it) before the
    import, because otherwise litellm fetches its price map from the network.
    """
    global _litellm_module
    if _litellm_module is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm as _lm

        _lm.suppress_debug_info = True
        _litellm_module = _lm
    return _litellm_module


def litellm_version() -> str:
    """The installed litellm version (without importing it)."""
    try:
        return importlib.metadata.version("litellm")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "absent"


def runtime_info() -> dict[str, str]:
    """What a run manifest records about the LLM layer."""
    local = os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return {
        "litellm_version": litellm_version(),
        "price_map": "bundled" if local.lower() == "true" else "remote",
    }


def supports_json_mode(model: str) -> bool:
    """True when LiteLLM knows the model accepts `response_format` JSON mode."""
    lm = litellm()
    try:
        if lm.supports_response_schema(model=model):
            return True
    except Exception:
        pass
    try:
        provider = lm.get_llm_provider(model)[1]
        name = model.split("/", 1)[1] if "/" in model else model
        params = lm.get_supported_openai_params(model=name, custom_llm_provider=provider) or []
        return "response_format" in params
    except Exception:
        return False


@dataclass(frozen=True)
class RetryPolicy:
    """Our single retry loop: attempts in total, and how long we may wait between them.

    Waits honour Retry-After (seconds or an HTTP date) and fall back to
    exponential backoff from `base_delay_s`; every wait is capped at `cap_s`.
    """

    max_attempts: int = 3
    cap_s: float = 30.0
    base_delay_s: float = 1.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(float(retry_after), self.cap_s))
        return min(self.base_delay_s * 2.0 ** (attempt - 1), self.cap_s)


@dataclass(frozen=True)
class CallAttempt:
    """One HTTP request to the provider (or one mocked call)."""

    model: str
    outcome: str
    """"ok", "rate_limit", "server", "timeout", "connection" or "error"."""
    status: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_note: str | None = None
    latency_s: float = 0.0
    retry_after_s: float | None = None
    error: str | None = None
    response_format: str | None = None
    """What constrained the answer: None, "json_object" (JSON mode), "json_object+schema"
    (llama-cpp-python's schema form) or "json_schema" (OpenAI's), see `format_label`."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_label(response_format: Any) -> str | None:
    """A short name for the `response_format` a request carried (recorded per attempt)."""
    if not isinstance(response_format, Mapping):
        return None
    kind = str(response_format.get("type"))
    if kind == "json_object" and response_format.get("schema") is not None:
        return "json_object+schema"
    return kind


def context_tokens(model: str) -> int | None:
    """The model's input context in tokens when LiteLLM's bundled model map knows it."""
    try:
        info = litellm().get_model_info(model=model)
    except Exception:
        return None
    n = info.get("max_input_tokens") or info.get("max_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


@dataclass(frozen=True)
class Completion:
    """The answer of a successful call, with every attempt that led to it."""

    text: str
    model: str
    attempts: tuple[CallAttempt, ...] = field(default_factory=tuple)

    @property
    def final(self) -> CallAttempt:
        return self.attempts[-1]


class ModelClosed(MemkitError):
    """A request was not sent: its caller closed the model's limit (`ModelLimit.close`)
    while the request waited for a slot. `attempts` are those made before."""

    attempts: tuple[CallAttempt, ...] = ()


class ModelLimit:
    """The one place that decides how many requests a model has in flight.

    Starts at `ceiling` (the user's concurrency). A 429 halves the limit (once
    per window: only a request started after the last cut can cut again); a run
    of `limit` successes in a row raises it by one, never above `ceiling`.
    Records, for the run report, the in-flight count each request saw when it
    started (itself included), the limit over time, the time requests spent
    queued for a slot and the time spent waiting on Retry-After / backoff.
    """

    def __init__(self, ceiling: int, clock: Callable[[], float] = time.perf_counter):
        if ceiling < 1:
            raise ConfigError(f"concurrency must be >= 1, got {ceiling!r}")
        self.ceiling = self.limit = ceiling
        self.in_flight = 0
        self._clock = clock
        self._cond = asyncio.Condition()
        self._started = 0
        self._cut_at = 0
        self._successes = 0
        self.in_flight_seen: list[int] = []
        self.limits_seen: list[int] = [ceiling]
        self.rate_limited = 0
        self.queued_s = 0.0
        self.retry_wait_s = 0.0
        self.busy_s = 0.0
        """Sum of request durations: busy_s / wall is the mean achieved concurrency."""
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.closed: str | None = None

    def set_ceiling(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = min(self.limit, ceiling) if self.rate_limited else ceiling

    async def close(self, reason: str) -> None:
        """No request waiting for a slot, or asking later, is sent (it raises
        ModelClosed). For a caller that has given up on the model (the eval stops a
        model at its first fatal error); never done by this module itself, since a
        long-lived worker must go on after one bad request."""
        async with self._cond:
            self.closed = reason
            self._cond.notify_all()

    async def acquire(self) -> int:
        """Wait for a slot; returns the request's ticket (its start order)."""
        t0 = self._clock()
        async with self._cond:
            await self._cond.wait_for(lambda: self.closed or self.in_flight < self.limit)
            if self.closed:
                raise ModelClosed(f"not sent: {self.closed}")
            self.in_flight += 1
            ticket = self._started
            self._started += 1
            self.in_flight_seen.append(self.in_flight)
        now = self._clock()
        self.queued_s += now - t0
        if self.first_start is None:
            self.first_start = now
        return ticket

    async def release(self, ticket: int, outcome: str, duration_s: float) -> None:
        async with self._cond:
            self.in_flight -= 1
            self.busy_s += duration_s
            self.last_end = self._clock()
            if outcome == "rate_limit":
                self.rate_limited += 1
                self._successes = 0
                if ticket >= self._cut_at and self.limit > 1:
                    self.limit = max(1, self.limit // 2)
                    self._cut_at = self._started
                    self.limits_seen.append(self.limit)
            elif outcome == "ok":
                self._successes += 1
                if self._successes >= self.limit and self.limit < self.ceiling:
                    self.limit += 1
                    self._successes = 0
                    self.limits_seen.append(self.limit)
            self._cond.notify_all()

    def stats(self) -> dict[str, Any]:
        """What the run report shows about this model's requests (wall clock)."""
        seen = self.in_flight_seen
        wall = (self.last_end or 0.0) - (self.first_start or 0.0)
        return {
            "requests": len(seen),
            "concurrency_limit": self.ceiling,
            "in_flight_min": min(seen, default=0),
            "in_flight_median": statistics.median(seen) if seen else 0,
            "in_flight_max": max(seen, default=0),
            "in_flight_mean_over_time": round(self.busy_s / wall, 3) if wall > 0 else None,
            "limit_min": min(self.limits_seen),
            "limit_final": self.limit,
            "rate_limited": self.rate_limited,
            "queued_s": round(self.queued_s, 3),
            "retry_wait_s": round(self.retry_wait_s, 3),
        }


_limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ModelLimit]] = (
    weakref.WeakKeyDictionary()
)


def model_limit(model: str, concurrency: int | None = None) -> ModelLimit:
    """This event loop's limit for `model`; `concurrency` (when given) is its ceiling."""
    loop = asyncio.get_running_loop()
    per_loop = _limits.setdefault(loop, {})
    lim = per_loop.get(model)
    if lim is None:
        lim = per_loop[model] = ModelLimit(concurrency or 4)
    elif concurrency is not None and concurrency != lim.ceiling:
        lim.set_ceiling(concurrency)
    return lim


def limit_stats() -> dict[str, dict[str, Any]]:
    """`ModelLimit.stats()` of every model used on the running event loop."""
    loop = asyncio.get_running_loop()
    return {m: lim.stats() for m, lim in sorted(_limits.get(loop, {}).items())}


def _retry_after(exc: BaseException) -> float | None:
    headers: Mapping[str, str] | None = getattr(exc, "headers", None) or None
    resp = getattr(exc, "response", None)
    if headers is None and resp is not None:
        headers = getattr(resp, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())


_STATUS_OUTCOME = {400: "bad_request", 401: "auth", 403: "permission", 404: "not_found"}
_STATUS_OUTCOME[422] = "bad_request"
_CREDENTIAL_HINTS = ("missing credentials", "api_key client option", "no api key", "api key not")


def classify(exc: BaseException) -> tuple[str, int | None]:
    """Map a provider exception to an attempt outcome and HTTP status.

    LiteLLM wraps some failures in a 500 whose message is the real cause
    (a missing key, a refused connection); those are classified by cause.
    """
    lm = litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    text = str(exc).lower()
    if isinstance(exc, asyncio.TimeoutError | lm.Timeout):
        return "timeout", status
    if isinstance(exc, lm.RateLimitError) or status == 429:
        return "rate_limit", status
    if isinstance(exc, lm.AuthenticationError) or any(h in text for h in _CREDENTIAL_HINTS):
        return "auth", status
    if isinstance(exc, lm.PermissionDeniedError):
        return "permission", status
    if isinstance(exc, lm.NotFoundError):
        return "not_found", status
    if isinstance(exc, lm.BadRequestError | lm.UnprocessableEntityError):
        return "bad_request", status
    if isinstance(exc, lm.APIConnectionError) or "connection error" in text:
        return "connection", status
    if status in _STATUS_OUTCOME:
        return _STATUS_OUTCOME[status], status
    if status is not None and status >= 500:
        return "server", status
    return "error", status


def env_keys(model: str, api_base: str | None = None) -> list[str]:
    """Environment variables LiteLLM needs for `model` that are not set (keys, bases)."""
    try:
        got = litellm().validate_environment(model=model, api_base=api_base)
    except Exception:
        return []
    return [k for k in got.get("missing_keys") or () if not (api_base and k.endswith("_BASE"))]


OLLAMA_BASE = "http://localhost:11434"


def _reachable(model: str, base: str, api_key: str | None, timeout: float) -> None:
    """One GET of `<base>/models`: any HTTP answer means reachable; 401/403 mean the key is bad."""
    req = urllib.request.Request(base.rstrip("/") + "/models", method="GET")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            return
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise _fail(model, "auth", f"{base} refused the key (HTTP {e.code})", e.code) from None
        return
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise _fail(model, "connection", f"{base} is unreachable ({reason})") from None


def _fail(model: str, kind: str, cause: str, status: int | None = None) -> ProviderError:
    err = ProviderError(f"{model}: {cause}", kind=kind, status=status)
    err.attempts = ()  # type: ignore[attr-defined]
    return err


def preflight(
    model: str,
    *,
    api_base: str | None = None,
    api_key: str | None = None,
    key_name: str | None = None,
    timeout: float = 3.0,
) -> None:
    """Check `model` before any pass: provider resolvable, credentials present and,
    with `api_base` (or a local Ollama), the endpoint answering one cheap GET.

    Raises ProviderError with one line naming the model and the cause. It
    cannot know whether the provider serves that model name: a wrong name
    under a known provider fails on the first request, as `not_found`, and is
    never retried. `key_name` names where `api_key` came from, for messages.
    """
    lm = litellm()
    try:
        provider = lm.get_llm_provider(model, api_base=api_base)[1]
    except Exception as e:
        first = str(e).split("\n", 1)[0].removeprefix("litellm.BadRequestError: ")
        raise _fail(model, "not_found", f"unknown model string ({first[:160]})") from None
    if not api_key:
        missing = env_keys(model, api_base)
        if provider in ("ollama", "ollama_chat") and missing == ["OLLAMA_API_BASE"]:
            api_base, missing = OLLAMA_BASE, []
        if missing:
            raise _fail(
                model, "auth", f"no credentials: environment variable {' / '.join(missing)} not set"
            )
    elif key_name and not api_key.strip():
        raise _fail(model, "auth", f"no credentials: {key_name} is empty")
    if not api_base and provider in ("ollama", "ollama_chat"):
        # a local server LiteLLM would call: check the one it would call answers
        api_base = os.environ.get("OLLAMA_API_BASE") or OLLAMA_BASE
    if api_base:
        _reachable(model, api_base, api_key, timeout)


_unpriced: set[str] = set()
"""Models LiteLLM's price map does not price (a lookup that fails is not repeated)."""


def _cost(lm: Any, resp: Any, model: str) -> tuple[float, str | None]:
    """USD of one answer: LiteLLM's own figure on the response when it made one
    (computing it again costs ~ms of CPU per call), else the price map."""
    known = (getattr(resp, "_hidden_params", None) or {}).get("response_cost")
    if isinstance(known, int | float) and not isinstance(known, bool):
        return float(known), None
    note = f"no price for {model!r} in litellm's bundled map"
    if model not in _unpriced:
        try:
            return float(lm.completion_cost(completion_response=resp, model=model)), None
        except Exception:
            _unpriced.add(model)
    return 0.0, note


def _usage(resp: Any) -> tuple[int, int]:
    usage = getattr(resp, "usage", None)
    if usage is None:
        return 0, 0
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(
        getattr(usage, "completion_tokens", 0) or 0
    )


async def acomplete(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    api_base: str | None = None,
    api_key: str | None = None,
    max_tokens: int = 2048,
    timeout: float = 60.0,
    json_mode: bool | None = None,
    retry: RetryPolicy = RetryPolicy(),
    concurrency: int | None = None,
    extra: Mapping[str, Any] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.perf_counter,
) -> Completion:
    """One chat completion through `litellm.acompletion`, with our retry loop.

    `json_mode=None` asks LiteLLM whether the model supports JSON mode.
    `extra` is passed through (e.g. `mock_response`, `temperature`).
    `concurrency` sets the model's ceiling (`model_limit`; None keeps the
    current one, 4 for a model not seen yet on this event loop).
    Raises ProviderError (with `.attempts`) when every attempt failed or the
    failure is not retryable.
    """
    lm = litellm()
    if json_mode is None:
        json_mode = supports_json_mode(model)
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in messages],
        "max_tokens": max_tokens,
        "timeout": timeout,
        "max_retries": 0,
        **(extra or {}),
    }
    if json_mode:
        kwargs["response_format"] = {"type": "json_object"}
    if api_base:
        kwargs["api_base"] = api_base
    if api_key:
        kwargs["api_key"] = api_key
    label = format_label(kwargs.get("response_format"))
    attempts: list[CallAttempt] = []
    limit = model_limit(model, concurrency)
    for n in range(1, max(1, retry.max_attempts) + 1):
        try:
            ticket = await limit.acquire()
        except ModelClosed as exc:
            exc.attempts = tuple(attempts)
            raise
        t0 = clock()
        try:
            # The SDK timeout bounds the HTTP call; wait_for is a backstop for
            # providers or mocks that ignore it.
            # (`extra` may carry the timeout: the backstop follows the one sent)
            resp = await asyncio.wait_for(lm.acompletion(**kwargs), float(kwargs["timeout"]) + 5.0)
        except asyncio.CancelledError:
            await limit.release(ticket, "cancelled", clock() - t0)
            raise
        except Exception as exc:
            outcome, status = classify(exc)
            after = _retry_after(exc) if outcome == "rate_limit" else None
            latency = clock() - t0
            await limit.release(ticket, outcome, latency)
            attempts.append(
                CallAttempt(
                    model=model,
                    outcome=outcome,
                    status=status,
                    latency_s=latency,
                    retry_after_s=after,
                    error=f"{type(exc).__name__}: {str(exc)[:300]}",
                    response_format=label,
                )
            )
        else:
            latency = clock() - t0
            await limit.release(ticket, "ok", latency)
            tin, tout = _usage(resp)
            cost, note = _cost(lm, resp, model)
            try:
                text = resp.choices[0].message.content
            except (AttributeError, IndexError):
                text = None
            attempts.append(
                CallAttempt(
                    model=model,
                    outcome="ok",
                    status=200,
                    input_tokens=tin,
                    output_tokens=tout,
                    cost_usd=cost,
                    cost_note=note,
                    latency_s=latency,
                    response_format=label,
                )
            )
            return Completion(text=text or "", model=model, attempts=tuple(attempts))
        last = attempts[-1]
        if last.outcome not in RETRYABLE or n >= retry.max_attempts:
            break
        wait = retry.delay(n, last.retry_after_s)
        limit.retry_wait_s += wait
        await sleep(wait)
    last = attempts[-1]
    err = ProviderError(
        f"{model}: {last.outcome} after {len(attempts)} attempt(s): {last.error}",
        kind=last.outcome,
        status=last.status,
    )
    err.attempts = tuple(attempts)  # type: ignore[attr-defined]
    raise err
