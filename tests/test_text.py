"""SPEC §2, §3.3, §4.2, §5.2: byte-exact truncation, trigrams, keywords, word sets."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.text import (
    STOPWORDS,
    TRUNCATED_MARKER,
    byte_len,
    containment,
    fold_accents,
    keyword_tokens,
    keywords,
    trigram_similarity,
    trigrams,
    truncate_bytes,
    truncate_middle,
    word_set,
)

MARK = byte_len(TRUNCATED_MARKER)


def test_marker_is_15_bytes():
    assert MARK == 15


# --- truncate_bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -1, -100])
def test_truncate_bytes_nonpositive_n_is_identity(n):
    assert truncate_bytes("x" * 100, n) == "x" * 100


def test_truncate_bytes_at_and_past_the_bound():
    s = "a" * 40
    assert truncate_bytes(s, 40) == s
    assert truncate_bytes(s + "b", 40) == "a" * 25 + TRUNCATED_MARKER
    assert byte_len(truncate_bytes(s + "b", 40)) == 40


@pytest.mark.parametrize("n, kept", [(15, 15), (14, 14), (1, 1), (16, 1), (17, 2)])
def test_truncate_bytes_tiny_n_keeps_n_when_no_room(n, kept):
    assert truncate_bytes("z" * 100, n) == "z" * kept + TRUNCATED_MARKER


def test_truncate_bytes_backs_off_to_code_point_start():
    s = "é" * 20  # 2 bytes each
    out = truncate_bytes(s, 20)  # keep 5 bytes -> back off to 4
    assert out == "éé" + TRUNCATED_MARKER
    out = truncate_bytes("€" * 10, 19)  # 3-byte chars; keep 4 -> 3
    assert out == "€" + TRUNCATED_MARKER


@settings(max_examples=200)
@given(st.text(), st.integers(16, 300))
def test_truncate_bytes_never_exceeds_n_and_is_a_prefix(s, n):
    out = truncate_bytes(s, n)
    assert byte_len(out) <= n
    if out != s:
        assert s.startswith(out[: -len(TRUNCATED_MARKER)])


# --- truncate_middle -------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -5])
def test_truncate_middle_nonpositive_is_identity(n):
    assert truncate_middle("x" * 500, n) == "x" * 500


def test_truncate_middle_fits_unchanged():
    assert truncate_middle("x" * 100, 100) == "x" * 100


def test_truncate_middle_small_budget_uses_truncate_bytes():
    s = "x" * 200
    assert truncate_middle(s, 65) == truncate_bytes(s, 65)  # budget 1 < 2
    assert truncate_middle(s, 66) != truncate_bytes(s, 66)  # budget 2: a real middle cut


def test_truncate_middle_layout_and_count():
    s = "".join(chr(ord("a") + i % 26) for i in range(1000))
    out = truncate_middle(s, 364)  # budget 300: head 200, tail 100
    removed = 1000 - 300
    assert out == s[:200] + f"\n…[{removed} bytes truncated]…\n" + s[-100:]


def test_truncate_middle_utf8_boundaries():
    s = "é" * 500  # 1000 bytes
    out = truncate_middle(s, 165)  # budget 101: head 67 -> 66, tail 35 -> 34
    head, _, rest = out.partition("\n…[")
    count, _, tail = rest.partition(" bytes truncated]…\n")
    assert head == "é" * 33 and tail == "é" * 17
    assert int(count) == 1000 - 66 - 34


@settings(max_examples=200)
@given(st.text(min_size=0, max_size=400), st.integers(66, 500))
def test_truncate_middle_never_exceeds_n(s, n):
    out = truncate_middle(s, n)
    assert byte_len(out) <= n
    out.encode("utf-8")  # valid UTF-8


# --- pg_trgm --------------------------------------------------------------------------------


def test_trigrams_match_pg_trgm():
    # SELECT show_trgm('cat'); -> {"  c"," ca","at ","cat"}
    assert trigrams("cat") == {"  c", " ca", "cat", "at "}
    assert trigrams("Cat, CAT!") == trigrams("cat")  # lowercase, set
    assert trigrams("a") == {"  a", " a "}
    assert trigrams("!!") == frozenset()


def test_trigram_similarity_values():
    # SELECT similarity('word', 'two words'); -> 0.363636
    assert trigram_similarity("word", "two words") == pytest.approx(4 / 11)
    assert trigram_similarity("same", "SAME") == 1.0
    assert trigram_similarity("", "") == 0.0
    assert trigram_similarity("abc", "") == 0.0


# --- keywords -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query, expect",
    [
        ("Who is the marketing lead for Kiem Lai?", ["marketing", "lead", "kiem", "lai"]),
        ("D7-retention: how's the SIGNUP funnel?", ["d7", "retention", "signup", "funnel"]),
        ("traffic traffic Traffic sources", ["traffic", "sources"]),
        ("the of and is who", []),
        ("", []),
        ("a b c ? !", []),
        ("Ai là trưởng nhóm của dự án?", ["trưởng", "nhóm", "dự", "án"]),
        ("x ab", ["ab"]),
    ],
)
def test_keywords(query, expect):
    assert keywords(query) == expect


def test_vietnamese_stopwords_removed():
    assert keywords("và của là có không") == []


def _runs(s, keep):
    """The maximal runs of characters `keep` accepts, in order (a loop per character)."""
    out, cur = [], []
    for c in s:
        if keep(c):
            cur.append(c)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _tokens_by_char(s):
    """The keyword splitter as first written: the reference the linear-time
    `keyword_tokens` must reproduce token for token."""
    return _runs(s, lambda c: c.isalpha() or c.isdecimal())


def _keywords_by_char(query, stopwords=STOPWORDS):
    seen = {}
    for tok in _tokens_by_char(query):
        t = tok.lower()
        if len(t) < 2 or t in stopwords or t in seen:
            continue
        seen[t] = None
    return list(seen)


_TRICKY = "aZ9 _-.'\t\n\x1e\u00a0İıßǅ²½Ⅻ〇一٣é\u0301Đ数😀𐄇𝟘𐌀\U000e0001\ud800"


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.one_of(st.sampled_from(_TRICKY), st.characters(codec=None)), max_size=80)
)
def test_keywords_match_the_per_character_reference(s):
    assert keyword_tokens(s) == _tokens_by_char(s)
    assert keywords(s) == _keywords_by_char(s)


def test_keyword_tokens_match_the_reference_on_every_code_point():
    """Every code point in one string: a character classed differently from
    str.isalpha/isdecimal would move a token boundary. Also the ASCII path."""
    import sys

    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert keyword_tokens(every) == _tokens_by_char(every)
    ascii_ = "".join(map(chr, range(128))) * 3
    assert (
        keyword_tokens(ascii_)
        == _tokens_by_char(ascii_)
        == ["0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"] * 3
    )


def test_keywords_of_a_numeral_above_the_bmp_split_the_word():
    # U+10107 AEGEAN NUMBER ONE is numeric but neither a letter nor a decimal digit
    assert keyword_tokens("ab\U00010107cd 😀ef𝟘") == ["ab", "cd", "ef𝟘"]
    assert keywords("İstanbul ISTANBUL x² ab½cd") == _keywords_by_char("İstanbul ISTANBUL x² ab½cd")


# --- dedup word sets -------------------------------------------------------------------------


def _fold_by_char(s: str) -> str:
    """SPEC §5.2's fold, literally: NFD, drop every Mn character, NFC, đ/Đ -> d/D."""
    import unicodedata

    d = unicodedata.normalize("NFD", s)
    kept = "".join(c for c in d if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", kept).replace("đ", "d").replace("Đ", "D")


def _word_set_by_char(s: str) -> frozenset[str]:
    """SPEC §5.2's word set, literally: tokens of a-z, 0-9 and non-ASCII characters."""
    return frozenset(
        _runs(_fold_by_char(s).lower(), lambda c: "a" <= c <= "z" or "0" <= c <= "9" or c > "\x7f")
    )


_ACCENTY = "aAdDđĐeEoOuUyYiIİKǅﬁ \u0300\u0301\u0303\u0309\u0323\u0302\u0306\u031b\u0903\u20dd-,.ß"


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
        st.text(alphabet=_ACCENTY, max_size=40),
        st.text(alphabet=st.characters(max_codepoint=127), max_size=40),
    )
)
def test_fold_and_word_set_equal_the_per_character_definition(s):
    """The ASCII shortcut, the combining-diacritics pass and the general path
    (spacing Mc and enclosing Me marks kept, đ mapped) all give SPEC §5.2, and so
    does the assembler's byte-level tokenizer."""
    from memkit.assemble import dedup_words

    assert fold_accents(s) == _fold_by_char(s)
    assert word_set(s) == _word_set_by_char(s)
    assert {w.decode("utf-8") for w in dedup_words(s)} == word_set(s)


