"""A big scope's vectors in a file beside the SQLite database, mapped on open (issue #36).

A fresh process answering its first vector recall loads the scope's matrix
from SQLite: at 1M rows that is a million rows handed over one by one (~6 s).
After such a full load, a writable store leaves the matrix beside the file
(`<db>.vectors-<scope digest>`): a header, the normalised vectors as stored
in memory (dim x n float32, columns in rowid order, each dimension's row
followed by a quarter of headroom left as a hole in the file), then the rowids,
confidences, last-seen times and recencies. The next process maps it and
reads pages, not rows; the answers are the ones a full load gives, bit for bit.

A sidecar is used only when it is provably the database's, as of a change number:

* its header names the scope, the embedder's fingerprint and dimension the
  database records (`meta`), no reembed in progress, and a change number
  (`seq`) not above the database's highest; the file's size is exactly what
  the header implies (a truncated or torn file is refused);
* its rowids rise strictly, and evenly spaced sample rows (`SAMPLES`) read
  from the database agree with it (live, of the scope, same vector and
  confidence) unless changed after `seq`.

Rows changed after `seq` (at most `memkit.store.index.SYNC_MAX`, else the
scope is loaded from SQLite) are then applied as any other connection's
writes are. A refused sidecar is logged, counted (`counts["rejected"]`) and
replaced after the full load that answers instead; it never fails a recall.
Writes go to a temporary file, fsynced, then renamed over the old one, so a
reader maps a whole file or none; a failed write (disk full) is logged and
counted (`counts["write_failed"]`), never raised. Not checked: the vectors
between the samples (a checksum would read the whole file, which is what the
map avoids); a sidecar modified in place by something other than memkit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import uuid
from collections import Counter
from typing import Any

import numpy as np

from memkit.embed import normalize_rows
from memkit.errors import ConfigError, MemkitError

log = logging.getLogger(__name__)

MIN_ROWS = 50_000
"""Live embedded rows from which a scope gets a sidecar (below, SQLite loads it in < 0.5 s)."""

SAMPLES = 16
"""Rows of the database a sidecar is checked against on open (evenly spaced)."""

MAGIC = b"memkit-vectors 1\n"
HEADER = 4096
"""Bytes of the header (magic + JSON, space-padded): the vectors start page-aligned."""

_ARRAYS = (("rowid", np.int64), ("conf", np.float64), ("last_seen", np.float64))
"""The per-row arrays after the vectors, in file order (then `recency`, float64)."""


class SidecarRejected(MemkitError):
    """A sidecar that is not provably the database's as of its change number."""


class SidecarWriteFailed(MemkitError):
    """A sidecar asked for on demand (`SQLiteStore.write_sidecar`) could not be
    written (e.g. the disk is full); the file there before is untouched."""


def sidecar_path(db_path: str, scope_id: str) -> str:
    """Where a scope's sidecar lives: beside the database, named by a digest of the scope."""
    return f"{db_path}.vectors-{hashlib.sha256(scope_id.encode()).hexdigest()[:16]}"


