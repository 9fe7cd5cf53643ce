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

import itertools
import math
from array import array
from collections.abc import Iterable
from typing import cast

import numpy as np

from memkit.errors import ConfigError
from memkit.text import recent_trigrams, trigram_words

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


def _bytes(values: np.ndarray) -> memoryview:
    """The bytes of a numpy array, no copy when it is contiguous (for `array.frombytes`)."""
    return np.ascontiguousarray(values).data.cast("B")


def _array(code: str, values: np.ndarray) -> array[int]:
    """An array.array ('q' int64 or 'i' int32) of numpy values, so later writes append."""
    out = array(code)
    out.frombytes(_bytes(np.asarray(values, np.int64 if code == "q" else np.int32)))
    return out


CHUNKS, CHUNK_MIN = 16, 1 << 16
"""`GramIndex._load` posts the rows in about CHUNKS runs of at least CHUNK_MIN
grams: its sort keys and masks (~40 B a gram) then cost a sixteenth of the
index's own int32 grams at once, not twice the index."""


BUILD_ROWS = 4_096
"""Rows `GramIndex.build` takes at once: its arrays (~60 B a gram of the chunk)
stay a few MB whatever the scope's size."""


def gram_codes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every trigram occurrence of `texts` as (row index, code): the code packs
    the gram's three code points (21 bits each) into one int, so
    {code_gram(c) for c in the codes of row i} == trigrams(texts[i]) (a
    property test holds it on any text). Words are `trigram_words`', each
    padded "  w " as `trigrams` pads them; a text's padded words are laid end
    to end and only the windows inside a word are kept."""
    lens: list[int] = []
    per_text: list[int] = []
    joined = []
    for text in texts:
        words = trigram_words(text)
        if words:
            joined.append("  " + "   ".join(words) + " ")
            lens.extend(map(len, words))
        per_text.append(len(words))
    wl = np.asarray(lens, dtype=np.int64)
    if wl.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    cps = np.frombuffer("".join(joined).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    ngrams = wl + 1  # a word of L code points has L + 1 windows in "  w "
    word_at = np.zeros(wl.size, dtype=np.int64)  # where each padded word starts
    np.cumsum(wl[:-1] + 3, out=word_at[1:])
    first = np.repeat(word_at, ngrams)
    offsets = np.zeros(wl.size, dtype=np.int64)
    np.cumsum(ngrams[:-1], out=offsets[1:])
    at = first + np.arange(first.size, dtype=np.int64) - np.repeat(offsets, ngrams)
    del first
    c = cps.astype(np.int64)
    codes = (c[at] << 42) | (c[at + 1] << 21) | c[at + 2]
    word_row = np.repeat(np.arange(len(texts), dtype=np.int64), per_text)
    return np.repeat(word_row, ngrams), codes


def code_gram(code: int) -> str:
    """The trigram a `gram_codes` code stands for."""
    return chr(code >> 42) + chr((code >> 21) & 0x1FFFFF) + chr(code & 0x1FFFFF)


def _segments(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The positions of the segments [start, start + len), concatenated."""
    offsets = np.zeros(lens.size, dtype=np.int64)
    np.cumsum(lens[:-1], out=offsets[1:])
    return np.repeat(starts - offsets, lens) + np.arange(int(lens.sum()), dtype=np.int64)


