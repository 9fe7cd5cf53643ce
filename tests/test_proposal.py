"""The one proposal route (memkit.proposal): a pass parses once and validates once,
the store commits a Proposal re-checking only what can change under its lock, and
evaluations score raw answers with the same helpers."""

from __future__ import annotations

import pytest

import memkit.proposal as proposal
from memkit import SQLiteStore
from memkit.consolidate import build_rollout, run_pass_sync
from memkit.consolidate.reply import Reply
from memkit.errors import AlreadyConsumed, ConfigError, ProposalError, StaleSnapshot
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams
from memkit.proposal import (
    Proposal,
    raw_op,
    unknown_ids,
    validate_proposal,
    widening_entries,
    widens_scope,
)
from memkit.types import Change, Entry


class Fixed:
    name = "fixed"

    def __init__(self, text: str):
        self.text = text

    async def propose(self, request) -> Reply:
        return Reply(self.text, "fixed", (CallAttempt(model="fixed", outcome="ok"),))


@pytest.fixture
def store():
    s = SQLiteStore.open(":memory:", embedder=None)
    yield s
    s.close()


def staged(store, scope="s", text="we deploy with make deploy"):
    r = build_rollout(scope, [{"role": "user", "content": text}], "done")
    store.stage_rollout(r)
    return r


def test_a_pass_validates_once_and_reports_the_applied_changes(store, monkeypatch):
    calls = []
    real = proposal.validate_changes

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(proposal, "validate_changes", counting)
    a = store.remember("s", "old wording of a fact").id
    staged(store)
    text = (
        '{"changes": [{"ids": [], "entry": {"content": "Deploy with make deploy"}},'
        f' {{"ids": ["{a}"], "entry": null}}]}}'
    )
    res = run_pass_sync(store, "s", Fixed(text))
    assert res.outcome == "committed"
    assert len(calls) == 1
    assert res.changes == res.commit.changes
    assert [c.op for c in res.changes] == ["add", "retract"]
    assert res.changes[0].entry.content == "Deploy with make deploy"
    assert res.commit.retired == (a,)


def test_commit_pass_takes_a_proposal_for_exactly_its_pass(store):
    r = staged(store)
    p = validate_proposal("s", [r.id], [], [{"entry": {"content": "A durable fact"}}])
    with pytest.raises(ConfigError, match="another pass"):
        store.commit_pass("s", [r.id], [], p, ConsolidationParams(max_changes=3))
    with pytest.raises(ConfigError, match="another pass"):
        store.commit_pass("other", [r.id], [], p)
    res = store.commit_pass("s", [r.id], [], p)
    assert res.changes == (Change(entry=Entry("A durable fact", scope_id="s")),)
    assert store.get("s", res.added[0]).content == "A durable fact"
    with pytest.raises(AlreadyConsumed):
        store.commit_pass("s", [r.id], [], p)


def test_a_proposal_still_meets_the_lock_checks(store):
    a = store.remember("s", "Deploy via ops/deploy.sh").id
    r = staged(store)
    snap = store.snapshot("s")
    p = validate_proposal("s", [r.id], snap, [{"ids": [a], "entry": None}])
    store.retract("s", a)
    with pytest.raises(StaleSnapshot):
        store.commit_pass("s", [r.id], snap, p)
    assert store.pending_rollouts("s")[0].id == r.id


def test_raw_changes_keep_their_error_precedence(store):
    """An invalid proposal for consumed rollouts reports `consumed`, as before."""
    r = staged(store)
    store.commit_pass("s", [r.id], [], [])
    with pytest.raises(AlreadyConsumed):
        store.commit_pass("s", [r.id], [], [{"ids": ["nope"], "entry": None}])
    r2 = staged(store, text="another run")
    with pytest.raises(ProposalError) as e:
        store.commit_pass("s", [r2.id], [], [{"ids": ["nope"], "entry": None}])
    assert e.value.code == "unknown_id"


def test_helpers_for_evaluations():
    raw = [
        {"ids": ["a", "zz", 3], "entry": None},
        {"ids": ["b"], "entry": {"content": "x", "scope_id": "other"}},
        {"entry": {"content": "y", "scope": "s"}},
        {"entry": {"content": "z", "scope": ""}},
        "not a change",
        {"ids": [], "entry": None},
    ]
    assert unknown_ids(raw, {"a", "b"}) == 1
    assert unknown_ids(None, set()) == 0
    assert widening_entries(raw, "s") == 1
    assert widens_scope({"scope_id": None, "content": "x"}, "s") is False
    assert widens_scope("not an entry", "s") is False
    assert [raw_op(c) for c in raw] == ["retract", "merge", "add", "add", "invalid", "invalid"]


def test_validate_proposal_keeps_its_pass():
    rid = "a" * 64
    p = validate_proposal("s", [rid], [], [{"entry": {"content": "fact", "kind": "preference"}}])
    assert isinstance(p, Proposal)
    assert p.is_for("s", [rid], [], ConsolidationParams())
    assert not p.is_for("s", [rid], [], ConsolidationParams(max_changes=2))
    assert p.changes[0].entry.kind == "preference"
