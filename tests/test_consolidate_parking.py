"""Parking (memkit extension of SPEC §7.8, issue #16): no head-of-line freeze.

A rollout that was part of `park_after` (3) passes whose answer was invalid
leaves the pending queue, keeps its evidence and can be re-queued; provider
errors and stale snapshots never count. A SIGKILL while a pass parks never
leaves a rollout both parked and pending, and never loses one.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace

import pytest
from crash_loops import SCOPE
from kill_harness import assert_file_sound, kill_rounds, stage_runs

from memkit import SQLiteStore
from memkit.consolidate import OracleConsolidator, build_rollout, run_pass_sync
from memkit.errors import ConfigError, ProviderError
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams
from memkit.stores import open_store
from memkit.types import Rollout

S = "s"
INVENTED = [{"ids": ["mem-invented"], "entry": None}]


def _stage(store: SQLiteStore, *texts: str, scope: str = S) -> list[str]:
    ids = []
    for i, text in enumerate(texts):
        r = build_rollout(scope, [{"role": "user", "content": text}], "ok", run_id=f"{scope}-{i}")
        assert store.stage_rollout(replace(r, staged_at=float(i)))
        ids.append(r.id)
    return ids


def _poisoned(request) -> list:
    """Invalid whenever the batch holds a poison rollout, else one valid add per rollout."""
    texts = [m["content"] for r in request.rollouts for m in r.messages]
    if any("poison" in t for t in texts):
        return INVENTED
    return [{"ids": [], "entry": {"content": f"learned: {t}"}} for t in texts]


POISONED = OracleConsolidator(_poisoned, name="poisoned")


@pytest.fixture
def store(make_store):
    """Parking on the test's backend (the conformance fixture: SQLite and Postgres)."""
    return make_store(embedder=None)


def _pending(store, scope=S):
    return [r.id for r in store.pending_rollouts(scope, 100)]


def test_three_invalid_answers_park_exactly_the_batch_then_later_evidence_commits(store):
    ids = _stage(store, "poison head", "b", "c", "d", "e", "f")
    for n in (1, 2):
        res = run_pass_sync(store, S, POISONED)
        assert res.error_code == "unknown_id" and res.parked == ()
        assert _pending(store) == ids  # a bound: not parked at 2
        assert [r.failed_passes for r in store.pending_rollouts(S, 100)] == [n] * 4 + [0, 0]
    res = run_pass_sync(store, S, POISONED)
    assert res.error_code == "unknown_id" and res.parked == tuple(ids[:4])  # ... parked at 3
    assert _pending(store) == ids[4:]
    parked = store.parked_rollouts(S)
    assert [r.id for r in parked] == ids[:4]
    assert all(r.failed_passes == 3 and r.parked_at is not None for r in parked)
    assert parked[0].messages[0]["content"] == "poison head"  # the evidence is kept
    stats = store.stats(S)
    assert (stats["rollouts_pending"], stats["rollouts_parked"], stats["rollouts_consumed"]) == (
        2,
        4,
        0,
    )
    # the queue moves on: the next batch commits
    res = run_pass_sync(store, S, POISONED)
    assert res.outcome == "committed" and res.consumed == tuple(ids[4:])
    assert sorted(m.content for m in store.live(S)) == ["learned: e", "learned: f"]


def test_requeue_puts_a_parked_rollout_back_with_its_failures_forgotten(store):
    ids = _stage(store, "poison", "b")
    for _ in range(3):
        run_pass_sync(store, S, POISONED)
    assert [r.id for r in store.parked_rollouts(S)] == ids and _pending(store) == []
    store.requeue(S, ids[1])
    (back,) = store.pending_rollouts(S)
    assert back.id == ids[1] and back.failed_passes == 0 and back.parked_at is None
    assert store.stats(S)["rollouts_parked"] == 1
    res = run_pass_sync(store, S, POISONED)
    assert res.outcome == "committed" and res.consumed == (ids[1],)
    with pytest.raises(ConfigError, match="not parked in scope"):
        store.requeue(S, ids[1])  # consumed now
    with pytest.raises(ConfigError, match="not parked in scope 'other'"):
        store.requeue("other", ids[0])  # another scope's rollout
    with pytest.raises(ConfigError, match="not parked"):
        store.requeue(S, "0" * 64)
    assert [r.id for r in store.parked_rollouts(S)] == [ids[0]]


