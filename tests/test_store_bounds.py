"""One error contract on both backends (issue #34 item 5): bounds on scope ids, kinds and
tags are the same on SQLite and Postgres and are refused as MemkitError, changing nothing.

Was: a scope id over ~2.7 KB raised psycopg's ProgramLimitExceeded from remember,
remember_many, stage_rollout and learn on Postgres (a B-tree entry's limit) while SQLite
stored it; a NUL (U+0000) was stored by SQLite and refused by Postgres.
"""

from __future__ import annotations

import pytest

from memkit import ConfigError, MemkitError, MemoryTools
from memkit.checks import MAX_SCOPE_BYTES
from memkit.consolidate import build_rollout
from memkit.errors import ToolError

AT = "é" * (MAX_SCOPE_BYTES // 2)  # exactly the bound, in 2-byte characters
PAST = AT + "s"  # one byte past it
HUGE = "s" * 3000  # past Postgres's B-tree entry limit


def _remember(s, scope):
    return s.remember(scope, "The deploy script is ops/deploy.sh", tags=["ops"])


def _remember_many(s, scope):
    return s.remember_many(scope, ["fact one", {"content": "fact two", "kind": "preference"}])


def _stage(s, scope):
    return s.stage_rollout(build_rollout(scope, [{"role": "user", "content": "hi"}], "ok"))


def _learn(s, scope):
    return MemoryTools(s, scope).call("learn", {"lesson": "Deploy with make deploy."})


WRITERS = {"remember": _remember, "remember_many": _remember_many, "stage_rollout": _stage}


def _state(s):
    d = s.digest()
    assert d["problems"] == []
    return d


@pytest.mark.parametrize("writer", [*WRITERS, "learn"])
def test_a_scope_id_at_the_bound_is_stored_on_both_backends(make_store, writer):
    assert len(AT.encode()) == MAX_SCOPE_BYTES
    s = make_store(embedder="hashing")
    if writer == "learn":
        _learn(s, AT)
    else:
        WRITERS[writer](s, AT)
    if writer == "stage_rollout":
        assert len(s.pending_rollouts(AT)) == 1
    else:
        assert s.scopes() == [AT] and s.live(AT)
        assert s.recall(AT, "")  # a blank query lists the scope's recent rows


@pytest.mark.parametrize("scope", [PAST, HUGE], ids=["one-past", "3000-bytes"])
@pytest.mark.parametrize("writer", WRITERS)
def test_a_longer_scope_id_is_a_config_error_on_both_backends(make_store, writer, scope):
    s = make_store(embedder="hashing")
    _remember(s, "s")
    before = _state(s)
    with pytest.raises(ConfigError) as e:
        WRITERS[writer](s, scope)
    assert f"scope_id is {len(scope.encode())} bytes (max {MAX_SCOPE_BYTES})" in str(e.value)
    assert _state(s) == before and s.scopes() == ["s"]


@pytest.mark.parametrize("scope", [PAST, HUGE], ids=["one-past", "3000-bytes"])
def test_memory_tools_refuse_a_longer_scope_on_both_backends(make_store, scope):
    s = make_store(embedder="hashing")
    with pytest.raises(ConfigError, match=f"max {MAX_SCOPE_BYTES}"):
        MemoryTools(s, scope)
    assert s.scopes() == []


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda s: s.remember("s", "x", tags=["ops\x00"]), "tags[0]"),
        (lambda s: s.remember("s", "x", kind="fact\x00"), "kind"),
        (lambda s: s.remember("s", "x", source_run_id="r\x00"), "source_run_id"),
        (lambda s: s.remember_many("s", [{"content": "x", "tags": ["\x00"]}]), "tags"),
        (lambda s: _stage(s, "s\x00"), "scope_id"),
        (lambda s: s.stage_rollout(build_rollout("s", [], "ok\x00")), "rollout.final"),
    ],
    ids=["tag", "kind", "run-id", "batch-tag", "rollout-scope", "rollout-final"],
)
def test_nul_bearing_identifiers_are_refused_alike(make_store, call, says):
    s = make_store(embedder="hashing")
    _remember(s, "s")
    before = _state(s)
    with pytest.raises(MemkitError) as e:
        call(s)
    assert says in str(e.value)
    assert _state(s) == before


def test_a_nul_in_a_query_is_searched_for_alike(make_store):
    """A query is never stored: a NUL in it is answered, the same on both backends."""
    s = make_store(embedder="hashing")
    _remember(s, "s")
    assert [h.id for h in s.recall("s", "deploy\x00")] == [m.id for m in s.live("s")]
    assert [m.id for m in s.snapshot("s", query="ops\x00")] == [m.id for m in s.live("s")]


@pytest.mark.parametrize("text", ["a\x00b", "\udc80"], ids=["nul", "not-utf8"])
def test_learn_and_proposals_refuse_unstorable_text_alike(make_store, text):
    """The tools and the proposal validator share the store's rule (`text_problem`)."""
    from memkit.errors import ProposalError

    s = make_store(embedder="hashing")
    _stage(s, "s")
    with pytest.raises(ToolError, match="lesson"):
        MemoryTools(s, "s").call("learn", {"lesson": f"Deploy {text} with make"})
    (r,) = s.pending_rollouts("s")
    change = {"ids": [], "entry": {"kind": "fact", "content": f"Deploy {text}"}}
    with pytest.raises(ProposalError) as e:
        s.commit_pass("s", [r.id], s.snapshot("s"), [change])
    assert e.value.code == "invalid_lesson"
    assert s.live("s") == [] and [p.id for p in s.pending_rollouts("s")] == [r.id]


@pytest.mark.parametrize("bad", ["\ud800", "r-\udc80"], ids=["lone", "trailing"])
def test_commit_pass_refuses_a_rollout_id_that_is_not_utf8_alike(make_store, bad):
    """Found by the API fuzzer: a lone surrogate among `rollout_ids` reached SQLite's
    (or psycopg's) encoder and escaped as UnicodeEncodeError. Now a ProposalError on
    both backends, and the staged rollout stays pending."""
    from memkit.errors import ProposalError

    s = make_store(embedder="hashing")
    _stage(s, "s")
    (r,) = s.pending_rollouts("s")
    with pytest.raises(ProposalError, match="not encodable as UTF-8") as e:
        s.commit_pass("s", [r.id, bad], s.snapshot("s"), [])
    assert e.value.code == "rollout_ids"
    assert [p.id for p in s.pending_rollouts("s")] == [r.id]
    assert s.commit_pass("s", [r.id], s.snapshot("s"), []).consumed == (r.id,)  # still fine
