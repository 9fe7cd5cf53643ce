"""The adversarial proposal corpus (tests/proposals/adversarial.jsonl).

Every line is checked twice: purely (parse_response + validate_changes
against a synthetic snapshot) and end to end through `run_pass` against a
real SQLiteStore, where a rejected proposal must leave the database
byte-for-byte unchanged (full `iterdump()` before and after) and the
evidence pending.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from memkit import SQLiteStore
from memkit.consolidate import Reply, build_rollout, parse_response, run_pass_sync
from memkit.errors import ANSWER_CODES, PROPOSAL_CODES, ProposalError
from memkit.llm import CallAttempt
from memkit.params import ConsolidationParams
from memkit.proposal import validate_batch, validate_changes
from memkit.types import Memory

CORPUS = Path(__file__).parent / "proposals" / "adversarial.jsonl"
LINES = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
REJECTED = [e for e in LINES if e["expect"] != "ok"]
ACCEPTED = [e for e in LINES if e["expect"] == "ok"]
SCOPE = "scope-a"


def _expand(value, ids: dict[str, str]):
    if isinstance(value, str):
        if value.startswith("@repeat:"):
            spec, _, suffix = value[len("@repeat:") :].partition("@")
            unit, _, n = spec.rpartition(":")
            return unit * int(n) + suffix
        return ids.get(value, value)
    if isinstance(value, list):
        return [_expand(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, ids) for k, v in value.items()}
    return value


def answer_text(line: dict, ids: dict[str, str]) -> str:
    if "raw" in line:
        return line["raw"]
    return json.dumps({"changes": _expand(line["changes"], ids)}, ensure_ascii=False)


class Fixed:
    """A consolidator that answers one fixed text."""

    def __init__(self, text: str):
        self.name = "fixed"
        self.text = text
        self.calls = 0

    async def propose(self, request) -> Reply:
        self.calls += 1
        return Reply(self.text, "fixed", (CallAttempt(model="fixed", outcome="ok"),))


def _content(i: int) -> str:
    words = hashlib.sha256(str(i).encode()).hexdigest()
    return "Memory " + " ".join(words[j : j + 6] for j in range(0, 36, 6))


def test_corpus_shape():
    names = [e["name"] for e in LINES]
    assert len(names) == len(set(names))
    assert len(REJECTED) >= 50
    assert {e["expect"] for e in LINES} <= {"ok", *PROPOSAL_CODES}
    # every code a proposal alone can earn is exercised
    assert {e["expect"] for e in REJECTED} >= {
        "parse",
        "bounds",
        "empty_change",
        "unknown_id",
        "scope_widening",
        "invalid_lesson",
    }


# --- pure: parse + validate against a synthetic snapshot ----------------------

SNAP = tuple(
    Memory(id=f"m{i:02d}", scope_id=SCOPE, kind="fact", content=_content(i)) for i in range(32)
)
PURE_IDS = {f"$M{i}": f"m{i:02d}" for i in range(32)} | {
    "$M0_UPPER": "M00",
    "$FOREIGN": "f00",
    "$OLDEST": "m-oldest",
    "$SCOPE": SCOPE,
}
RID = "a" * 64


@pytest.mark.parametrize("line", LINES, ids=[e["name"] for e in LINES])
def test_corpus_pure(line):
    text = answer_text(line, PURE_IDS)
    if line["expect"] == "ok":
        changes = validate_changes(SCOPE, [RID], SNAP, parse_response(text).changes)
        assert len(changes) == len(line["changes"])
        return
    with pytest.raises(ProposalError) as ei:
        validate_changes(SCOPE, [RID], SNAP, parse_response(text).changes)
    assert ei.value.code == line["expect"], str(ei.value)


def test_batch_bounds_and_ids():
    p = ConsolidationParams()
    validate_batch(SCOPE, [RID], SNAP, 16, p)  # at every bound
    validate_batch(SCOPE, [f"{i:064x}" for i in range(4)], SNAP, 0, p)
    cases = [
        ([], SNAP, 0, "bounds"),
        ([f"{i:064x}" for i in range(5)], SNAP, 0, "bounds"),
        ([RID], (*SNAP, Memory(id="m32", scope_id=SCOPE, kind="fact", content="x")), 0, "bounds"),
        ([RID], SNAP, 17, "bounds"),
        (["a" * 63], SNAP, 0, "rollout_ids"),
        (["a" * 65], SNAP, 0, "rollout_ids"),
        (["A" * 64], SNAP, 0, "rollout_ids"),
        ([RID, RID], SNAP, 0, "rollout_ids"),
        ([RID], (Memory(id="x", scope_id="other", kind="fact", content="x"),), 0, "snapshot_scope"),
        ([RID], (Memory(id="", scope_id=SCOPE, kind="fact", content="x"),), 0, "snapshot_scope"),
    ]
    for rids, snap, n, code in cases:
        with pytest.raises(ProposalError) as ei:
            validate_batch(SCOPE, rids, snap, n, p)
        assert ei.value.code == code, (rids, n, str(ei.value))


# --- end to end: run_pass against a real store ---------------------------------


def _make_store(path: Path) -> tuple[SQLiteStore, dict[str, str]]:
    t = [1_000_000.0]

    def clock() -> float:
        t[0] += 1.0
        return t[0]

    store = SQLiteStore.open(str(path), embedder=None, clock=clock)
    oldest = store.remember(SCOPE, _content(999), kind="fact").id
    for i in range(32):
        store.remember(SCOPE, _content(i), kind="fact")
    foreign = store.remember("scope-b", _content(1000), kind="fact").id
    msgs = [{"role": "user", "content": "Remember that the deploy script is ops/deploy.sh."}]
    store.stage_rollout(build_rollout(SCOPE, msgs, "ok", run_id="run-1"))
    snap = store.snapshot(SCOPE, 32)
    assert oldest not in {m.id for m in snap}
    ids = {f"$M{i}": m.id for i, m in enumerate(snap)}
    ids |= {"$M0_UPPER": snap[0].id.upper(), "$FOREIGN": foreign, "$OLDEST": oldest}
    ids["$SCOPE"] = SCOPE
    return store, ids


def _dump(path: Path) -> list[str]:
    con = sqlite3.connect(str(path))
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "m.db"
    store, ids = _make_store(path)
    yield store, ids, path
    store.close()


@pytest.mark.parametrize("line", REJECTED, ids=[e["name"] for e in REJECTED])
def test_rejected_leaves_store_unchanged(line, shared_store):
    store, ids, path = shared_store
    before = _dump(path)
    errors: list[BaseException] = []
    res = run_pass_sync(store, SCOPE, Fixed(answer_text(line, ids)), on_error=errors.append)
    assert res.outcome == "error"
    assert res.error_code == line["expect"], res.error
    assert [getattr(e, "code", None) for e in errors] == [line["expect"]]
    assert res.attempts[-1].validation_code == line["expect"]
    assert res.attempts[-1].raw_response == answer_text(line, ids)
    # the one write a refused answer makes (memkit extension of §7.8, parking):
    # one more failed pass on its rollout, retried alone next (a split of one);
    # undo it so the corpus shares one store
    con = sqlite3.connect(str(path))
    try:
        row = con.execute("SELECT failed_passes, split_size, failed_as FROM rollouts").fetchone()
        counted = line["expect"] in ANSWER_CODES
        assert row == ((1, 1, "answer") if counted else (0, None, None))
        con.execute("UPDATE rollouts SET failed_passes = 0, split_size = NULL, failed_as = NULL")
        con.commit()
    finally:
        con.close()
    assert _dump(path) == before
    assert len(store.pending_rollouts(SCOPE)) == 1


@pytest.mark.parametrize("line", ACCEPTED, ids=[e["name"] for e in ACCEPTED])
def test_accepted_commits(line, tmp_path):
    store, ids = _make_store(tmp_path / "m.db")
    with store:
        res = run_pass_sync(store, SCOPE, Fixed(answer_text(line, ids)))
        assert res.outcome == "committed", res.error
        assert res.parse_mode == "strict"
        assert len(res.changes) == len(line["changes"])
        assert store.pending_rollouts(SCOPE) == []
        n_entries = sum(1 for c in line["changes"] if c.get("entry") is not None)
        assert len(res.commit.added) == n_entries