class _Down:
    name = "down"

    async def propose(self, request):
        err = ProviderError("server down", kind="server", status=503)
        err.attempts = (CallAttempt(model="down", outcome="server", status=503),)
        raise err


def test_provider_errors_and_stale_snapshots_never_park(store):
    ids = _stage(store, "a", "b")
    for _ in range(5):
        res = run_pass_sync(store, S, _Down())
        assert res.error_code == "provider" and res.parked == ()
    assert _pending(store) == ids
    assert [r.failed_passes for r in store.pending_rollouts(S)] == [0, 0]
    for code in ("stale_snapshot", "consumed", "provider", "nonsense"):
        with pytest.raises(ConfigError, match="does not judge the answer"):
            store.record_failed_pass(S, ids, code)
    assert store.stats(S)["rollouts_parked"] == 0


def test_park_after_is_a_tunable_and_zero_turns_parking_off(store):
    ids = _stage(store, "poison")
    once = ConsolidationParams(park_after=1)
    assert run_pass_sync(store, S, POISONED, once).parked == tuple(ids)
    (other,) = _stage(store, "poison again", scope="t")
    off = ConsolidationParams(park_after=0)
    for _ in range(5):
        assert run_pass_sync(store, "t", POISONED, off).parked == ()
    assert _pending(store, "t") == [other]
    assert store.pending_rollouts("t")[0].failed_passes == 5


def test_record_failed_pass_counts_only_pending_rollouts_of_the_scope(store):
    a, _b = _stage(store, "a", "b")
    (t,) = _stage(store, "t", scope="t")
    assert store.record_failed_pass(S, [a, t, "f" * 64], "parse", ConsolidationParams()) == ()
    assert [r.failed_passes for r in store.pending_rollouts(S)] == [1, 0]
    assert store.pending_rollouts("t")[0].failed_passes == 0  # foreign scope untouched
    assert store.record_failed_pass(S, [a, a], "parse") == ()  # a duplicate counts once
    assert store.record_failed_pass(S, [a], "invalid_lesson") == (a,)
    assert store.record_failed_pass(S, [a], "parse") == ()  # parked: no longer counted
    assert store.parked_rollouts(S)[0].failed_passes == 3
    assert store.record_failed_pass(S, [], "parse") == ()


@pytest.mark.parametrize(
    "bad_id",
    ["abc", "A" * 64, "a" * 63, "a" * 65, "g" * 64, " " + "a" * 63, None, 7],
)
def test_stage_rollout_refuses_a_malformed_id(store, bad_id):
    r = build_rollout(S, [{"role": "user", "content": "x"}], "ok")
    with pytest.raises(ConfigError, match=r"rollout\.id"):
        store.stage_rollout(replace(r, id=bad_id))
    assert store.stats(S)["rollouts_pending"] == 0
    assert store.stage_rollout(replace(r, id="a" * 64))  # the bound itself is accepted


@pytest.mark.parametrize("bad_scope", ["", "   ", None, 3])
def test_stage_rollout_refuses_a_malformed_scope(store, bad_scope):
    r = build_rollout(S, [{"role": "user", "content": "x"}], "ok")
    with pytest.raises(ConfigError, match=r"rollout\.scope_id"):
        store.stage_rollout(replace(r, scope_id=bad_scope))
    assert store.stats()["rollouts_pending"] == 0


def test_a_store_from_before_parking_migrates_with_its_queue(tmp_path):
    from memkit.schema import MIGRATIONS

    path = tmp_path / "old.db"
    c = sqlite3.connect(path)
    for _version, ddl in MIGRATIONS[:3]:
        for stmt in ddl.split(";"):
            if stmt.strip():
                c.execute(stmt)
    c.execute("PRAGMA user_version = 3")
    c.execute(
        "INSERT INTO rollouts (id, scope_id, run_id, messages, final, staged_at) "
        "VALUES (?, 's', 'r', '[]', '', 1.0)",
        ("b" * 64,),
    )
    c.commit()
    c.close()
    with SQLiteStore.open(str(path), embedder=None) as store:
        (r,) = store.pending_rollouts(S)
        assert (r.id, r.failed_passes, r.parked_at) == ("b" * 64, 0, None)
        assert store.stats(S)["rollouts_parked"] == 0


