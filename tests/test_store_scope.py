"""Scope isolation as a property (SPEC §6): no sequence of operations on one scope
returns or changes a row of another, and a foreign id behaves exactly like a missing one."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_store_helpers import Clock

from memkit.errors import NotFound

SCOPES = ("a", "b")
TEXTS = (
    "deploy with make deploy",
    "deploy with make deploy now",
    "the db is postgres 16",
    "prefers dark mode",
    "marketing lead is alice",
)


class FixedEmbedder:
    """Every text gets a vector close to one axis: every row survives the floor."""

    name = "fixed-3"
    dim = 3

    def embed(self, texts):
        return np.array([[1.0, (len(t) % 5) / 10, 0.0] for t in texts], dtype=np.float32)


op = st.one_of(
    st.tuples(st.just("remember"), st.sampled_from(SCOPES), st.sampled_from(TEXTS)),
    st.tuples(st.just("update"), st.sampled_from(SCOPES), st.integers(0, 20)),
    st.tuples(st.just("retract"), st.sampled_from(SCOPES), st.integers(0, 20)),
    st.tuples(st.just("recall"), st.sampled_from(SCOPES), st.sampled_from((*TEXTS, ""))),
)


def snapshot_rows(store, scope, ids):
    """Every row of `scope` among the ids written so far, read through the public API;
    the scope's row count catches a row written there under an id nobody returned."""
    out: dict = {"rows": store.stats(scope)["rows"]}
    for mid in ids:
        try:
            m = store.get(scope, mid)
        except NotFound:
            continue
        out[mid] = (m.content, m.tags, m.confidence, m.seen_count, m.last_seen_at, m.superseded_by)
    return out


def outcome(fn):
    try:
        return ("ok", fn())
    except NotFound as e:
        return ("notfound", type(e))


# make_store opens a fresh store (on Postgres: a fresh schema) per example.
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_no_operation_crosses_scopes(make_store, ops):
    clock = Clock()
    store = make_store(embedder=FixedEmbedder(), clock=clock)
    all_ids: list[str] = []
    for name, scope, arg in ops:
        clock.advance(60)
        other = "b" if scope == "a" else "a"
        before = snapshot_rows(store, other, all_ids)
        if name == "remember":
            all_ids.append(store.remember(scope, arg).id)
        elif name in ("update", "retract") and all_ids:
            mid = all_ids[arg % len(all_ids)]
            is_foreign = mid in before
            fn = (
                (lambda m=mid, s=scope: store.update(s, m, "changed text"))
                if name == "update"
                else (lambda m=mid, s=scope: store.retract(s, m))
            )
            res = outcome(fn)
            if is_foreign:
                # a foreign id behaves exactly like a missing one
                missing = outcome(
                    (lambda s=scope: store.update(s, "no-such-id", "changed text"))
                    if name == "update"
                    else (lambda s=scope: store.retract(s, "no-such-id"))
                )
                assert res == missing == ("notfound", NotFound)
                assert outcome(lambda m=mid, s=scope: store.get(s, m)) == ("notfound", NotFound)
                assert outcome(lambda m=mid, s=scope: store.history(s, m)) == (
                    "notfound",
                    NotFound,
                )
            elif res[0] == "ok" and name == "update":
                all_ids.append(res[1])
        elif name == "recall":
            for limit in (8, 0):
                for hit in store.recall(scope, arg, limit):
                    assert hit.memory.scope_id == scope and hit.memory.live
            for m in store.live(scope):
                assert m.scope_id == scope
            for m in store.snapshot(scope, policy="relevant", query=arg or "x"):
                assert m.scope_id == scope
        assert snapshot_rows(store, other, all_ids) == before
    for scope in SCOPES:
        for m in store.live(scope):
            for h in store.history(scope, m.id):
                assert h.scope_id == scope
    store.close()
