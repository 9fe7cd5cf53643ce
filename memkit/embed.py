"""Embedders: WordLlama (offline default), MiniLM (a sentence transformer, offline,
in `memkit.minilm`), a scikit-learn hashing baseline, LiteLLM.

Every embedder returns float32 rows that are L2-normalised (a zero row stays
zero), so the store can score by a plain dot product. Heavy imports happen on
first use, never at import time: `import memkit` must stay free.

Every embedder embeds at most the first `EMBED_MAX_BYTES` of a text: the
store keeps the full text (keyword recall and fold-in see all of it), but one
huge write or query cannot stall a store for seconds of tokenising, nor
exceed a provider's input limit.

WordLlama is computed here text by text, with the tokenizer taken piece by
piece (`token_ids`): the same bits as WordLlama's own `embed`, and cheaper at
every batch size. Leaves out any ANN or vector storage (the store's).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memkit.errors import ConfigError
from memkit.params import DEFAULT_FLOOR

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
    """What the store needs from an embedder: a stable name, a dimension, rows.

    Optional attributes: `fingerprint` (str; what identifies its weights, recorded
    by a store beside the name; see `fingerprint_of`) and `default_floor`
    (float; the vector-path floor `RecallParams(floor=None)` means with it;
    see `default_floor_of`)."""

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


def fingerprint_of(emb: Embedder) -> str:
    """What identifies `emb`'s vectors: its `fingerprint` attribute (the built-in
    embedders hash their weights' identity), else a hash of its name and dimension."""
    fp = getattr(emb, "fingerprint", None)
    if isinstance(fp, str) and fp:
        return fp
    return hashlib.sha256(f"{emb.name}:{int(emb.dim)}".encode()).hexdigest()[:16]


def embedder_meta(emb: Embedder) -> dict[str, str]:
    """The store `meta` rows that name an embedder: name, dimension, fingerprint."""
    return {
        "embedder": emb.name,
        "embedder_dim": str(int(emb.dim)),
        "embedder_fingerprint": fingerprint_of(emb),
    }


def default_floor_of(emb: Embedder | None) -> float:
    """The floor recall uses with `emb` when the caller sets none: its own
    `default_floor` (cosine scales differ between models), else `DEFAULT_FLOOR`."""
    floor = getattr(emb, "default_floor", None)
    if isinstance(floor, int | float) and not isinstance(floor, bool) and 0 <= floor <= 1:
        return float(floor)
    return DEFAULT_FLOOR


# --- WordLlama ---------------------------------------------------------------

_WL_LOCK = threading.Lock()
_WL_MODELS: dict[tuple[str, int], tuple[Any, Callable[[str], list[int]]]] = {}


def _load_wordllama(config: str, dim: int) -> tuple[Any, Callable[[str], list[int]]]:
    """Load once per process from the installed package folder, downloads
    disabled; with the fastest exact way to take a text's token ids."""
    key = (config, dim)
    with _WL_LOCK:
        loaded = _WL_MODELS.get(key)
        if loaded is None:
            from pathlib import Path

            import wordllama
            from wordllama import WordLlama

            model = WordLlama.load(
                config=config,
                dim=dim,
                cache_dir=Path(wordllama.__file__).parent,
                disable_download=True,
            )
            loaded = _WL_MODELS[key] = (model, token_ids(model.tokenizer))
        return loaded


_MARK = "\u2581"
"""SentencePiece's word marker: the tokenizer's normalizer turns every space into it."""

_PIECE = re.compile(f"{_MARK}*[^{_MARK}]+|{_MARK}+")
"""A piece: a run of markers (spaces) and the word after it, or trailing markers."""

PIECES_CACHED = 1 << 14
"""Pieces whose ids are kept (words repeat across texts, Zipf)."""


def token_ids(tokenizer: Any) -> Callable[[str], list[int]]:
    """text -> the ids `tokenizer.encode(text, add_special_tokens=False)` gives,
    for the shape of tokenizer WordLlama ships (Llama 2's SentencePiece BPE),
    taken piece by piece through a cache; any other shape, the tokenizer itself.

    Why: that tokenizer has no pre-tokenizer, so its BPE runs over the whole
    text and its own cache, keyed by the text, never hits. With pieces cached,
    the embedding inside the write loop fell from ~120 to ~96 us a `remember`
    (from ~160 to ~90 us on LongMemEval text, whose words repeat).

    Why exact: the normalizer only prepends the marker and turns spaces into
    it, and no token holds a marker after another character (checked here), so
    no merge joins a character to a marker after it: a text's tokens are its
    pieces' tokens, each piece split by the same BPE model alone. Byte fallback
    covers every byte, so no unknown tokens fuse across pieces. The empty text
    and texts holding an added token's literal (`<s>`) go to the tokenizer.
    The function's `piecewise` says which way it takes."""

    def whole(text: str) -> list[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    whole.piecewise = False  # type: ignore[attr-defined]  # a function attribute

    spec = json.loads(tokenizer.to_str())
    model = spec.get("model") or {}
    vocab = model.get("vocab") or {}
    fits = (
        spec.get("normalizer")
        == {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": _MARK},
                {"type": "Replace", "pattern": {"String": " "}, "content": _MARK},
            ],
        }
        and spec.get("pre_tokenizer") is None
        and model.get("type") == "BPE"
        and model.get("dropout") is None
        and model.get("byte_fallback") is True
        and not model.get("continuing_subword_prefix")
        and not model.get("end_of_word_suffix")
        and all(f"<0x{b:02X}>" in vocab for b in range(256))
        and not any(_MARK in t.lstrip(_MARK) for t in vocab)
    )
    if not fits:
        return whole
    literals = tuple(a["content"] for a in spec.get("added_tokens") or ())
    bpe = tokenizer.model

    @functools.lru_cache(maxsize=PIECES_CACHED)
    def piece(p: str) -> tuple[int, ...]:
        return tuple(t.id for t in bpe.tokenize(p))

    def ids(text: str) -> list[int]:
        if not text or any(lit in text for lit in literals):
            return whole(text)
        pieces = _PIECE.findall(_MARK + text.replace(" ", _MARK))
        return list(itertools.chain.from_iterable(map(piece, pieces)))

    ids.piecewise = True  # type: ignore[attr-defined]  # a function attribute
    return ids