def test_fold_and_word_set_on_every_code_point():
    every = "".join(map(chr, range(sys.maxunicode + 1))).encode("utf-8", "replace").decode()
    for i in range(0, len(every), 50_000):
        chunk = every[i : i + 50_000]
        assert fold_accents(chunk) == _fold_by_char(chunk)
        assert word_set(chunk) == _word_set_by_char(chunk)


def test_word_set_folds_accents_and_d_stroke():
    assert word_set("Đà Nẵng, café!") == {"da", "nang", "cafe"}
    assert word_set("D7-retention") == {"d7", "retention"}
    assert word_set("...") == frozenset()


def test_containment():
    a, b = word_set("one two three four five"), word_set("one two three four")
    assert containment(a, b) == 1.0
    assert containment(a, word_set("one six")) == 0.5
    assert containment(a, frozenset()) == 0.0


def _trigrams_by_char(s: str) -> frozenset[str]:
    """pg_trgm's trigrams with words split character by character by `str.isalnum`."""
    words = _runs(s.lower(), str.isalnum)
    return frozenset(f"  {w} "[i : i + 3] for w in words for i in range(len(w) + 1))


def test_trigram_words_split_exactly_where_str_isalnum_says_on_every_code_point():
    """Trigram words are maximal runs of `str.isalnum()` characters (pg_trgm's rule):
    each code point between two letters either joins them into one word or splits
    them, exactly as `str.isalnum` says."""
    bad = [
        hex(i)
        for i in range(sys.maxunicode + 1)
        if trigrams(f"a{chr(i)}b") != _trigrams_by_char(f"a{chr(i)}b")
    ]
    assert bad == []
