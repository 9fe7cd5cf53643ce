"""Postgres recall's pure parts: candidate arrays, search bounds, build settings.

`memkit.store.postgres.PostgresStore` searches vectors in the database and ranks
the candidates it reads with `memkit.store.rank`; what it needs that touches no
connection lives here: how far pgvector's cosines may be from the SQLite
store's (`COSINE_SLACK`), the candidate rows as the arrays `rank` takes, in
the SQLite store's float32 arithmetic (`candidate_arrays`), and the HNSW
build session's settings (`BUILD_SETTINGS`, `build_session`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memkit.embed import normalize_rows
from memkit.errors import ConfigError
from memkit.store import cosine
from memkit.store.rows import nan

COSINE_SLACK = 1e-3
"""How far pgvector's cosine (float sums, then a division by the norms) may be
from the client's (a float32 product of normalised vectors): far above the
float32 rounding of any embedding's dimension, so bounds read with it never
miss a row."""

SCORE_SLACK = 1e-9
"""Relative margin under the limit-th score: a row that could tie it is read."""

PAGE_MIN = 64
"""The first page of nearest rows an exact recall reads (4 x limit when larger)."""


def to_numpy(value: Any) -> np.ndarray:
    """A fetched pgvector value as a float32 array (the adapter gives numpy or Vector)."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


BUILD_SETTINGS: dict[str, str] = {
    "maintenance_work_mem": "1GB",
    "max_parallel_maintenance_workers": "2",
}
"""The HNSW build session's settings (`open(build_settings=...)` overrides them):
the graph is built in memory when it fits `maintenance_work_mem` (the server's
64 MB default spills, many times slower: 622 s against ~41 s at 100k rows),
and pgvector >= 0.6 builds in parallel with maintenance workers (capped by
the server's `max_worker_processes`)."""


def build_session(overrides: Mapping[str, str | int] | None) -> dict[str, str]:
    """`BUILD_SETTINGS` with `overrides` applied (None drops a default); ConfigError
    for a name that is not a setting name or a value that is not a string or int."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(f"build_settings={overrides!r:.80}: want a mapping of setting -> value")
    out = dict(BUILD_SETTINGS)
    for name, value in (overrides or {}).items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z_][a-z0-9_.]*", name):
            raise ConfigError(f"build_settings: {name!r} is not a server setting name")
        if value is None:
            out.pop(name, None)
        elif isinstance(value, bool) or not isinstance(value, str | int):
            raise ConfigError(f"build_settings {name}={value!r}: want a string or an int")
        else:
            out[name] = str(value)
    return out


LIVE = "memories WHERE scope_id = ? AND superseded_by IS NULL AND embedding IS NOT NULL"
"""The vector path's candidates: a scope's live embedded rows."""


def candidate_arrays(
    rows: Sequence[tuple[Any, ...]], q: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`_ranked`'s cosines and arrays from (rowid, confidence, last_seen_at,
    created_at, embedding) rows. Vectors are normalised as the SQLite store loads
    them, and each row's cosine is `memkit.store.cosine.row_cosines`': the bits
    the SQLite store ranks it by, whichever other rows the database returned;
    None or another dimension is a zero row (cosine 0)."""
    dim = q.shape[0]
    cols = np.zeros((dim, len(rows)), dtype=np.float32)
    vecs = {j: to_numpy(r[4]) for j, r in enumerate(rows) if r[4] is not None}
    ok = [j for j, v in vecs.items() if v.shape == (dim,)]
    if ok:  # one normalisation of the stacked rows: each row's bits as alone (tested)
        cols[:, ok] = normalize_rows(np.stack([vecs[j] for j in ok])).T
    return (cosine.row_cosines(q, cols.T), *row_arrays(rows))


def row_arrays(
    rows: Sequence[tuple[Any, ...]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """rowid, confidence, last_seen_at and the recency timestamp (last_seen_at, else
    created_at) of (rowid, confidence, last_seen_at, created_at, ...) rows."""
    rowid = np.array([r[0] for r in rows], dtype=np.int64)
    conf = np.array([r[1] for r in rows], dtype=np.float64)
    last_seen = np.array([nan(r[2]) for r in rows])
    made = np.array([nan(r[3]) for r in rows])
    return rowid, conf, last_seen, np.where(np.isnan(last_seen), made, last_seen)
