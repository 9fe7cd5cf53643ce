"""Float32 cosines whose bits depend on the row and the query alone.

BLAS `gemv` (and numpy's `einsum`) sum a row's products in an order that
depends on where the row sits in the matrix and on the CPU's kernel: on an
AMD EPYC's OpenBLAS, a row's float32 cosine in a 5,000-row matrix differs in
its last bits from the same row's in a matrix without the first 4 rows. A
store that ranks a scope's whole matrix (SQLite) and one that ranks the
candidates the database found (Postgres) then disagree on ties and on rows at
the floor, and one store's answer moves when an unrelated row is written.

`row_cosines` fixes the order: for every row, `((x0*q0 + x1*q1) + x2*q2) + ...`,
each product and each sum rounded to float32 on its own (IEEE's basic
operations, the same on every SIMD lane and tail: no fused multiply-add).
It is 3-4x slower than `gemv` on a column matrix, so a store ranks its whole
scope with the fast product (`fast_cosines`) and computes exactly only the
rows that could matter (`memkit.store.rank.near_top`, within `slack` of the
cut). What it leaves out: the vectors' normalisation (`memkit.embed`), done
once when a row is loaded.
"""

from __future__ import annotations

import numpy as np

CHUNK = 65536
"""Rows a pass per dimension keeps in cache (its two float32 buffers: 512 KB)."""
BLOCK = 1024
"""Rows whose products `row_cosines` holds at once when it adds along rows."""


def _query(query: np.ndarray) -> np.ndarray:
    return np.asarray(query, dtype=np.float32).ravel()


def fast_cosines(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """BLAS's cosines of normalised rows (0 for a mismatched length), each within
    `slack(dim)` of `row_cosines`' and not always its bits (module docstring)."""
    q = _query(query)
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    if matrix.ndim != 2 or q.shape[0] != matrix.shape[1]:
        return np.zeros(matrix.shape[0], dtype=np.float32)
    if matrix.shape[0] <= 2048 or not matrix.flags.c_contiguous:
        # Small, or a transposed view of column storage (the store's layout):
        # BLAS gemv streams each dimension's contiguous row, the fast case.
        return np.asarray(matrix @ q, dtype=np.float32)
    # Tall row-major: einsum's SIMD loop beats BLAS gemv on this layout (2-3x
    # at 100k rows on a shared machine) and stays predictable.
    scores: np.ndarray = np.einsum("ij,j->i", matrix, q)
    return scores


def row_cosines(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Each row's float32 cosine in the fixed order of the module docstring: the
    same bits in any matrix, layout or machine; 0 for a mismatched length. Two
    loops give the same bits: a tall column store is read one dimension at a
    time (a pass per dimension, in cache); anything else a block of rows at a
    time (their products, then `add.accumulate` along each row, which adds in
    order: ~0.02 ms for a few rows, where a pass per dimension costs ~0.4 ms)."""
    q = _query(query)
    n = matrix.shape[0]
    if matrix.ndim != 2 or n == 0 or q.shape[0] != matrix.shape[1]:
        return np.zeros(n, dtype=np.float32)
    out = np.empty(n, dtype=np.float32)
    if n <= BLOCK or not matrix.T.flags.c_contiguous:
        for s in range(0, n, BLOCK):
            products = np.multiply(matrix[s : s + BLOCK].astype(np.float32, copy=False), q)
            out[s : s + BLOCK] = np.add.accumulate(products, axis=1)[:, -1]
        return out
    tmp = np.empty(min(CHUNK, n), dtype=np.float32)
    for s in range(0, n, CHUNK):
        cols = matrix.T[:, s : s + CHUNK].astype(np.float32, copy=False)
        acc, t = out[s : s + CHUNK], tmp[: cols.shape[1]]
        np.multiply(cols[0], q[0], out=acc)
        for j in range(1, q.shape[0]):
            np.multiply(cols[j], q[j], out=t)
            np.add(acc, t, out=acc)
    return out


def take_rows(matrix: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """`matrix[positions]`, gathered along the storage's contiguous axis (a column
    store's view stays a column store's view: `row_cosines` reads it in place)."""
    if positions.size == matrix.shape[0] and np.array_equal(positions, np.arange(positions.size)):
        return matrix
    if matrix.T.flags.c_contiguous:
        return np.ascontiguousarray(np.take(matrix.T, positions, axis=1)).T
    return np.asarray(matrix[positions])


def slack(dim: int) -> float:
    """A bound on |fast_cosines - row_cosines| for unit vectors of `dim`: each is
    within gamma_d = d*u / (1 - d*u) (u = 2**-24) of the exact dot product, whose
    terms' absolute sum is at most 1; doubled, with room for the norms' rounding."""
    u = 2.0**-24
    d = max(int(dim), 1)
    gamma = d * u / max(1.0 - d * u, 1e-9)
    return 2.0 * gamma * 1.01 + 1e-6
