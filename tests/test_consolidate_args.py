"""The request helpers `memkit.consolidate` exports check their arguments (issue #22
item 2): a mistyped argument is a MemkitError naming it and the bad value, never a
TypeError, AttributeError or UnicodeEncodeError from deep inside. The checks are
isinstance tests of the arguments (and of each item the helper walks anyway), so
the pass path, its request bytes and its hashes are unchanged."""

from __future__ import annotations

import hashlib

import pytest

from memkit.consolidate import (
    build_request,
    evidence_messages,
    prepare_request,
    rollout_id,
    shape_request,
)
from memkit.errors import ConfigError, TranscriptError
from memkit.params import ConsolidationParams
from memkit.types import Memory, Rollout

MSGS = [{"role": "user", "content": "deploy with make ship"}]
ROLLOUT = Rollout(id="r1", scope_id="s", messages=tuple(MSGS), final="done", run_id=None)


def _memory() -> Memory:
    return Memory(id="m1", scope_id="s", kind="fact", content="c")


@pytest.mark.parametrize(
    "messages, error, names",
    [
        (None, TranscriptError, "messages must be a list of message objects, got NoneType"),
        (5, TranscriptError, "got int 5"),
        ("user: hi", TranscriptError, "got str 'user: hi'"),
        (b"[]", TranscriptError, "got bytes"),
        ({"role": "user"}, TranscriptError, "got dict"),
        ([5], TranscriptError, "messages[0] must be a message object, got int 5"),
        ([{"x": {1}}], TranscriptError, "messages[0] is not UTF-8 JSON (TypeError"),
        ([{"c": "\ud800"}], TranscriptError, "messages[0] is not UTF-8 JSON (UnicodeEncodeError"),
    ],
)
def test_rollout_id_refuses_bad_messages_naming_them(messages, error, names):
    with pytest.raises(error) as e:
        rollout_id(messages)
    assert names in str(e.value)


def test_rollout_id_of_good_messages_is_unchanged():
    """The hash of checked input is the canonical JSON's, streamed or not."""
    expected = hashlib.sha256(b'[{"content":"deploy with make ship","role":"user"}]').hexdigest()
    assert rollout_id(MSGS) == rollout_id(iter(MSGS)) == rollout_id(tuple(MSGS)) == expected


@pytest.mark.parametrize(
    "args, error, names",
    [
        ((None,), TranscriptError, "messages must be a list of message objects, got NoneType"),
        (("hi",), TranscriptError, "got str 'hi'"),
        ((iter(MSGS),), TranscriptError, "got list_iterator"),  # walked backwards: a sequence
        (([5],), TranscriptError, "messages[0] must be a message object, got int 5"),
        (([*MSGS, "x"],), TranscriptError, "messages[1] must be a message object, got str 'x'"),
        ((MSGS, None), ConfigError, "params must be ConsolidationParams, not NoneType"),
        ((MSGS, {"evidence_bytes": 5}), ConfigError, "params must be ConsolidationParams"),
        ((MSGS, ConsolidationParams(), "off"), ConfigError, "redaction must be RedactionParams"),
    ],
)
def test_evidence_messages_refuses_bad_arguments_naming_them(args, error, names):
    with pytest.raises(error) as e:
        evidence_messages(*args)
    assert names in str(e.value)


@pytest.mark.parametrize(
    "args, names",
    [
        ((None, []), "rollouts must be a list of Rollout, got NoneType None"),
        (("r1", []), "rollouts must be a list of Rollout, got str 'r1'"),
        (([MSGS[0]], []), "rollouts[0] must be a Rollout, got dict"),
        (([ROLLOUT], None), "snapshot must be a list of Memory, got NoneType None"),
        (([ROLLOUT], ["m1"]), "snapshot[0] must be a Memory, got str 'm1'"),
        (([], [ROLLOUT]), "snapshot[0] must be a Memory, got Rollout"),
    ],
)
def test_build_request_refuses_bad_arguments_naming_them(args, names):
    with pytest.raises(ConfigError) as e:
        build_request(*args)
    assert names in str(e.value)


@pytest.mark.parametrize(
    "args, names",
    [
        ((None,), "payload must be build_request's"),
        (("{}",), "got str '{}'"),
        (({},), "got dict {}"),
        (({"rollouts": 5, "memories": []},), "got dict {'rollouts': 5"),
        (({"rollouts": [{"x": {1}}], "memories": []},), "payload is not build_request's JSON"),
        (({"rollouts": [], "memories": []}, None), "params must be ConsolidationParams"),
        (({"rollouts": [], "memories": []}, 4096), "params must be ConsolidationParams, not int"),
    ],
)
def test_shape_request_refuses_bad_arguments_naming_them(args, names):
    with pytest.raises(ConfigError) as e:
        shape_request(*args)
    assert names in str(e.value)


def test_a_malformed_payload_that_needs_shaping_is_a_config_error():
    """The excerpt path reads each rollout's messages and final: a payload without them
    is named, not a KeyError, even when only shaping reaches it."""
    payload = {"rollouts": [{"id": "r", "text": "x" * 5000}], "memories": []}
    with pytest.raises(ConfigError, match="payload is not build_request's JSON payload"):
        shape_request(payload, ConsolidationParams(request_bytes=1024))


def test_checked_helpers_build_the_same_request():
    payload = build_request([ROLLOUT], [_memory()])
    assert payload["rollouts"][0]["messages"] == MSGS
    text, size = shape_request(payload)
    assert size is None and text.startswith('{"rollouts":[{"id":"r1"')


@pytest.mark.parametrize(
    "kw, names",
    [
        ({"scope_id": None}, "scope_id must be a string, not NoneType"),
        ({"scope_id": 5}, "scope_id must be a string, not int"),
        ({"scope_id": "s\ud800"}, "scope_id is not encodable as UTF-8"),
        ({"replicate": "0"}, "replicate must be an integer, not str"),
        ({"replicate": -1}, "replicate must be within 0.."),
        ({"replicate": True}, "replicate must be an integer, not bool"),
        ({"system_prompt": None}, "system_prompt must be a string"),
        ({"system_prompt": "x\ud800"}, "system_prompt is not encodable as UTF-8"),
        ({"prompt_version": 1}, "prompt_version must be a string, not int"),
    ],
)
def test_prepare_request_refuses_its_own_bad_arguments_naming_them(kw, names):
    args = {"scope_id": "s", "rollouts": [ROLLOUT], "snapshot": [_memory()], **kw}
    with pytest.raises(ConfigError) as e:
        prepare_request(**args)
    assert names in str(e.value)


def test_prepare_request_of_good_arguments_is_unchanged():
    req = prepare_request("s", [ROLLOUT], [_memory()], replicate=2)
    assert (req.scope_id, req.replicate, req.excerpt_size) == ("s", 2, None)
    assert req.user_text == shape_request(build_request([ROLLOUT], [_memory()]))[0]