def row_chunks(lens: np.ndarray, grams: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) covering every row in order: each range ends with the
    row at which its grams reach `grams` (the last, with the rows left)."""
    ends = np.cumsum(lens)
    total = int(ends[-1]) if ends.size else 0
    cuts = np.searchsorted(ends, np.arange(grams, total, grams)) + 1
    bounds = np.unique(np.concatenate(([0], cuts, [lens.size])))
    return list(itertools.pairwise(bounds.tolist()))


def _post_chunk(
    post: list[array[int]],
    lo: int,
    starts: np.ndarray,
    lens: np.ndarray,
    plen: np.ndarray,
    flat: np.ndarray,
    rank: np.ndarray,
) -> None:
    """Append the slots lo, lo + 1, ... (their starts, lens and prefix lengths
    given) to the postings of the first plen of their grams in the order."""
    a = int(starts[0])
    fl = flat[a : a + int(lens.sum())]
    local = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
    # one stable sort on (slot, place in the order): 8x faster than lexsort here
    by_rank = np.argsort(local * max(rank.size, 1) + rank[fl], kind="stable")
    place = np.arange(fl.size, dtype=np.int64) - np.repeat(starts - a, lens)
    posted = by_rank[place < np.repeat(plen, lens)]
    del by_rank, place
    grams = fl[posted]
    by_gram = np.argsort(grams, kind="stable")  # slots ascend within each gram
    grams = grams[by_gram]
    owners = (local[posted][by_gram] + lo).astype(np.int32)
    if grams.size == 0:
        return
    heads = np.flatnonzero(np.concatenate(([True], grams[1:] != grams[:-1])))
    ends = np.append(heads[1:], grams.size) * 4
    buf = _bytes(owners)
    for g, x, y in zip(grams[heads].tolist(), (heads * 4).tolist(), ends.tolist(), strict=True):
        post[g].frombytes(buf[x:y])


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
        self.cutoff: float | None = None
        """Rows last seen at or before this time were left out when the index was
        built (`memkit.store.index.Indexes.grams_of`: they cannot be fold
        targets); None: built from every live row."""

    def covers(self, since: float) -> bool:
        """Whether every row seen after `since` is held: a fold-in decision whose
        window starts at `since` may ask this index (SPEC §3.3's window is strict)."""
        return self.cutoff is None or self.cutoff <= since

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
        slots = np.fromiter((slot for _, slot in live), dtype=np.int64, count=len(live))
        lens = np.frombuffer(self._len, dtype=np.int32)[slots]
        starts = np.frombuffer(self._start, dtype=np.int64)[slots]
        flat = np.frombuffer(self._ids, dtype=np.int32)[_segments(starts, lens)]
        rowids = np.fromiter((r for r, _ in live), np.int64, len(live))
        self._load(_array("q", rowids), _array("i", lens), _array("i", flat))

    @classmethod
    def build(
        cls, rows: Iterable[tuple[int, str]], floor: float = 0.0, hits: int = HITS
    ) -> GramIndex:
        """An index of (rowid, content) pairs, built in bulk: what a writer's first
        fold-in waits for (every live row of the scope).

        Rows are taken BUILD_ROWS at a time (pass a streaming cursor), their
        grams found as numbers in numpy (`gram_codes`), and each row's sorted
        gram ids appended to flat int32 buffers that the index keeps: no
        object per row or gram. At 100k synthetic bench rows (2 cores, load
        ~2): 1.5-1.7 s and a traced peak 1.40x the index's steady 51 MB, where
        a Python list of ids per row took 4.3-5.0 s and 5.95x (316 MB)."""
        gi = cls(floor, hits)
        rowids, lens, flat = array("q"), array("i"), array("i")
        known = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        it = iter(rows)
        while chunk := list(itertools.islice(it, BUILD_ROWS)):
            rowids.extend([r for r, _ in chunk])
            row, codes = gram_codes([c for _, c in chunk])
            ids, known = gi._ids_of_codes(codes, known)
            del codes
            v = max(len(gi._vocab), 1)
            key = row * v + ids
            del row, ids
            key.sort()
            if key.size:  # each row's distinct grams, ascending
                keep = np.empty(key.size, dtype=bool)
                keep[0] = True
                np.not_equal(key[1:], key[:-1], out=keep[1:])
                key = key[keep]
            lens.frombytes(_bytes(np.bincount(key // v, minlength=len(chunk)).astype(np.int32)))
            flat.frombytes(_bytes((key % v).astype(np.int32)))
        gi._load(rowids, lens, flat)
        return gi

    def _ids_of_codes(
        self, codes: np.ndarray, known: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """The gram id of each `gram_codes` code, and `known` (the codes seen so far,
        ascending, and their ids) with the new ones, which join the vocabulary."""
        seen, ids = known
        pos = np.searchsorted(seen, codes)
        hit = seen[np.minimum(pos, seen.size - 1)] == codes if seen.size else pos < 0
        if not hit.all():
            new = np.unique(codes[~hit])
            vocab, base = self._vocab, len(self._vocab)
            grams = map(code_gram, new.tolist())
            vocab.update(zip(grams, range(base, base + new.size), strict=True))
            both = np.concatenate((seen, new))
            order = np.argsort(both, kind="stable")
            seen = both[order]
            ids = np.concatenate((ids, np.arange(base, base + new.size, dtype=np.int64)))[order]
            pos = np.searchsorted(seen, codes)
        return ids[pos], (seen, ids)

    def _load(self, rowids: array[int], lens: array[int], ids: array[int]) -> None:
        """Replace the slots, order and postings with these rows, taking the arrays
        as they are (no copy): row i holds the gram ids
        ids[sum(lens[:i]) : sum(lens[:i + 1])], ascending."""
        self._probe = None
        nvocab, n = len(self._vocab), len(rowids)
        flat = np.frombuffer(ids, dtype=np.int32)  # a view: gone when this returns
        lens64 = np.frombuffer(lens, dtype=np.int32).astype(np.int64)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens64[:-1], out=starts[1:])
        step = max(flat.size // CHUNKS, CHUNK_MIN)
        # the order: fewest live rows first, ties by gram id (counted in steps:
        # bincount widens its input to int64, twice the index's grams at once)
        df = np.zeros(nvocab, dtype=np.int64)
        for a in range(0, flat.size, step):
            df += np.bincount(flat[a : a + step], minlength=nvocab)
        rank = np.empty(nvocab, dtype=np.int64)
        rank[np.lexsort((np.arange(nvocab), df))] = np.arange(nvocab)
        del df
        bare = lens64 - np.ceil(self.floor * lens64 - 1e-9).astype(np.int64)
        plen = np.minimum(lens64, bare + self.hits)  # _prefix_len, row by row
        post = [array("i") for _ in range(nvocab)]
        for lo, hi in row_chunks(lens64, step):
            _post_chunk(post, lo, starts[lo:hi], lens64[lo:hi], plen[lo:hi], flat, rank)
        del flat
        self._post = post
        self._rank = _array("q", rank)
        self._next_new = -1
        self._slot = dict(zip(rowids, range(n), strict=True))
        self._rowid, self._len, self._ids = rowids, lens, ids
        self._start = _array("q", starts)
        self._live, self._stale = int(plen.sum()), 0
        self._ranked, self._added = n, 0

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
