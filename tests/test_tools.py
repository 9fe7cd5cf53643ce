"""Model-facing memory tools (SPEC §6) against a small fake store that counts calls,
so "validation errors never reach the store" is proven, not assumed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from memkit.errors import ConfigError, NotFound, ToolError
from memkit.text import byte_len, truncate_middle
from memkit.tools import SCHEMAS, TOOL_NAMES, MemoryTools, decode_arguments
from memkit.types import Memory, Recalled, RememberResult


class FakeStore:
    """The store contract in memory: fold on identical content, soft retract."""

    def __init__(self, *, curation: bool = True):
        self.supports_curation = curation
        self.rows: dict[str, Memory] = {}
        self.calls: Counter[str] = Counter()
        self.last: dict[str, tuple] = {}
        self.extra_hits: list[Recalled] = []
        self._n = 0

    def _id(self) -> str:
        self._n += 1
        return f"id{self._n}"

    def _live(self, scope_id: str, memory_id: str) -> Memory:
        m = self.rows.get(memory_id)
        if m is None or m.scope_id != scope_id or not m.live:
            raise NotFound(memory_id, scope_id)
        return m

    def recall(self, scope_id, query, limit=8, params=None):
        self.calls["recall"] += 1
        self.last["recall"] = (scope_id, query, limit)
        hits = [
            Recalled(m, "keyword", 1.0)
            for m in self.rows.values()
            if m.scope_id == scope_id and m.live
        ]
        return (hits + self.extra_hits)[:limit]

    def remember(self, scope_id, content, *, kind="fact", confidence=0.7, tags=(), **_):
        self.calls["remember"] += 1
        self.last["remember"] = (scope_id, content, kind, confidence, tuple(tags))
        for m in self.rows.values():
            if m.live and m.scope_id == scope_id and m.kind == kind and m.content == content:
                return RememberResult(m.id, True)
        mid = self._id()
        self.rows[mid] = Memory(mid, scope_id, kind, content, tuple(tags), confidence)
        return RememberResult(mid, False)

    def update(self, scope_id, memory_id, content, *, tags=None, confidence=0.7):
        self.calls["update"] += 1
        self.last["update"] = (scope_id, memory_id, content, tags, confidence)
        old = self._live(scope_id, memory_id)
        new_id = self._id()
        new_tags = old.tags if tags is None else tuple(tags)
        self.rows[new_id] = Memory(new_id, scope_id, old.kind, content, new_tags, confidence)
        self.rows[memory_id] = Memory(**{**_fields(old), "superseded_by": new_id})
        return new_id

    def retract(self, scope_id, memory_id):
        self.calls["retract"] += 1
        old = self._live(scope_id, memory_id)
        self.rows[memory_id] = Memory(**{**_fields(old), "superseded_by": memory_id})

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


def _fields(m: Memory) -> dict:
    return {f: getattr(m, f) for f in Memory.__slots__}


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def tools(store) -> MemoryTools:
    return MemoryTools(store, "scope-a")


def seed(store: FakeStore, scope: str, content: str, kind: str = "fact") -> str:
    res = store.remember(scope, content, kind=kind)
    store.calls.clear()
    return res.id


# --- advertising and the permission gate -------------------------------------------


def test_schemas_are_openai_function_tools_for_every_offered_tool(tools):
    schemas = tools.schemas()
    assert [s["function"]["name"] for s in schemas] == list(TOOL_NAMES)
    for s in schemas:
        assert s["type"] == "function"
        assert set(s["function"]) == {"name", "description", "parameters"}
        assert s["function"]["parameters"]["type"] == "object"
        json.dumps(s)
    recall = schemas[0]["function"]["parameters"]
    assert recall["additionalProperties"] is False
    assert recall["required"] == ["query"]
    assert recall["properties"]["limit"]["default"] == 8
    edit = schemas[2]["function"]["parameters"]
    assert edit["properties"]["action"]["enum"] == ["update", "forget", "invalidate"]


def test_schemas_are_copies_the_caller_may_mutate(tools):
    tools.schemas()[0]["function"]["name"] = "hacked"
    assert SCHEMAS["memory_recall"]["function"]["name"] == "memory_recall"


def test_memory_edit_only_offered_when_the_store_supports_curation():
    store = FakeStore(curation=False)
    tools = MemoryTools(store, "s")
    assert [s["function"]["name"] for s in tools.schemas()] == ["memory_recall", "learn"]
    with pytest.raises(ToolError, match="memory_edit: not offered"):
        tools.call("memory_edit", {"id": "x", "action": "forget"})
    assert store.total_calls == 0


def test_no_store_installed_offers_no_tools():
    tools = MemoryTools(None, "s")
    assert tools.schemas() == []
    with pytest.raises(ToolError, match="memory_recall: not offered: no memory store"):
        tools.call("memory_recall", {"query": "x"})


def test_store_without_the_attribute_gets_no_memory_edit():
    class Minimal:
        def recall(self, *a, **k):
            return []

    assert MemoryTools(Minimal(), "s").names() == ("memory_recall", "learn")


@pytest.mark.parametrize("denied", TOOL_NAMES)
def test_a_denied_tool_is_neither_advertised_nor_executable_and_writes_nothing(store, denied):
    asked: list[str] = []

    def permit(name: str) -> bool:
        asked.append(name)
        return name != denied

    tools = MemoryTools(store, "s", permit=permit)
    assert denied not in [s["function"]["name"] for s in tools.schemas()]
    args = {
        "memory_recall": {"query": "x"},
        "learn": {"lesson": "x"},
        "memory_edit": {"id": "x", "action": "forget"},
    }[denied]
    with pytest.raises(ToolError, match=f"^{denied}: not permitted") as exc:
        tools.call(denied, args)
    assert exc.value.tool == denied and exc.value.argument is None
    assert store.total_calls == 0
    assert denied in asked


def test_permission_is_asked_at_call_time_so_a_host_can_revoke(store):
    allowed = {"learn"}
    tools = MemoryTools(store, "s", permit=lambda n: n in allowed)
    tools.call("learn", {"lesson": "first"})
    allowed.clear()
    with pytest.raises(ToolError, match="not permitted"):
        tools.call("learn", {"lesson": "second"})
    assert store.calls["remember"] == 1
    assert tools.schemas() == []


def test_unknown_tool_is_refused_without_touching_the_store(store, tools):
    with pytest.raises(ToolError, match=r"^memory_delete: unknown tool"):
        tools.call("memory_delete", {"id": "x"})
    assert store.total_calls == 0


@pytest.mark.parametrize("scope", ["", "   ", None])
def test_tools_need_a_scope(store, scope):
    with pytest.raises(ConfigError, match="scope_id"):
        MemoryTools(store, scope)  # type: ignore[arg-type]


# --- argument decoding ---------------------------------------------------------------


def test_arguments_may_be_json_text_a_dict_or_empty():
    assert decode_arguments("learn", '{"lesson": "x"}') == {"lesson": "x"}
    assert decode_arguments("learn", {"lesson": "x"}) == {"lesson": "x"}
    assert decode_arguments("learn", "") == {} == decode_arguments("learn", None)


@pytest.mark.parametrize(
    "raw, needle",
    [
        ("{not json", "are not valid JSON"),
        ("[" * 100_000, "are not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
    ],
)
def test_bad_argument_text_is_refused_naming_the_tool(store, tools, raw, needle):
    with pytest.raises(ToolError, match=f"^learn: arguments {needle}"):
        tools.call("learn", raw)
    assert store.total_calls == 0


# --- memory_recall ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, argument",
    [
        ({"query": ""}, "query"),
        ({"query": "   \n"}, "query"),
        ({}, "query"),
        ({"query": 42}, "query"),
        ({"query": "é" * 1000 + "x"}, "query"),  # 2001 bytes
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 21}, "limit"),
        ({"query": "x", "limit": "5"}, "limit"),
        ({"query": "x", "limit": True}, "limit"),
        ({"query": "x", "limit": 2.5}, "limit"),
        ({"query": "x", "scope": "other"}, "scope"),
    ],
)
def test_recall_validation_errors_never_reach_the_store(store, tools, args, argument):
    with pytest.raises(ToolError) as exc:
        tools.call("memory_recall", args)
    assert exc.value.tool == "memory_recall" and exc.value.argument == argument
    assert str(exc.value).startswith(f"memory_recall.{argument}: ")
    assert store.total_calls == 0


def test_recall_bounds_at_the_edge_are_accepted(store, tools):
    tools.call("memory_recall", {"query": "  " + "é" * 1000 + "  "})  # 2000 bytes after trim
    assert store.last["recall"][1] == "é" * 1000
    tools.call("memory_recall", {"query": "x", "limit": 1})
    assert store.last["recall"][2] == 1
    tools.call("memory_recall", json.dumps({"query": "x", "limit": 20}))
    assert store.last["recall"][2] == 20
    tools.call("memory_recall", {"query": "x", "limit": 3.0})  # integral JSON number
    assert store.last["recall"][2] == 3


def test_recall_default_limit_is_8_and_scope_is_the_tools_own(store, tools):
    assert tools.call("memory_recall", {"query": "deploy"}) == {"entries": []}
    assert store.last["recall"] == ("scope-a", "deploy", 8)


def test_recall_returns_id_kind_content_and_drops_foreign_scope_entries(store, tools):
    mine = seed(store, "scope-a", "Deploy with make deploy", kind="procedure")
    seed(store, "scope-b", "Other tenant's secret")
    store.extra_hits = [Recalled(Memory("zz", "scope-b", "fact", "leaked"), "keyword", 1.0)]
    out = tools.call("memory_recall", {"query": "deploy"})
    assert out == {
        "entries": [{"id": mine, "kind": "procedure", "content": "Deploy with make deploy"}]
    }


def test_recall_middle_truncates_long_content_and_flags_only_cut_entries(store, tools):
    at = seed(store, "scope-a", "a" * 2000)
    past = seed(store, "scope-a", "b" * 1000 + "c" * 1001)
    entries = {e["id"]: e for e in tools.call("memory_recall", {"query": "x"})["entries"]}
    assert entries[at] == {"id": at, "kind": "fact", "content": "a" * 2000}
    cut = entries[past]
    assert cut["truncated"] is True
    assert cut["content"] == truncate_middle("b" * 1000 + "c" * 1001, 2000)
    assert byte_len(cut["content"]) <= 2000
    assert cut["content"].startswith("b") and cut["content"].endswith("c")
    assert "bytes truncated" in cut["content"]


def test_recall_is_read_only(store, tools):
    seed(store, "scope-a", "x")
    tools.call("memory_recall", {"query": "x"})
    assert set(store.calls) == {"recall"}


# --- learn ---------------------------------------------------------------------------------


def test_learn_writes_a_learning_at_0_7_and_confirms(store, tools):
    out = tools.call("learn", {"lesson": "  The CI cache key includes the lockfile hash. "})
    assert store.last["remember"] == (
        "scope-a",
        "The CI cache key includes the lockfile hash.",
        "learning",
        0.7,
        (),
    )
    assert out["folded"] is False and out["id"] in out["message"]
    again = tools.call("learn", {"lesson": "The CI cache key includes the lockfile hash."})
    assert again["folded"] is True and again["id"] == out["id"]
    assert "Folded" in again["message"]


def test_learn_passes_tags_and_ignores_unknown_fields(store, tools):
    tools.call("learn", {"lesson": "x", "tags": [" ci ", "", "cache"], "scope": "evil"})
    assert store.last["remember"][0] == "scope-a"
    assert store.last["remember"][4] == ("ci", "cache")


@pytest.mark.parametrize(
    "args, argument",
    [
        ({}, "lesson"),
        ({"lesson": "  "}, "lesson"),
        ({"lesson": ["x"]}, "lesson"),
        ({"lesson": "x", "tags": "ci"}, "tags"),
        ({"lesson": "x", "tags": ["ok", 3]}, "tags"),
    ],
)
def test_learn_refusals_name_the_argument_and_write_nothing(store, tools, args, argument):
    with pytest.raises(ToolError) as exc:
        tools.call("learn", args)
    assert (exc.value.tool, exc.value.argument) == ("learn", argument)
    assert store.total_calls == 0


# --- memory_edit ------------------------------------------------------------------------------


def test_edit_update_inserts_a_successor_at_0_7(store, tools):
    old = seed(store, "scope-a", "Deploy with ops/deploy.sh", kind="procedure")
    out = tools.call(
        "memory_edit", {"id": old, "action": "update", "content": " Deploy with make deploy "}
    )
    assert out["action"] == "update" and out["replaces"] == old
    assert store.last["update"] == ("scope-a", old, "Deploy with make deploy", None, 0.7)
    new = store.rows[out["id"]]
    assert new.kind == "procedure" and new.live
    assert store.rows[old].superseded_by == out["id"]


def test_edit_update_with_tags(store, tools):
    old = seed(store, "scope-a", "x")
    tools.call("memory_edit", {"id": old, "action": "update", "content": "y", "tags": ["t"]})
    assert store.last["update"][3] == ("t",)


@pytest.mark.parametrize("action", ["forget", "invalidate"])
def test_edit_forget_and_invalidate_retract(store, tools, action):
    mid = seed(store, "scope-a", "stale fact")
    out = tools.call("memory_edit", {"id": mid, "action": action, "content": "ignored"})
    assert out["action"] == action and out["id"] == mid
    assert store.rows[mid].superseded_by == mid
    assert store.calls == Counter(retract=1)


def test_a_second_forget_is_not_found_in_scope(store, tools):
    mid = seed(store, "scope-a", "x")
    tools.call("memory_edit", {"id": mid, "action": "forget"})
    with pytest.raises(ToolError, match=f"^memory_edit.id: memory '{mid}' not found in scope"):
        tools.call("memory_edit", {"id": mid, "action": "forget"})


def test_a_foreign_id_is_refused_like_a_missing_one(store, tools):
    foreign = seed(store, "scope-b", "their fact")
    with pytest.raises(ToolError, match="not found in scope") as exc:
        tools.call("memory_edit", {"id": foreign, "action": "invalidate"})
    with pytest.raises(ToolError, match="not found in scope") as missing:
        tools.call("memory_edit", {"id": "nope", "action": "invalidate"})
    assert str(exc.value).replace(foreign, "?") == str(missing.value).replace("nope", "?")
    with pytest.raises(ToolError, match="not found in scope"):
        tools.call("memory_edit", {"id": foreign, "action": "update", "content": "mine now"})
    assert store.rows[foreign].live and store.rows[foreign].content == "their fact"
    assert "scope-b" not in str(exc.value)


@pytest.mark.parametrize(
    "args, argument",
    [
        ({"id": "id1", "action": "delete"}, "action"),
        ({"id": "id1", "action": "FORGET"}, "action"),
        ({"id": "id1"}, "action"),
        ({"action": "forget"}, "id"),
        ({"id": " ", "action": "forget"}, "id"),
        ({"id": "id1", "action": "update"}, "content"),
        ({"id": "id1", "action": "update", "content": "   "}, "content"),
        ({"id": "id1", "action": "update", "content": "x", "tags": [1]}, "tags"),
    ],
)
def test_edit_refusals_happen_before_the_store_is_called(store, tools, args, argument):
    seed(store, "scope-a", "x")
    with pytest.raises(ToolError) as exc:
        tools.call("memory_edit", args)
    assert (exc.value.tool, exc.value.argument) == ("memory_edit", argument)
    assert store.total_calls == 0


# --- hostile arguments (issue #22): lone surrogates, sizes, wrong types ------------------

SURROGATE = "x \ud800"


@pytest.mark.parametrize(
    "tool, args, argument",
    [
        ("learn", {"lesson": SURROGATE}, "lesson"),
        ("learn", {"lesson": "x", "tags": ["ok", SURROGATE]}, "tags"),
        ("memory_recall", {"query": SURROGATE}, "query"),
        ("memory_recall", {"query": "x", "limit": 10**30}, "limit"),
        ("memory_recall", {"query": "x", "limit": "5"}, "limit"),
        ("memory_edit", {"id": SURROGATE, "action": "forget"}, "id"),
        ("memory_edit", {"id": "id1", "action": SURROGATE}, "action"),
        ("memory_edit", {"id": "id1", "action": "update", "content": SURROGATE}, "content"),
        (
            "memory_edit",
            {"id": "id1", "action": "update", "content": "x", "tags": [SURROGATE]},
            "tags",
        ),
    ],
)
def test_unencodable_and_mistyped_arguments_are_tool_errors(store, tools, tool, args, argument):
    seed(store, "scope-a", "x")
    for form in (args, json.dumps(args)):  # a dict, and JSON text with a \ud800 escape
        with pytest.raises(ToolError) as exc:
            tools.call(tool, form)
        assert (exc.value.tool, exc.value.argument) == (tool, argument)
    assert store.total_calls == 0


def test_lesson_bound_is_8192_bytes_at_the_bound_and_one_past(store, tools):
    at = "é" * 4096  # 8192 bytes
    assert tools.call("learn", {"lesson": at})["folded"] is False
    with pytest.raises(ToolError, match="8193 bytes") as exc:
        tools.call("learn", {"lesson": at + "a"})
    assert exc.value.argument == "lesson"
    mid = seed(store, "scope-a", "x")
    with pytest.raises(ToolError, match="max 8192") as exc:
        tools.call("memory_edit", {"id": mid, "action": "update", "content": at + "a"})
    assert exc.value.argument == "content"
    assert store.total_calls == 0


def test_a_10_mb_lesson_is_refused_before_the_store(store, tools):
    with pytest.raises(ToolError, match="max 8192"):
        tools.call("learn", {"lesson": "a" * 10_000_000})
    assert store.total_calls == 0


def test_tag_bounds_are_the_proposal_bounds(store, tools):
    tools.call("learn", {"lesson": "x", "tags": [f"t{i}" for i in range(32)]})
    with pytest.raises(ToolError, match="33 tags") as exc:
        tools.call("learn", {"lesson": "y", "tags": [f"t{i}" for i in range(33)]})
    assert exc.value.argument == "tags"
    tools.call("learn", {"lesson": "z", "tags": ["a" * 1024, "b" * 1023]})  # 2048 joined
    with pytest.raises(ToolError, match="2049 bytes"):
        tools.call("learn", {"lesson": "w", "tags": ["a" * 1024, "b" * 1024]})


@pytest.mark.parametrize("scope", [SURROGATE, 5, None, b"scope"])
def test_tools_refuse_an_unusable_scope(store, scope):
    with pytest.raises(ConfigError, match="scope_id"):
        MemoryTools(store, scope)


def test_tools_refuse_a_permit_that_is_not_callable(store):
    with pytest.raises(ConfigError, match="permit"):
        MemoryTools(store, "scope-a", permit=True)