def test_a_postgres_store_from_before_parking_migrates_with_its_queue(pg_dsn):
    import psycopg

    from memkit.pg_schema import MIGRATIONS
    from memkit.postgres import PostgresStore

    with psycopg.connect(pg_dsn, autocommit=True) as c:  # a store at migration 1
        c.execute("DROP TABLE IF EXISTS memories, rollouts, scopes, meta, schema_version")
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("CREATE TABLE schema_version (version integer NOT NULL)")
        for stmt in MIGRATIONS[0][1].split(";"):
            if stmt.strip():
                c.execute(stmt)
        c.execute("INSERT INTO schema_version VALUES (1)")
        c.execute(
            "INSERT INTO rollouts (id, scope_id, run_id, messages, final, staged_at) "
            "VALUES (%s, 's', 'r', '[]', '', 1.0)",
            ("b" * 64,),
        )
    with PostgresStore.open(pg_dsn, embedder=None) as store:
        (r,) = store.pending_rollouts(S)
        assert (r.id, r.failed_passes, r.parked_at) == ("b" * 64, 0, None)
        assert store.record_failed_pass(S, [r.id], "parse", ConsolidationParams(park_after=1))
        assert [p.id for p in store.parked_rollouts(S)] == [r.id]
        assert store.stats(S)["rollouts_parked"] == 1


def test_rollout_type_defaults():
    r = Rollout(id="a" * 64, scope_id=S, messages=(), final="")
    assert r.failed_passes == 0 and r.parked_at is None


# --- crash safety: SIGKILL while passes park ------------------------------------------

KILLS_INSIDE = 30
"""Kills that must land inside `commit_pass` or `record_failed_pass`."""
KILLS_EACH = 10
"""Of which at least this many inside each: `record_failed_pass` is the parking
transaction (measured 6-15 of 30 by chance before the harness aimed at both)."""


def _check(db: str, staged: dict[str, str]) -> tuple[int, int]:
    """Every staged rollout is in exactly one state, consistent with its counts and rows."""
    assert_file_sound(db)
    with open_store(db, embedder=None) as store:
        pending = {r.id: r for r in store.pending_rollouts(SCOPE, 10**6)}
        parked = {r.id: r for r in store.parked_rollouts(SCOPE)}
        markers = {m.content for m in store.live(SCOPE)}
        stats = store.stats(SCOPE)
    consumed = {rid for rid, run in staged.items() if f"marker {run}" in markers}
    assert not set(pending) & set(parked), "a rollout is both parked and pending"
    assert not consumed & (set(pending) | set(parked))
    assert set(pending) | set(parked) | consumed == set(staged), "a rollout was lost"
    assert (stats["rollouts_pending"], stats["rollouts_parked"], stats["rollouts_consumed"]) == (
        len(pending),
        len(parked),
        len(consumed),
    )
    assert all(r.failed_passes == 3 for r in parked.values())  # never double-counted
    assert all(r.failed_passes < 3 for r in pending.values())
    return len(parked), len(consumed)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sigkill_while_parking_never_loses_or_duplicates_a_rollout(tmp_path, store_url):
    db = store_url
    staged = stage_runs(db, SCOPE, 0, 60)
    state = [(0, 0)]

    def after_round() -> None:
        parked, consumed = _check(db, staged)
        state.append((parked, consumed))
        if len(staged) - parked - consumed < 40:
            staged.update(stage_runs(db, SCOPE, len(staged), 60))

    report = kill_rounds(
        tmp_path,
        db,
        "crash_loops:parking_loop",
        ("commit_pass", "record_failed_pass"),
        after_round=after_round,
        target_inside=KILLS_INSIDE,
        target_each=KILLS_EACH,
        max_kills=6 * KILLS_INSIDE,
        seed=20261203,
    )
    print(f"{report.kills} kills, inside: {dict(report.inside_by)}; parked, consumed: {state[-1]}")
    assert report.inside >= KILLS_INSIDE, f"only {report.inside} of {report.kills} kills inside"
    assert min(report.inside_by[m] for m in ("commit_pass", "record_failed_pass")) >= KILLS_EACH
    parked, consumed = state[-1]
    assert parked > 0 and consumed > 0  # the kills landed while both kinds of pass ran
