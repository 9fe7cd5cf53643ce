"""In-memory trigram index: the fold-in candidate search (SPEC §3.3).

Why in memory: on-disk postings cost every write one B-tree page per trigram,
which held remember to ~70/s at 100k rows. Here a write appends to a few
arrays and SQLite writes one row.

Why exact: l-prefix filtering. Fix one order of all grams (rarest first, by
document frequency when the order was set). If Jaccard(A, B) >= t, then
|A∩B| >= ceil(t|B|), so the shared grams that come first in the order are
among B's first |B| - ceil(t|B|) + h grams, and likewise among A's first
|A| - ceil(t|A|) + h; both prefixes hold at least min(h, ceil(t|A|)) of them.
So each row posts only its prefix (for the index's `floor`, the lowest
threshold it serves), a probe reads the postings of its own prefix, and only
rows with enough hits (and a possible length) are scored, exactly, against
the grams they hold now. Nothing that can reach t is ever pruned. Common
grams are in almost no row's prefix, so their long lists are never read.

Layout: every indexed version of a row gets a *slot* (dense ints, so hit
counts are one `np.bincount`). A slot holds all its gram ids in one flat int32
array; postings map a gram id to the slots whose prefix holds it. A reworded
or retired row's slot dies in place (length -1). Rebuilding (compaction)
renumbers the slots and re-sorts the grams by their frequency then; it runs
once dead postings outweigh live ones, or once the rows added since the
order was set outnumber the rows it was set from. Grams first seen in
between go to the front of the order (rare when new), and the order never
changes outside a rebuild, as exactness needs.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import cast

import numpy as np

from memkit.errors import ConfigError
from memkit.text import recent_trigrams, trigrams

HITS = 10
"""Prefix depth h: a row posts h - 1 grams past the bare prefix, and a probe
needs h hits (fewer only for tiny texts). Deeper means longer postings but
fewer candidates to score. Search time per probe at 100k bulk-built rows
(synthetic / LongMemEval sentences, a prototype of this index): h=3 227/3,115
us, h=5 161/999, h=7 147/531, h=10 149/360, h=14 -/366, h=20 -/444. The
earlier index (every gram posted, the rarest probed): 192/392."""


_REORDER = 1
"""Set the order afresh once the rows added since it was set exceed this many
times the rows it was set from (1,000 at least). Growing one index from empty
to 100k rows by `put` (synthetic / LongMemEval sentences), then searching:
never reorder 23/27 us per put, 183/555 us per search; every doubling (1)
45/45 and 177/331; every 4x (3) 33/38 and 131/371. The longest put (the
reorder at 64k rows) took 0.7 s."""


def count_at_least(slots: np.ndarray, min_hits: int, nslots: int) -> np.ndarray:
    """The values in `slots` (all < nslots) occurring >= min_hits times,
    ascending. A sort when the postings are fewer than a 32nd of the slots (a
    value occurs >= h times iff a sorted run holds it at i and i + h - 1), else
    one bincount (a pass over every slot, but no sort). Measured on this
    machine (numpy 2.4, CPU time): at 100k slots, 4k postings 42 us sorted vs
    39 us bincount, 8k 105 vs 47, 30k 548 vs 74 (the bench's fold-in probes at
    100k rows: median 7.6k postings); at 1M slots the two meet near 22k
    postings (~430 us), at 10k slots near 1k."""
    h = max(int(min_hits), 1)
    if slots.size * 32 < nslots:
        s = np.sort(slots)
        if s.size < h:
            return s[:0]
        head = s[: s.size - h + 1]
        vals: np.ndarray = head[s[h - 1 :] == head]
        if vals.size > 1:
            first = np.empty(vals.size, dtype=bool)
            first[0] = True
            np.not_equal(vals[1:], vals[:-1], out=first[1:])
            vals = vals[first]
        return vals
    return np.flatnonzero(np.bincount(slots, minlength=nslots) >= h)


GRAM_BYTES = 200
"""Estimated bytes per gram of the vocabulary beyond its postings: its dict entry,
3-character str and int id, its posting list's object (`nbytes`; fitted with
tracemalloc over 2k-30k-row indexes, checked in tests/test_index_cache.py)."""

ROW_BYTES = 120
"""Estimated bytes per live row beyond its grams: its `_slot` entry and two ints."""

FEW = 64
"""Candidates up to this many are scored one by one in Python (~2.5 us each);
more, in one vectorised pass (~50 us however few). Most writes have ~15."""


def _array(code: str, values: np.ndarray) -> array[int]:
    """An array.array ('q' int64 or 'i' int32) of numpy values, so later writes append."""
    out = array(code)
    out.frombytes(np.ascontiguousarray(values, np.int64 if code == "q" else np.int32).tobytes())
    return out


class GramIndex:
    """Trigram postings of the live rows of one (scope, kind), for thresholds >= floor.

    `floor` 0 posts every gram of every row (any threshold > 0 is served);
    the store passes its fold threshold (0.65), which posts about half as many.
    """

    def __init__(self, floor: float = 0.0, hits: int = HITS) -> None:
        if not 0.0 <= floor <= 1.0:
            raise ConfigError(f"floor {floor!r} outside [0, 1]")
        if hits < 1:
            raise ConfigError(f"hits {hits!r} must be >= 1")
        self.floor, self.hits = float(floor), int(hits)
        self._vocab: dict[str, int] = {}
        self._rank = array("q")  # gram id -> place in the order (smaller = earlier)
        self._next_new = -1  # place of the next gram first seen after the order was set
        self._post: list[array[int]] = []  # gram id -> slots whose prefix holds it (int32)
        self._slot: dict[int, int] = {}  # live rowid -> slot
        self._rowid = array("q")  # slot -> rowid
        self._start = array("q")  # slot -> offset into _ids
        self._len = array("i")  # slot -> number of grams; -1 once dead
        self._ids = array("i")  # concatenated gram ids of every slot, ascending per slot
        self._live = 0  # postings of live slots
        self._stale = 0  # postings of dead slots
        self._ranked = 0  # live rows when the order was set
        self._added = 0  # slots added since
        self._mine = np.zeros(0, dtype=np.uint8)  # scratch: 1 at the probe's gram ids
        self._probe: tuple[frozenset[str], list[int]] | None = None
        """The last search's grams and their ids in the order, while the index is
        unchanged: a write searches, then puts the same grams."""

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, rowid: int) -> bool:
        return rowid in self._slot

    @property
    def nbytes(self) -> int:
        """Estimated memory held (the store's cache bound, `memkit.store.index`): the
        flat arrays and postings as stored, plus `GRAM_BYTES` a gram and `ROW_BYTES`
        a live row for the Python objects. O(1)."""
        arrays = 4 * len(self._ids) + 20 * len(self._rowid) + 8 * len(self._rank)
        postings = 4 * (self._live + self._stale)
        objects = GRAM_BYTES * len(self._vocab) + ROW_BYTES * len(self._slot)
        return arrays + postings + objects + self._mine.nbytes

    @property
    def stale_postings(self) -> int:
        """Postings of dead slots, awaiting compaction."""
        return self._stale

    @property
    def postings(self) -> int:
        """Postings held now, live and stale, counted from the lists themselves:
        each live row holds min(m, m - ceil(floor m) + hits) of its m grams."""
        return sum(map(len, self._post))

    def holders(self, gram: str) -> frozenset[int]:
        """Rowids of the live rows that post `gram` (it is in their prefix of
        the order), which says where the order puts it: a rare gram is posted
        by every row holding it, a common one by almost none."""
        i = self._vocab.get(gram)
        if i is None:
            return frozenset()
        length, rowid = self._len, self._rowid
        return frozenset(rowid[slot] for slot in self._post[i] if length[slot] >= 0)

    def _prefix_len(self, m: int) -> int:
        """How many of its first grams (in the order) a row of m grams posts."""
        return min(m, m - math.ceil(self.floor * m - 1e-9) + self.hits)

    def _gram_ids(self, grams: frozenset[str]) -> list[int]:
        vocab = self._vocab
        out = list(map(vocab.get, grams))
        if None in out:  # grams no row had yet: first in the order, for good
            new = [g for g, i in zip(grams, out, strict=True) if i is None]
            post, k = self._post, len(self._post)
            vocab.update(zip(new, range(k, k + len(new)), strict=True))
            post.extend([array("i") for _ in new])
            self._rank.extend(range(self._next_new, self._next_new - len(new), -1))
            self._next_new -= len(new)
            out = list(map(vocab.get, grams))
        out.sort()  # every gram has an id by now
        return cast("list[int]", out)

    def put(self, rowid: int, content: str, grams: frozenset[str] | None = None) -> None:
        """Index a live row (idempotent; a new wording replaces the old one)."""
        probe, self._probe = self._probe, None
        if grams is not None and probe is not None and probe[0] is grams:
            by_rank = probe[1]  # searched just now, every gram known: ids and order at hand
            ids = sorted(by_rank)
        else:
            ids = self._gram_ids(recent_trigrams(content) if grams is None else grams)
            by_rank = None
        old = self._slot.get(rowid)
        if old is not None:
            s, n = self._start[old], self._len[old]
            if n == len(ids) and self._ids[s : s + n].tolist() == ids:
                return
            self._kill(old)
        self._add(rowid, ids, by_rank)
        self._maybe_compact()

    def drop(self, rowid: int) -> None:
        """Forget a row that is no longer live (idempotent)."""
        self._probe = None
        slot = self._slot.pop(rowid, None)
        if slot is not None:
            self._kill(slot)
            self._maybe_compact()

    def _add(self, rowid: int, ids: list[int], by_rank: list[int] | None = None) -> None:
        slot = len(self._len)
        self._slot[rowid] = slot
        self._rowid.append(rowid)
        self._start.append(len(self._ids))
        self._len.append(len(ids))
        self._ids.extend(ids)
        post = self._post
        if by_rank is None:
            by_rank = sorted(ids, key=self._rank.__getitem__)
        prefix = by_rank[: self._prefix_len(len(ids))]
        for i in prefix:
            post[i].append(slot)
        self._live += len(prefix)
        self._added += 1

    def _kill(self, slot: int) -> None:
        n = self._prefix_len(self._len[slot])
        self._len[slot] = -1
        self._live -= n
        self._stale += n

    def _maybe_compact(self) -> None:
        reorder = self._added > _REORDER * max(self._ranked, 1_000)
        if reorder or self._stale > max(self._live, 50_000):
            self.compact()

    def compact(self) -> None:
        """Renumber the live slots, drop every dead posting, and set the order
        afresh from the grams' frequencies now."""
        live = sorted(self._slot.items(), key=lambda kv: kv[1])
        start, length = self._start, self._len
        ids = np.frombuffer(self._ids, dtype=np.int32).copy()
        self._load(
            [rowid for rowid, _ in live],
            [ids[start[slot] : start[slot] + length[slot]] for _, slot in live],
        )

    @classmethod
    def build(
        cls, rows: Iterable[tuple[int, str]], floor: float = 0.0, hits: int = HITS
    ) -> GramIndex:
        """An index of (rowid, content) pairs, built in bulk: ~2x faster than
        one `put` per row, which matters when a 100k-row scope loads."""
        gi = cls(floor, hits)
        vocab = gi._vocab
        rowids, id_lists = [], []
        for rowid, content in rows:
            rowids.append(rowid)
            id_lists.append(sorted([vocab.setdefault(g, len(vocab)) for g in trigrams(content)]))
        gi._load(rowids, id_lists)
        return gi

    def _load(self, rowids: list[int], id_lists: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Replace the slots, order and postings with these rows (ids sorted per row)."""
        self._probe = None
        nvocab = len(self._vocab)
        lens = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
        flat = (
            np.concatenate([np.asarray(x, dtype=np.int32) for x in id_lists])
            if id_lists
            else np.zeros(0, dtype=np.int32)
        )
        starts = np.zeros(len(rowids), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        # the order: fewest live rows first, ties by gram id
        df = np.bincount(flat, minlength=nvocab)
        rank = np.empty(nvocab, dtype=np.int64)
        rank[np.lexsort((np.arange(nvocab), df))] = np.arange(nvocab)
        # each row's grams in that order; its first _prefix_len are posted
        slots = np.repeat(np.arange(len(rowids), dtype=np.int32), lens)
        # one stable sort on (slot, place in the order): 8x faster than lexsort here
        by_rank = np.argsort(slots.astype(np.int64) * max(nvocab, 1) + rank[flat], kind="stable")
        place = np.arange(flat.size) - np.repeat(starts, lens)
        bare = lens - np.ceil(self.floor * lens - 1e-9).astype(np.int64)
        plen = np.minimum(lens, bare + self.hits)  # _prefix_len, row by row
        posted = by_rank[place < np.repeat(plen, lens)]
        grams, owners = flat[posted], slots[posted]
        by_gram = owners[np.argsort(grams, kind="stable")]  # slots ascend within each gram
        bounds = np.concatenate(([0], np.cumsum(np.bincount(grams, minlength=nvocab))))
        self._post = [_array("i", by_gram[bounds[i] : bounds[i + 1]]) for i in range(nvocab)]
        self._rank = _array("q", rank)
        self._next_new = -1
        self._slot = dict(zip(rowids, range(len(rowids)), strict=True))
        self._rowid = _array("q", np.asarray(rowids, dtype=np.int64))
        self._start = _array("q", starts)
        self._len = _array("i", lens.astype(np.int32))
        self._ids = _array("i", flat)
        self._live, self._stale = int(posted.size), 0
        self._ranked, self._added = len(rowids), 0

    def similar(self, grams: frozenset[str], threshold: float) -> dict[int, float]:
        """{rowid: pg_trgm similarity} of the indexed rows at or above `threshold`
        (which must be > 0 and >= the index's floor), scored exactly on the
        grams each row holds now."""
        if not threshold >= self.floor or threshold <= 0:
            raise ConfigError(
                f"threshold {threshold!r}: this index serves thresholds > 0 and >= {self.floor}"
            )
        n = len(grams)
        if n == 0 or not self._slot:
            return {}
        t = threshold
        need = max(1, math.ceil(t * n - 1e-9))
        if need > n:
            return {}
        post = self._post
        known = [i for i in map(self._vocab.get, grams) if i is not None]
        known.sort(key=self._rank.__getitem__)
        self._probe = (grams, known) if len(known) == n else None
        # grams no row holds come first in the order and fill the prefix for nothing
        take = min(n, n - need + self.hits) - (n - len(known))
        if take <= 0:
            return {}
        slots = np.frombuffer(b"".join([post[i] for i in known[:take]]), dtype=np.int32)
        min_hits = min(self.hits, need)
        if slots.size < min_hits:
            return {}
        cand = count_at_least(slots, min_hits, len(self._len))
        lo = math.floor(t * n - 1e-9)  # the length filter: |B| in [t|A|, |A|/t]
        hi = math.ceil(n / t + 1e-9)
        if cand.size <= FEW:
            return self._score_few(cand.tolist(), known, n, t, lo, hi)
        return self._score_many(cand, known, n, t, lo, hi)

    def _score_few(
        self, cand: list[int], known: list[int], n: int, t: float, lo: int, hi: int
    ) -> dict[int, float]:
        """Exact similarity of a few candidate slots, one by one."""
        length, start, ids, rowid = self._len, self._start, self._ids, self._rowid
        mine = set(known)
        out: dict[int, float] = {}
        for slot in cand:
            m = length[slot]
            if m <= 0 or m < lo or m > hi:
                continue
            s = start[slot]
            inter = len(mine.intersection(ids[s : s + m]))
            sim = inter / (n + m - inter)  # the same double as the vectorised pass
            if sim >= t:
                out[rowid[slot]] = sim
        return out

    def _score_many(
        self, cand: np.ndarray, known: list[int], n: int, t: float, lo: int, hi: int
    ) -> dict[int, float]:
        """Exact similarity of many candidate slots, in one vectorised pass."""
        post = self._post
        sizes = np.frombuffer(self._len, dtype=np.int32)[cand]
        keep = (sizes > 0) & (sizes >= lo) & (sizes <= hi)
        cand, sizes = cand[keep], sizes[keep]
        if cand.size == 0:
            return {}
        starts = np.frombuffer(self._start, dtype=np.int64)[cand]
        flat = np.frombuffer(self._ids, dtype=np.int32)
        offsets = np.zeros(cand.size, dtype=np.int64)
        np.cumsum(sizes[:-1], out=offsets[1:])
        gather = np.repeat(starts - offsets, sizes) + np.arange(int(sizes.sum()))
        mine = self._mine
        if mine.size < len(post):  # grown in steps, so a write does not sweep a fresh array
            mine = self._mine = np.zeros(2 * len(post), dtype=np.uint8)
        mine[known] = 1
        try:
            inter = np.add.reduceat(mine[flat[gather]], offsets, dtype=np.int64)
        finally:
            mine[known] = 0  # clean for the next probe, whatever happened
        sim = inter / (n + sizes - inter)
        ok = sim >= t
        rowids = np.frombuffer(self._rowid, dtype=np.int64)[cand[ok]]
        return dict(zip(rowids.tolist(), sim[ok].tolist(), strict=True))
