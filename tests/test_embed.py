"""Embedders: offline WordLlama default, hashing baseline, LiteLLM (mocked), specs."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memkit.embed import (
    Embedder,
    HashingEmbedder,
    LiteLLMEmbedder,
    WordLlamaEmbedder,
    get_embedder,
    normalize_rows,
)
from memkit.errors import ConfigError


def test_normalize_rows_keeps_zero_rows():
    x = normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0]])


@pytest.mark.parametrize(
    "spec, cls, name, dim",
    [
        ("wordllama", WordLlamaEmbedder, "wordllama-256", 256),
        ("hashing", HashingEmbedder, "hashing-256", 256),
        ("hashing-64", HashingEmbedder, "hashing-64", 64),
    ],
)
def test_specs(spec, cls, name, dim):
    e = get_embedder(spec)
    assert isinstance(e, cls) and e.name == name and e.dim == dim
    assert isinstance(e, Embedder)


def test_none_and_instances_pass_through():
    assert get_embedder(None) is None
    h = HashingEmbedder(8)
    assert get_embedder(h) is h
    lm = get_embedder("litellm:openai/text-embedding-3-small")
    assert isinstance(lm, LiteLLMEmbedder) and lm.name == "litellm:openai/text-embedding-3-small"


@pytest.mark.parametrize("spec", ["bert", "hashing-x", "litellm:", 42])
def test_bad_specs(spec):
    with pytest.raises(ConfigError):
        get_embedder(spec)


def test_hashing_is_deterministic_normalised_and_semantic_enough():
    e = HashingEmbedder()
    x = e.embed(["deploy the service", "deploy the service", "bake a cake", ""])
    assert x.shape == (4, 256) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x[:3], axis=1), 1.0, rtol=1e-5)
    assert np.array_equal(x[0], x[1])
    assert not x[3].any()
    assert x[0] @ HashingEmbedder().embed(["deploying services"])[0] > x[0] @ x[2]
    assert e.embed([]).shape == (0, 256)


def test_wordllama_offline_normalised():
    e = WordLlamaEmbedder()
    x = e.embed(["how do I deploy?", "The deploy script is ops/deploy.sh", "I like cake"])
    assert x.shape == (3, 256) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    assert x[0] @ x[1] > x[0] @ x[2]
    assert e.embed([]).shape == (0, 256)


def test_litellm_embedder_lazy_and_mocked(monkeypatch):
    import types

    calls = {}

    def fake_embedding(model, input, **kw):
        calls["model"] = model
        return types.SimpleNamespace(data=[{"embedding": [3.0, 4.0]} for _ in input])

    # The embedder reaches litellm only through memkit.llm's lazy accessor.
    fake = types.SimpleNamespace(embedding=fake_embedding)
    monkeypatch.setattr("memkit.llm.litellm", lambda: fake)
    e = LiteLLMEmbedder("openai/emb")
    assert e.dim == 0
    x = e.embed(["a", "b"])
    assert calls["model"] == "openai/emb" and e.dim == 2
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.6, 0.8]])
    e2 = LiteLLMEmbedder("openai/emb", dim=3)
    with pytest.raises(ConfigError, match="dim 2"):
        e2.embed(["a"])


# --- the embedded prefix is bounded (issue #22) ---------------------------------------


def test_embed_prefix_bound_at_and_past_and_on_a_code_point():
    from memkit.embed import EMBED_MAX_BYTES, embed_prefix

    at = "é" * (EMBED_MAX_BYTES // 2)
    assert embed_prefix(at) is at
    assert embed_prefix(at + "a") == at
    cut = embed_prefix("a" + "é" * EMBED_MAX_BYTES)  # the limit falls inside an "é"
    assert len(cut.encode()) == EMBED_MAX_BYTES - 1 and cut.startswith("aé")
    assert embed_prefix("short") == "short"


@pytest.mark.parametrize("embedder", [HashingEmbedder(), WordLlamaEmbedder()], ids=["hash", "wl"])
def test_a_long_text_embeds_as_its_prefix(embedder):
    from memkit.embed import EMBED_MAX_BYTES

    head = ("deploy with make deploy from the repo root " * 400)[:EMBED_MAX_BYTES]
    long = head + "and then something entirely different about cakes " * 200_000  # ~10 MB
    np.testing.assert_array_equal(embedder.embed([long]), embedder.embed([head]))


def test_litellm_embedder_sends_only_the_prefix(monkeypatch):
    import types

    from memkit.embed import EMBED_MAX_BYTES

    sent = []

    def fake_embedding(model, input, **kw):
        sent.extend(input)
        return types.SimpleNamespace(data=[{"embedding": [3.0, 4.0]} for _ in input])

    monkeypatch.setattr(
        "memkit.llm.litellm", lambda: types.SimpleNamespace(embedding=fake_embedding)
    )
    LiteLLMEmbedder("openai/emb").embed(["x" * 10_000_000, "short"])
    assert [len(t) for t in sent] == [EMBED_MAX_BYTES, 5]


@functools.cache
def _wordllama():
    """WordLlama's own model, loaded apart from memkit's (the reference)."""
    from pathlib import Path

    import wordllama

    emb = WordLlamaEmbedder()
    return wordllama.WordLlama.load(
        config=emb.config,
        dim=emb.dim,
        cache_dir=Path(wordllama.__file__).parent,
        disable_download=True,
    )


def _wordllama_tokenizer():
    return _wordllama().tokenizer


def test_wordllama_gives_each_text_of_a_batch_its_own_vector():
    """A batch of 150 texts of very different lengths: every text gets exactly
    the vector it gets alone."""
    import random

    rng = random.Random(3)
    words = "deploy staging cluster budget ünïcode 日本語 the a of".split()
    texts = [" ".join(rng.choices(words, k=rng.choice([1, 3, 40, 200]))) for _ in range(150)]
    emb = WordLlamaEmbedder()
    batch = emb.embed(texts)
    alone = np.vstack([emb.embed([t]) for t in texts])
    assert batch.shape == (150, 256) and np.array_equal(batch, alone)


def test_wordllama_one_text_is_bit_identical_to_wordllamas_own_embed():
    """`embed([text])` skips WordLlama's batch machinery; each vector must equal
    what WordLlama's own `embed` gives that text (then L2-normalised)."""
    import random

    from memkit.embed import EMBED_MAX_BYTES, normalize_rows

    rng = random.Random(5)
    words = "deploy staging cluster budget ünïcode 日本語 the a of 🙂 x1 --flag".split()
    texts = ["", " ", "a", "\u0000", "🙂" * 3, "x" * EMBED_MAX_BYTES]
    texts += [" ".join(rng.choices(words, k=rng.choice([1, 2, 7, 60, 400]))) for _ in range(80)]
    emb, model = WordLlamaEmbedder(), _wordllama()
    for t in texts:
        want = normalize_rows(model.embed([t]))
        got = emb.embed([t])
        assert got.shape == (1, 256) and got.dtype == np.float32
        assert np.array_equal(got, want), t[:40]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 40),
    dim=st.integers(1, 300),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e3, 1e18]),
    zero_row=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_normalize_rows_gives_the_bits_of_dividing_by_numpys_norm(rows, dim, scale, zero_row, seed):
    """normalize_rows does np.linalg.norm's arithmetic itself; every stored
    vector must keep the bits it had when it called np.linalg.norm."""
    from memkit.embed import normalize_rows

    x = (np.random.default_rng(seed).standard_normal((rows, dim)) * scale).astype(np.float32)
    if zero_row:
        x[0] = 0.0
    want = x.copy()
    norms = np.linalg.norm(want, axis=1, keepdims=True)
    np.divide(want, norms, out=want, where=norms > 0)
    got = normalize_rows(x.copy())
    assert got.dtype == np.float32 and np.array_equal(got, want)
    for i in range(rows):  # a stack's rows keep the bits each has alone (Postgres's candidates)
        assert np.array_equal(normalize_rows(x[i].copy()), want[i : i + 1])


