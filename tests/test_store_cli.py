"""`memkit store stats|recall|history` over a real store file."""

from __future__ import annotations

import json

import pytest

from memkit.cli import main
from memkit.store import open_store


@pytest.fixture
def db(store_url):
    """A small store on each backend (a SQLite file or a postgresql:// DSN)."""
    path = store_url
    with open_store(path, embedder="hashing") as s:
        a = s.remember("s", "The deploy script is ops/deploy.sh", tags=["ops"]).id
        b = s.update("s", a, "Deploy with make deploy")
        s.remember("s", "Prefers tea over coffee", kind="preference")
    return path, a, b


def test_stats(db, capsys):
    path, _, _ = db
    assert main(["store", "stats", "--db", path, "--scope", "s", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["rows"], st["live"], st["superseded"], st["embedder"]) == (3, 2, 1, "hashing-256")


def test_recall_uses_recorded_embedder(db, capsys):
    path, _, b = db
    assert main(["store", "recall", "--db", path, "--scope", "s", "--json", "make deploy"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["memory"]["id"] == b and hits[0]["path"] == "vector"
    assert main(["store", "recall", "--db", path, "--scope", "s", "deploy"]) == 0
    assert b in capsys.readouterr().out


def test_history(db, capsys):
    path, a, b = db
    assert main(["store", "history", "--db", path, "--scope", "s", "--json", b]) == 0
    assert [m["id"] for m in json.loads(capsys.readouterr().out)] == [a, b]


def test_errors_are_one_line(db, capsys, tmp_path):
    path, a, _ = db
    # a scope the store does not hold is a usage error listing the scopes it does
    assert main(["store", "history", "--db", path, "--scope", "other", a]) == 2
    assert "scope 'other' is not in" in capsys.readouterr().err
    assert main(["store", "history", "--db", path, "--scope", "s", "nope"]) == 1
    assert "not found in scope 's'" in capsys.readouterr().err
    assert main(["store", "stats", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no store" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()


def test_unknown_scope_is_refused_with_a_close_match(db, capsys):
    """Was: `store recall --scope gamma` printed "(nothing recalled)" and exited 0."""
    path, _, _ = db
    with open_store(path, embedder="hashing") as s:
        s.remember("alpha", "x")
    assert main(["store", "recall", "--db", path, "--scope", "alpah", "deploy"]) == 2
    err = capsys.readouterr().err
    assert "did you mean alpha?" in err and "scopes: alpha, s" in err


def _snapshot(path):
    """The store as bytes on disk (SQLite: every file of it; Postgres: every row)."""
    from pathlib import Path

    if str(path).startswith("postgresql://"):
        from test_store_helpers import dump

        return dump(path)

    p = Path(path)
    return {q.name: q.read_bytes() for q in p.parent.iterdir() if q.name.startswith(p.name)}


@pytest.mark.parametrize("kind", ["foreign", "empty", "random"])
@pytest.mark.parametrize("sub", ["stats", "recall", "history"])
def test_non_stores_are_refused_untouched(tmp_path, capsys, kind, sub):
    """Was: `store stats` grew a foreign SQLite file 8 KB -> 57 KB with memkit's tables,
    made a 0-byte file a store, and gave random bytes a raw sqlite3 traceback."""
    import sqlite3

    path = tmp_path / "x.db"
    if kind == "foreign":
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (a)")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        conn.close()
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(bytes(range(256)) * 40)
    before = _snapshot(path)
    extra = {"stats": [], "recall": ["--scope", "s", "q"], "history": ["--scope", "s", "id"]}
    assert main(["store", sub, "--db", str(path), *extra[sub]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a memkit store" in err and "Traceback" not in err
    assert _snapshot(path) == before


def test_inspecting_a_store_never_writes_it(db, capsys):
    path, _, b = db
    before = _snapshot(path)
    assert main(["store", "stats", "--db", path]) == 0
    assert main(["store", "recall", "--db", path, "--scope", "s", "deploy"]) == 0
    assert main(["store", "history", "--db", path, "--scope", "s", b]) == 0
    assert _snapshot(path) == before


def test_stats_lists_scopes_by_name_with_counts_per_kind(db, capsys):
    path, _, _ = db
    with open_store(path, embedder="hashing") as s:
        s.remember("beta", "Uses vim", kind="preference")
        s.remember("beta", "Run tests with make test", kind="procedure")
    capsys.readouterr()
    assert main(["store", "stats", "--db", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[1].split()
    assert head == [
        "scope",
        "live",
        "fact",
        "preference",
        "procedure",
        "learning",
        "outcome",
        "superseded",
        "retracted",
    ]
    rows = {ln.split()[0]: [int(x) for x in ln.split()[1:]] for ln in lines[2:]}
    assert rows == {"beta": [2, 0, 1, 1, 0, 0, 0, 0], "s": [2, 1, 1, 0, 0, 0, 1, 0]}
    assert main(["store", "stats", "--db", path, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["per_scope"]["beta"]["by_kind"]["procedure"] == 1


def test_recall_says_why_the_keyword_path_answered(db, capsys):
    path, _, _ = db
    assert main(["store", "recall", "--db", path, "--scope", "s", "--floor", "0.99", "tea"]) == 0
    assert "keyword path: below_floor" in capsys.readouterr().out


def test_store_help_at_every_level(capsys):
    assert main(["store", "--help"]) == 0
    assert "stats" in capsys.readouterr().out
    for sub in ("stats", "recall", "history"):
        assert main(["store", sub, "--help"]) == 0
        assert "--db" in capsys.readouterr().out
    assert main(["store"]) == 2
    assert main(["store", "stat"]) == 2
