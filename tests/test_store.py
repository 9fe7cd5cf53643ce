"""SQLiteStore lifecycle, curation (update/retract/history), reads and stats."""

from __future__ import annotations

import sqlite3

import pytest
from test_store_helpers import Clock, TableEmbedder

from memkit.errors import ConfigError, EmbedderMismatch, NotFound
from memkit.store import SQLiteStore
from memkit.store.schema import MIGRATIONS, SCHEMA_VERSION


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(make_store, clock):
    s = make_store(embedder=None, clock=clock)
    yield s
    s.close()


# --- open / migrations / embedder record --------------------------------------------


def test_file_store_uses_wal_and_migrates_once(tmp_path):
    path = tmp_path / "m.db"
    with SQLiteStore.open(str(path), embedder=None) as s:
        s.remember("s", "kept across reopen")
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with SQLiteStore.open(str(path), embedder=None) as s:
        assert [m.content for m in s.live("s")] == ["kept across reopen"]


def test_migrations_are_numbered_and_append_only():
    versions = [v for v, _ in MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1))


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "m.db"
    c = sqlite3.connect(path)
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(RuntimeError, match="newer"):
        SQLiteStore.open(str(path), embedder=None)


def test_embedder_recorded_and_mismatch_refused(tmp_path):
    path = str(tmp_path / "m.db")
    SQLiteStore.open(path, embedder="hashing").close()
    with pytest.raises(EmbedderMismatch, match=r"'hashing-256'.*'hashing-128'"):
        SQLiteStore.open(path, embedder="hashing-128")
    with pytest.raises(EmbedderMismatch, match="table-4"):
        SQLiteStore.open(path, embedder=TableEmbedder())
    with SQLiteStore.open(path, embedder="hashing") as s:
        assert s.stats()["embedder"] == "hashing-256" and s.stats()["embedder_dim"] == 256
    with SQLiteStore.open(path, embedder=None) as s:  # keyword-only reader is allowed
        assert s.embedder is None


def test_bad_embedder_spec_is_a_config_error(make_store):
    with pytest.raises(ConfigError, match="'bert'"):
        make_store(embedder="bert")


def test_supports_curation():
    assert SQLiteStore.supports_curation is True


# --- get / update / retract / history ------------------------------------------------------


def test_get_missing_and_foreign_raise_the_same_not_found(store):
    rid = store.remember("a", "fact in a").id
    with pytest.raises(NotFound) as missing:
        store.get("b", "nope")
    with pytest.raises(NotFound) as foreign:
        store.get("b", rid)
    assert type(missing.value) is type(foreign.value)
    assert str(foreign.value) == f"memory {rid!r} not found in scope 'b'"


def test_update_inserts_successor_and_retires_old(store, clock):
    old = store.remember("s", "Deploy with ops/deploy.sh", kind="procedure", tags=["ops"]).id
    store.remember("s", "Deploy with ops/deploy.sh now")  # different kind, no fold
    clock.advance(10)
    new = store.update("s", old, "Deploy with make deploy", confidence=0.8)
    o, n = store.get("s", old), store.get("s", new)
    assert o.superseded_by == new and not o.live
    assert (n.kind, n.scope_id, n.seen_count, n.confidence) == ("procedure", "s", 1, 0.8)
    assert n.tags == ("ops",)  # tags=None keeps the old tags
    assert n.created_at == clock.t
    assert store.update("s", new, "Deploy with make ship", tags=["x"]) != new
    assert store.live("s")[0].tags == ("x",)


def test_update_default_confidence_is_chosen(store):
    old = store.remember("s", "x is y", confidence=0.9).id
    assert store.get("s", store.update("s", old, "x is z")).confidence == 0.7


@pytest.mark.parametrize("content", ["", "   "])
def test_update_blank_content_rejected_without_change(store, content):
    rid = store.remember("s", "x is y").id
    with pytest.raises(ConfigError):
        store.update("s", rid, content)
    assert store.get("s", rid).live and store.stats("s")["rows"] == 1


