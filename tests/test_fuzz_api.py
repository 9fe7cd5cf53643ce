"""Property: whatever Python values reach the public store and tools API, the only
exceptions that escape are MemkitError subclasses, and a refused call leaves the
database intact (SQLite: `PRAGMA integrity_check` ok) with the same rows (issue #22),
on both backends (Postgres with fewer examples: each costs server round trips).

Each example opens a store, seeds it, then makes a handful of calls whose
arguments mix well-formed values (real ids, the right scope) with arbitrary
ones: None, bools, huge ints, NaN, bytes, lone surrogates, nested lists and
dicts, strings where lists belong and lists where strings belong.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memkit import SQLiteStore
from memkit.consolidate import build_rollout
from memkit.errors import MemkitError
from memkit.params import RecallParams
from memkit.tools import MemoryTools
from memkit.types import Rollout

sys.path.insert(0, str(Path(__file__).parent))
from conftest import _empty_pg_schema

FUZZ_EXAMPLES = 150
PG_FUZZ_EXAMPLES = 40
CALLS_PER_EXAMPLE = 8

IDENTIFIERS = ["s" * 1024, "é" * 512, "s" * 1025, "x" * 3000, "s\x00", "\x00", "\udc80 s"]
"""Identifiers at and past the scope-id bound (1,024 bytes; Postgres's B-tree limit is
~2.7 KB), with a NUL or not UTF-8 (issue #34 item 5): one contract on both backends."""
_chars = st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\x00", "é", " "]))
texts = st.text(_chars, max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
    st.binary(max_size=6),
    st.sampled_from(["s", "other", "", "  ", "x \ud800", "ops", "fact", "learning", "5"]),
    st.sampled_from(IDENTIFIERS),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(texts, st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=6,
)
scope = st.one_of(st.just("s"), st.just("s"), st.sampled_from(IDENTIFIERS), anything)


def _state(store) -> dict:
    """What a refused call must not change (`digest`: read on the store's own
    connection); the engine's consistency check must pass."""
    d = store.digest()
    assert d["problems"] == []
    return d


def _ids(store: SQLiteStore) -> list[str]:
    return [m.id for m in store.live("s")] or ["none"]


def _call(data, store: SQLiteStore, tools: MemoryTools):
    """Draw one call: (name, thunk)."""
    d = data.draw
    ids = _ids(store)
    mid = d(st.one_of(st.sampled_from(ids), anything))
    name = d(
        st.sampled_from(
            [
                "remember", "remember_many", "update", "retract", "get", "history", "recall",
                "live", "stats", "pending_rollouts", "snapshot", "stage_rollout", "commit_pass",
                "tool",
            ]
        )
    )  # fmt: skip
    if name == "remember":
        kw = d(
            st.fixed_dictionaries(
                {},
                optional={
                    "kind": anything,
                    "confidence": anything,
                    "tags": anything,
                    "source_run_id": anything,
                },
            )
        )
        sc, content = d(scope), d(st.one_of(texts, anything))
        return name, lambda: store.remember(sc, content, **kw)
    if name == "remember_many":
        fields = st.sampled_from(["content", "kind", "tags", "bogus"])
        item = st.one_of(texts, st.dictionaries(fields, anything))
        items = d(st.one_of(anything, st.lists(item, max_size=3)))
        sc = d(scope)
        return name, lambda: store.remember_many(sc, items)
    if name == "update":
        kw = d(st.fixed_dictionaries({}, optional={"tags": anything, "confidence": anything}))
        sc, content = d(scope), d(st.one_of(texts, anything))
        return name, lambda: store.update(sc, mid, content, **kw)
    if name in ("retract", "get", "history"):
        sc = d(scope)
        return name, lambda: getattr(store, name)(sc, mid)
    if name == "recall":
        kw = d(
            st.fixed_dictionaries(
                {},
                optional={
                    "params": st.one_of(st.just(RecallParams()), anything),
                    "query_embedding": anything,
                },
            )
        )
        sc, query, limit = d(scope), d(st.one_of(texts, anything)), d(anything)
        return name, lambda: store.recall(sc, query, limit, **kw)
    if name == "live":
        sc, limit = d(scope), d(anything)
        return name, lambda: store.live(sc, limit=limit)
    if name == "stats":
        sc = d(anything)
        return name, lambda: store.stats(sc)
    if name == "pending_rollouts":
        sc, limit = d(scope), d(anything)
        return name, lambda: store.pending_rollouts(sc, limit)
    if name == "snapshot":
        sc, limit, policy = d(scope), d(anything), d(anything)
        query = d(st.one_of(texts, anything))
        return name, lambda: store.snapshot(sc, limit, policy=policy, query=query)
    if name == "stage_rollout":
        rollout = d(
            st.one_of(
                anything,
                st.builds(
                    Rollout,
                    id=st.one_of(st.just("d" * 64), anything),
                    scope_id=scope,
                    messages=st.one_of(
                        st.just(({"role": "user", "content": "x"},)),
                        anything,
                        st.tuples(st.dictionaries(st.sampled_from(["role", "content"]), anything)),
                    ),
                    final=anything,
                    staged_at=anything,
                    run_id=anything,
                ),
            )
        )
        return name, lambda: store.stage_rollout(rollout)
    if name == "commit_pass":
        rids = [r.id for r in store.pending_rollouts("s", 4)]
        snap = store.snapshot("s", 32)
        changes = d(
            st.one_of(
                anything,
                st.lists(
                    st.fixed_dictionaries(
                        {"ids": st.one_of(st.just([]), st.lists(st.sampled_from(ids)), anything)},
                        optional={"entry": st.one_of(st.none(), anything, st.fixed_dictionaries(
                            {"content": st.one_of(texts, anything)},
                            optional={"kind": anything, "tags": anything, "scope": anything,
                                      "scope_id": anything, "confidence": anything}))},
                    ),
                    max_size=3,
                ),
            )
        )  # fmt: skip
        rollout_ids = d(st.one_of(st.just(rids), anything))
        snapshot = d(st.one_of(st.just(snap), anything))
        sc = d(scope)
        return name, lambda: store.commit_pass(sc, rollout_ids, snapshot, changes)
    tool = d(st.one_of(st.sampled_from(["memory_recall", "learn", "memory_edit"]), anything))
    args = d(
        st.one_of(
            anything,
            st.dictionaries(
                st.sampled_from(["query", "limit", "lesson", "tags", "id", "action", "content"]),
                st.one_of(anything, st.sampled_from([*ids, "update", "forget"])),
                max_size=4,
            ),
        )
    )
    if d(st.booleans()):
        with contextlib.suppress(TypeError, ValueError):
            args = json.dumps(args)
    return "tool", lambda: tools.call(tool, args)


def test_only_memkit_errors_escape_and_refusals_change_nothing(backend, request):
    if backend == "sqlite":
        examples, make = FUZZ_EXAMPLES, lambda: SQLiteStore.open(":memory:", embedder="hashing")
    else:
        dsn = request.getfixturevalue("pg_dsn")
        examples, make = PG_FUZZ_EXAMPLES, lambda: _fresh_pg_store(dsn)
    settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(given(st.data())(lambda data: _fuzz(data, make())))()


def _fresh_pg_store(dsn: str):
    from memkit.store import PostgresStore

    PostgresStore.open(dsn, embedder="hashing").close()  # the tables exist
    _empty_pg_schema(dsn)
    return PostgresStore.open(dsn, embedder="hashing")


def _fuzz(data, store) -> None:
    try:
        store.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])
        store.stage_rollout(build_rollout("s", [{"role": "user", "content": "hi"}], "ok"))
        tools = MemoryTools(store, "s")
        for _ in range(CALLS_PER_EXAMPLE):
            name, thunk = _call(data, store, tools)
            before = _state(store)
            try:
                thunk()
            except MemkitError:
                assert _state(store) == before, f"a refused {name} changed the store"
            except Exception as e:  # the property: nothing else may escape
                raise AssertionError(f"{name} raised {type(e).__name__}: {e!r:.200}") from e
            else:
                _state(store)  # integrity holds after accepted calls too
    finally:
        store.close()
