"""Eligibility, rollout ids, bounded evidence, redaction and idempotent staging (SPEC §7)."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from memkit import SQLiteStore
from memkit.consolidate import build_rollout, eligible, evidence_messages, rollout_id, stage_run
from memkit.consolidate.stage import canonical_json
from memkit.errors import TranscriptError
from memkit.params import ConsolidationParams, RedactionParams
from memkit.text import byte_len


def run(**kw):
    base = {
        "run_id": "run-1",
        "scope_id": "scope-a",
        "parent_run_id": None,
        "status": "succeeded",
        "stop_reason": "stop",
        "turns": 2,
        "started_at": "2026-01-01T00:00:00Z",
        "task": "deploy",
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "How do I deploy? We use make deploy."},
            {"role": "assistant", "content": "Run `make deploy`."},
        ],
        "final_answer": "Run `make deploy`.",
    }
    base.update(kw)
    return base


# --- eligibility ---------------------------------------------------------------


@pytest.mark.parametrize("stop", ["", "stop", "end_turn", None])
def test_eligible_root_success(stop):
    assert eligible(run(stop_reason=stop))


@pytest.mark.parametrize(
    "kw",
    [
        {"parent_run_id": "run-0"},
        {"status": "failed"},
        {"status": "aborted"},
        {"status": "parked"},
        {"turns": 0},
        {"stop_reason": "max_tokens"},
        {"stop_reason": "length"},
        {"stop_reason": "tool_use"},
        {"stop_reason": "error"},
    ],
    ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()),
)
def test_ineligible_runs_stage_nothing(kw, store):
    r = run(**kw)
    assert not eligible(r)
    assert stage_run(store, r) is None
    assert store.pending_rollouts("scope-a", 100) == []
    assert store.stats("scope-a")["rollouts_pending"] == 0


@pytest.fixture
def store():
    s = SQLiteStore.open(":memory:", embedder=None)
    yield s
    s.close()


# --- rollout id ------------------------------------------------------------------


def test_rollout_id_is_sha256_of_canonical_whole_list():
    msgs = run()["messages"]
    expected = hashlib.sha256(canonical_json(msgs).encode()).hexdigest()
    assert rollout_id(msgs) == expected
    assert rollout_id(iter(msgs)) == expected  # streamed from a one-shot iterator
    assert rollout_id([]) == hashlib.sha256(b"[]").hexdigest()


def test_rollout_id_includes_system_and_key_order_is_irrelevant():
    msgs = run()["messages"]
    without_system = msgs[1:]
    assert rollout_id(msgs) != rollout_id(without_system)
    reordered = [dict(reversed(list(m.items()))) for m in msgs]
    assert rollout_id(reordered) == rollout_id(msgs)
    changed = copy.deepcopy(msgs)
    changed[0]["content"] += " "
    assert rollout_id(changed) != rollout_id(msgs)


def test_rollout_id_hashes_originals_not_evidence():
    secret = [{"role": "user", "content": "password=hunter2 " + "x" * 10_000}]
    r = build_rollout("s", secret, "")
    assert r.id == rollout_id(secret)
    assert len(r.id) == 64 and all(c in "0123456789abcdef" for c in r.id)


# --- evidence bounds -------------------------------------------------------------


def test_evidence_tail_32_messages_chronological_system_skipped():
    msgs = [{"role": "system", "content": "sys"}]
    msgs += [{"role": "user", "content": f"m{i}"} for i in range(40)]
    ev = evidence_messages(msgs)
    assert [m["content"] for m in ev] == [f"m{i}" for i in range(8, 40)]
    assert len(evidence_messages(msgs[:33])) == 32  # 32 non-system: all kept
    assert len(evidence_messages(msgs[:34])) == 32  # 33: one past the bound


def test_evidence_system_and_empty_do_not_count():
    msgs = [{"role": "user", "content": "first"}]
    msgs += [{"role": "system", "content": "s"}, {"role": "tool", "content": ""}] * 40
    msgs += [{"role": "assistant", "content": None}]
    ev = evidence_messages(msgs)
    assert ev == [{"role": "user", "content": "first"}]


def test_evidence_per_message_cap_4000_bytes():
    exact = "é" * 2000  # 4000 bytes: kept whole
    over = "é" * 2000 + "a"  # 4001 bytes: cut in the middle
    ev = evidence_messages([{"role": "user", "content": exact}, {"role": "user", "content": over}])
    assert ev[0]["content"] == exact
    assert byte_len(ev[1]["content"]) <= 4000 and "bytes truncated" in ev[1]["content"]


def test_evidence_total_budget_32000_bytes():
    msgs = [{"role": "user", "content": f"{i:02d}" + "x" * 3998} for i in range(20)]
    ev = evidence_messages(msgs)
    # 8 whole messages use exactly 32,000 bytes; the budget is then not positive
    assert len(ev) == 8
    assert sum(byte_len(m["content"]) for m in ev) == 32_000
    assert ev[0]["content"].startswith("12") and ev[-1]["content"].startswith("19")
    # one byte less of budget: the 8th message gets only the 3,999 bytes left; the
    # middle cut leaves a few bytes of budget, so (as in the reference) a 9th
    # message still gets a tiny truncate_bytes stub before the budget runs out
    p = ConsolidationParams(evidence_bytes=31_999)
    ev = evidence_messages(msgs, p)
    assert len(ev) == 9
    assert ev[1]["content"].startswith("12") and byte_len(ev[1]["content"]) <= 3999
    assert ev[0]["content"].startswith("11") and ev[0]["content"].endswith("…[truncated]")


def test_evidence_tool_calls_annotated_once_first_8():
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": f"tool{i}", "arguments": "{}"}}
        for i in range(10)
    ]
    msgs = [{"role": "assistant", "content": "calling", "tool_calls": calls}]
    (ev,) = evidence_messages(msgs)
    assert ev["content"].count("\nTool call ") == 8
    assert "tool7" in ev["content"] and "tool8" not in ev["content"]
    assert ev["content"].startswith("calling\nTool call tool0: {}")
    # a message with only tool calls is not empty
    (ev,) = evidence_messages([{"role": "assistant", "content": None, "tool_calls": calls[:1]}])
    assert ev["content"] == "\nTool call tool0: {}"


def test_evidence_tool_name_and_args_bounds():
    name, args = "n" * 65, "a" * 1025
    msgs = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": args}}],
        }
    ]
    (ev,) = evidence_messages(msgs)
    note = ev["content"]
    assert "n" * 64 not in note and "…[truncated]" in note  # name > 64 B cut
    assert "bytes truncated" in note  # args > 1024 B cut in the middle
    ok = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "n" * 64}}]}]
    assert evidence_messages(ok)[0]["content"] == "\nTool call " + "n" * 64 + ": "


def test_evidence_name_and_tool_call_id_bounds():
    msgs = [
        {"role": "tool", "content": "r", "name": "x" * 64, "tool_call_id": "i" * 128},
        {"role": "tool", "content": "r", "name": "x" * 65, "tool_call_id": "i" * 129},
    ]
    a, b = evidence_messages(msgs)
    assert a["name"] == "x" * 64 and a["tool_call_id"] == "i" * 128
    assert b["name"] != "x" * 65 and byte_len(b["name"]) <= 64
    assert b["tool_call_id"] != "i" * 129 and byte_len(b["tool_call_id"]) <= 128


def test_final_answer_8000_bytes():
    assert build_rollout("s", [], "é" * 4000).final == "é" * 4000
    cut = build_rollout("s", [], "é" * 4000 + "!").final
    assert byte_len(cut) <= 8000 and "bytes truncated" in cut
    assert build_rollout("s", [], None).final == ""


def test_secrets_redacted_from_evidence_and_final():
    msgs = [
        {"role": "user", "content": "the db is at postgres://admin:s3cret@db:5432 password=hunter2"}
    ]
    r = build_rollout("s", msgs, "token: ghp_" + "A" * 36)
    text = json.dumps([r.messages, r.final])
    assert "s3cret" not in text and "hunter2" not in text and "ghp_" not in text
    assert "[REDACTED]" in r.messages[0]["content"]
    off = build_rollout("s", msgs, "", redaction=RedactionParams(secrets=False))
    assert "hunter2" in off.messages[0]["content"]


def test_originals_not_mutated():
    r = run()
    before = copy.deepcopy(r)
    build_rollout("s", r["messages"], r["final_answer"])
    assert r == before


# --- staging -----------------------------------------------------------------------


def test_stage_is_idempotent_by_id(store):
    a = stage_run(store, run())
    b = stage_run(store, run(run_id="run-2"))  # same transcript, another run record
    assert a is not None and b is not None and a.id == b.id
    pending = store.pending_rollouts("scope-a", 10)
    assert [p.id for p in pending] == [a.id]
    assert pending[0].run_id == "run-1"
    assert pending[0].messages == a.messages and pending[0].final == a.final


def test_stage_uses_store_redaction():
    s = SQLiteStore.open(":memory:", embedder=None, redaction=RedactionParams(pii=True))
    with s:
        r = stage_run(s, run(messages=[{"role": "user", "content": "mail me at a.b@example.com"}]))
        assert "example.com" not in r.messages[0]["content"]


@pytest.mark.parametrize(
    "field,value",
    [
        ("run_id", None),
        ("scope_id", ""),
        ("status", "done"),
        ("messages", "hello"),
        ("turns", "2"),
        ("turns", -1),
        ("parent_run_id", 7),
        ("stop_reason", 3),
        ("final_answer", ["x"]),
    ],
)
def test_malformed_transcript_names_field(field, value, store):
    with pytest.raises(TranscriptError, match=field):
        stage_run(store, run(**{field: value}))


def test_missing_field_and_bad_message(store):
    r = run()
    del r["messages"]
    with pytest.raises(TranscriptError, match="messages"):
        stage_run(store, r)
    with pytest.raises(TranscriptError, match=r"messages\[1\]"):
        stage_run(store, run(messages=[{"role": "user", "content": "x"}, {"content": "no role"}]))


# --- properties ---------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_msg = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.one_of(st.none(), st.text(alphabet="ab é€\n", max_size=6000)),
    }
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_msg, max_size=60))
def test_evidence_bounds_property(msgs):
    p = ConsolidationParams()
    ev = evidence_messages(msgs)
    assert len(ev) <= p.evidence_messages
    assert all(m["role"] != "system" and m["content"] for m in ev)
    assert all(byte_len(m["content"]) <= p.message_bytes for m in ev)
    # each kept message but the last-kept (oldest) fits the budget left for it
    assert sum(byte_len(m["content"]) for m in ev[1:]) < p.evidence_bytes
    # chronological: evidence is a subsequence of the non-system, non-empty originals
    originals = [m["content"] for m in msgs if m["role"] != "system" and m["content"]]
    assert len(ev) <= len(originals)
    assert rollout_id(msgs) == hashlib.sha256(canonical_json(msgs).encode()).hexdigest()
