"""A model's request budget (memkit extension of SPEC §7.3), through LiteLLM and the stub.

The SPEC's 60,000 bytes stay the default; `max_request_bytes` or the model's
context (`context_tokens`, else LiteLLM's model map) lower it. Shaping still
never shortens ids, and a request whose 16-byte excerpts do not fit the budget
fails before any provider call. Every bound is tested at the bound and one past it.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from stub_openai import StubServer, consolidation_payload, reply

from memkit import SQLiteStore
from memkit.consolidate import build_rollout, get_consolidator, run_pass_sync
from memkit.consolidate.budget import BYTES_PER_TOKEN, TEMPLATE_TOKENS, request_budget
from memkit.consolidate.request import (
    NATIVE_PROMPT,
    SHAPE_SIZES,
    build_request,
    encode,
    excerpt,
)
from memkit.errors import ConfigError, RequestTooLarge
from memkit.params import ConsolidationParams
from memkit.text import byte_len

FAST = ConsolidationParams(timeout_s=5.0)
LONG = "We deploy with make deploy from the repository root, always. " * 40


def _store(n_messages: int = 6) -> SQLiteStore:
    store = SQLiteStore.open(":memory:", embedder=None)
    msgs = [{"role": "user", "content": f"{i}: {LONG}"} for i in range(n_messages)]
    store.stage_rollout(build_rollout("s", msgs, "ok " + LONG, run_id="r-1"))
    return store


def _payload(store: SQLiteStore) -> dict:
    return build_request(store.pending_rollouts("s", 4), store.snapshot("s", 32))


@pytest.fixture(scope="module")
def srv():
    with StubServer(default=reply('{"changes": []}')) as s:
        yield s


def _llm(srv: StubServer, name: str, **kw):
    return get_consolidator(f"litellm:openai/{name}", api_base=srv.url, api_key="k", **kw)


def _sent(srv: StubServer, name: str) -> list[str]:
    return [c.messages[-1]["content"] for c in srv.calls_for(name)]


# --- the pure budget --------------------------------------------------------------------


def test_budget_defaults_to_the_spec_limit_and_never_raises_it():
    assert request_budget(60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT) == 60_000
    assert (
        request_budget(
            60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT, max_request_bytes=99_999
        )
        == 60_000
    )
    huge = request_budget(
        60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT, context_tokens=128_000
    )
    assert huge == 60_000


def test_budget_from_context_tokens_sets_aside_answer_template_and_system_prompt():
    got = request_budget(
        60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT, context_tokens=8192
    )
    expect = math.floor((8192 - 2048 - TEMPLATE_TOKENS) * BYTES_PER_TOKEN) - byte_len(NATIVE_PROMPT)
    assert got == expect
    # the whole request in tokens, at the conservative rate, fits the context with the answer
    assert (got + byte_len(NATIVE_PROMPT)) / BYTES_PER_TOKEN + TEMPLATE_TOKENS + 2048 <= 8192
    # both options given: the lower wins
    both = request_budget(
        60_000,
        output_tokens=2048,
        system_prompt=NATIVE_PROMPT,
        context_tokens=8192,
        max_request_bytes=got - 1,
    )
    assert both == got - 1


def test_a_context_without_room_fails_at_the_bound_and_not_before():
    # floor((141 - 100 - 32) * 1.25) - 10 = 11 - 10 = 1 byte of room: the bound
    small = {"output_tokens": 100, "system_prompt": "x" * 10}
    assert request_budget(60_000, context_tokens=141, **small) == 1
    with pytest.raises(RequestTooLarge, match="leaves no room"):
        request_budget(60_000, context_tokens=140, **small)


def test_bad_budget_options_are_refused_naming_the_option():
    for key, bad in (("max_request_bytes", 0), ("context_tokens", -5), ("context_tokens", "8k")):
        with pytest.raises(ConfigError, match=key):
            get_consolidator("litellm:openai/x", **{key: bad})


# --- through LiteLLM and the stub -------------------------------------------------------


def test_a_request_at_the_budget_goes_unshaped_one_byte_over_is_shaped(srv):
    store = _store()
    full = encode(_payload(store))
    n = byte_len(full)
    at = run_pass_sync(store, "s", _llm(srv, "at-bound", max_request_bytes=n), FAST)
    assert at.outcome == "committed" and at.excerpt_size is None and at.request_budget == n
    assert _sent(srv, "at-bound") == [full]

    store = _store()
    want = _payload(store)
    over = run_pass_sync(store, "s", _llm(srv, "past-bound", max_request_bytes=n - 1), FAST)
    assert over.outcome == "committed" and over.request_budget == n - 1
    assert over.excerpt_size == SHAPE_SIZES[0]
    (sent,) = _sent(srv, "past-bound")
    assert byte_len(sent) <= n - 1
    # ids, roles and kinds are never shortened
    got = json.loads(sent)
    assert [r["id"] for r in got["rollouts"]] == [r["id"] for r in want["rollouts"]]
    assert [m["role"] for m in got["rollouts"][0]["messages"]] == [
        m["role"] for m in want["rollouts"][0]["messages"]
    ]


def test_the_smallest_size_must_fit_else_no_provider_call(srv):
    store = _store()
    smallest = byte_len(encode(excerpt(_payload(store), SHAPE_SIZES[-1])))
    fits = run_pass_sync(store, "s", _llm(srv, "tiny-fits", max_request_bytes=smallest), FAST)
    assert fits.outcome == "committed" and fits.excerpt_size == SHAPE_SIZES[-1]
    assert len(srv.calls_for("tiny-fits")) == 1

    store = _store()
    errors: list[BaseException] = []
    res = run_pass_sync(
        store,
        "s",
        _llm(srv, "tiny-refused", max_request_bytes=smallest - 1),
        FAST,
        on_error=errors.append,
    )
    assert res.outcome == "error" and res.error_code == "request_too_large"
    assert isinstance(errors[0], RequestTooLarge)
    assert srv.calls_for("tiny-refused") == []  # failed before any provider call
    assert len(store.pending_rollouts("s")) == 1  # nothing consumed


def test_smollm2_context_shapes_every_request_to_fit_8192_tokens(srv):
    store = _store(n_messages=12)
    cons = _llm(srv, "smollm2", context_tokens=8192, extra={"max_tokens": 2048})
    budget = cons.request_budget(FAST, NATIVE_PROMPT)
    assert byte_len(encode(_payload(store))) > budget  # too large as it is
    res = run_pass_sync(store, "s", cons, FAST)
    assert res.outcome == "committed" and res.request_budget == budget
    (sent,) = _sent(srv, "smollm2")
    assert byte_len(sent) <= budget
    assert consolidation_payload(srv.calls_for("smollm2")[0].body)["rollouts"][0]["id"]
    # a smaller answer ceiling leaves a larger budget
    roomier = _llm(srv, "smollm2", context_tokens=8192, extra={"max_tokens": 512})
    assert roomier.request_budget(FAST, NATIVE_PROMPT) > budget


def test_a_context_litellm_knows_lowers_the_budget_without_options(srv):
    # LiteLLM's bundled map gives gpt-4 an 8,192-token input context
    small = _llm(srv, "gpt-4")
    assert small.request_budget(FAST, NATIVE_PROMPT) == request_budget(
        60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT, context_tokens=8192
    )
    # a large context keeps the SPEC's limit; an unknown model too
    assert _llm(srv, "gpt-4o-mini").request_budget(FAST, NATIVE_PROMPT) == 60_000
    assert _llm(srv, "no-such-model-xyz").request_budget(FAST, NATIVE_PROMPT) == 60_000
    # an explicit byte budget is the user's word: LiteLLM's map is not asked
    assert _llm(srv, "gpt-4", max_request_bytes=50_000).request_budget(FAST, NATIVE_PROMPT) == (
        50_000
    )


def test_cli_and_experiment_options_reach_the_consolidator(srv, tmp_path, monkeypatch):
    """`memkit eval run --context-tokens/--max-request-bytes`: the run's passes are
    shaped to the budget those options give, and the manifest records them."""
    from test_eval_data import write_tiny_dataset

    from evals.commands import run_main
    from evals.experiment import load_experiment
    from evals.runfolder import read_jsonl

    tiny = write_tiny_dataset(tmp_path / "tiny")
    monkeypatch.setenv("MEMKIT_TEST_STUB_KEY", "k")
    spec = "litellm:openai/smollm2"
    by_context = request_budget(
        60_000, output_tokens=2048, system_prompt=NATIVE_PROMPT, context_tokens=8192
    )
    for n, (flags, budget) in enumerate(
        [
            (["--context-tokens", "8192"], by_context),
            (
                ["--context-tokens", "8192", "--max-request-bytes", str(by_context - 1)],
                by_context - 1,
            ),
        ]
    ):
        out = tmp_path / f"run{n}"
        argv = ["--dataset", str(tiny), "--mode", "pipeline", "--embedder", "hashing",
                "--resamples", "20", "--consolidator", spec, "--api-base", srv.url,
                "--api-key-env", "MEMKIT_TEST_STUB_KEY", "--cache-dir", str(tmp_path / "cache"),
                "--out", str(out), "--quiet", "--no-report", *flags]  # fmt: skip
        assert run_main(argv) == 0
        options = json.loads((out / "manifest.json").read_text())["config"]["model_options"]
        assert options[spec]["context_tokens"] == 8192
        passes = [p for p in read_jsonl(out / "passes.jsonl") if p.get("request_budget")]
        assert passes and {p["request_budget"] for p in passes} == {budget}

    exp = tmp_path / "e.toml"
    exp.write_text(f'[models."{spec}"]\ncontext_tokens = 8192\n', encoding="utf-8")
    assert load_experiment(exp).models[spec]["context_tokens"] == 8192
    exp.write_text(f'[models."{spec}"]\ncontext_tokens = 0\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="context_tokens must be an integer >= 1"):
        load_experiment(exp)
