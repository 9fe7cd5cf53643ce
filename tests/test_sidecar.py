"""The vector sidecar (issue #36): a big scope's matrix left beside the SQLite file
after a full load and mapped by later opens. It is used only when it is the
database's (else refused loudly and the table answers), rows written since
are applied, and every answer is the one a store without it gives, bit for bit."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from memkit.errors import ConfigError
from memkit.params import RecallParams
from memkit.store.index import SYNC_MAX
from memkit.store.sidecar import (
    HEADER,
    MAGIC,
    SidecarWriteFailed,
    file_size,
    headroom,
    sidecar_path,
)
from memkit.store.sqlite import SQLiteStore

DIM = 32
N = 3000
MIN = 1000
ALL = RecallParams(floor=-1.0)
"""Every live row clears the floor: whole rankings are compared."""
NOW = 1.8e9


def clock() -> float:
    """A fixed clock: scores (recency decay) compare across opens."""
    return NOW


class Emb:
    """A fixed-table embedder (its name sets the fingerprint the store records)."""

    dim = DIM

    def __init__(self, name: str = "side-test"):
        self.name = name

    def embed(self, texts):
        return np.stack(
            [
                np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:8], 16))
                .standard_normal(DIM)
                .astype(np.float32)
                for t in texts
            ]
        )


def _build(path: Path, n: int = N, seed: int = 0, emb: Emb | None = None, **kw) -> None:
    """A store of `n` rows in scope "s", closed."""
    rng = np.random.default_rng(seed)
    with SQLiteStore.open(str(path), embedder=emb or Emb(), clock=clock, **kw) as s:
        s.bulk_load("s", [f"row {seed} {i}" for i in range(n)], rng.standard_normal((n, DIM)))


def _queries(k: int = 5) -> np.ndarray:
    return np.random.default_rng(99).standard_normal((k, DIM)).astype(np.float32)


def _answers(path: Path, **kw) -> tuple[list, dict]:
    """Every query's whole ranking (id, score, cosine) and the sidecar counts."""
    with SQLiteStore.open(str(path), embedder=None, clock=clock, **kw) as s:
        got = [
            [(h.id, h.score, h.cosine) for h in s.recall("s", "q", 0, ALL, query_embedding=q)]
            for q in _queries()
        ]
        return got, s.sidecar_counts


def _side(path: Path) -> Path:
    return Path(sidecar_path(str(path), "s"))


def _write_sidecar(path: Path) -> None:
    """A writable open's first recall loads the table and leaves the sidecar."""
    assert _answers(path, vector_sidecar=MIN)[1] == {"written": 1}
    assert _side(path).is_file()


def test_a_mapped_scope_answers_bit_identically_to_the_table(tmp_path):
    db = tmp_path / "m.db"
    _build(db)
    want, counts = _answers(db, vector_sidecar=None)
    assert counts == {} and not _side(db).exists()
    _write_sidecar(db)
    got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert counts == {"used": 1, "delta_rows": 0}
    assert got == want and len(got[0]) == N


def test_the_row_bound_writes_a_sidecar_at_min_rows_and_not_one_below(tmp_path):
    at, below = tmp_path / "at.db", tmp_path / "below.db"
    _build(at, n=MIN)
    _build(below, n=MIN - 1)
    _write_sidecar(at)
    assert _answers(below, vector_sidecar=MIN)[1] == {}
    assert not _side(below).exists()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_vector_sidecar_must_be_a_positive_int(tmp_path, bad):
    with pytest.raises(ConfigError, match="vector_sidecar"):
        SQLiteStore.open(str(tmp_path / "x.db"), vector_sidecar=bad)


