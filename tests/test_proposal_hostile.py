"""Malformed proposals get a stable SPEC code, and the attempt records it (issue #22).

Each case was, before, either accepted silently (`kind: 0` stored as a fact,
`tags: false` as no tags, a foreign scope hidden behind an empty `scope_id`)
or escaped as the wrong exception (`RecursionError`, `UnicodeEncodeError`),
which a pass reported as `internal` and LiteLLM attempts as a clean "ok".
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).parent))

from stub_openai import StubServer, reply

from memkit import SQLiteStore
from memkit.consolidate import Reply, build_rollout, get_consolidator, run_pass_sync
from memkit.errors import ProposalError
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams
from memkit.proposal import parse_response, validate_changes, widens_scope

RID = "a" * 64
DEEP = "[" * 50_000 + "]" * 50_000


def _entry(**fields):
    return [{"ids": [], "entry": {"content": "Deploy with make deploy", **fields}}]


@pytest.mark.parametrize(
    "text",
    [DEEP, '{"changes": ' + DEEP + "}", '{"changes": [' + "{" * 0 + DEEP + "]}"],
    ids=["deep-array", "deep-changes", "deep-item"],
)
def test_too_deep_is_parse(text):
    for lenient in (False, True):
        with pytest.raises(ProposalError) as e:
            changes = parse_response(text, lenient=lenient).changes
            validate_changes("s", [RID], [], changes)
        assert e.value.code == "parse"


@pytest.mark.parametrize(
    "fields, code",
    [
        ({"kind": 0}, "invalid_lesson"),
        ({"kind": False}, "invalid_lesson"),
        ({"kind": ""}, "invalid_lesson"),
        ({"kind": ["fact"]}, "invalid_lesson"),
        ({"tags": False}, "invalid_lesson"),
        ({"tags": "ops"}, "invalid_lesson"),
        ({"tags": 0}, "invalid_lesson"),
        ({"tags": ["ok", "x \ud800"]}, "invalid_lesson"),
        ({"content": "x \ud800"}, "invalid_lesson"),
        ({"scope_id": "", "scope": "other"}, "scope_widening"),
        ({"scope_id": None, "scope": "other"}, "scope_widening"),
        ({"scope": "s", "scope_id": "other"}, "scope_widening"),
        ({"scope_id": "s", "scope": "other"}, "scope_widening"),
        ({"scope": 5}, "scope_widening"),
    ],
)
def test_malformed_entries_get_their_code(fields, code):
    with pytest.raises(ProposalError) as e:
        validate_changes("s", [RID], [], _entry(**fields))
    assert e.value.code == code


@pytest.mark.parametrize(
    "fields",
    [{}, {"kind": None}, {"tags": None}, {"tags": []}, {"scope_id": "s"}, {"scope": ""}],
)
def test_well_formed_entries_still_pass(fields):
    (ch,) = validate_changes("s", [RID], [], _entry(**fields))
    assert ch.entry.kind == "fact" and ch.entry.tags == ()


def test_widens_scope_reads_both_keys():
    assert widens_scope({"scope_id": "", "scope": "other"}, "s")
    assert widens_scope({"scope_id": None, "scope": "other"}, "s")
    assert not widens_scope({"scope_id": "s", "scope": ""}, "s")


class Scripted:
    name = "scripted"

    def __init__(self, text: str):
        self.text = text

    async def propose(self, request) -> Reply:
        return Reply(self.text, "scripted", (CallAttempt(model="scripted", outcome="ok"),))


def _store() -> SQLiteStore:
    store = SQLiteStore.open(":memory:", embedder=None)
    store.stage_rollout(build_rollout("s", [{"role": "user", "content": "hi"}], "ok", run_id="r"))
    return store


BAD_ANSWERS = {
    "parse": DEEP,
    "invalid_lesson": json.dumps({"changes": _entry(content="x \ud800")}),
    "scope_widening": json.dumps({"changes": _entry(scope_id="", scope="other")}),
}


@pytest.mark.parametrize("code", sorted(BAD_ANSWERS))
def test_a_pass_reports_the_code_and_the_attempt_records_it(code):
    store = _store()
    res = run_pass_sync(store, "s", Scripted(BAD_ANSWERS[code]))
    assert (res.outcome, res.error_code) == ("error", code)
    (a,) = res.attempts
    assert a.validation_code == code and a.outcome in ("parse", "invalid")
    assert len(store.pending_rollouts("s", 10)) == 1 and store.live("s") == []


@pytest.mark.parametrize("code", sorted(BAD_ANSWERS))
def test_through_litellm_the_attempt_is_not_ok(code):
    with StubServer({"bad": reply(BAD_ANSWERS[code])}) as srv:
        store = _store()
        c = get_consolidator("litellm:openai/bad", api_base=srv.url, api_key="stub")
        res = run_pass_sync(store, "s", c, ConsolidationParams(timeout_s=5.0))
    assert res.error_code == code
    (a,) = res.attempts
    assert a.validation_code == code and a.outcome != "ok"
    assert len(store.pending_rollouts("s", 10)) == 1


@pytest.mark.parametrize(
    "args, argument",
    [
        ((5, [RID], []), "scope_id"),
        (("s", None, []), "rollout_ids"),
        (("s", 5, []), "rollout_ids"),
        (("s", {RID: 1}, []), "rollout_ids"),
        (("s", [RID], None), "snapshot"),
        (("s", [RID], "m1"), "snapshot"),
        (("s", [RID], [5]), "snapshot"),
    ],
)
def test_mistyped_pass_arguments_are_config_errors_naming_them(args, argument):
    """The caller's mistakes, not the model's: they escaped as TypeError
    (`len(None)`) or AttributeError (`'str' object has no attribute 'id'`)."""
    from memkit.errors import ConfigError

    with pytest.raises(ConfigError, match=argument):
        validate_changes(*args, [])
