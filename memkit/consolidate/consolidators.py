"""Consolidators: anything that turns a request into `{"changes": [...]}` text.

Every consolidator answers with text, never with parsed objects, so the
native model, the heuristic baseline, the gold oracle and a replayed run all
go through the same parse -> validate -> commit path and are scored alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonlines

from memkit import llm
from memkit.consolidate.budget import request_budget
from memkit.consolidate.cache import ResponseCache, cache_key
from memkit.consolidate.heuristic import HeuristicConsolidator
from memkit.consolidate.recording import is_recording, read_recording
from memkit.consolidate.reply import Consolidator, Reply, local_reply
from memkit.consolidate.request import ConsolidationRequest
from memkit.errors import ConfigError, ProviderError, did_you_mean
from memkit.llm import CallAttempt, RetryPolicy
from memkit.params import ConsolidationParams
from memkit.proposal import proposal_response_format

REPLAYABLE = ("rate_limit", "server", "timeout")
"""Provider failures a recording replays: what the provider did to this request
in the recorded run. A connection or configuration error (dead endpoint,
missing key, unknown model) says nothing about the request and is left out.
The response cache keeps none of them: it stores answers only."""


class LiteLLMConsolidator:
    """The native consolidator: the SPEC §7.4 prompt sent to any LiteLLM model.

    Options: `api_base`, `api_key`, `cache_dir` (or `cache`), `json_mode`
    (None = ask LiteLLM), `max_attempts`, `retry_cap_s`, `base_delay_s`,
    `concurrency` (per model), and any extra litellm kwargs in `extra`
    (e.g. `temperature`, `mock_response`). Output tokens and the timeout come
    from the request's ConsolidationParams (`extra["max_tokens"]` wins).

    `structured_output` ("json_schema" or "json_object",
    `memkit.proposal.RESPONSE_FORMS`) sends the proposal JSON Schema as
    `response_format` (instead of JSON mode); each attempt records it.
    `max_request_bytes` / `context_tokens` lower the request budget
    (`request_budget`, `memkit.consolidate.budget`); without either, a context
    LiteLLM's model map knows is used.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        cache_dir: str | Path | None = None,
        cache: ResponseCache | None = None,
        json_mode: bool | None = None,
        max_attempts: int = 3,
        retry_cap_s: float = 30.0,
        base_delay_s: float = 1.0,
        concurrency: int = 4,
        extra: Mapping[str, Any] | None = None,
        sleep: Callable[[float], Any] | None = None,
        structured_output: str | None = None,
        max_request_bytes: int | None = None,
        context_tokens: int | None = None,
    ):
        if not model:
            raise ConfigError(
                "litellm consolidator needs a model, e.g. 'litellm:openai/gpt-4o-mini'"
            )
        self.model = model
        self.name = f"litellm:{model}"
        self.api_base = api_base
        self.api_key = api_key
        self.cache = cache if cache is not None else ResponseCache(cache_dir) if cache_dir else None
        self.json_mode = json_mode
        self.retry = RetryPolicy(max_attempts, retry_cap_s, base_delay_s)
        self.concurrency = concurrency
        self.extra = dict(extra or {})
        self.structured_output = structured_output
        if structured_output is not None:
            if "response_format" in self.extra:
                raise ConfigError(
                    f"{self.name}: give structured_output or response_format, not both"
                )
            self.extra["response_format"] = proposal_response_format(structured_output)
            self.json_mode = False  # the schema is the response_format
        self.max_request_bytes = _positive(self.name, "max_request_bytes", max_request_bytes)
        self.context_tokens = _positive(self.name, "context_tokens", context_tokens)
        self._known_context: list[int | None] = []
        self._sleep = sleep
        self.provider_calls = 0
        """HTTP requests actually sent (cache hits excluded)."""

    def request_budget(self, params: ConsolidationParams, system_prompt: str) -> int:
        """Bytes this model's shaped request may have (SPEC §7.3's limit or lower)."""
        context = self.context_tokens
        if context is None and self.max_request_bytes is None:
            if not self._known_context:  # LiteLLM's model map, asked once
                self._known_context.append(llm.context_tokens(self.model))
            context = self._known_context[0]
        return request_budget(
            params.request_bytes,
            output_tokens=int(self.extra.get("max_tokens") or params.output_tokens),
            system_prompt=system_prompt,
            max_request_bytes=self.max_request_bytes,
            context_tokens=context,
        )

    def _call_params(self, request: ConsolidationRequest, json_mode: bool) -> dict[str, Any]:
        """What can change an answer (the cache key): not the timeout, not the key."""
        return {
            "max_tokens": request.params.output_tokens,
            "json_mode": json_mode,
            **{k: v for k, v in self.extra.items() if k != "timeout"},
        }

    async def propose(self, request: ConsolidationRequest) -> Reply:
        json_mode = self.json_mode
        if json_mode is None:
            json_mode = llm.supports_json_mode(self.model)
        key = None
        if self.cache is not None:
            key = cache_key(
                model=self.model,
                api_base=self.api_base,
                messages=request.messages,
                params=self._call_params(request, json_mode),
                replicate=request.replicate,
                prompt_version=request.prompt_version,
            )
            hit = self.cache.get(key)
            if hit is not None:
                return _replay(hit, self.model)
        kwargs: dict[str, Any] = {}
        if self._sleep is not None:
            kwargs["sleep"] = self._sleep
        try:
            done = await llm.acomplete(
                self.model,
                request.messages,
                api_base=self.api_base,
                api_key=self.api_key,
                max_tokens=request.params.output_tokens,
                timeout=self.extra.get("timeout", request.params.timeout_s),
                json_mode=json_mode,
                retry=self.retry,
                concurrency=self.concurrency,
                extra=self.extra,
                **kwargs,
            )
        except ProviderError as e:  # never cached: a rerun asks again (issue #34)
            self.provider_calls += len(getattr(e, "attempts", ()))
            raise
        self.provider_calls += len(done.attempts)
        if self.cache is not None and key is not None:
            self.cache.put(
                key, {"text": done.text, "attempts": [a.to_dict() for a in done.attempts]}
            )
        return Reply(text=done.text, model=self.model, attempts=done.attempts)