# --- WordLlama's token ids, piece by piece ------------------------------------


@functools.cache
def _piece_ids():
    from memkit.embed import token_ids

    return token_ids(_wordllama_tokenizer())


_TOKEN_EDGES = [
    "",
    " ",
    "  ",
    "a",
    " a",
    "a ",
    "a  b",
    "   lead and trail   ",
    "\u2581",
    "a \u2581b\u2581",
    "<s>",
    "x </s> y",
    "<unk><unk>",
    "<s",
    "s>",
    "\u0000",
    "a\tb\nc\r\nd",
    "🙂🙂 x🙂",
    "ünïcode 日本語 ελληνικά עברית",
    "e\u0301 ﬁ Ⅻ",
    "--flag=1 x1 $HOME ~/x.py",
    "x" * 8192,
]


def test_the_shipped_tokenizer_is_taken_piece_by_piece():
    """WordLlama's tokenizer has the shape `token_ids` checks for: a WordLlama
    upgrade that changed it would fall back (right, but slower) and fail here."""
    assert _piece_ids().piecewise


@pytest.mark.parametrize("text", _TOKEN_EDGES)
def test_token_ids_piece_by_piece_are_the_tokenizers_own_at_the_edges(text):
    """`remember` takes a text's ids piece by piece through a cache; they must
    be exactly the ids the tokenizer gives the whole text: empty, spaces only,
    the marker itself, added-token literals, control characters, scripts, the cap."""
    assert _piece_ids()(text) == _wordllama_tokenizer().encode(text, add_special_tokens=False).ids


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                ["the", "deploy", " ", "  ", "\u2581", "<s>", "</s>", "\t", "日本", "🙂"]
            ),
            st.text(min_size=1, max_size=12),
        ),
        max_size=12,
    )
)
def test_token_ids_piece_by_piece_are_the_tokenizers_own(parts):
    """The same over random mixes of words, spaces, markers, literals and any text."""
    tok = _wordllama_tokenizer()
    for text in ("".join(parts), " ".join(parts)):
        assert _piece_ids()(text) == tok.encode(text, add_special_tokens=False).ids, text[:60]


