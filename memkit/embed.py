"""Embedders: WordLlama (offline default), a scikit-learn hashing baseline, LiteLLM.

Every embedder returns float32 rows that are L2-normalised (a zero row stays
zero), so the store can score by a plain dot product. Heavy imports happen on
first use, never at import time: `import memkit` must stay free.

Every embedder embeds at most the first `EMBED_MAX_BYTES` of a text: the
store keeps the full text (keyword recall and fold-in see all of it), but one
huge write or query cannot stall a store for seconds of tokenising, nor
exceed a provider's input limit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memkit.errors import ConfigError

EMBED_MAX_BYTES = 8192
"""(memkit) UTF-8 bytes of a text that are embedded (the SPEC's lesson bound; a
vector of a longer text is the vector of its prefix, cut on a code point)."""


def embed_prefix(text: str, max_bytes: int = EMBED_MAX_BYTES) -> str:
    """`text` cut to at most `max_bytes` UTF-8 bytes on a code-point boundary (no marker)."""
    if len(text) * 4 <= max_bytes:
        return text
    head = text[:max_bytes]
    raw = head.encode("utf-8", "surrogatepass")
    if len(raw) <= max_bytes:
        return head
    return raw[:max_bytes].decode("utf-8", "ignore")


def _bounded(texts: Sequence[str]) -> list[str]:
    return [embed_prefix(t) for t in texts]


@runtime_checkable
class Embedder(Protocol):
    """What the store needs from an embedder: a stable name, a dimension, rows."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""
        ...


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalise each row as float32; zero rows stay zero (their cosine is 0)."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    # np.linalg.norm(x, axis=1, keepdims=True)'s own arithmetic, without its
    # argument handling: a third of the cost of a row, and the same bits (tested)
    norms = np.sqrt(np.add.reduce(x * x, axis=1, keepdims=True))
    np.divide(x, norms, out=x, where=norms > 0)
    return x


# --- WordLlama ---------------------------------------------------------------

_WL_CHUNK = 64
"""WordLlama's own batch size in `embed` (its default)."""

_WL_LOCK = threading.Lock()
_WL_MODELS: dict[tuple[str, int], Any] = {}


def _load_wordllama(config: str, dim: int) -> Any:
    """Load once per process from the installed package folder, downloads disabled."""
    key = (config, dim)
    with _WL_LOCK:
        model = _WL_MODELS.get(key)
        if model is None:
            from pathlib import Path

            import wordllama
            from wordllama import WordLlama

            model = WordLlama.load(
                config=config,
                dim=dim,
                cache_dir=Path(wordllama.__file__).parent,
                disable_download=True,
            )
            _WL_MODELS[key] = model
        return model


def _wordllama_one(model: Any, text: str) -> np.ndarray:
    """One text as WordLlama's `embed` computes it, without its batch machinery
    (padding, attention masks, a thread pool for one text): every `remember`
    embeds one text, and this halves that (65 -> 37 us a short text). The same
    float32 operations in the same order: bit-identical (tested)."""
    table = model.embedding
    ids = np.asarray(model.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int32)
    np.minimum(ids, table.shape[0] - 1, out=ids)  # WordLlama clips; ids are never < 0
    total = np.add.reduce(table[ids], axis=0, dtype=np.float32)  # what .sum() calls
    return normalize_rows((total / np.float32(max(ids.size, 1)))[None, :])


class WordLlamaEmbedder:
    """The default: WordLlama's 256-d weights ship inside the wheel (offline, fast)."""

    def __init__(self, dim: int = 256, config: str = "l2_supercat"):
        self.dim = dim
        self.config = config
        self.name = f"wordllama-{dim}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _bounded(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = _load_wordllama(self.config, self.dim)
        if len(texts) == 1:
            return _wordllama_one(model, texts[0])
        if len(texts) <= _WL_CHUNK:
            return normalize_rows(model.embed(texts))
        # WordLlama pads each chunk of 64 to its longest text; chunks of similar
        # lengths pad less (1,000 LongMemEval turns: 6.0 -> 3.2 s). A text's
        # vector does not depend on its chunk: bit-identical (tested).
        order = np.argsort(np.fromiter(map(len, texts), dtype=np.int64), kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        out[order] = model.embed([texts[i] for i in order])
        return normalize_rows(out)


# --- hashing ------------------------------------------------------------------


class HashingEmbedder:
    """scikit-learn HashingVectorizer over words and char 3-5-grams: no model file.

    Deterministic across processes (murmurhash), so it is a reproducible baseline.
    """

    def __init__(self, dim: int = 256):
        if dim < 2:
            raise ConfigError(f"hashing embedder dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"
        self._vecs: tuple[Any, Any] | None = None

    def _vectorizers(self) -> tuple[Any, Any]:
        if self._vecs is None:
            from sklearn.feature_extraction.text import HashingVectorizer

            common = {"n_features": self.dim, "alternate_sign": False, "norm": None}
            self._vecs = (
                HashingVectorizer(analyzer="word", ngram_range=(1, 2), **common),
                HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), **common),
            )
        return self._vecs

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _bounded(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        words, chars = self._vectorizers()
        x = words.transform(texts) + chars.transform(texts)
        return normalize_rows(x.toarray())


# --- LiteLLM -----------------------------------------------------------------


class LiteLLMEmbedder:
    """Any provider's embedding model through `litellm.embedding` (imported lazily).

    The dimension is learned from the first response unless given.
    """

    def __init__(self, model: str, dim: int | None = None, **options: Any):
        if not model:
            raise ConfigError(
                "litellm embedder needs a model, e.g. 'litellm:openai/text-embedding-3-small'"
            )
        self.model = model
        self.name = f"litellm:{model}"
        self.dim = int(dim or 0)
        self.options = options

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _bounded(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        from memkit.llm import litellm  # the one module that imports litellm

        resp = litellm().embedding(model=self.model, input=texts, **self.options)
        rows = [d["embedding"] if isinstance(d, dict) else d.embedding for d in resp.data]
        x = normalize_rows(np.asarray(rows, dtype=np.float32))
        if not self.dim:
            self.dim = int(x.shape[1])
        elif x.shape[1] != self.dim:
            raise ConfigError(f"{self.name} returned dim {x.shape[1]}, expected {self.dim}")
        return x


def get_embedder(spec: str | Embedder | None) -> Embedder | None:
    """Resolve an embedder spec: "wordllama[-D]", "hashing[-D]", "litellm:<model>",
    an Embedder instance (returned as is) or None (keyword-only store)."""
    if spec is None or (isinstance(spec, Embedder) and not isinstance(spec, str)):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"embedder spec must be a string, an Embedder or None, got {spec!r}")
    s = spec.strip()
    if s.startswith("litellm:"):
        return LiteLLMEmbedder(s[len("litellm:") :])
    base, _, dim = s.partition("-")
    if dim and not dim.isdigit():
        raise ConfigError(f"unknown embedder spec {spec!r}")
    if base == "wordllama":
        return WordLlamaEmbedder(int(dim) if dim else 256)
    if base == "hashing":
        return HashingEmbedder(int(dim) if dim else 256)
    if base in ("none", ""):
        return None
    raise ConfigError(
        f"unknown embedder spec {spec!r} (want wordllama, hashing[-D], litellm:<model> or None)"
    )