def _positive(name: str, option: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name}: {option} must be an integer >= 1, got {value!r}")
    return value


def _replay(hit: Mapping[str, Any], model: str) -> Reply:
    """A cached attempt sequence played back: the answer, or the error it ended in."""
    attempts = tuple(CallAttempt(**a) for a in hit["attempts"])
    error = hit.get("error")
    if error is not None:
        err = ProviderError(error["message"], kind=error["kind"], status=error["status"])
        err.attempts = attempts  # type: ignore[attr-defined]
        err.cached = True  # type: ignore[attr-defined]
        raise err
    return Reply(text=hit["text"], model=model, attempts=attempts, cached=True)


class OracleConsolidator:
    """Answers with the gold changes for the batch: the ceiling that validates scorers.

    `gold(request)` returns the list of change objects (the eval suite maps
    the rollouts' `run_id`s and the snapshot to its annotations).
    """

    def __init__(
        self, gold: Callable[[ConsolidationRequest], list[dict[str, Any]]], name: str = "oracle"
    ):
        if not callable(gold):
            raise ConfigError(f"oracle consolidator needs a callable gold lookup, got {gold!r}")
        self.gold = gold
        self.name = name

    async def propose(self, request: ConsolidationRequest) -> Reply:
        t0 = time.perf_counter()
        changes = list(self.gold(request))
        return local_reply(self.name, json.dumps({"changes": changes}, ensure_ascii=False), t0)


