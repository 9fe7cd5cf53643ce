"""Every bad argument to the store is a ConfigError naming it, and changes nothing
(issue #22). Each case below escaped before as IntegrityError, TypeError,
ProgrammingError, AttributeError, OverflowError or UnicodeEncodeError, or was
coerced silently (`5` stored as scope '5', `"ops"` as tags o, p, s)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from memkit import SQLiteStore
from memkit.checks import MAX_CONTENT_BYTES
from memkit.consolidate import build_rollout, stage_run
from memkit.errors import ConfigError, MemkitError, TranscriptError
from memkit.types import Rollout

SURROGATE = "x \ud800"


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore.open(tmp_path / "m.db", embedder="hashing")
    s.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])
    s.stage_rollout(build_rollout("s", [{"role": "user", "content": "hi"}], "ok", run_id="r"))
    yield s
    s.close()


def db_state(c: sqlite3.Connection) -> tuple:
    """`PRAGMA integrity_check` must pass; returns what a refused call must not change."""
    assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return (
        c.execute("SELECT COUNT(*), group_concat(id || content || tags) FROM memories").fetchone(),
        c.execute("SELECT COUNT(*), group_concat(id || messages) FROM rollouts").fetchone(),
    )


def _state(store: SQLiteStore) -> tuple:
    c = sqlite3.connect(store.path)  # a reader of its own: what is on disk
    try:
        return db_state(c)
    finally:
        c.close()


def _live_id(store):
    return store.live("s")[0].id


CASES = [
    ("remember", lambda s: s.remember(None, "x"), "scope_id"),
    ("remember", lambda s: s.remember(5, "x"), "scope_id"),
    ("remember", lambda s: s.remember(SURROGATE, "x"), "scope_id"),
    ("remember", lambda s: s.remember("s", SURROGATE), "content"),
    ("remember", lambda s: s.remember("s", b"bytes"), "content"),
    ("remember", lambda s: s.remember("s", "x" * (MAX_CONTENT_BYTES + 1)), "content"),
    ("remember", lambda s: s.remember("s", "x", tags=None), "tags"),
    ("remember", lambda s: s.remember("s", "x", tags=[1, 2]), "tags"),
    ("remember", lambda s: s.remember("s", "x", tags="ops"), "tags"),
    ("remember", lambda s: s.remember("s", "x", tags=["ok", SURROGATE]), "tags[1]"),
    ("remember", lambda s: s.remember("s", "x", source_run_id={}), "source_run_id"),
    ("remember", lambda s: s.remember("s", "x", kind=0), "kind"),
    ("remember", lambda s: s.remember("s", "x", confidence="0.5"), "confidence"),
    ("remember", lambda s: s.remember("s", "x", confidence=float("nan")), "confidence"),
    ("remember_many", lambda s: s.remember_many("s", "abc"), "items"),
    ("remember_many", lambda s: s.remember_many("s", ["ok", {"content": SURROGATE}]), "item 1"),
    ("update", lambda s: s.update("s", _live_id(s), SURROGATE), "content"),
    ("update", lambda s: s.update("s", _live_id(s), "x", tags="ops"), "tags"),
    ("update", lambda s: s.update("s", None, "x"), "memory_id"),
    ("retract", lambda s: s.retract("s", 5), "memory_id"),
    ("get", lambda s: s.get(["s"], "x"), "scope_id"),
    ("history", lambda s: s.history("s", {}), "memory_id"),
    ("recall", lambda s: s.recall("s", "x", limit=None), "limit"),
    ("recall", lambda s: s.recall("s", "x", limit="5"), "limit"),
    ("recall", lambda s: s.recall("s", 5), "query"),
    ("recall", lambda s: s.recall("s", SURROGATE), "query"),
    ("recall", lambda s: s.recall("s", "x", params={}), "params"),
    ("recall", lambda s: s.recall("s", "x", query_embedding="vec"), "query_embedding"),
    ("live", lambda s: s.live("s", limit=10**30), "limit"),
    ("pending_rollouts", lambda s: s.pending_rollouts("s", 10**30), "limit"),
    ("pending_rollouts", lambda s: s.pending_rollouts("s", None), "limit"),
    ("snapshot", lambda s: s.snapshot("s", policy="best"), "policy"),
    ("snapshot", lambda s: s.snapshot("s", limit=2.5), "limit"),
    ("stats", lambda s: s.stats(5), "scope_id"),
    ("stage_rollout", lambda s: s.stage_rollout({"id": "r"}), "rollout"),
    (
        "stage_rollout",
        lambda s: s.stage_rollout(Rollout("b" * 64, "s", ({"role": "user", "content": b"x"},), "")),
        "rollout.messages",
    ),
    (
        "stage_rollout",
        lambda s: s.stage_rollout(Rollout("b" * 64, "s", (), SURROGATE)),
        "rollout.final",
    ),
    ("commit_pass", lambda s: s.commit_pass("s", "a" * 64, [], []), "rollout_ids"),
    ("commit_pass", lambda s: s.commit_pass("s", [{}], [], []), "rollout id"),
    ("commit_pass", lambda s: s.commit_pass("s", ["a" * 64], ["m"], []), "snapshot"),
]


@pytest.mark.parametrize(
    "method, call, argument", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_bad_arguments_are_memkit_errors_naming_the_argument_and_change_nothing(
    store, method, call, argument
):
    before = _state(store)
    with pytest.raises(MemkitError) as e:
        call(store)
    assert argument in str(e.value), str(e.value)
    assert _state(store) == before


def test_nothing_is_coerced(store):
    with pytest.raises(ConfigError):
        store.remember(5, "x")
    with pytest.raises(ConfigError):
        store.remember("s", "x", tags="ops")
    assert store.stats()["scopes"] == 1 and store.live("5") == []


def test_stage_run_with_bytes_or_surrogates_is_a_transcript_error(store):
    run = {
        "run_id": "r2",
        "scope_id": "s",
        "status": "succeeded",
        "stop_reason": "stop",
        "turns": 1,
        "messages": [{"role": "user", "content": b"bytes"}],
        "final_answer": "ok",
    }
    before = _state(store)
    with pytest.raises(TranscriptError, match="messages"):
        stage_run(store, run)
    with pytest.raises(TranscriptError, match="messages"):
        stage_run(store, {**run, "messages": [{"role": "user", "content": SURROGATE}]})
    with pytest.raises(TranscriptError, match="final_answer"):
        stage_run(store, {**run, "messages": [], "final_answer": SURROGATE})
    assert _state(store) == before


@pytest.mark.parametrize(
    "args, kw, argument",
    [
        ((5, [], "ok"), {}, "scope_id"),
        ((" ", [], "ok"), {}, "scope_id"),
        (("s", None, "ok"), {}, "messages"),
        (("s", "hi", "ok"), {}, "messages"),
        (("s", [5], "ok"), {}, "messages[0]"),
        (("s", [{"role": "user", "content": SURROGATE}], "ok"), {}, "messages"),
        (("s", [{"role": "user", "content": b"x"}], "ok"), {}, "messages"),
        (("s", [], 5), {}, "final_answer"),
        (("s", [], SURROGATE), {}, "final_answer"),
        (("s", [], "ok"), {"run_id": 5}, "run_id"),
        (("s", [], "ok"), {"params": {}}, "params"),
    ],
)
def test_build_rollout_refuses_bad_arguments_naming_them(args, kw, argument):
    """They escaped as TypeError, AttributeError or UnicodeEncodeError."""
    with pytest.raises(MemkitError, match=argument.replace("[", r"\[")):
        build_rollout(*args, **kw)


@pytest.mark.parametrize("status", [[], {}, None, 5])
def test_stage_run_with_an_unhashable_or_mistyped_status_is_a_transcript_error(store, status):
    run = {"run_id": "r9", "scope_id": "s", "status": status, "messages": []}
    before = _state(store)
    with pytest.raises(TranscriptError, match="status"):
        stage_run(store, run)
    assert _state(store) == before


def test_a_store_rollout_is_redacted_even_when_built_by_hand(store):
    r = Rollout(
        "c" * 64, "s", ({"role": "user", "content": "password=hunter22"},), "sk-" + "a" * 30
    )
    assert store.stage_rollout(r)
    (got,) = [x for x in store.pending_rollouts("s", 10) if x.id == r.id]
    assert got.messages[0]["content"] == "password=[REDACTED]" and got.final == "[REDACTED]"


def test_ten_megabytes_are_refused_quickly(store):
    """Reported, not asserted as a time: see the report / bench for the numbers."""
    big = "deploy " * 1_500_000  # 10.5 MB
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="max 65536"):
        store.remember("s", big)
    elapsed = time.perf_counter() - t0
    print(f"remember of {len(big)} bytes refused in {elapsed * 1000:.1f} ms")


@pytest.mark.parametrize("kw", [{"params": {}}, {"redaction": True}])
def test_stage_run_checks_its_parameters(store, kw):
    run = {"run_id": "r9", "scope_id": "s", "status": "succeeded", "stop_reason": "stop",
           "turns": 1, "messages": [], "final_answer": "ok"}  # fmt: skip
    before = _state(store)
    with pytest.raises(ConfigError, match=next(iter(kw))):
        stage_run(store, run, **kw)
    assert _state(store) == before


PER_METHOD = list({c[0]: c for c in reversed(CASES)}.values())  # one case of each method


@pytest.mark.parametrize("method, call, argument", PER_METHOD, ids=[c[0] for c in PER_METHOD])
def test_postgres_refuses_the_same(make_store, backend, method, call, argument):
    """Both backends share the checks; here the Postgres half (SQLite is above, with
    `PRAGMA integrity_check` on the file)."""
    if backend != "postgres":
        pytest.skip("the SQLite half is test_bad_arguments_are_memkit_errors_...")
    s = make_store(embedder="hashing")
    s.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])
    s.stage_rollout(build_rollout("s", [{"role": "user", "content": "hi"}], "ok", run_id="r"))

    def state():
        return s.stats(), s.live("s"), s.pending_rollouts("s", 100)

    before = state()
    with pytest.raises(MemkitError) as e:
        call(s)
    assert argument in str(e.value), str(e.value)
    assert state() == before


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.remember("s", "a\x00b"),
        lambda s: s.remember("s\x00", "x"),
        lambda s: s.recall("s\x00", "x"),
    ],
    ids=["content", "scope", "recall-scope"],
)
def test_both_backends_refuse_nul_in_text_and_change_nothing(make_store, call):
    """Postgres text cannot hold U+0000: a MemkitError, never a driver error (found by the
    API fuzz on Postgres), and SQLite refuses it too (issue #34 item 5: one contract;
    was: SQLite stored it)."""
    s = make_store(embedder="hashing")
    s.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"])
    before = s.stats(), s.live("s")
    with pytest.raises(MemkitError, match="NUL"):
        call(s)
    assert (s.stats(), s.live("s")) == before
    assert s.remember("s", "still writable").folded is False
