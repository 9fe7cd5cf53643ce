"""The store side of consolidation (SPEC §7): staging, pending, snapshot, commit_pass."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import test_store_helpers as helpers
from test_store_helpers import Clock, remember_unfolded

from memkit.errors import AlreadyConsumed, MemkitError, ProposalError, StaleSnapshot
from memkit.params import ConsolidationParams
from memkit.redact import redact
from memkit.store import open_store
from memkit.types import CommitResult, Rollout


def rid(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def rollout(n: int, scope: str = "s", **kw) -> Rollout:
    return Rollout(
        id=rid(n),
        scope_id=scope,
        messages=({"role": "user", "content": f"message {n}"},),
        final=f"answer {n}",
        run_id=f"run-{n}",
        **kw,
    )


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock, store_url):
    s = open_store(store_url, embedder="hashing", clock=clock)
    yield s
    s.close()


def dump(store):
    return helpers.dump(store.path)


# --- staging -------------------------------------------------------------------------------


def test_stage_is_idempotent_by_id_and_round_trips(store, clock):
    assert store.stage_rollout(rollout(1)) is True
    clock.advance(5)
    assert store.stage_rollout(rollout(1)) is False
    (got,) = store.pending_rollouts("s")
    want = rollout(1)
    assert (got.id, got.scope_id, got.messages, got.final, got.run_id) == (
        want.id,
        "s",
        want.messages,
        want.final,
        "run-1",
    )
    assert got.staged_at == clock.t - 5 and got.consumed_at is None


def test_pending_oldest_first_limited_and_scoped(store, clock):
    for n in (3, 1, 2):
        store.stage_rollout(rollout(n))
        clock.advance(1)
    store.stage_rollout(rollout(9, scope="other"))
    assert [r.id for r in store.pending_rollouts("s")] == [rid(3), rid(1), rid(2)]
    assert [r.id for r in store.pending_rollouts("s", limit=2)] == [rid(3), rid(1)]
    assert [r.id for r in store.pending_rollouts("other")] == [rid(9)]
    assert len(store.pending_rollouts("s", limit=4)) == 3


def test_pending_default_limit_is_four(store, clock):
    for n in range(6):
        store.stage_rollout(rollout(n))
        clock.advance(1)
    assert [r.id for r in store.pending_rollouts("s")] == [rid(n) for n in range(4)]


# One check and one redaction for both backends (`_check_rollout`): every bad field
# is a MemkitError naming it, and nothing reaches the table.
BAD_ROLLOUTS = [
    ("not-a-rollout", lambda r: {"id": r.id, "scope_id": "s"}, "rollout must be Rollout"),
    ("id-upper", lambda r: replace(r, id="A" * 64), "rollout.id"),
    ("id-short", lambda r: replace(r, id="a" * 63), "rollout.id"),
    ("id-long", lambda r: replace(r, id="a" * 65), "rollout.id"),
    ("id-none", lambda r: replace(r, id=None), "rollout.id"),
    ("scope-blank", lambda r: replace(r, scope_id="  "), "rollout.scope_id"),
    ("scope-int", lambda r: replace(r, scope_id=3), "rollout.scope_id"),
    ("run-id", lambda r: replace(r, run_id={}), "rollout.run_id"),
    ("final-surrogate", lambda r: replace(r, final="x \ud800"), "rollout.final"),
    ("final-bytes", lambda r: replace(r, final=b"ok"), "rollout.final"),
    ("staged-at", lambda r: replace(r, staged_at="now"), "rollout.staged_at"),
    ("staged-at-bool", lambda r: replace(r, staged_at=True), "rollout.staged_at"),
    ("messages-str", lambda r: replace(r, messages="hi"), "rollout.messages"),
    ("message-str", lambda r: replace(r, messages=("hi",)), "rollout.messages[0]"),
    ("message-bytes", lambda r: replace(r, messages=({"content": b"x"},)), "rollout.messages"),
    ("message-nan", lambda r: replace(r, messages=({"n": float("nan")},)), "rollout.messages"),
]


@pytest.mark.parametrize(
    "bad, field", [b[1:] for b in BAD_ROLLOUTS], ids=[b[0] for b in BAD_ROLLOUTS]
)
def test_a_bad_rollout_is_refused_naming_the_field_and_nothing_is_staged(store, bad, field):
    store.stage_rollout(rollout(2))
    before = dump(store)
    with pytest.raises(MemkitError) as e:
        store.stage_rollout(bad(rollout(1)))
    assert field in str(e.value), str(e.value)
    assert dump(store) == before
    assert [r.id for r in store.pending_rollouts("s", 10)] == [rid(2)]
    assert store.stage_rollout(replace(rollout(1), id="a" * 64))  # the bound is accepted


sys.path.insert(0, str(Path(__file__).parent))
from secret_corpus import SECRETS  # noqa: E402


def _call(text: str) -> dict:
    """A tool call as agents make them: the pasted text inside JSON arguments."""
    args = json.dumps({"cmd": text})
    return {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": args}}


def test_staging_redacts_every_secret_of_the_corpus_as_redact_does(store):
    """Messages (text contents, content parts and tool-call arguments) and the final
    answer are redacted with the store's settings: exactly `memkit.redact.redact`'s
    output, on either backend, and no secret reaches the table. (A hand-built
    rollout's parts and tool-call arguments were stored unredacted before.)"""
    params = store.redaction
    for i, (name, text, _needle) in enumerate(SECRETS):
        msgs = (
            {"role": "user", "content": f"config:\n{text}"},
            {"role": "tool", "content": 7},
            {"role": "assistant", "content": None, "tool_calls": [_call(text)]},
            {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]},
        )
        assert store.stage_rollout(Rollout(rid(1000 + i), "s", msgs, text, run_id=name))
    got = {r.run_id: r for r in store.pending_rollouts("s", 10**6)}
    assert len(got) == len(SECRETS)
    for name, text, _needle in SECRETS:
        r = got[name]
        assert r.messages[0]["content"] == redact(f"config:\n{text}", params), name
        assert r.messages[1] == {"role": "tool", "content": 7}
        (call,) = r.messages[2]["tool_calls"]
        assert call["function"]["arguments"] == redact(_call(text)["function"]["arguments"], params)
        assert r.messages[3]["content"] == [
            {"type": "text", "text": redact(text, params)},
            {"type": "image"},
        ], name
        assert r.final == redact(text, params), name
    raw = repr(dump(store))
    leaked = [name for name, _text, needle in SECRETS if needle in raw]
    assert leaked == []


