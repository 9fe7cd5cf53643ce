"""Byte-exact text helpers: truncation, dedup word sets, pg_trgm trigrams, keywords.

Every length is a UTF-8 byte count and every cut falls on a code-point
boundary (SPEC §2), because the budgets they enforce are paid in bytes.
All functions are pure.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

TRUNCATED_MARKER = "\n…[truncated]"
"""Appended by truncate_bytes; exactly 15 UTF-8 bytes."""

_MIDDLE_RESERVE = 64


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _back_to_start(b: bytes, i: int) -> int:
    """Largest code-point start <= i (i may equal len(b))."""
    while 0 < i < len(b) and _is_continuation(b[i]):
        i -= 1
    return i


def _forward_to_start(b: bytes, i: int) -> int:
    """Smallest code-point start >= i."""
    while i < len(b) and _is_continuation(b[i]):
        i += 1
    return i


LINE_BREAKING = re.compile("\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Line breaks (LF, CR, CRLF as one, VT, FF, U+0085, U+2028, U+2029, and the
FS/GS/RS separators `str.splitlines` also splits on) and every other C0/C1
control character or DEL."""


def one_line(s: str) -> str:
    """`s` with each line break (CRLF counted once) and control character as one space.

    For text that must stay on its line (a prompt-block entry, SPEC §5.4 extension):
    no content can start a bullet, a heading or a second entry."""
    return LINE_BREAKING.sub(" ", s)


_UNSAFE_ON_A_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def terminal_safe(s: str) -> str:
    """`s` for a terminal: control characters (so ESC, and with it CSI and OSC 52
    clipboard writes), line breaks and bidi overrides/isolates/marks as visible
    escapes (`\\x1b`, `\\n`, `\\u202e`). Stored text printed by a command line
    can then neither drive the terminal nor reorder what a reader sees."""
    return _UNSAFE_ON_A_TERMINAL.sub(_escape, s)


def byte_len(s: str) -> int:
    """UTF-8 length of s."""
    return len(s.encode("utf-8"))


def truncate_bytes(s: str, n: int) -> str:
    """Keep at most n-15 bytes of s and append the truncation marker (SPEC §2).

    Unchanged when n <= 0 or s already fits. When n <= 15 there is no room
    for the marker inside n; the reference then keeps n bytes and still
    appends it, and so do we.
    """
    if n <= 0:
        return s
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    keep = n - len(TRUNCATED_MARKER.encode("utf-8"))
    if keep <= 0:
        keep = n
    keep = _back_to_start(b, keep)
    return b[:keep].decode("utf-8") + TRUNCATED_MARKER


def truncate_middle(s: str, n: int) -> str:
    """Keep the head (2/3) and tail (1/3) of s around a marker naming the cut (SPEC §2).

    For n >= 66 the result never exceeds n bytes.
    """
    if n <= 0:
        return s
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    budget = n - _MIDDLE_RESERVE
    if budget < 2:
        return truncate_bytes(s, n)
    head = _back_to_start(b, budget * 2 // 3)
    tail_start = _forward_to_start(b, len(b) - (budget - head))
    removed = tail_start - head
    return (
        b[:head].decode("utf-8")
        + f"\n…[{removed} bytes truncated]…\n"
        + b[tail_start:].decode("utf-8")
    )


# --- dedup word sets (SPEC §5.2) -------------------------------------------


class _DropMarks(dict[int, int | None]):
    """str.translate table deleting combining marks (category Mn), filled lazily."""

    def __missing__(self, cp: int) -> int | None:
        out = None if unicodedata.category(chr(cp)) == "Mn" else cp
        self[cp] = out
        return out


_DROP_MARKS = _DropMarks()

_COMBINING_DIACRITICS = re.compile("[\u0300-\u036f]+")
"""U+0300-U+036F, all category Mn: the marks of Latin-script accents."""


def fold_accents(s: str) -> str:
    """NFD, drop combining marks (Mn), NFC, and map đ/Đ to d/D.

    ASCII text is returned as is (every step is the identity there). The
    common accented case (Latin, Vietnamese) is settled by one regex pass over
    the combining-diacritics block: when only ASCII remains once those and
    đ/Đ are gone, no other mark can be left and NFC is the identity. Anything
    else drops every Mn character through a lazily filled translate table and
    recomposes. A property test pins all three paths to the per-character
    definition."""
    if s.isascii():
        return s
    t = _COMBINING_DIACRITICS.sub("", unicodedata.normalize("NFD", s))
    u = t.replace("đ", "d").replace("Đ", "D")
    if u.isascii():
        return u
    t = unicodedata.normalize("NFC", t.translate(_DROP_MARKS))
    return t.replace("đ", "d").replace("Đ", "D")


_DEDUP_TOKEN = re.compile("[a-z0-9\u0080-\U0010ffff]+")
"""A run of ASCII a-z, 0-9 or non-ASCII characters (SPEC §5.2 tokens)."""


def word_set(s: str) -> frozenset[str]:
    """The accent-folded, lowercased word set used for paraphrase dedup.

    Token characters are ASCII a-z, 0-9 and any non-ASCII character; every
    other character separates tokens.
    """
    return frozenset(_DEDUP_TOKEN.findall(fold_accents(s).lower()))


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """|A∩B| / min(|A|,|B|); 0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


# --- pg_trgm trigram similarity (SPEC §3.3) ---------------------------------


_ALNUM_RUN = re.compile(r"[^\W_]+")
"""Maximal runs of `str.isalnum()` characters (checked over every code point in tests)."""


def trigram_words(s: str) -> list[str]:
    """The words whose grams make up `trigrams(s)`: lowercased maximal alnum runs,
    each padded "  w " and cut in 3-char windows (`GramIndex.build` finds the
    same windows in numpy)."""
    return _ALNUM_RUN.findall(s.lower())


@functools.lru_cache(maxsize=1 << 13)
def _word_trigrams(w: str) -> tuple[str, ...]:
    padded = f"  {w} "
    return tuple(padded[i : i + 3] for i in range(len(padded) - 2))


def trigrams(s: str) -> frozenset[str]:
    """pg_trgm's trigram set: lowercase, words padded "  w ", 3-char windows.

    Per-word grams are cached: words repeat across memories (Zipf), and every
    write and every fold-in index build takes this set. 8,192 words hold the
    Zipf head (92% hits on LongMemEval sentences; 98% at 65,536) in an eighth
    of the memory, which `remember` shares with its embedder's tokenizer
    (100k texts: 12.9 vs 11.9 us a LongMemEval sentence, 12.7 vs 14.5 us a
    synthetic one; paired `remember` rounds at 100k rows +1.5% on the mean)."""
    return frozenset().union(*map(_word_trigrams, trigram_words(s)))


@functools.lru_cache(maxsize=256)
def recent_trigrams(s: str) -> frozenset[str]:
    """`trigrams` of the last texts asked: a row another writer committed is
    indexed by a writer's catch-up and then scored again by its fold-in
    decision (`memkit.store.writes`), which takes its set once."""
    return trigrams(s)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|A∩B| / |A∪B|; 0 when both are empty (as pg_trgm)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def trigram_similarity(a: str, b: str) -> float:
    """pg_trgm `similarity(a, b)`."""
    return jaccard(trigrams(a), trigrams(b))


# --- keywords (SPEC §4.2) ---------------------------------------------------

STOPWORDS_EN: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn
    doing don down during each few for from further had hadn has hasn have haven having he
    her here hers herself him himself his how i if in into is isn it its itself just let
    ll me might more most must mustn my myself no nor not now of off on once only or other
    ought our ours ourselves out over own re same shall shan she should shouldn so some such
    than that the their theirs them themselves then there these they this those through to
    too under until up ve very was wasn we were weren what when where which while who whom
    why will with won would wouldn you your yours yourself yourselves also get got please
    tell know want need use used using ok okay yes yeah hi hello thanks thank
    """.split()
)
"""English stopwords: function words and question words, which carry no topic."""