def test_memory_and_read_only_opens_write_no_sidecar(tmp_path):
    with SQLiteStore.open(":memory:", embedder=Emb(), vector_sidecar=1) as s:
        s.bulk_load("s", ["a b c", "d e f"], np.ones((2, DIM)))
        assert s.recall("s", "q", 2, ALL, query_embedding=np.ones(DIM))
        assert s.sidecar_counts == {}
    db = tmp_path / "ro.db"
    _build(db)
    assert _answers(db, read_only=True, vector_sidecar=MIN)[1] == {}
    assert not _side(db).exists()


def test_rows_written_after_the_sidecar_are_included_and_retired_rows_excluded(tmp_path):
    db = tmp_path / "d.db"
    _build(db)
    _write_sidecar(db)
    before = _side(db).read_bytes()
    q = _queries()[0]
    with SQLiteStore.open(str(db), embedder=Emb(), clock=clock, vector_sidecar=MIN) as s:
        top = s.recall("s", "q", 1, ALL, query_embedding=q)[0]
        s.retract("s", top.id)
        new = s.remember("s", "a brand new memory after the sidecar").id
        # this writer mapped the sidecar, then its own writes copied the map into memory
        assert s.recall("s", "q", 1, ALL, query_embedding=q)[0].id != top.id
        assert s.sidecar_counts == {"used": 1, "delta_rows": 0}
    assert _side(db).read_bytes() == before  # a map is never written through
    got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert counts == {"used": 1, "delta_rows": 2}
    ids = {h[0] for h in got[0]}
    assert new in ids and top.id not in ids and len(ids) == N
    assert got == _answers(db, vector_sidecar=None)[0]


def test_a_delta_of_sync_max_rows_is_applied_and_one_more_reloads(tmp_path):
    db = tmp_path / "big.db"
    _build(db)
    _write_sidecar(db)
    with SQLiteStore.open(str(db), embedder=Emb(), clock=clock, vector_sidecar=MIN) as s:
        s.bulk_load("s", [f"more {i}" for i in range(SYNC_MAX)], np.ones((SYNC_MAX, DIM)))
    got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert counts == {"used": 1, "delta_rows": SYNC_MAX} and len(got[0]) == N + SYNC_MAX
    assert got == _answers(db, vector_sidecar=None)[0]
    with SQLiteStore.open(str(db), embedder=Emb(), clock=clock, vector_sidecar=MIN) as s:
        s.bulk_load("s", ["one more row"], np.ones((1, DIM)))
    assert _answers(db, vector_sidecar=MIN)[1] == {"written": 1}  # reloaded, left anew
    got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert counts == {"used": 1, "delta_rows": 0} and len(got[0]) == N + SYNC_MAX + 1


