"""`memkit store stats|recall|history` over a real store file."""

from __future__ import annotations

import json

import pytest

from memkit.cli import main
from memkit.store import SQLiteStore


@pytest.fixture
def db(tmp_path):
    path = str(tmp_path / "m.db")
    with SQLiteStore.open(path, embedder="hashing") as s:
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
    assert main(["store", "history", "--db", path, "--scope", "other", a]) == 1
    assert "not found in scope 'other'" in capsys.readouterr().err
    assert main(["store", "stats", "--db", str(tmp_path / "missing.db")]) == 1
    assert "no store" in capsys.readouterr().err
