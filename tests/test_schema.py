"""The schema: shipped migrations never change (hash-pinned), the migrated schema
matches its committed snapshot, and each migration commits on its own.

After adding a migration: pin its hash in PINNED and refresh the snapshot with
`MEMKIT_UPDATE_SCHEMA=1 .venv/bin/python -m pytest tests/test_schema.py`.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from memkit.errors import SchemaError
from memkit.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate

SNAPSHOT = Path(__file__).with_name("schema_snapshot.sql")

PINNED = {
    1: "cb44e8b4ca8cde7899f3badea95cc98d0b4895f7deb4f1edd66195754a91c276",
    2: "60be2ddf2bd7005235b899282041d7258e91411cd988b9408752590b60ecb355",
    3: "cf9df6ff3ccfc9925c4bcd05f1fad8626986db7fd8bbf1fa4fd6476a8d012658",
    4: "ffddd6941546e97deec8229b5e6716e6cb1f56b5d1c190f2b81da3c6902e0c38",
    5: "3f987c27eead35f498d1e52c946bcbe247ec05e56009a8ca07b9d8e288348bab",
}
"""sha256 of each shipped migration's DDL text."""


def digest(ddl: str) -> str:
    return hashlib.sha256(ddl.encode("utf-8")).hexdigest()


def test_shipped_migrations_are_never_edited():
    versions = [v for v, _ in MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1)), "append, numbered 1, 2, 3, ..."
    ddl = dict(MIGRATIONS)
    changed = [v for v, h in PINNED.items() if digest(ddl.get(v, "")) != h]
    assert changed == [], f"shipped migrations {changed} were edited: append a new one instead"


def schema_of(conn: sqlite3.Connection) -> str:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name"
    ).fetchall()
    out = [f"-- user_version {conn.execute('PRAGMA user_version').fetchone()[0]}"]
    out += [f"-- {t} {n}\n{' '.join(sql.split())};" for t, n, sql in rows]
    return "\n".join(out) + "\n"


def test_migrated_schema_matches_the_snapshot():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    assert migrate(conn) == SCHEMA_VERSION
    got = schema_of(conn)
    if os.environ.get("MEMKIT_UPDATE_SCHEMA"):
        SNAPSHOT.write_text(got, encoding="utf-8")
    assert got == SNAPSHOT.read_text(encoding="utf-8"), (
        "the schema changed: if on purpose (a new migration), refresh the snapshot "
        "(see this module's docstring)"
    )


def test_each_migration_commits_on_its_own(monkeypatch):
    """A failing migration rolls back alone; the ones before it stay applied."""
    import memkit.store.schema as schema

    broken = (*MIGRATIONS, (SCHEMA_VERSION + 1, "CREATE TABLE ok_then (x); SELECT nope FROM t0"))
    monkeypatch.setattr(schema, "MIGRATIONS", broken)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    conn = sqlite3.connect(":memory:", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        schema.migrate(conn)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'ok_then'").fetchall() == []


def test_a_newer_database_is_refused_by_name():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaError, match="newer than this memkit"):
        migrate(conn)
