"""In-memory keyword index: the SPEC §4.2 keyword path without a scan.

SPEC §4.2 matches a row when a query keyword is a case-insensitive substring
of its content or of any tag, and ranks by the number of distinct keywords
matched, then `last_seen_at` descending (None last), then rowid descending.
This index returns exactly that for the live rows of one scope:

* A row's *haystack* is its lowercased content and each lowercased tag,
  joined by NUL; its *words* are the haystack's maximal runs of
  alphanumeric characters (`str.isalnum`), two or more long.
* A keyword whose characters are all alphanumeric (every keyword `memkit.text
  .keywords` makes, save rare case-mapping artefacts) can only occur inside
  one word. So it matches a row exactly when it is a substring of one of the
  row's words: the index finds the vocabulary words that contain it and
  takes their rows. Each word posts its 2- and 3-character grams; a
  2-character keyword's posting is exactly its words; a longer keyword's
  candidates are the words of its rarest trigram, each confirmed by a
  literal `in` (over distinct words, never over rows). Words of one
  character are left out: every keyword has at least two.
* Any other keyword is checked literally against every live haystack.
* Counting and ranking are numpy over dense row positions.

SQLite's FTS5 trigram tokenizer was the other candidate: it cannot match a
keyword under 3 characters and folds case its own way, so it could not give
SPEC §4.2 exactly.

A changed row gets a new position; its old one dies in place, and the index
is rebuilt once dead positions outnumber live ones.

Writes are applied lazily: `put` and `drop` queue, and the next `search` (or
`len`) applies the queue in order, so a burst of writes with no keyword
query between them pays for the index once, at the query (~40-80 us per
queued write at 100k rows, ~70 us of every `remember` before). `backlog`
lets the store drop an index whose queue outgrew it (rebuilding from
SQLite is then no dearer).

Leaves out: stemming, relevance scores (SPEC §4.2 has none), persistence
(built from SQLite on a scope's first keyword query, like the store's other
indexes), and the no-keyword case (the store answers it by recency).
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from collections.abc import Iterable, Sequence

import numpy as np

_WORD = re.compile(r"[^\W_]{2,}")
"""Runs of `str.isalnum` characters (\\w without the underscore is exactly
isalnum, checked over every code point), two or more long."""


ROW_BYTES = 100
"""Estimated bytes a row position holds beyond its haystack's str: its `_pos` entry,
int objects, list slot, rowid, time and flag (`nbytes`; fitted with tracemalloc
over 2k-30k-row indexes, checked in tests/test_index_cache.py)."""

WORD_BYTES = 175
"""Estimated bytes a vocabulary word holds beyond its str: dict entry, id, list
slots and its row list's object."""

GRAM_KEY_BYTES = 150
"""Estimated bytes a 2- or 3-character gram of `_word_post` holds: its str, dict
entry and word list's object."""

QUEUED_BYTES = 120
"""Estimated bytes a queued write holds beyond its haystack: its tuple and numbers."""


def haystack(content: str, tags: Sequence[str]) -> str:
    """What a keyword must be a substring of (see the module docstring)."""
    return "\x00".join([content.lower(), *(t.lower() for t in tags)])


def _grams(word: str) -> set[str]:
    """The 2- and 3-character substrings of a word: a keyword of 2 characters is
    one of them, a longer one contains its trigrams."""
    return {word[i : i + 2] for i in range(len(word) - 1)} | {
        word[i : i + 3] for i in range(len(word) - 2)
    }