class ReplayConsolidator:
    """Serves recorded answers offline, keyed by (request hash, replicate).

    Two sources: a recording (`<name>.jsonl`, `memkit.consolidate.recording`)
    replays the real attempts, their tokens and latency included, and shapes
    requests to the recorded budget (`request_budget`), so the same data and
    code send the same request hashes; or a run folder, whose
    `attempts.jsonl` raw answers are served (optionally of one `model`) with
    local latency. A request that is not there raises
    ProviderError(kind="replay_miss"), "not in the recording": the prompt, the
    shaping or the data changed since it was recorded. The eval counts those
    apart from provider failures and names them (`evals.providers`).
    """

    def __init__(self, source: str | Path, *, model: str | None = None, name: str | None = None):
        self.source = Path(source)
        self.model = model
        self.name = name or f"replay:{source}"
        self.budget: int | None = None
        self.isolate = True
        """False for a recording made before the split of failed batches (its
        header has no `isolate`): it holds only whole-batch requests, so
        `run_pass` counts and parks whole batches, as the recorded run did."""
        self.header: dict[str, Any] = {}
        self._entries: dict[tuple[str, int], dict[str, Any]] | None = None
        self._answers: dict[tuple[str, int], tuple[str, str]] = {}
        if is_recording(self.source):
            self.header, self._entries = read_recording(self.source)
            recorded = str(self.header.get("model") or self.name)
            if model is not None and model != recorded:
                raise ConfigError(f"replay: {self.source} recorded {recorded!r}, not {model!r}")
            self.model = recorded
            self.budget = _positive(self.name, "request_budget", self.header.get("request_budget"))
            self.isolate = self.header.get("isolate") is True
            return
        path = self.source / "attempts.jsonl"
        if not path.is_file():
            raise ConfigError(
                f"replay: {str(self.source)!r} is neither a recording (.jsonl) nor a run "
                "folder with attempts.jsonl"
            )
        with jsonlines.open(path) as lines:
            try:
                records = list(lines.iter(type=dict, skip_empty=True))
            except jsonlines.InvalidLineError as e:
                raise ConfigError(f"replay: {path}:{e.lineno}: {e}") from None
            for rec in records:
                raw = rec.get("raw_response")
                if raw is None or "request_hash" not in rec:
                    continue
                if model is not None and rec.get("model") != model:
                    continue
                key = (rec["request_hash"], int(rec.get("replicate", 0)))
                self._answers[key] = (raw, str(rec.get("model") or self.name))

    def __len__(self) -> int:
        return len(self._entries if self._entries is not None else self._answers)

    def request_budget(self, params: ConsolidationParams, system_prompt: str) -> int:
        """The recorded run's budget (a run folder: the SPEC's, from `params`)."""
        if self.budget is None:
            return params.request_bytes
        return min(params.request_bytes, self.budget)

    async def propose(self, request: ConsolidationRequest) -> Reply:
        t0 = time.perf_counter()
        key = (request.request_hash, request.replicate)
        if self._entries is not None:
            entry = self._entries.get(key)
            if entry is None:
                raise self._miss(request)
            return _replay(entry, str(self.model))
        hit = self._answers.get(key)
        if hit is None:
            raise self._miss(request)
        text, model = hit
        return local_reply(model, text, t0)

    def _miss(self, request: ConsolidationRequest) -> ProviderError:
        err = ProviderError(
            f"not in the recording: request {request.request_hash[:12]}… replicate "
            f"{request.replicate} is not in {str(self.source)!r} (the prompt, the request "
            "shaping or the data changed since it was recorded)",
            kind="replay_miss",
        )
        err.attempts = (  # type: ignore[attr-defined]
            CallAttempt(model=self.name, outcome="replay_miss", error=str(err)),
        )
        return err


CONSOLIDATOR_KINDS = ("litellm", "heuristic", "oracle", "replay")
"""The kinds of consolidator spec `get_consolidator` knows (for its "did you mean")."""


def get_consolidator(spec: str, **options: Any) -> Consolidator:
    """`litellm:<model>` | `heuristic` | `oracle` (needs `gold=`) |
    `replay:<recording.jsonl>` | `replay:<run-dir>`."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"consolidator spec must be a non-empty string, got {spec!r}")
    kind, _, arg = spec.partition(":")
    if kind == "litellm":
        return LiteLLMConsolidator(arg, **options)
    if kind == "heuristic" and not arg:
        return HeuristicConsolidator(**options)
    if kind == "oracle" and not arg:
        if "gold" not in options:
            raise ConfigError("oracle consolidator needs gold=<callable(request) -> changes>")
        return OracleConsolidator(**options)
    if kind == "replay" and arg:
        return ReplayConsolidator(arg, **options)
    hint = did_you_mean(kind, CONSOLIDATOR_KINDS) if kind not in CONSOLIDATOR_KINDS else ""
    raise ConfigError(
        f"unknown consolidator {spec!r}{hint} (want litellm:<model>, heuristic, oracle, "
        "replay:<recording.jsonl or run dir>)"
    )