def test_token_ids_match_on_real_sentences_even_with_a_tiny_cache(monkeypatch, shared_datasets):
    """PAWS's Wikipedia sentences (names, numbers, diacritics), through a
    2-piece cache that evicts all the time: every id list the tokenizer's own."""
    import csv

    import memkit.embed as embed

    monkeypatch.setattr(embed, "PIECES_CACHED", 2)
    tok = _wordllama_tokenizer()
    ids = embed.token_ids(tok)
    path = shared_datasets / "paws" / "paws_wiki_labeled_final_test.tsv"
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [r[k] for r in rows[:4000] for k in ("sentence1", "sentence2")]
    assert len(texts) == 8000
    assert [ids(t) for t in texts] == [tok.encode(t, add_special_tokens=False).ids for t in texts]


def _tokenizer_with(edit):
    """WordLlama's tokenizer with its JSON spec changed by `edit`."""
    import json

    from tokenizers import Tokenizer

    spec = json.loads(_wordllama_tokenizer().to_str())
    edit(spec)
    return Tokenizer.from_str(json.dumps(spec))


def _merge_across_a_space(spec):
    """A token "s▁t" and the merge that makes it, right after "▁t" forms."""
    model = spec["model"]
    model["vocab"]["s\u2581t"] = len(model["vocab"])
    model["merges"].insert(1, ["s", "\u2581t"])


def _split_on_whitespace(spec):
    spec["pre_tokenizer"] = {"type": "WhitespaceSplit"}


@pytest.mark.parametrize("edit", [_merge_across_a_space, _split_on_whitespace])
def test_token_ids_fall_back_to_the_tokenizer_when_pieces_would_differ(edit):
    """A tokenizer whose merges can cross a space (or that splits words itself)
    is not taken piece by piece: the ids stay the tokenizer's own. With the
    cross-space merge, pieces alone would miss the "s▁t" token."""
    from memkit.embed import token_ids

    tok = _tokenizer_with(edit)
    text = "this is this test"
    want = tok.encode(text, add_special_tokens=False)
    if edit is _merge_across_a_space:
        assert "s\u2581t" in want.tokens  # the case pieces cannot see
    ids = token_ids(tok)
    assert not ids.piecewise and ids(text) == want.ids


def test_wordllama_batch_is_bit_identical_to_wordllamas_own_batch():
    """Every batch is embedded text by text; the vectors must be the ones
    WordLlama's own batch `embed` (padding, masks) gives, normalised."""
    import random

    rng = random.Random(11)
    words = "deploy staging cluster budget ünïcode 日本語 the a of 🙂 <s> x1".split()
    texts = ["", " ", *(" ".join(rng.choices(words, k=rng.choice([1, 5, 90]))) for _ in range(100))]
    want = normalize_rows(_wordllama().embed(texts))
    assert np.array_equal(WordLlamaEmbedder().embed(texts), want)