def headroom(n: int) -> int:
    """Columns a sidecar of n rows holds: a quarter more, as a load allocates, so a
    writer appends into its private copy of the map without copying the matrix."""
    return max(n + n // 4, 64)


def file_size(dim: int, n: int) -> int:
    """The exact size of a sidecar of n rows of dim floats (the headroom is a hole)."""
    return HEADER + 4 * dim * headroom(n) + 8 * 4 * n


class Sidecars:
    """The sidecars of one SQLite store (one per scope with `min_rows` live embedded rows)."""

    def __init__(self, db_path: str, *, writable: bool, min_rows: int = MIN_ROWS):
        self.db_path = db_path
        self.writable = writable
        self.min_rows = min_rows
        self.counts: Counter[str] = Counter()
        """used, rejected, written, write_failed, removed, delta_rows (rows applied
        on top of a map)."""

    def path(self, scope_id: str) -> str:
        return sidecar_path(self.db_path, scope_id)

    def open(self, conn: Any, scope_id: str, top: int) -> tuple[dict[str, Any], int] | None:
        """The scope's mapped arrays (`ScopeVectors` fields) and the change number they
        hold, or None (no sidecar, or a refused one: logged and counted). `top` is
        the highest change number the caller knows committed."""
        path = self.path(scope_id)
        if not os.path.exists(path):
            return None
        try:
            return _open(conn, path, scope_id, top)
        except (SidecarRejected, OSError, ValueError) as e:
            self.counts["rejected"] += 1
            log.warning("memkit: vector sidecar %s not used: %s", path, e)
            return None

    def write(
        self, conn: Any, scope_id: str, fields: dict[str, Any], seq: int, strict: bool = False
    ) -> None:
        """Leave the scope's arrays (n rows, as of change number `seq`) beside the
        database; a scope now under `min_rows` loses an old sidecar (it would be
        read and passed over on every load). `strict` (asked for on demand):
        what would skip the write is a ConfigError (the old file kept) and a
        failed write a SidecarWriteFailed, instead of logged and counted."""
        n, path = int(fields["n"]), self.path(scope_id)
        if not self.writable:
            return
        meta = _meta(conn)
        why = _unwritable(meta, n, self.min_rows)
        if why:
            if strict:
                raise ConfigError(f"scope {scope_id!r}: no vector sidecar written: {why}")
            if os.path.isfile(path):
                with contextlib.suppress(OSError):
                    os.remove(path)
                    self.counts["removed"] += 1
            return
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        header = {
            "scope_id": scope_id,
            "embedder_fingerprint": meta["embedder_fingerprint"],
            "dim": int(fields["dim"]),
            "seq": int(seq),
            "n": n,
        }
        try:
            with open(tmp, "wb") as f:
                f.write(_header_bytes(header))
                cols, spare = fields["cols"], 4 * (headroom(n) - n)
                for i in range(cols.shape[0]):
                    f.write(np.ascontiguousarray(cols[i, :n], dtype=np.float32).tobytes())
                    f.seek(spare, os.SEEK_CUR)  # a hole: no disk, zeros when read
                for name, dtype in (*_ARRAYS, ("recency", np.float64)):
                    f.write(np.ascontiguousarray(fields[name][:n], dtype=dtype).tobytes())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except (OSError, SidecarRejected) as e:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            self.counts["write_failed"] += 1
            if strict:
                raise SidecarWriteFailed(f"vector sidecar {path!r} not written: {e}") from e
            log.warning("memkit: vector sidecar %s not written: %s", path, e)
            return
        self.counts["written"] += 1


def _meta(conn: Any) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def _unwritable(meta: dict[str, str], n: int, min_rows: int) -> str:
    """Why a scope of n live embedded rows gets no sidecar ("": it does)."""
    if n < min_rows:
        return f"{n} live embedded rows, under the bound of {min_rows}"
    if "reembed_to" in meta:
        return "a reembed is unfinished"
    if "embedder_fingerprint" not in meta:
        return "no embedder fingerprint recorded"
    return ""


def _header_bytes(header: dict[str, Any]) -> bytes:
    raw = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n"
    if len(raw) > HEADER:
        raise SidecarRejected(f"a header of {len(raw)} bytes (the scope id is too long)")
    return raw.ljust(HEADER, b" ")


def _read_header(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read(HEADER)
    if len(raw) < HEADER or not raw.startswith(MAGIC):
        raise SidecarRejected("not a memkit vector sidecar, or a truncated header")
    try:
        header = json.loads(raw[len(MAGIC) :].decode())
    except ValueError as e:
        raise SidecarRejected(f"unreadable header ({e})") from None
    ok = isinstance(header, dict) and all(
        isinstance(header.get(k), str) for k in ("scope_id", "embedder_fingerprint")
    )
    ok = ok and all(
        isinstance(header.get(k), int) and not isinstance(header[k], bool) and header[k] >= 0
        for k in ("dim", "seq", "n")
    )
    if not ok:
        raise SidecarRejected(f"unreadable header ({str(header)[:200]})")
    return dict(header)


def _open(conn: Any, path: str, scope_id: str, top: int) -> tuple[dict[str, Any], int]:
    h = _read_header(path)
    meta = _meta(conn)
    if h["scope_id"] != scope_id:
        raise SidecarRejected(f"it holds scope {h['scope_id']!r}, not {scope_id!r}")
    if "reembed_to" in meta:
        raise SidecarRejected("the database is being re-embedded")
    want = (meta.get("embedder_fingerprint"), meta.get("embedder_dim"))
    if (h["embedder_fingerprint"], str(h["dim"])) != want:
        raise SidecarRejected(
            f"made with embedder fingerprint {h['embedder_fingerprint']} (dim {h['dim']}); "
            f"the database records {want[0]} (dim {want[1]})"
        )
    if h["seq"] > top:
        raise SidecarRejected(
            f"made at change {h['seq']}, past the database's last ({top}): "
            "another or an older copy of the database"
        )
    dim, n = h["dim"], h["n"]
    size = os.path.getsize(path)
    if size != file_size(dim, n):
        raise SidecarRejected(f"{size} bytes, its header says {file_size(dim, n)} (truncated?)")
    off = HEADER + 4 * dim * headroom(n)
    fields: dict[str, Any] = {"dim": dim, "n": n}
    # copy-on-write: a writer's changes stay in its own pages, never reach the file
    fields["cols"] = np.memmap(path, np.float32, "c", HEADER, (dim, headroom(n)))
    with open(path, "rb") as f:
        f.seek(off)
        for name, dtype in (*_ARRAYS, ("recency", np.float64)):
            fields[name] = np.fromfile(f, dtype=dtype, count=n)
    if n and not bool(np.all(np.diff(fields["rowid"]) > 0)):
        raise SidecarRejected("its rowids do not rise (corrupt)")
    _check_samples(conn, scope_id, h["seq"], fields)
    return fields, h["seq"]


def _check_samples(conn: Any, scope_id: str, seq: int, fields: dict[str, Any]) -> None:
    """Evenly spaced rows of the sidecar agree with the database (or changed after `seq`)."""
    n = fields["n"]
    if n == 0:
        return
    at = np.unique(np.linspace(0, n - 1, min(SAMPLES, n)).astype(np.int64))
    rowids = [int(fields["rowid"][i]) for i in at]
    found = {
        r[0]: r[1:]
        for r in conn.execute(
            "SELECT rowid, scope_id, superseded_by, change_seq, confidence, last_seen_at, "
            f"embedding FROM memories WHERE rowid IN ({', '.join('?' * len(rowids))})",
            rowids,
        )
    }
    for i, rowid in zip(at, rowids, strict=True):
        r = found.get(rowid)
        if r is None:
            raise SidecarRejected(f"row {rowid} is not in the database")
        scope, successor, changed, conf, seen, emb = r
        if changed > seq:
            continue  # the delta since `seq` brings it up to date
        vec = np.zeros(fields["dim"], dtype=np.float32)
        if emb is not None and len(emb) == 4 * fields["dim"]:
            vec = normalize_rows(conn.unvec(emb).copy())[0]
        col = np.asarray(fields["cols"][:, i])
        same_seen = (seen is None and math.isnan(fields["last_seen"][i])) or (
            seen == fields["last_seen"][i]
        )
        if (
            scope != scope_id
            or successor is not None
            or emb is None
            or conf != fields["conf"][i]
            or not same_seen
            or not np.allclose(vec, col, rtol=0, atol=1e-6)
        ):
            raise SidecarRejected(f"row {rowid} differs from the database (a foreign sidecar?)")
