"""`memkit eval run --store postgresql://...`: the same evaluation on Postgres gives a
byte-identical metrics.json (store and pipeline modes), leaves no scratch schema
behind, and keeps a password out of every run file."""

from __future__ import annotations

import json

import psycopg
import pytest
from test_eval_data import write_tiny_dataset

from evals.datasets import load_dataset
from evals.replay import CachingEmbedder
from evals.runner import RunConfig, run_eval
from memkit.embed import get_embedder
from memkit.errors import ConfigError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = write_tiny_dataset(tmp_path_factory.mktemp("d") / "tiny")
    return root, load_dataset(root)


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'memkit_scratch%'")
        return {r[0] for r in rows}


def test_metrics_on_postgres_are_byte_identical_to_sqlite(
    tiny, pg_server_dsn, tmp_path, monkeypatch
):
    from memkit.store import PostgresStore

    root, ds = tiny
    opened = []
    real = PostgresStore.scratch.__func__
    monkeypatch.setattr(
        PostgresStore,
        "scratch",
        classmethod(lambda c, *a, **k: opened.append(1) or real(c, *a, **k)),
    )
    emb = CachingEmbedder(get_embedder("wordllama"))
    before = _schemas(pg_server_dsn)
    runs = {}
    for name, store in (("sqlite", None), ("postgres", pg_server_dsn)):
        cfg = RunConfig(
            dataset=str(root), consolidators=("heuristic", "oracle"), resamples=200, store=store
        )
        out = tmp_path / name
        run_eval(cfg, out, quiet=True, dataset=ds, embedder=emb, report=False)
        runs[name] = out
    got = (runs["postgres"] / "metrics.json").read_bytes()
    assert got == (runs["sqlite"] / "metrics.json").read_bytes()
    assert b'"system":"store"' in got.replace(b" ", b"") and b"pipeline:oracle" in got
    assert len(opened) == 3 * len(ds.scopes)  # store mode and two pipelines, each scope
    assert _schemas(pg_server_dsn) == before  # every scope's scratch schema was dropped
    manifest = json.loads((runs["postgres"] / "manifest.json").read_text())
    assert manifest["config"]["store"].startswith(("postgresql://", "user=", "host="))


def test_a_store_password_never_reaches_a_run_file_and_a_bad_url_is_refused(tmp_path):
    cfg = RunConfig(dataset="x", store="postgresql://me:hunter22@db.example/mem")
    assert "hunter22" not in str(cfg.to_dict())
    with pytest.raises(ConfigError, match="postgresql://"):
        RunConfig(dataset="x", store="mysql://me@db/mem")
