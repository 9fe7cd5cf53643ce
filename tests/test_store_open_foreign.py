"""`SQLiteStore.open` refuses a file memkit did not make, as the CLI does (issue #33 item 6).

Was: opening another application's SQLite file read-write added memkit's tables to it
(its sha256 changed), and bytes that are not SQLite raised a raw sqlite3.DatabaseError.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from memkit import ConfigError, SQLiteStore
from memkit.cli import main
from memkit.store import open_store


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _app_db(path: Path, *, tables: int = 1, user_version: int = 0) -> Path:
    c = sqlite3.connect(path)
    for i in range(tables):
        c.execute(f"CREATE TABLE app_{i} (x)")
        c.execute(f"INSERT INTO app_{i} VALUES ('precious')")
    c.execute(f"PRAGMA user_version = {user_version}")
    c.commit()
    c.close()
    return path


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: _app_db(p), "holds other tables: app_0"),
        (lambda p: _app_db(p, tables=7), "app_0, app_1, app_2, app_3, app_4, ..."),
        (lambda p: _app_db(p, user_version=3), "holds other tables"),  # a version is no proof
        (lambda p: _app_db(p, tables=0, user_version=2), "no memkit tables"),
        (lambda p: p.write_text("not a database " * 100) and p, "file is not a database"),
    ],
)
def test_open_refuses_a_foreign_file_and_leaves_it_unchanged(tmp_path, make, says):
    path = tmp_path / "other.db"
    make(path)
    before = _sha(path)
    for opener in (
        lambda: SQLiteStore.open(str(path), embedder=None),
        lambda: open_store(str(path), embedder=None),
        lambda: SQLiteStore.open(str(path), embedder=None, read_only=True),
    ):
        with pytest.raises(ConfigError, match="is not a memkit store") as e:
            opener()
        assert says in str(e.value) and str(path) in str(e.value)
    assert _sha(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, no -shm


def test_the_cli_refuses_the_same_file(tmp_path, capsys):
    path = _app_db(tmp_path / "other.db")
    before = _sha(path)
    assert main(["store", "stats", "--db", str(path)]) == 2
    assert "is not a memkit store" in capsys.readouterr().err
    assert _sha(path) == before


@pytest.mark.parametrize("make", [lambda p: p.write_bytes(b""), lambda p: _app_db(p, tables=0)])
def test_an_empty_file_becomes_a_store(tmp_path, make):
    """The other side of the rule: a file holding no tables (0 bytes, or an empty SQLite
    database) is memkit's to create a store in, and reopens as one."""
    path = tmp_path / "new.db"
    make(path)
    with SQLiteStore.open(str(path), embedder=None) as s:
        s.remember("a", "we deploy on Fridays")
    with SQLiteStore.open(str(path), embedder=None) as s:
        assert [m.content for m in s.live("a")] == ["we deploy on Fridays"]
    with SQLiteStore.open(str(path), embedder=None, read_only=True) as s:
        assert s.scopes() == ["a"]
