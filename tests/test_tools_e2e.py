"""End to end on the real SQLiteStore: the tools write, the next run's block shows it,
edits change what later runs see, and history keeps every revision."""

from __future__ import annotations

import pytest

from memkit.assemble import block_for_run
from memkit.errors import ToolError
from memkit.tools import MemoryTools

SCOPE = "team-a"


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def store(make_store):
    with make_store(embedder="hashing", clock=Clock()) as s:
        yield s


def test_learn_update_forget_across_runs(store):
    run1 = MemoryTools(store, SCOPE)
    learned = run1.call("learn", '{"lesson": "Releases are cut from the release/2.x branch"}')
    mid = learned["id"]
    assert learned["folded"] is False

    # the next run's block shows the lesson with its id
    block = block_for_run(store, SCOPE, "how are releases cut?")
    assert f"- (learning, id {mid}) Releases are cut from the release/2.x branch" in block.text
    assert block.account.admitted == (mid,)

    # restating it folds instead of duplicating
    again = run1.call("learn", {"lesson": "Releases are cut from the release/2.x branch."})
    assert again == {**again, "id": mid, "folded": True}

    run2 = MemoryTools(store, SCOPE)
    upd = run2.call(
        "memory_edit",
        {"id": mid, "action": "update", "content": "Releases are cut from the main branch"},
    )
    new_id = upd["id"]
    assert new_id != mid
    successor = store.get(SCOPE, new_id)
    assert (successor.kind, successor.confidence, successor.seen_count) == ("learning", 0.7, 1)
    text = block_for_run(store, SCOPE, "how are releases cut?").text
    assert f"id {new_id}) Releases are cut from the main branch" in text
    assert "release/2.x" not in text

    # the old id is no longer editable; the new one can be forgotten once
    with pytest.raises(ToolError, match="not found in scope"):
        run2.call("memory_edit", {"id": mid, "action": "forget"})
    run2.call("memory_edit", {"id": new_id, "action": "forget"})
    with pytest.raises(ToolError, match="not found in scope"):
        run2.call("memory_edit", {"id": new_id, "action": "forget"})

    run3_block = block_for_run(store, SCOPE, "how are releases cut?")
    assert "Releases are cut" not in run3_block.text
    assert run3_block.text == ""  # nothing live is recalled: no block at all
    assert MemoryTools(store, SCOPE).call("memory_recall", {"query": "releases"}) == {"entries": []}

    # history still holds every revision, oldest first
    chain = store.history(SCOPE, mid)
    assert [m.id for m in chain] == [mid, new_id]
    assert chain[0].content == "Releases are cut from the release/2.x branch."
    assert chain[0].superseded_by == new_id
    assert chain[1].superseded_by == new_id  # retracted: points at itself


def test_scopes_are_isolated_through_the_tools(store):
    theirs = MemoryTools(store, "team-b").call("learn", {"lesson": "Team B deploys on Fridays"})
    mine = MemoryTools(store, SCOPE)
    assert mine.call("memory_recall", {"query": "deploys Fridays"}) == {"entries": []}
    with pytest.raises(ToolError, match="not found in scope"):
        mine.call("memory_edit", {"id": theirs["id"], "action": "invalidate"})
    with pytest.raises(ToolError, match=r"memory_recall\.scope"):
        mine.call("memory_recall", {"query": "deploys", "scope": "team-b"})
    assert store.get("team-b", theirs["id"]).live


def test_recall_tool_returns_what_learn_wrote(store):
    tools = MemoryTools(store, SCOPE)
    a = tools.call("learn", {"lesson": "The staging database is db-stg-1", "tags": ["db"]})
    out = tools.call("memory_recall", {"query": "staging database", "limit": 1})
    assert out == {
        "entries": [
            {"id": a["id"], "kind": "learning", "content": "The staging database is db-stg-1"}
        ]
    }
    assert store.get(SCOPE, a["id"]).tags == ("db",)


def test_a_failing_store_gives_an_empty_block_not_a_failed_run(make_store):
    s = make_store(embedder="hashing", clock=Clock())
    s.remember(SCOPE, "The deploy script is ops/deploy.sh")
    assert "ops/deploy.sh" in block_for_run(s, SCOPE, "deploy").text
    s.close()
    block = block_for_run(s, SCOPE, "deploy")  # recall now raises inside the store
    assert block.text == ""
    assert block.account.error
