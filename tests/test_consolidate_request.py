"""Request building and byte shaping (SPEC §7.2-7.3), the native prompt (§7.4), parsing (§7.5)."""

from __future__ import annotations

import copy
import json

import pytest

from memkit.consolidate import (
    NATIVE_PROMPT,
    NATIVE_PROMPT_VERSION,
    build_request,
    parse_response,
    prepare_request,
    shape_request,
)
from memkit.errors import ProposalError, RequestTooLarge
from memkit.params import ConsolidationParams
from memkit.text import byte_len
from memkit.types import Memory, Rollout


def _rollout(i: int, n_msgs: int = 32, size: int = 4000) -> Rollout:
    msgs = tuple(
        {
            "role": ("user", "assistant", "tool")[j % 3],
            "name": f"name-{j}",
            "tool_call_id": f"call-{i}-{j}",
            "content": ("é" * (size // 2)),
        }
        for j in range(n_msgs)
    )
    return Rollout(id=f"{i:064x}", scope_id="s", messages=msgs, final="ü" * 4000, run_id=f"r{i}")


def _memory(i: int, size: int = 8192) -> Memory:
    return Memory(
        id=f"mem-{i:04d}",
        scope_id="s",
        kind=("fact", "preference", "procedure")[i % 3],
        content="ß" * (size // 2),
        tags=tuple(f"tag{k}-" + "t" * 100 for k in range(12)),
        confidence=0.6 + i / 100,
    )


def test_small_request_is_unshaped():
    payload = build_request([_rollout(0, 2, 100)], [_memory(0, 100)])
    text, size = shape_request(payload)
    assert size is None
    assert json.loads(text) == payload
    assert set(payload) == {"rollouts", "memories"}


def test_worst_case_shapes_to_fit_with_every_id():
    rollouts = [_rollout(i) for i in range(4)]
    snapshot = [_memory(i) for i in range(32)]
    originals = copy.deepcopy((rollouts, snapshot))
    payload = build_request(rollouts, snapshot)
    assert byte_len(json.dumps(payload, ensure_ascii=False)) > 500_000
    text, size = shape_request(payload)
    assert byte_len(text) <= 60_000
    assert size in (2048, 1024, 512, 256, 128, 64, 32, 16)
    got = json.loads(text)
    assert [r["id"] for r in got["rollouts"]] == [r.id for r in rollouts]
    for r_got, r in zip(got["rollouts"], rollouts, strict=True):
        assert len(r_got["messages"]) == 32
        for m_got, m in zip(r_got["messages"], r.messages, strict=True):
            assert m_got["role"] == m["role"]
            assert m_got["name"] == m["name"] and m_got["tool_call_id"] == m["tool_call_id"]
            assert byte_len(m_got["content"]) <= max(size, 16)
    assert [m["id"] for m in got["memories"]] == [m.id for m in snapshot]
    for m_got, m in zip(got["memories"], snapshot, strict=True):
        assert (m_got["kind"], m_got["confidence"], m_got["scope_id"]) == (
            m.kind,
            m.confidence,
            m.scope_id,
        )
        assert len(m_got["tags"]) == 8
        assert all(byte_len(t) <= 64 for t in m_got["tags"])
    # the first size that fits was used: the next larger one does not fit
    bigger = {16: 32, 32: 64, 64: 128, 128: 256, 256: 512, 512: 1024, 1024: 2048}
    if size in bigger:
        from memkit.consolidate.request import encode, excerpt

        assert byte_len(encode(excerpt(payload, bigger[size]))) > 60_000
    assert (rollouts, snapshot) == originals
    assert payload == build_request(*originals)  # the payload itself was not mutated


def test_excerpt_is_what_shaping_sends_at_that_size():
    from memkit.consolidate import excerpt
    from memkit.consolidate.request import SHAPE_MAX_TAGS, SHAPE_SIZES, encode
    from memkit.errors import ConfigError

    payload = build_request([_rollout(0, 4, 3000)], [_memory(0, 3000)])
    frozen = json.dumps(payload)
    for size in SHAPE_SIZES:
        cut = excerpt(payload, size)
        # a budget of exactly that excerpt's length: shaping sends that excerpt
        text, used = shape_request(
            payload, ConsolidationParams(request_bytes=byte_len(encode(cut)))
        )
        assert (used, json.loads(text)) == (size, cut)
        assert all(byte_len(m["content"]) <= size for m in cut["rollouts"][0]["messages"])
        assert byte_len(cut["memories"][0]["content"]) <= size
        assert len(cut["memories"][0]["tags"]) == SHAPE_MAX_TAGS
        assert cut["rollouts"][0]["id"] == payload["rollouts"][0]["id"]
    assert json.dumps(payload) == frozen  # never mutated
    for bad_size in (0, -1, 1.5, "16", True):
        with pytest.raises(ConfigError, match="size"):
            excerpt(payload, bad_size)
    for bad in (None, [], {"rollouts": []}, {"rollouts": [{}], "memories": []}):
        with pytest.raises(ConfigError, match="payload"):
            excerpt(bad, 16)


def test_limit_exactly_met_and_one_past():
    payload = build_request([_rollout(0, 1, 10)], [])
    n = byte_len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    assert shape_request(payload, ConsolidationParams(request_bytes=n))[1] is None
    _, size = shape_request(payload, ConsolidationParams(request_bytes=n - 1))
    assert size is not None  # a byte over: shaping kicks in


def test_huge_id_fails_before_any_provider_call():
    r = Rollout(
        id="x" * 80_000, scope_id="s", messages=({"role": "user", "content": "hi"},), final=""
    )
    with pytest.raises(RequestTooLarge, match="80"):
        prepare_request("s", [r], [])


def test_request_hash_is_stable_and_sensitive():
    a = prepare_request("s", [_rollout(0, 2, 50)], [_memory(0, 50)])
    b = prepare_request("s", [_rollout(0, 2, 50)], [_memory(0, 50)])
    c = prepare_request("s", [_rollout(1, 2, 50)], [_memory(0, 50)])
    assert a.request_hash == b.request_hash != c.request_hash
    assert a.messages[0] == {"role": "system", "content": NATIVE_PROMPT}
    assert json.loads(a.messages[1]["content"])["rollouts"][0]["id"] == a.rollouts[0].id
    other_version = prepare_request("s", [_rollout(0, 2, 50)], [_memory(0, 50)], prompt_version="x")
    assert other_version.request_hash != a.request_hash


def test_native_prompt_says_what_spec_7_4_requires():
    p = NATIVE_PROMPT.lower()
    assert NATIVE_PROMPT_VERSION
    for phrase in (
        "at most 4",
        "256 characters",
        "new, stable, specific to this scope",
        "untrusted evidence",
        "never invent ids",
        '{"changes": []}',
        "json",
        "merge",
        "retract",
        "toy exercises",
        "generic advice",
        "status",
    ):
        assert phrase.lower() in p, phrase


# --- parsing ----------------------------------------------------------------------


def test_parse_strict():
    assert parse_response('{"changes": []}').mode == "strict"
    assert parse_response(' \n{"changes": [{"ids": ["a"], "entry": null}]}\n').changes == [
        {"ids": ["a"], "entry": None}
    ]


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"changes": []}\n```',
        '```\n{"changes": []}\n```',
        'Sure, here it is:\n```json\n{"changes": []}\n```\nAnything else?',
        'Here: {"changes": []} -- done',
    ],
)
def test_lenient_repairs_and_reports_apart(text):
    with pytest.raises(ProposalError) as ei:
        parse_response(text)
    assert ei.value.code == "parse"
    p = parse_response(text, lenient=True)
    assert p.mode == "repaired" and p.changes == [] and p.strict_error


@pytest.mark.parametrize(
    "text",
    ["", "nothing", "```json\nnot json\n```", '{"changes": null}', '{"changes": {}}', "[1]", None],
)
def test_lenient_still_fails_on_garbage(text):
    with pytest.raises(ProposalError) as ei:
        parse_response(text, lenient=True)
    assert ei.value.code == "parse"


# --- properties -------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_text = st.text(alphabet=st.sampled_from('aé€🙂 \n"\\x'), max_size=3000)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    contents=st.lists(_text, min_size=1, max_size=40),
    memories=st.lists(_text, max_size=12),
    limit=st.integers(min_value=500, max_value=30_000),
)
def test_shaping_property(contents, memories, limit):
    msgs = tuple({"role": "user", "content": c} for c in contents)
    rollouts = [Rollout(id=f"{i:064x}", scope_id="s", messages=msgs, final="f") for i in range(2)]
    snap = [
        Memory(id=f"m{i}", scope_id="s", kind="fact", content=c, tags=("t" * 70,) * 10)
        for i, c in enumerate(memories)
    ]
    payload = build_request(rollouts, snap)
    frozen = json.dumps(payload)
    try:
        text, size = shape_request(payload, ConsolidationParams(request_bytes=limit))
    except RequestTooLarge:
        from memkit.consolidate.request import encode, excerpt

        assert byte_len(encode(excerpt(payload, 16))) > limit
    else:
        assert byte_len(text) <= limit
        got = json.loads(text)
        assert [r["id"] for r in got["rollouts"]] == [r.id for r in rollouts]
        assert [m["id"] for m in got["memories"]] == [m.id for m in snap]
        assert all(len(r["messages"]) == len(msgs) for r in got["rollouts"])
        if size is None:
            assert got == payload
    assert json.dumps(payload) == frozen