STOPWORDS_VI: frozenset[str] = frozenset(
    """
    và của là có không những các cho với được trong này đó một người khi thì mà để đã sẽ
    đang rất cũng như nào gì ai đâu sao thế vậy nhé ạ ơi à ừ vâng dạ bị bởi tại từ trên
    dưới về ra vào lên xuống nữa lại còn hay hoặc nhưng nếu vì nên thôi chỉ mới vẫn đều
    cái chiếc con những mình tôi bạn anh chị em họ chúng ta nó ấy kia đây này ở theo
    """.split()
)
"""Vietnamese stopwords, with diacritics only: unaccented forms such as "lai" are
often content words (names), so they are deliberately not listed."""

STOPWORDS: frozenset[str] = STOPWORDS_EN | STOPWORDS_VI


_ASCII_SEPARATORS = {c: " " for c in range(128) if not chr(c).isalnum()}
"""ASCII characters that split keywords: all but A-Z, a-z and 0-9."""

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


@functools.cache
def _token_classes() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Regexes for maximal runs of `str.isalpha()` / `str.isdecimal()` characters.

    `[^\\W_]` is exactly `str.isalnum()`, which also admits numerals that are
    neither letters nor decimal digits (superscripts, fractions, Roman
    numerals: No/Nl, about 1,100 code points); the class lists them out. Those
    above U+FFFF cannot go into `re`'s fast bitmap (each would be one more
    comparison per character), so the first regex leaves them in and the
    second, exact one (with ranges) re-splits only the tokens that hold a
    character above U+FFFF. Built once, on first use (~0.15 s)."""
    spans: list[list[int]] = []
    for o in range(sys.maxunicode + 1):
        c = chr(o)
        if c.isnumeric() and not (c.isalpha() or c.isdecimal()):
            if spans and spans[-1][1] == o - 1:
                spans[-1][1] = o
            else:
                spans.append([o, o])

    def cls(lo: int, hi: int) -> str:
        return "".join(
            re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
            for a, b in spans
            if lo <= a <= hi
        )

    bmp = re.compile(f"[^\\W_{cls(0, 0xFFFF)}]+")
    exact = re.compile(f"[^\\W_{cls(0, sys.maxunicode)}]+")
    return bmp, exact


def keyword_tokens(s: str) -> list[str]:
    """The words a query is split into for the keyword path (SPEC §4.2), in
    order: maximal runs of letters (`str.isalpha`) and decimal digits
    (`str.isdecimal`), before lowercasing and filtering.

    Linear time at C speed (ASCII: translate + split; else one regex scan)
    rather than a Python loop per character: a 10 MB query splits in a
    fraction of a second."""
    if s.isascii():
        return s.translate(_ASCII_SEPARATORS).split()
    bmp, exact = _token_classes()
    runs = bmp.findall(s)
    if _ASTRAL.search(s) is None:
        return runs
    return [t for r in runs for t in (exact.findall(r) if _ASTRAL.search(r) else (r,))]


def keywords(query: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Query keywords: split on non letter/digit, lowercase, drop <2 chars and
    stopwords, dedupe keeping first occurrence (SPEC §4.2)."""
    if query.isascii():  # lowercasing ASCII keeps every character in place
        words = dict.fromkeys(keyword_tokens(query.lower()))
    else:  # lower distinct tokens ("İ" lowercases to two characters, one a mark)
        words = dict.fromkeys([t.lower() for t in dict.fromkeys(keyword_tokens(query))])
    return [t for t in words if len(t) > 1 and t not in stopwords]