# --- snapshot ------------------------------------------------------------------------------------


def test_snapshot_recent_is_most_recently_confirmed(store, clock):
    ids = []
    for text in ("alpha one", "beta two", "gamma three", "delta four"):
        ids.append(store.remember("s", text).id)
        clock.advance(1)
    assert [m.id for m in store.snapshot("s", 3)] == ids[::-1][:3]
    assert len(store.snapshot("s")) == 4


def test_snapshot_default_limit_is_32(store):
    remember_unfolded(store, "s", [f"row number {i}" for i in range(40)])
    assert len(store.snapshot("s")) == 32


def test_snapshot_relevant_puts_matches_first_then_pads(store, clock):
    deploy = store.remember("s", "deploys run through ops/deploy.sh").id
    clock.advance(1)
    others = [store.remember("s", t).id for t in ("tea over coffee", "the office is in Hanoi")]
    snap = store.snapshot("s", 3, policy="relevant", query="how do deploys run")
    assert snap[0].id == deploy
    assert {m.id for m in snap} == {deploy, *others}
    assert len(store.snapshot("s", 2, policy="relevant", query="deploy")) == 2


def test_snapshot_unknown_policy(store):
    with pytest.raises(ValueError, match="'fancy'"):
        store.snapshot("s", policy="fancy")


# --- commit_pass ----------------------------------------------------------------------------------


def test_commit_applies_add_merge_retract_and_consumes(store, clock):
    a = store.remember("s", "Deploy via ops/deploy.sh").id
    b = store.remember("s", "Deploys need VPN access", kind="procedure").id
    c = store.remember("s", "Office is in Hanoi").id
    for n in (1, 2):
        store.stage_rollout(rollout(n))
    store.stage_rollout(rollout(3))
    snap = store.snapshot("s")
    clock.advance(100)
    res = store.commit_pass(
        "s",
        [rid(1), rid(2)],
        snap,
        [
            {"ids": [], "entry": {"content": "Team uses Postgres 16", "tags": ["db"]}},
            {
                "ids": [a, b],
                "entry": {"content": "Deploy via make deploy (VPN)", "kind": "procedure"},
            },
            {"ids": [c], "entry": None},
        ],
    )
    assert isinstance(res, CommitResult)
    added, merged = res.added
    assert res.retired == (a, b, c) and res.consumed == (rid(1), rid(2))
    pg, mg = store.get("s", added), store.get("s", merged)
    assert (pg.kind, pg.confidence, pg.tags, pg.scope_id) == ("fact", 0.6, ("db",), "s")
    assert pg.created_at == clock.t and pg.seen_count == 1
    assert mg.kind == "procedure" and mg.live
    assert store.get("s", a).superseded_by == merged == store.get("s", b).superseded_by
    assert store.get("s", c).superseded_by == c
    assert [r.id for r in store.pending_rollouts("s")] == [rid(3)]
    assert {m.id for m in store.live("s")} == {added, merged}
    # merged rows are linked in history
    assert [m.id for m in store.history("s", merged)][-1] == merged
    assert {m.id for m in store.history("s", a)} == {a, b, merged}
    # the new rows are embedded and recallable
    assert store.get("s", added).embedding is not None
    assert store.recall("s", "Postgres 16")[0].id == added