def _refused(db: Path, caplog, reason: str) -> None:
    """A read-only open refuses the sidecar loudly and answers as the table does."""
    want = _answers(db, vector_sidecar=None)[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memkit.store.sidecar"):
        got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert got == want
    assert counts == {"rejected": 1}
    assert reason in caplog.text and "not used" in caplog.text


def test_a_truncated_sidecar_is_refused_and_replaced_by_a_writable_open(tmp_path, caplog):
    db = tmp_path / "t.db"
    _build(db)
    _write_sidecar(db)
    good = _side(db).read_bytes()
    _side(db).write_bytes(good[:-8])  # one float64 short
    _refused(db, caplog, "truncated")
    _side(db).write_bytes(good[: HEADER - 1])
    _refused(db, caplog, "truncated header")
    _side(db).write_bytes(good + b"\0" * 8)  # one past the size
    _refused(db, caplog, "its header says")
    _answers(db, vector_sidecar=MIN)
    assert _side(db).read_bytes() == good


def test_a_corrupt_sidecar_is_refused(tmp_path, caplog):
    db = tmp_path / "c.db"
    _build(db)
    _write_sidecar(db)
    good = bytearray(_side(db).read_bytes())
    bad = bytearray(good)
    bad[20:30] = b"not json!!"
    _side(db).write_bytes(bytes(bad))
    _refused(db, caplog, "unreadable header")
    _side(db).write_bytes(MAGIC + b'{"n": -1}'.ljust(len(good) - len(MAGIC)))
    _refused(db, caplog, "unreadable header")
    bad = bytearray(good)
    bad[HEADER : HEADER + 4 * DIM * N] = bytes(4 * DIM * N)  # every vector zeroed
    _side(db).write_bytes(bytes(bad))
    _refused(db, caplog, "differs from the database")
    rowids = HEADER + 4 * DIM * headroom(N)
    bad = bytearray(good)
    bad[rowids : rowids + 16] = bad[rowids + 8 : rowids + 16] + bad[rowids : rowids + 8]
    _side(db).write_bytes(bytes(bad))
    _refused(db, caplog, "rowids do not rise")


def test_another_embedders_or_another_databases_sidecar_is_refused(tmp_path, caplog):
    a, other_emb, other_db = tmp_path / "a.db", tmp_path / "e.db", tmp_path / "o.db"
    _build(a)
    _write_sidecar(a)
    _build(other_emb, emb=Emb("another-embedder"))
    _build(other_db, seed=1)
    for db in (other_emb, other_db):
        _side(db).write_bytes(_side(a).read_bytes())
    _refused(other_emb, caplog, "fingerprint")
    _refused(other_db, caplog, "differs from the database")


def test_a_sidecar_newer_than_the_database_is_refused(tmp_path, caplog):
    newer, older = tmp_path / "n.db", tmp_path / "o.db"
    _build(newer)
    with SQLiteStore.open(str(newer), embedder=Emb(), clock=clock) as s:
        s.remember("s", "one more change")
    _write_sidecar(newer)
    _build(older)  # the same rows, one change behind: a restored copy
    _side(older).write_bytes(_side(newer).read_bytes())
    _refused(older, caplog, "past the database's last")


def test_a_failed_write_is_counted_and_logged_not_raised(tmp_path, caplog):
    db = tmp_path / "f.db"
    _build(db)
    _side(db).mkdir()  # the rename onto it fails, as a full disk would fail the write
    want = _answers(db, vector_sidecar=None)[0]
    with caplog.at_level(logging.WARNING, logger="memkit.store.sidecar"):
        got, counts = _answers(db, vector_sidecar=MIN)
    assert got == want
    assert counts == {"rejected": 1, "write_failed": 1}
    assert "not written" in caplog.text
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    assert _side(db).is_dir() and os.listdir(_side(db)) == []


def test_a_scope_shrunk_under_the_bound_loses_its_sidecar(tmp_path):
    db = tmp_path / "shrunk.db"
    _build(db, n=MIN)
    _write_sidecar(db)
    with SQLiteStore.open(str(db), embedder=Emb(), clock=clock, vector_sidecar=MIN) as s:
        top = s.recall("s", "q", 1, ALL, query_embedding=_queries()[0])[0]
        s.retract("s", top.id)
    assert _answers(db, read_only=True, vector_sidecar=MIN)[1] == {"used": 1, "delta_rows": 1}
    assert _side(db).is_file()  # a read-only open leaves it
    # more than SYNC_MAX changes since: a full load, now of MIN - 1 rows
    with SQLiteStore.open(str(db), embedder=Emb(), clock=clock, vector_sidecar=MIN) as s:
        s.bulk_load("other", [f"o {i}" for i in range(SYNC_MAX + 1)], np.ones((SYNC_MAX + 1, DIM)))
    got, counts = _answers(db, vector_sidecar=MIN)
    assert counts == {"removed": 1} and len(got[0]) == MIN - 1
    assert not _side(db).exists()


# --- on demand: `SQLiteStore.write_sidecar`, `memkit store sidecar` -----------------------


def test_a_sidecar_written_on_demand_replaces_a_corrupt_one_and_is_mapped(tmp_path):
    db = tmp_path / "demand.db"
    _build(db)
    want = _answers(db, vector_sidecar=None)[0]
    _side(db).write_bytes(b"not a sidecar")
    with SQLiteStore.open(str(db), embedder=None, clock=clock, vector_sidecar=MIN) as s:
        rep = s.write_sidecar("s")
        assert s.sidecar_counts == {"written": 1}  # from the table: the old file is not read
    assert rep["scope"] == "s" and rep["path"] == str(_side(db)) and rep["rows"] == N
    assert rep["bytes"] == file_size(DIM, N) == _side(db).stat().st_size
    got, counts = _answers(db, read_only=True, vector_sidecar=MIN)
    assert counts == {"used": 1, "delta_rows": 0} and got == want


def test_on_demand_the_row_bound_writes_at_min_rows_and_refuses_one_below(tmp_path):
    db = tmp_path / "bound.db"
    _build(db, n=MIN)
    with SQLiteStore.open(str(db), embedder=None, vector_sidecar=MIN) as s:
        assert s.write_sidecar("s")["rows"] == MIN
    kept = _side(db).read_bytes()
    with (
        SQLiteStore.open(str(db), embedder=None, vector_sidecar=MIN + 1) as s,
        pytest.raises(ConfigError, match=f"{MIN} live embedded rows, under the bound of"),
    ):
        s.write_sidecar("s")
    assert _side(db).read_bytes() == kept  # a refusal keeps the file there


def test_on_demand_an_open_without_sidecars_or_an_unknown_scope_is_a_config_error(tmp_path):
    db = tmp_path / "none.db"
    _build(db, n=10)
    for opts, match in (
        ({"vector_sidecar": None}, "keeps no vector sidecars"),
        ({"read_only": True, "vector_sidecar": 1}, "read-only"),
    ):
        with (
            SQLiteStore.open(str(db), embedder=None, **opts) as s,
            pytest.raises(ConfigError, match=match),
        ):
            s.write_sidecar("s")
    with (
        SQLiteStore.open(":memory:", embedder=None) as s,
        pytest.raises(ConfigError, match="keeps no vector sidecars"),
    ):
        s.write_sidecar("s")
    with (
        SQLiteStore.open(str(db), embedder=None, vector_sidecar=1) as s,
        pytest.raises(ConfigError, match="'t' is not in"),
    ):
        s.write_sidecar("t")
    assert not _side(db).exists()


def test_on_demand_a_failed_write_raises_and_leaves_no_temporary_file(tmp_path):
    db = tmp_path / "fail.db"
    _build(db, n=10)
    _side(db).mkdir()  # the rename onto it fails, as a full disk would fail the write
    with (
        SQLiteStore.open(str(db), embedder=None, vector_sidecar=1) as s,
        pytest.raises(SidecarWriteFailed, match="not written"),
    ):
        s.write_sidecar("s")
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_memkit_store_sidecar_writes_the_file_and_refuses_bad_input_loudly(tmp_path, capsys):
    from memkit.cli import main

    db = tmp_path / "cli.db"
    _build(db, n=MIN)
    assert main(["store", "sidecar", "--db", str(db), "--scope", "s", "--min-rows", "1"]) == 0
    assert f"{MIN:,} rows of scope s" in capsys.readouterr().out
    assert _side(db).stat().st_size == file_size(DIM, MIN)
    args = ["store", "sidecar", "--db", str(db), "--scope", "s", "--json"]
    assert main([*args, "--min-rows", str(MIN)]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == MIN
    for bad, err in (
        ([*args, "--min-rows", str(MIN + 1)], "under the bound"),
        ([*args, "--min-rows", "0"], "vector_sidecar"),
        (["store", "sidecar", "--db", str(db), "--scope", "t"], "'t' is not in"),
        (["store", "sidecar", "--db", str(tmp_path / "no.db"), "--scope", "s"], "no.db"),
        (["store", "sidecar", "--db", "postgresql://x/y", "--scope", "s"], "SQLite's"),
    ):
        assert main(bad) == 2
        assert err in capsys.readouterr().err
    assert not (tmp_path / "no.db").exists()
