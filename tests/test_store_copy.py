"""`memkit store copy`: every memory, history chain and rollout moves between backends
losslessly, verified by counts and checksums; a non-empty destination is refused."""

from __future__ import annotations

import numpy as np
import pytest
from test_store_helpers import Clock

from memkit.cli import main
from memkit.consolidate import build_rollout
from memkit.errors import EmbedderMismatch, MemkitError
from memkit.params import ConsolidationParams
from memkit.store import copy_store, open_store


def _fill(url: str) -> dict:
    """A store with folds, an update chain, a retraction, embeddings, another scope, and
    rollouts pending (one failed pass), consumed (by a committed pass) and parked."""
    clock = Clock()
    with open_store(url, embedder="hashing", clock=clock) as s:
        a = s.remember("s", "The deploy script is ops/deploy.sh", tags=["ops", "ünï"]).id
        clock.advance(5)
        s.remember("s", "The deploy script is ops/deploy.sh.", confidence=0.9, source_run_id="r1")
        b = s.update("s", a, "Deploy with make deploy")
        c = s.update("s", b, "Deploy with make ship", tags=["x"])
        gone = s.remember("s", "Prefers tea over coffee", kind="preference").id
        s.retract("s", gone)
        s.remember("t", "Another scope's fact", kind="learning")
        r1, r2, r3 = (
            build_rollout("s", [{"role": "user", "content": f"ev {i}"}], "ok") for i in (1, 2, 3)
        )
        for r in (r1, r2, r3):
            s.stage_rollout(r)
        snap = s.snapshot("s")
        s.commit_pass("s", [r1.id], snap, [{"ids": [], "entry": {"content": "From a pass"}}])
        s.record_failed_pass("s", [r2.id], "parse")  # one failure, still pending
        s.record_failed_pass("s", [r3.id], "parse", ConsolidationParams(park_after=1))  # parked
    return {"chain": [a, b, c], "gone": gone, "pending": r2.id}


def _state(url: str) -> dict:
    with open_store(url, embedder="hashing", clock=Clock(2e9)) as s:  # one "now" for all
        out = {"stats": {k: v for k, v in s.stats().items()}}
        for scope in ("s", "t"):
            out[scope] = [(m, m.embedding) for m in s.live(scope)]
            out[f"{scope}-recall"] = [(h.id, h.score) for h in s.recall(scope, "deploy")]
        out["pending"] = [(r.id, r.failed_passes) for r in s.pending_rollouts("s", 10)]
        out["parked"] = [(r.id, r.failed_passes, r.parked_at) for r in s.parked_rollouts("s")]
        return out


def _same(a: dict, b: dict) -> None:
    assert a["stats"] == b["stats"]
    for scope in ("s", "t"):
        assert [m for m, _ in a[scope]] == [m for m, _ in b[scope]]
        for (_, ea), (_, eb) in zip(a[scope], b[scope], strict=True):
            assert np.array_equal(ea, eb)
        assert a[f"{scope}-recall"] == b[f"{scope}-recall"]
    assert a["pending"] == b["pending"] and a["parked"] == b["parked"]
    assert len(a["parked"]) == 1 and a["pending"][0][1] == 1


def test_copy_sqlite_to_postgres_and_back_is_lossless(tmp_path, pg_dsn):
    src, back = str(tmp_path / "src.db"), f"sqlite:///{tmp_path}/back.db"
    ids = _fill(src)
    rep = copy_store(src, pg_dsn)
    assert (rep.memories, rep.rollouts, rep.scopes) == (6, 3, 2)
    assert copy_store(pg_dsn, back).memories_sha256 == rep.memories_sha256
    want = _state(src)
    _same(want, _state(pg_dsn))
    _same(want, _state(back))
    with open_store(pg_dsn, embedder="hashing", clock=Clock()) as s:
        for mid in ids["chain"]:
            assert [m.id for m in s.history("s", mid)] == ids["chain"]
        assert s.get("s", ids["gone"]).retracted
        # the copy is a working store: writes fold into copied rows
        assert s.remember("s", "Deploy with make ship!").folded


def test_nonempty_destination_is_refused_unless_told(tmp_path, pg_dsn):
    src, other = str(tmp_path / "src.db"), str(tmp_path / "other.db")
    _fill(src)
    with open_store(other, embedder="hashing") as s:
        s.remember("z", "already here")
    before = _state(other)
    with pytest.raises(MemkitError, match="not empty"):
        copy_store(src, other)
    assert _state(other)["stats"] == before["stats"]
    rep = copy_store(src, other, into_nonempty=True)
    with open_store(other, embedder=None) as s:
        assert s.stats()["rows"] == 1 + rep.memories
    with pytest.raises(MemkitError, match="already in the destination"):  # ids collide
        copy_store(src, other, into_nonempty=True)
    with open_store(other, embedder=None) as s:
        assert s.stats()["rows"] == 1 + rep.memories


def test_another_embedder_is_refused(tmp_path):
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    _fill(src)
    open_store(dst, embedder="hashing-128").close()
    with pytest.raises(EmbedderMismatch):
        copy_store(src, dst)


def test_cli_copy_reports_verified_counts(tmp_path, pg_dsn, capsys):
    src = str(tmp_path / "src.db")
    _fill(src)
    assert main(["store", "copy", "--from", src, "--to", pg_dsn]) == 0
    out = capsys.readouterr().out
    assert "copied 6 memories (2 scopes) and 3 rollouts; verified" in out
    assert main(["store", "copy", "--from", src, "--to", pg_dsn]) == 1
    assert "not empty" in capsys.readouterr().err
