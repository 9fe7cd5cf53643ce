"""`judge`: one answer read once, both readings recorded (issue #16 item 1)."""

from __future__ import annotations

import json

import pytest

from memkit.consolidate import judge
from memkit.errors import ProposalError

ADD = {"ids": [], "entry": {"content": "deploy with make deploy"}}


def _validate(changes):
    for ch in changes:
        if ch.get("ids"):
            raise ProposalError("unknown_id", f"id {ch['ids'][0]!r} is not in the snapshot")
    return tuple(changes)


def test_strict_answer_is_valid_both_ways():
    j = judge(json.dumps({"changes": [ADD]}), _validate)
    assert j.mode == "strict" and j.strict.code is None and j.lenient.code is None
    assert j.under(False) == (j.strict, "strict") and j.lenient.typed == (ADD,)


def test_fenced_valid_answer_fails_strictly_and_is_valid_after_repair():
    j = judge("Sure:\n```json\n" + json.dumps({"changes": [ADD]}) + "\n```", _validate)
    assert j.mode == "repaired"
    assert j.strict.code == "parse" and j.strict.changes is None
    assert j.lenient.code is None and j.lenient.changes == [ADD]
    assert j.under(False)[1] == "failed" and j.under(True) == (j.lenient, "repaired")
    assert "[parse] [parse]" not in str(j.strict.error)


def test_fenced_invented_ids_keep_the_validator_code_after_repair():
    bad = {"ids": ["mem-x"], "entry": None}
    j = judge("```json\n" + json.dumps({"changes": [bad]}) + "\n```", _validate)
    assert (j.strict.code, j.lenient.code) == ("parse", "unknown_id")
    assert j.lenient.changes == [bad]


@pytest.mark.parametrize("text", [None, "", "no json at all", '{"changes": null}'])
def test_unparsable_answer_fails_both_ways(text):
    j = judge(text, _validate)
    assert j.mode == "failed" and j.strict.code == j.lenient.code == "parse"
    assert j.lenient.changes is None


def test_validator_runs_once():
    calls = []
    judge(json.dumps({"changes": []}), lambda ch: calls.append(ch) or ())
    judge('```json\n{"changes": []}\n```', lambda ch: calls.append(ch) or ())
    assert len(calls) == 2
