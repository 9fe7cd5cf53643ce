"""Structured output: the proposal JSON Schema as a per-model `response_format`.

Through LiteLLM against the loopback stub: the request body carries memkit's
one schema (`memkit.proposal.PROPOSAL_SCHEMA`) unchanged in either form, the
attempt records what constrained the answer, and strict parsing still judges
the answer (a schema is a request, not a guarantee).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from stub_openai import StubServer, fenced, reply

from memkit import SQLiteStore
from memkit.consolidate import build_rollout, get_consolidator, run_pass_sync
from memkit.errors import ConfigError
from memkit.params import ConsolidationParams
from memkit.proposal import (
    PROPOSAL_SCHEMA,
    PROPOSAL_SCHEMA_NAME,
    RESPONSE_FORMS,
    proposal_response_format,
)
from memkit.types import KINDS

FAST = ConsolidationParams(timeout_s=5.0)
GOOD = json.dumps(
    {"changes": [{"ids": [], "entry": {"kind": "procedure", "content": "Deploy with make."}}]}
)
ROOT = Path(__file__).resolve().parents[1]


def _store() -> SQLiteStore:
    store = SQLiteStore.open(":memory:", embedder=None)
    msgs = [{"role": "user", "content": "We deploy with make deploy."}]
    store.stage_rollout(build_rollout("s", msgs, "ok", run_id="r-1"))
    return store


@pytest.fixture(scope="module")
def srv():
    with StubServer(behaviours={"fenced": fenced(GOOD)}, default=reply(GOOD)) as s:
        yield s


def _run(srv: StubServer, name: str, **kw):
    cons = get_consolidator(f"litellm:openai/{name}", api_base=srv.url, api_key="k", **kw)
    res = run_pass_sync(_store(), "s", cons, FAST)
    return res, srv.calls_for(name)[-1].body


def test_llama_cpp_python_form_reaches_the_server_unchanged(srv):
    res, body = _run(srv, "schema-object", structured_output="json_object")
    assert body["response_format"] == {"type": "json_object", "schema": PROPOSAL_SCHEMA}
    assert res.outcome == "committed"
    assert res.attempts[-1].response_format == "json_object+schema"
    assert res.attempts[-1].to_dict()["response_format"] == "json_object+schema"


def test_hosted_vllm_models_pass_the_schema_unchanged_too(srv):
    # the local server's model string (memkit.local_server.LITELLM_MODEL)
    cons = get_consolidator(
        "litellm:hosted_vllm/smollm2-135m", api_base=srv.url, structured_output="json_object"
    )
    res = run_pass_sync(_store(), "s", cons, FAST)
    body = srv.calls_for("smollm2-135m")[-1].body
    assert body["response_format"] == {"type": "json_object", "schema": PROPOSAL_SCHEMA}
    assert res.attempts[-1].response_format == "json_object+schema"


def test_openai_form_reaches_the_server_unchanged(srv):
    res, body = _run(srv, "schema-openai", structured_output="json_schema")
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": PROPOSAL_SCHEMA_NAME, "schema": PROPOSAL_SCHEMA},
    }
    assert res.attempts[-1].response_format == "json_schema"


def test_without_the_option_the_attempt_says_what_was_sent(srv):
    res, body = _run(srv, "plain", json_mode=False)
    assert "response_format" not in body and res.attempts[-1].response_format is None
    res, body = _run(srv, "jsonmode", json_mode=True)
    assert body["response_format"] == {"type": "json_object"}
    assert res.attempts[-1].response_format == "json_object"


def test_strict_parsing_stays_the_judge_under_a_schema(srv):
    res, _ = _run(srv, "fenced", structured_output="json_object")
    last = res.attempts[-1]
    assert res.outcome == "error" and res.error_code == "parse"
    assert last.strict_code == "parse" and last.lenient_code is None  # valid after repair only
    assert last.response_format == "json_object+schema"


def test_the_option_is_checked_and_excludes_a_hand_made_response_format(srv):
    with pytest.raises(ConfigError, match="json_schema, json_object"):
        get_consolidator("litellm:openai/x", structured_output="yaml")
    with pytest.raises(ConfigError, match="not both"):
        get_consolidator(
            "litellm:openai/x",
            structured_output="json_object",
            extra={"response_format": {"type": "json_object"}},
        )
    from evals.providers import validate_options

    with pytest.raises(ConfigError, match="structured_output must be one of"):
        validate_options("litellm:openai/x", {"structured_output": "xml"})
    with pytest.raises(ConfigError, match="not both"):
        validate_options(
            "litellm:openai/x", {"structured_output": "json_object", "response_format": {}}
        )


def test_cli_flag_reaches_the_request(srv, tmp_path, monkeypatch):
    """`memkit eval run --structured-output json_object`: every request of the run
    carries the schema, and every attempt records it."""
    from test_eval_data import write_tiny_dataset

    from evals.commands import run_main
    from evals.runfolder import read_jsonl

    tiny = write_tiny_dataset(tmp_path / "tiny")
    monkeypatch.setenv("MEMKIT_TEST_STUB_KEY", "k")
    out = tmp_path / "run"
    n0 = len(srv.calls_for("flagged"))
    argv = ["--dataset", str(tiny), "--mode", "pipeline", "--embedder", "hashing",
            "--resamples", "20", "--consolidator", "litellm:openai/flagged",
            "--api-base", srv.url, "--api-key-env", "MEMKIT_TEST_STUB_KEY",
            "--structured-output", "json_object", "--cache-dir", str(tmp_path / "cache"),
            "--out", str(out), "--quiet", "--no-report"]  # fmt: skip
    assert run_main(argv) == 0
    calls = srv.calls_for("flagged")[n0:]
    assert calls and all(c.body["response_format"]["schema"] == PROPOSAL_SCHEMA for c in calls)
    attempts = read_jsonl(out / "attempts.jsonl")
    assert attempts and {a["response_format"] for a in attempts} == {"json_object+schema"}


def test_the_schema_states_the_validators_bounds():
    p = ConsolidationParams()
    changes = PROPOSAL_SCHEMA["properties"]["changes"]
    change = changes["items"]
    entry = change["properties"]["entry"]["anyOf"][1]
    assert changes["maxItems"] == p.max_changes
    assert change["properties"]["ids"]["maxItems"] == p.max_ids
    assert entry["properties"]["tags"]["maxItems"] == p.max_tags
    assert entry["properties"]["kind"]["enum"] == list(KINDS)
    for form in RESPONSE_FORMS:  # fresh copies: a caller cannot edit the one schema
        proposal_response_format(form)["type"] = "changed"
    assert proposal_response_format("json_object")["schema"] == PROPOSAL_SCHEMA


def test_the_behaviour_notes_show_the_one_schema():
    text = (ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    assert any(json.loads(b) == PROPOSAL_SCHEMA for b in blocks if '"changes"' in b), (
        "docs/behaviour.md must show memkit.proposal.PROPOSAL_SCHEMA as a ```json block"
    )
