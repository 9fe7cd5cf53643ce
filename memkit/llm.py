"""The only module that imports litellm, lazily (DESIGN "LLM calls").

One chat completion with exact attempt accounting: the OpenAI SDK's own
retries are off (`max_retries=0`) and this module owns a single bounded retry
loop that honours Retry-After, so "3 attempts" in a result means three HTTP
requests. Concurrency is bounded by one asyncio semaphore per model (LiteLLM's
router would reject instead of queueing). Tokens, cost from LiteLLM's bundled
price map (offline) and latency are recorded per attempt.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib.metadata
import os
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from memkit.errors import ProviderError

RETRYABLE: frozenset[str] = frozenset({"rate_limit", "server", "timeout", "connection"})
"""Attempt outcomes our retry loop tries again; anything else fails at once."""

_litellm_module: Any = None
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


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
            return max(0.0, min(retry_after, self.cap_s))
        return min(self.base_delay_s * 2 ** (attempt - 1), self.cap_s)


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """The answer of a successful call, with every attempt that led to it."""

    text: str
    model: str
    attempts: tuple[CallAttempt, ...] = field(default_factory=tuple)

    @property
    def final(self) -> CallAttempt:
        return self.attempts[-1]


def _semaphore(model: str, limit: int) -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    per_loop = _semaphores.setdefault(loop, {})
    sem = per_loop.get(model)
    if sem is None:
        sem = per_loop[model] = asyncio.Semaphore(limit)
    return sem


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


def classify(exc: BaseException) -> tuple[str, int | None]:
    """Map a provider exception to an attempt outcome and HTTP status."""
    lm = litellm()
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    if isinstance(exc, asyncio.TimeoutError | lm.Timeout):
        return "timeout", status
    if isinstance(exc, lm.RateLimitError) or status == 429:
        return "rate_limit", status
    if isinstance(exc, lm.APIConnectionError):
        return "connection", status
    if status is not None and status >= 500:
        return "server", status
    return "error", status


def _cost(lm: Any, resp: Any, model: str) -> tuple[float, str | None]:
    try:
        return float(lm.completion_cost(completion_response=resp, model=model)), None
    except Exception as e:
        return 0.0, f"no price for {model!r} in litellm's bundled map ({type(e).__name__})"


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
    concurrency: int = 4,
    extra: Mapping[str, Any] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.perf_counter,
) -> Completion:
    """One chat completion through `litellm.acompletion`, with our retry loop.

    `json_mode=None` asks LiteLLM whether the model supports JSON mode.
    `extra` is passed through (e.g. `mock_response`, `temperature`).
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
    attempts: list[CallAttempt] = []
    sem = _semaphore(model, concurrency)
    for n in range(1, max(1, retry.max_attempts) + 1):
        async with sem:
            t0 = clock()
            try:
                # The SDK timeout bounds the HTTP call; wait_for is a backstop for
                # providers or mocks that ignore it.
                resp = await asyncio.wait_for(lm.acompletion(**kwargs), timeout + 5.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome, status = classify(exc)
                after = _retry_after(exc) if outcome == "rate_limit" else None
                attempts.append(
                    CallAttempt(
                        model=model,
                        outcome=outcome,
                        status=status,
                        latency_s=clock() - t0,
                        retry_after_s=after,
                        error=f"{type(exc).__name__}: {str(exc)[:300]}",
                    )
                )
            else:
                latency = clock() - t0
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
                    )
                )
                return Completion(text=text or "", model=model, attempts=tuple(attempts))
        last = attempts[-1]
        if last.outcome not in RETRYABLE or n >= retry.max_attempts:
            break
        await sleep(retry.delay(n, last.retry_after_s))
    last = attempts[-1]
    err = ProviderError(
        f"{model}: {last.outcome} after {len(attempts)} attempt(s): {last.error}",
        kind=last.outcome,
        status=last.status,
    )
    err.attempts = tuple(attempts)  # type: ignore[attr-defined]
    raise err