class KeywordIndex:
    """The live rows of one scope, for the keyword path."""

    def __init__(self) -> None:
        self._hay: list[str | None] = []
        """By position; None once the position died."""
        self._rowid = array("q")
        self._ts = array("d")
        """last_seen_at by position; -inf for None (ranks last)."""
        self._alive = bytearray()
        self._pos: dict[int, int] = {}
        self._vocab: dict[str, int] = {}
        self._words: list[str] = []
        self._word_rows: list[array[int]] = []
        """Positions of the rows holding each word (dead ones included)."""
        self._word_post: dict[str, array[int]] = {}
        """2- or 3-character gram -> ids of the words holding it."""
        self._queue: list[tuple[int, str | None, float]] = []
        """Writes not applied yet, in order: (rowid, haystack, ts); haystack None drops."""
        self._held = 0
        """Estimated bytes of everything but the queue (`nbytes`), kept as rows come and go."""
        self._queued = 0

    def __len__(self) -> int:
        self._apply()
        return len(self._pos)

    @property
    def nbytes(self) -> int:
        """Estimated memory held (the store's cache bound, `memkit.store.index`): the
        haystacks' and words' str objects as measured when added, 4 bytes a link
        of the postings, and the stated constants for the Python objects. O(1)."""
        return self._held + self._queued

    @property
    def backlog(self) -> tuple[int, int]:
        """Writes queued since the last query, and the live rows before them."""
        return len(self._queue), len(self._pos)

    @classmethod
    def build(cls, rows: Iterable[tuple[int, str, Sequence[str], float | None]]) -> KeywordIndex:
        """An index of (rowid, content, tags, last_seen_at) rows."""
        ix = cls()
        for rowid, content, tags, last_seen in rows:
            ix.put(rowid, content, tags, last_seen)
        ix._apply()
        return ix

    def put(self, rowid: int, content: str, tags: Sequence[str], last_seen: float | None) -> None:
        """Row `rowid` is live with this content, these tags and this recency."""
        ts = -math.inf if last_seen is None or math.isnan(last_seen) else float(last_seen)
        hay = haystack(content, tags)
        self._queue.append((rowid, hay, ts))
        self._queued += QUEUED_BYTES + sys.getsizeof(hay)

    def drop(self, rowid: int) -> None:
        """Row `rowid` is no longer live (idempotent)."""
        self._queue.append((rowid, None, 0.0))
        self._queued += QUEUED_BYTES

    def _apply(self) -> None:
        queue, self._queue = self._queue, []
        self._queued = 0
        for rowid, hay, ts in queue:
            if hay is None:
                p = self._pos.pop(rowid, None)
                if p is not None:
                    self._kill(p)
                    self._maybe_compact()
                continue
            old = self._pos.get(rowid)
            if old is not None:
                if self._hay[old] == hay:
                    self._ts[old] = ts
                    continue
                self._kill(old)
            self._append(rowid, hay, ts)
            self._maybe_compact()

    def _append(self, rowid: int, hay: str, ts: float) -> None:
        p = len(self._hay)
        self._hay.append(hay)
        self._rowid.append(rowid)
        self._ts.append(ts)
        self._alive.append(1)
        self._pos[rowid] = p
        vocab = self._vocab
        words = set(_WORD.findall(hay))
        held = ROW_BYTES + sys.getsizeof(hay) + 4 * len(words)
        for w in words:
            wid = vocab.get(w)
            if wid is None:
                wid = vocab[w] = len(self._words)
                self._words.append(w)
                self._word_rows.append(array("i"))
                held += WORD_BYTES + sys.getsizeof(w)
                for g in _grams(w):
                    lst = self._word_post.get(g)
                    if lst is None:
                        lst = self._word_post[g] = array("i")
                        held += GRAM_KEY_BYTES
                    lst.append(wid)
                    held += 4
            self._word_rows[wid].append(p)
        self._held += held

    def _kill(self, p: int) -> None:
        self._held -= sys.getsizeof(self._hay[p])  # the position's other bytes stay till compaction
        self._hay[p] = None
        self._alive[p] = 0

    def _maybe_compact(self) -> None:
        dead = len(self._hay) - len(self._pos)
        if dead > max(len(self._pos), 1_000):
            live = [(self._rowid[p], h, self._ts[p]) for p, h in enumerate(self._hay) if h]
            fresh = KeywordIndex()
            for rowid, hay, ts in live:
                fresh._append(rowid, hay, ts)
            self.__dict__.update(fresh.__dict__)

    def _matches(self, kw: str) -> np.ndarray:
        """Positions of rows whose haystack contains `kw` (len >= 2); dead ones included."""
        if not kw.isalnum():
            return np.fromiter((p for p, h in enumerate(self._hay) if h and kw in h), np.int64)
        post = self._word_post
        cand: Sequence[int]
        if len(kw) == 2:
            cand = post.get(kw, ())  # every word holding the gram holds the keyword
        else:
            posts = [post.get(kw[i : i + 3]) for i in range(len(kw) - 2)]
            found = [lst for lst in posts if lst is not None]
            if len(found) < len(posts):
                return np.zeros(0, dtype=np.int64)
            words = self._words
            cand = [w for w in min(found, key=len) if kw in words[w]]
        rows = self._word_rows
        hit = [np.frombuffer(rows[w], dtype=np.int32) for w in cand]
        if not hit:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(hit) if len(hit) > 1 else hit[0]

    def search(self, keywords: Sequence[str], limit: int) -> list[tuple[int, int]]:
        """The top `limit` (rowid, distinct keywords matched) in SPEC §4.2 order."""
        self._apply()
        counts = np.zeros(len(self._hay), dtype=np.int32)
        for kw in keywords:
            # fancy `+=` adds once per distinct position: a row counts a keyword once
            counts[self._matches(kw)] += 1
        counts[np.frombuffer(self._alive, dtype=np.uint8) == 0] = 0
        pos = np.flatnonzero(counts)
        if pos.size == 0 or limit <= 0:
            return []
        c = counts[pos]
        if pos.size > limit:  # only rows matching at least the limit-th best count can rank
            kth = np.partition(c, pos.size - limit)[pos.size - limit]
            keep = c >= kth
            pos, c = pos[keep], c[keep]
        ts = np.frombuffer(self._ts, dtype=np.float64)[pos]
        rid = np.frombuffer(self._rowid, dtype=np.int64)[pos]
        order = np.lexsort((-rid, -ts, -c))[:limit]
        return [(int(rid[i]), int(c[i])) for i in order]
