"""A scope's live embedded rows as one float32 matrix: vector recall's index on SQLite.

Loaded from the table in chunks (`ScopeVectors.load`), or mapped from a sidecar
file (`ScopeVectors.mapped_from`, `memkit.store.sidecar`); kept true by queued
puts and drops that the next recall applies (`memkit.store.index` owns when).
Leaves out: which rows are live (the caller's patches say) and any ranking
(`memkit.store.rank`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memkit.embed import normalize_rows
from memkit.store.rows import nan

LOAD_CHUNK = 20_000
"""Rows a scope's matrix load reads at a time (`ScopeVectors.load`)."""

POS_BYTES = 100
"""Estimated bytes of one `pos` entry (dict slot, rowid and column ints; `nbytes`,
checked with tracemalloc in tests/test_index_cache.py)."""

QUEUED_BYTES = 250
"""Estimated bytes of one queued write beyond its vector's floats: tuple, numbers,
the vector's array object."""


@dataclass
class ScopeVectors:
    """Live embedded rows of one scope: a growable float32 matrix plus row facts.

    Vectors are stored as columns (`cols` is dim x capacity): scoring all rows
    is then `q @ cols`, a BLAS gemv that streams each dimension's contiguous
    row, measured ~1.5x faster than a dot per stored row at 100k rows. Removal
    swaps the last column into the hole, so every operation is O(dim).
    """

    dim: int
    n: int = 0
    cols: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    rowid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    conf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0))
    recency: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """last_seen, else created_at (NaN when neither): kept, not derived per recall."""
    pos: dict[int, int] = field(default_factory=dict)
    queue: list[tuple[Any, ...]] = field(default_factory=list)
    """Writes not applied yet: (rowid, vec, conf, last_seen, created), or (rowid,)
    for a drop. A write's vector goes into one column of `cols`, 256 cache lines
    apart, which cost `remember` ~10% at 100k rows; `flush` (the next recall)
    applies a run of them in one pass."""
    mapped: bool = False
    """`cols` is a copy-on-write map of a sidecar (`memkit.store.sidecar`), with its
    headroom: `pos` and room in the row arrays wait for the first change."""

    @property
    def nbytes(self) -> int:
        """Estimated memory held (the store's cache bound, `memkit.store.index`): the
        arrays' nbytes (a sidecar's map counts its mapped size, headroom included:
        a recall reads every live page of it), `POS_BYTES` a `pos` entry and the
        queued writes. O(1)."""
        arrays = sum(a.nbytes for a in (self.cols, self.rowid, self.conf, self.last_seen))
        queued = len(self.queue) * (QUEUED_BYTES + 4 * self.dim)
        return arrays + self.recency.nbytes + POS_BYTES * len(self.pos) + queued

    @classmethod
    def mapped_from(cls, fields: dict[str, Any]) -> ScopeVectors:
        """Live rows read from a sidecar (`Sidecars.open`'s fields); `pos` waits for a change."""
        n, dim = fields["n"], fields["dim"]
        cols = fields["cols"]
        names = ("rowid", "conf", "last_seen", "recency")
        return cls(dim=dim, n=n, cols=cols, mapped=True, **{k: fields[k] for k in names})

    def fields(self) -> dict[str, Any]:
        """What a sidecar holds (`Sidecars.write`): the live rows' arrays."""
        names = ("dim", "n", "cols", "rowid", "conf", "last_seen", "recency")
        return {k: getattr(self, k) for k in names}

    def _own(self) -> None:
        """Make a mapped scope changeable: the map's pages are copied as they are
        written (copy-on-write), so only the row facts and `pos` are made here."""
        if not self.mapped:
            return
        self.mapped = False
        self.pos = dict(zip(self.rowid[: self.n].tolist(), range(self.n), strict=True))
        self._resize_facts(self.cols.shape[1])

    def flush(self) -> None:
        """Apply the queued writes in order: the matrix ends exactly as if each
        had been applied when it came (same columns, same order)."""
        queue, self.queue = self.queue, []
        start = 0
        for k, op in enumerate([*queue, None]):
            if op is None or len(op) == 1:  # a drop (or the end) closes a run of puts
                self._put_run(queue[start:k])
                if op is not None:
                    self.drop(op[0])
                start = k + 1

    def _put_run(self, run: list[tuple[Any, ...]]) -> None:
        if not run:
            return
        self._own()
        at: dict[int, tuple[Any, ...]] = {}  # column -> its last write
        for op in run:
            i = self.pos.get(op[0])
            if i is None:
                self.grow(self.n + 1)
                i = self.n
                self.n += 1
                self.pos[op[0]] = i
            at[i] = op
        cols = np.fromiter(at, dtype=np.int64, count=len(at))
        ops = list(at.values())
        vecs = np.zeros((len(ops), self.dim), dtype=np.float32)  # mismatched length: cosine 0
        for j, op in enumerate(ops):
            v = np.asarray(op[1], dtype=np.float32).ravel()
            if v.shape[0] == self.dim:
                vecs[j] = v
        self.cols[:, cols] = vecs.T
        self.rowid[cols] = [op[0] for op in ops]
        self.conf[cols] = [op[2] for op in ops]
        seen = np.array([nan(op[3]) for op in ops])
        made = np.array([nan(op[4]) for op in ops])
        self.last_seen[cols] = seen
        self.recency[cols] = np.where(np.isnan(seen), made, seen)

    def rows(self) -> np.ndarray:
        """The live vectors as an (n, dim) view (no copy)."""
        return self.cols[:, : self.n].T

    def grow(self, need: int) -> None:
        self._own()
        cap = self.cols.shape[1]
        if need <= cap:
            return
        self._realloc(max(need, cap * 2, 64))

    def _realloc(self, cap: int) -> None:
        """Move the rows into new in-memory arrays of `cap` columns."""
        cols = np.zeros((self.dim, cap), dtype=np.float32)
        if self.n:
            cols[:, : self.n] = self.cols[:, : self.n]
        self.cols = cols
        self._resize_facts(cap)

    def _resize_facts(self, cap: int) -> None:
        for name in ("rowid", "conf", "last_seen", "recency"):
            old = getattr(self, name)
            arr = np.zeros(cap, dtype=old.dtype)
            arr[: self.n] = old[: self.n]
            setattr(self, name, arr)

    def put(
        self,
        rowid: int,
        vec: np.ndarray,
        conf: float,
        last_seen: float | None,
        created: float | None,
    ) -> None:
        """Hold one row now (the queue's writes go through `flush`)."""
        self._put_run([(rowid, vec, conf, last_seen, created)])

    def drop(self, rowid: int) -> None:
        self._own()
        i = self.pos.pop(rowid, None)
        if i is None:
            return
        last = self.n - 1
        if i != last:
            moved = int(self.rowid[last])
            self.cols[:, i] = self.cols[:, last]
            for name in ("rowid", "conf", "last_seen", "recency"):
                arr = getattr(self, name)
                arr[i] = arr[last]
            self.pos[moved] = i
        self.n = last

    @classmethod
    def load(cls, conn: Any, scope_id: str, dim: int) -> ScopeVectors:
        """The scope's live embedded rows, in rowid order on either backend (so
        both lay the matrix out alike). `conn` is a `memkit.store.sqlite_db` connection.

        Read in chunks of `LOAD_CHUNK` rows straight into a matrix sized from a
        count first: at 1M rows the whole result set, its joined bytes and a
        normalised copy held at once peaked at 3x the file (issue #36); now
        the matrix (with its quarter of headroom) and one chunk are all."""
        where = (
            "FROM memories WHERE scope_id = ? AND superseded_by IS NULL AND embedding IS NOT NULL"
        )
        (n,) = conn.execute(f"SELECT count(*) {where}", (scope_id,)).fetchone()
        cur = conn.execute(
            f"SELECT rowid, confidence, last_seen_at, created_at, embedding {where} ORDER BY rowid",
            (scope_id,),
        )
        sv = cls(dim=dim)
        while chunk := cur.fetchmany(LOAD_CHUNK):
            if not sv.dim:
                sv.dim = conn.unvec(chunk[0][4]).shape[0]
            if sv.cols.shape[1] == 0:
                sv.grow(n + n // 4)  # headroom: no 2x copy on the next write
            sv._put_chunk(conn, chunk)
        return sv

    def _put_chunk(self, conn: Any, chunk: list[tuple[Any, ...]]) -> None:
        """Append rows in rowid order (a chunk of `load`); vectors of another length
        go one by one (cosine 0, as `put` holds them)."""
        mat = conn.matrix([r[4] for r in chunk], self.dim)
        if mat is None:
            for r in chunk:
                self.put(int(r[0]), normalize_rows(conn.unvec(r[4]).copy())[0], r[1], r[2], r[3])
            return
        self.grow(self.n + len(chunk))
        i, k = self.n, len(chunk)
        rowid, conf, seen, made = zip(*((r[0], r[1], r[2], r[3]) for r in chunk), strict=True)
        unit = normalize_rows(mat.copy())
        for j in range(0, k, 256):  # transposed a tile at a time: 10x+ faster than at once
            tile = unit[j : j + 256]
            self.cols[:, i + j : i + j + len(tile)] = tile.T
        self.rowid[i : i + k] = rowid
        self.conf[i : i + k] = conf
        last_seen = np.array([nan(x) for x in seen])
        self.last_seen[i : i + k] = last_seen
        self.recency[i : i + k] = np.where(np.isnan(last_seen), [nan(x) for x in made], last_seen)
        self.pos.update(zip(map(int, rowid), range(i, i + k), strict=True))
        self.n = i + k
