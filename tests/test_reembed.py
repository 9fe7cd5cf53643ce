"""A store knows its embedder (name, dimension, fingerprint), refuses another one
naming both, and `reembed` moves it in place: atomic per batch, resumable after
a SIGKILL, verified by a count (both backends)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

from memkit.embed import HashingEmbedder, embedder_meta, fingerprint_of
from memkit.errors import ConfigError, EmbedderMismatch
from memkit.store import open_store

REPO = Path(__file__).resolve().parents[1]
N = 120


def _memkit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", "import sys; from memkit.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _fill(url: str, embedder: str = "hashing-64", n: int = N) -> list[str]:
    """n memories that never fold into each other, in two scopes; their contents."""
    contents = [f"note {i}: {uuid.uuid4().hex} {uuid.uuid4().hex}" for i in range(n)]
    with open_store(url, embedder=embedder) as s:
        s.remember_many("a", contents[: n // 2])
        s.remember_many("b", contents[n // 2 :])
        rid = s.live("a")[0].id
        s.update("a", rid, "an updated note that keeps its history")  # a retired row too
    return contents


def _rows(url: str) -> dict[str, tuple[str, bytes | None]]:
    """id -> (content, embedding) of every row, any state, read keyword-only."""
    with open_store(url, embedder=None, read_only=True) as s:
        out = {}
        for scope in s.scopes():
            for m in s.live(scope):
                for h in s.history(scope, m.id):
                    out[h.id] = h.content
        return out


class Named(HashingEmbedder):
    """hashing-64 by name and dimension, other weights (another fingerprint)."""

    def __init__(self):
        super().__init__(64)
        self.fingerprint = "0123456789abcdef"


def test_store_records_name_dim_fingerprint(make_store):
    s = make_store(embedder="hashing-64")
    st = s.stats()
    assert (st["embedder"], st["embedder_dim"]) == ("hashing-64", 64)
    assert st["embedder_fingerprint"] == fingerprint_of(HashingEmbedder(64))
    assert st["reembed_to"] is None


@pytest.mark.parametrize(
    "other, names",
    [
        ("hashing-32", ["'hashing-64' (dim 64", "'hashing-32' (dim 32"]),
        (Named(), ["fingerprint " + fingerprint_of(HashingEmbedder(64)), "0123456789abcdef"]),
    ],
)
def test_another_embedder_is_refused_naming_both(store_url, other, names):
    _fill(store_url, n=4)
    before = _rows(store_url)
    with pytest.raises(EmbedderMismatch) as err:
        open_store(store_url, embedder=other)
    assert isinstance(err.value, ConfigError)
    for name in names:
        assert name in str(err.value)
    assert "memkit store reembed" in str(err.value)
    with pytest.raises(EmbedderMismatch):
        open_store(store_url, embedder=other, read_only=True)
    assert _rows(store_url) == before
    open_store(store_url, embedder="hashing-64").close()  # its own still opens


def test_old_store_without_fingerprint_adopts_the_openers(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.db")
    _fill(path, n=4)
    with sqlite3.connect(path) as c:  # as memkit wrote it before fingerprints
        c.execute("DELETE FROM meta WHERE key = 'embedder_fingerprint'")
    with open_store(path, embedder=None, read_only=True) as s:
        assert s.stats()["embedder_fingerprint"] is None
    with pytest.raises(EmbedderMismatch):  # name and dim still decide
        open_store(path, embedder="hashing-32")
    open_store(path, embedder="hashing-64").close()
    with open_store(path, embedder=None) as s:
        assert s.stats()["embedder_fingerprint"] == fingerprint_of(HashingEmbedder(64))
    with pytest.raises(EmbedderMismatch):  # now recorded: another fingerprint is refused
        open_store(path, embedder=Named())


def test_reembed_moves_every_row_and_verifies(store_url):
    contents = _fill(store_url)
    before = _rows(store_url)
    with open_store(store_url, embedder=None) as s:
        seen = []
        rep = s.reembed("hashing-32", batch=50, progress=lambda d, t: seen.append((d, t)))
        assert rep.embedder == "hashing-32" and rep.previous == "hashing-64"
        assert rep.rows == rep.embedded_now == N + 1 and not rep.resumed  # +1: the retired row
        assert rep.batches == 3 and seen == [(50, N + 1), (100, N + 1), (N + 1, N + 1)]
        # the store object now uses it
        assert s.recall("a", contents[3])[0].content == contents[3]
    assert _rows(store_url) == before
    with open_store(store_url, embedder="hashing-32") as s:
        st = s.stats()
        assert (st["embedder"], st["embedder_dim"], st["embedded"]) == ("hashing-32", 32, N)
        hit = s.recall("b", contents[-1])[0]
        assert hit.path == "vector" and hit.content == contents[-1]
        assert hit.cosine == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(EmbedderMismatch):
        open_store(store_url, embedder="hashing-64")
    with open_store(store_url, embedder=None) as s:  # again: nothing to do
        rep = s.reembed("hashing-32")
        assert (rep.embedded_now, rep.batches, rep.rows) == (0, 0, N + 1)


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_reembed_batch_is_checked(make_store, batch):
    s = make_store(embedder="hashing-64")
    with pytest.raises(ConfigError, match="batch"):
        s.reembed("hashing-32", batch=batch)
    assert s.stats()["reembed_to"] is None


def test_reembed_batch_of_one(make_store):
    s = make_store(embedder="hashing-64")
    s.remember_many("a", ["first note about tea", "second note about trains"])
    rep = s.reembed("hashing-32", batch=1)
    assert (rep.rows, rep.batches) == (2, 2)


SLOW_REEMBED = textwrap.dedent(
    """
    import sys, time
    from memkit.embed import HashingEmbedder
    from memkit.store import open_store

    class Slow(HashingEmbedder):  # hashing-32 itself, slowly: a kill lands mid-move
        def embed(self, texts):
            time.sleep(0.05)
            return super().embed(texts)

    with open_store(sys.argv[1], embedder=None) as s:
        s.reembed(Slow(32), batch=10, progress=lambda d, t: print(d, t, flush=True))
    """
)


def test_sigkill_during_reembed_loses_nothing_and_a_rerun_finishes(store_url):
    contents = _fill(store_url)
    before = _rows(store_url)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_REEMBED, store_url],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    first = proc.stdout.readline().split()  # one batch committed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert first == ["10", str(N + 1)]
    # mid-move: both embedders are refused, naming both; the rows are all there
    for emb in ("hashing-64", "hashing-32"):
        with pytest.raises(EmbedderMismatch, match=r"hashing-64.*hashing-32.*unfinished"):
            open_store(store_url, embedder=emb)
    out = _memkit("store", "recall", "--db", store_url, "--scope", "a", "note")
    assert out.returncode == 2 and "unfinished" in out.stderr
    out = _memkit("store", "reembed", "--db", store_url, "--embedder", "wordllama")
    assert out.returncode == 2 and "finish it with --embedder hashing-32" in out.stderr
    assert _rows(store_url) == before
    # the rerun goes on from the cursor and verifies the count
    out = _memkit("store", "reembed", "--db", store_url, "--embedder", "hashing-32", "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["resumed"] and rep["rows"] == N + 1 and 0 < rep["embedded_now"] < N + 1
    assert f"reembed: {N + 1}/{N + 1} memories" in out.stderr
    assert _rows(store_url) == before
    ref = HashingEmbedder(32)
    with open_store(store_url, embedder="hashing-32") as s:
        for scope, text in (("a", contents[0]), ("b", contents[-1])):
            hit = s.recall(scope, text)[0]
            assert hit.content == text and hit.cosine == pytest.approx(1.0, abs=1e-6)
        q = ref.embed([contents[5]])[0]
        hits = s.recall("a", "x", query_embedding=q)
        assert hits[0].content == contents[5]
        assert np.isclose(hits[0].cosine, 1.0, atol=1e-6)
    assert embedder_meta(ref)["embedder_fingerprint"] == fingerprint_of(ref)