def test_update_and_retract_need_a_live_row_in_scope(store):
    rid = store.remember("a", "fact in a").id
    for scope, mid in (("b", rid), ("a", "missing")):
        with pytest.raises(NotFound):
            store.update(scope, mid, "new")
        with pytest.raises(NotFound):
            store.retract(scope, mid)
    store.retract("a", rid)
    with pytest.raises(NotFound):
        store.retract("a", rid)
    with pytest.raises(NotFound):
        store.update("a", rid, "new")
    assert store.stats()["rows"] == 1


def test_retract_points_at_itself_and_keeps_the_row(store):
    rid = store.remember("s", "x is y").id
    store.retract("s", rid)
    m = store.get("s", rid)
    assert m.superseded_by == rid and m.retracted and not m.live
    assert store.live("s") == []


def test_history_is_the_whole_chain_oldest_first(store, clock):
    a = store.remember("s", "v1 of the fact").id
    clock.advance(1)
    b = store.update("s", a, "v2 of the fact")
    clock.advance(1)
    c = store.update("s", b, "v3 of the fact")
    store.retract("s", c)
    for mid in (a, b, c):
        assert [m.id for m in store.history("s", mid)] == [a, b, c]
    assert store.history("s", a)[-1].superseded_by == c
    with pytest.raises(NotFound):
        store.history("other", a)


def test_history_of_a_lone_row(store):
    rid = store.remember("s", "alone").id
    assert [m.id for m in store.history("s", rid)] == [rid]


def test_live_order_and_limit(store, clock):
    ids = []
    for text in ("one fact", "two things", "three items"):
        ids.append(store.remember("s", text).id)
        clock.advance(1)
    assert [m.id for m in store.live("s")] == ids[::-1]
    assert [m.id for m in store.live("s", limit=2)] == ids[::-1][:2]
    assert store.live("s", limit=0) == []
    store.remember("s", "one fact")  # confirm again -> first
    assert store.live("s")[0].id == ids[0]


def test_stats_counts(store):
    a = store.remember("a", "fact one", kind="fact").id
    store.remember("a", "prefers tea", kind="preference")
    store.update("a", a, "fact one revised")
    b = store.remember("b", "other scope").id
    store.retract("b", b)
    st = store.stats("a")
    assert (st["rows"], st["live"], st["superseded"], st["retracted"]) == (3, 2, 1, 0)
    assert st["by_kind"]["fact"] == 1 and st["by_kind"]["preference"] == 1
    allst = store.stats()
    assert (allst["scopes"], allst["rows"], allst["retracted"]) == (2, 4, 1)


def test_context_manager_closes(tmp_path):
    with SQLiteStore.open(str(tmp_path / "m.db"), embedder=None) as s:
        pass
    with pytest.raises(sqlite3.ProgrammingError):
        s.live("s")


def test_default_embedder_is_wordllama(make_store, tmp_path):
    s = make_store()
    assert s.embedder is not None and s.embedder.name == "wordllama-256"
    rid = s.remember("s", "The deploy script is ops/deploy.sh").id
    hits = s.recall("s", "how do I deploy?")
    assert hits and hits[0].id == rid and hits[0].path == "vector"


def test_digest_changes_exactly_when_something_stored_changes(store, clock):
    from memkit.consolidate import build_rollout

    empty = store.digest()
    assert empty["problems"] == [] and empty["memories"] == empty["rollouts"] == 0
    r = store.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])
    one = store.digest()
    assert one["memories"] == 1 and one["memories_sha256"] != empty["memories_sha256"]
    store.recall("s", "deploy script")
    store.live("s")
    with pytest.raises(NotFound):
        store.retract("s", "no-such-id")
    assert store.digest() == one  # reads and refusals change nothing
    clock.advance(5)
    store.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])  # folds: seen again
    two = store.digest()
    assert two["memories"] == 1 and two["memories_sha256"] != one["memories_sha256"]
    store.stage_rollout(build_rollout("s", [{"role": "user", "content": "hi"}], "ok"))
    three = store.digest()
    assert three["rollouts"] == 1 and three["memories_sha256"] == two["memories_sha256"]
    store.update("s", r.id, "Deploy with make deploy")
    assert store.digest()["memories"] == 2


def test_closed(make_store):
    s = make_store(embedder=None)
    assert not s.closed
    s.close()
    assert s.closed
    s.close()  # harmless
    assert s.closed