def test_adds_insert_and_do_not_fold(store):
    a = store.remember("s", "Team uses Postgres 16 for everything").id
    store.stage_rollout(rollout(1))
    res = store.commit_pass(
        "s",
        [rid(1)],
        store.snapshot("s"),
        [{"entry": {"content": "Team uses Postgres 16 for everything"}}],
    )
    assert res.added[0] != a and len(store.live("s")) == 2


def test_empty_changes_still_consume(store):
    store.stage_rollout(rollout(1))
    res = store.commit_pass("s", [rid(1)], [], [])
    assert res == CommitResult(added=(), retired=(), consumed=(rid(1),))
    assert store.pending_rollouts("s") == []


def test_retried_commit_never_applies_twice(store):
    store.stage_rollout(rollout(1))
    changes = [{"entry": {"content": "A new durable fact"}}]
    store.commit_pass("s", [rid(1)], [], changes)
    before = dump(store)
    with pytest.raises(AlreadyConsumed) as e:
        store.commit_pass("s", [rid(1)], [], changes)
    assert e.value.code == "consumed"
    assert dump(store) == before


@pytest.mark.parametrize("which", ["unknown", "foreign"])
def test_unstaged_or_foreign_rollout_is_refused_without_mutation(store, which):
    store.stage_rollout(rollout(1))
    store.stage_rollout(rollout(2, scope="other"))
    before = dump(store)
    bad = rid(7) if which == "unknown" else rid(2)
    with pytest.raises(AlreadyConsumed):
        store.commit_pass("s", [rid(1), bad], [], [{"entry": {"content": "x y z"}}])
    assert dump(store) == before


@pytest.mark.parametrize("mutate", ["fold", "retract", "update", "confidence"])
def test_stale_snapshot_is_refused_without_mutation(store, clock, mutate):
    a = store.remember("s", "Deploy via ops/deploy.sh script").id
    store.stage_rollout(rollout(1))
    snap = store.snapshot("s")
    clock.advance(1)
    if mutate == "fold":
        store.remember("s", "Deploy via ops/deploy.sh script!")
    elif mutate == "retract":
        store.retract("s", a)
    elif mutate == "update":
        store.update("s", a, "Deploy via make")
    else:
        helpers.foreign_write(store.path, "UPDATE memories SET confidence = 0.9 WHERE id = ?", (a,))
    before = dump(store)
    with pytest.raises(StaleSnapshot) as e:
        store.commit_pass("s", [rid(1)], snap, [{"ids": [a], "entry": None}])
    assert e.value.code == "stale_snapshot"
    assert dump(store) == before


def test_invalid_changes_are_refused_without_mutation(store):
    a = store.remember("s", "Deploy via ops/deploy.sh").id
    store.stage_rollout(rollout(1))
    snap = store.snapshot("s")
    before = dump(store)
    cases = {
        "unknown_id": [{"ids": ["nope"], "entry": None}],
        "scope_widening": [{"entry": {"content": "x", "scope_id": "other"}}],
        "invalid_lesson": [{"entry": {"content": "  "}}],
        "empty_change": [{"ids": [], "entry": None}],
        "bounds": [{"entry": {"content": f"fact {i}"}} for i in range(17)],
    }
    for code, changes in cases.items():
        with pytest.raises(ProposalError) as e:
            store.commit_pass("s", [rid(1)], snap, [{"ids": [a], "entry": None}, *changes])
        assert e.value.code == code
        assert dump(store) == before


def test_max_changes_bound_at_16(store):
    store.stage_rollout(rollout(1))
    res = store.commit_pass(
        "s",
        [rid(1)],
        [],
        [{"entry": {"content": f"distinct fact number {i} " * (i + 1)}} for i in range(16)],
    )
    assert len(res.added) == 16


def test_commit_respects_params(store):
    store.stage_rollout(rollout(1))
    with pytest.raises(ProposalError) as e:
        store.commit_pass(
            "s", [rid(1)], [], [{"entry": {"content": "x"}}] * 2, ConsolidationParams(max_changes=1)
        )
    assert e.value.code == "bounds"


def test_commit_redacts_entries(store):
    store.stage_rollout(rollout(1))
    (mid,) = store.commit_pass(
        "s", [rid(1)], [], [{"entry": {"content": "staging password=hunter2 works"}}]
    ).added
    assert "hunter2" not in store.get("s", mid).content


def test_foreign_snapshot_row_is_a_scope_error(store):
    other = store.remember("other", "foreign fact").id
    store.stage_rollout(rollout(1))
    snap = [store.get("other", other)]
    with pytest.raises(ProposalError) as e:
        store.commit_pass("s", [rid(1)], snap, [{"ids": [other], "entry": None}])
    assert e.value.code == "snapshot_scope"
    assert store.get("other", other).live