def _wordllama_mean(loaded: tuple[Any, Callable[[str], list[int]]], text: str) -> np.ndarray:
    """The mean of a text's token vectors as WordLlama's `embed` computes it
    (before its normalisation), without its batch machinery: padding to the
    longest text, attention masks, a thread pool. The same float32 operations
    in the same order: bit-identical (tested), and faster at every batch size
    (a short text 65 -> 37 us alone; a batch of 1,000 synthetic memories 43 ->
    31 us a text; 1.3 KB texts 2.5 -> 0.47 ms a text)."""
    model, token_ids_of = loaded
    table = model.embedding
    ids = np.asarray(token_ids_of(text), dtype=np.int32)
    np.minimum(ids, table.shape[0] - 1, out=ids)  # WordLlama clips; ids are never < 0
    total = np.add.reduce(table[ids], axis=0, dtype=np.float32)  # what .sum() calls
    mean: np.ndarray = total / np.float32(max(ids.size, 1))
    return mean


WORDLLAMA_FLOOR = 0.07
"""WordLlama's default recall floor, calibrated (not the SPEC's 0.25): `memkit eval
calibrate floor --embedder wordllama` on datasets/bundled, with STS-B dev and MRPC
(docs/embedders.md). Floors 0.00-0.07 keep recall@8 non-inferior to the best (0.947;
at 0.07 0.939, paired difference -0.008 [-0.043, 0.029]); 0.07 is the one with the
most off-topic silence (0.105) among them; 0.08's lower end is -0.051. At the
SPEC's 0.25 recall@8 is 0.863 [-0.129, -0.053 below the best]."""


class WordLlamaEmbedder:
    """The default: WordLlama's 256-d weights ship inside the wheel (offline, fast)."""

    default_floor = WORDLLAMA_FLOOR

    def __init__(self, dim: int = 256, config: str = "l2_supercat"):
        self.dim = dim
        self.config = config
        self.name = f"wordllama-{dim}"

    @functools.cached_property
    def fingerprint(self) -> str:
        """The installed WordLlama version, its config and dimension (its weights
        ship inside that version's wheel)."""
        from importlib.metadata import version

        ident = f"wordllama {version('wordllama')} {self.config} {self.dim}"
        return hashlib.sha256(ident.encode()).hexdigest()[:16]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = _bounded(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if texts:
            loaded = _load_wordllama(self.config, self.dim)
            for i, text in enumerate(texts):
                out[i] = _wordllama_mean(loaded, text)
        return normalize_rows(out)


# --- MiniLM ------------------------------------------------------------------


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d), a sentence transformer, on onnxruntime from
    installed files only (`memkit.minilm`: the `embed` extra)."""

    name = "minilm-384"
    dim = 384

    def __init__(self) -> None:
        """Refuses at once when the extra is missing: a store must not learn
        only at its first write that it cannot embed."""
        from memkit import minilm

        minilm.check_installed()
        self.fingerprint = minilm.FINGERPRINT
        self.default_floor = minilm.DEFAULT_FLOOR

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from memkit.minilm import pooled

        return normalize_rows(pooled(_bounded(texts)))


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
        self.fingerprint = hashlib.sha256(
            f"sklearn-hashing word1-2 char_wb3-5 {dim}".encode()
        ).hexdigest()[:16]
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
        self.fingerprint = hashlib.sha256(self.name.encode()).hexdigest()[:16]
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
    """Resolve an embedder spec: "wordllama[-D]", "minilm[-384]", "hashing[-D]",
    "litellm:<model>", an Embedder instance (returned as is) or None (keyword-only
    store). A spec is also what a store records: an embedder's `name` resolves too."""
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
    if base == "minilm" and dim in ("", "384"):
        return MiniLMEmbedder()
    if base == "hashing":
        return HashingEmbedder(int(dim) if dim else 256)
    if base in ("none", ""):
        return None
    raise ConfigError(
        f"unknown embedder spec {spec!r} "
        "(want wordllama, minilm, hashing[-D], litellm:<model> or None)"
    )
