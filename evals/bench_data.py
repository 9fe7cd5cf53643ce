"""The workloads both store benches draw from (`memkit bench store`,
`evals.bench_store`, and its `--backend` side by side, `evals.bench_backends`):
random unit vectors, short synthetic texts, LongMemEval's real chat sentences
(read in place), a corpus file's texts, and the percentiles they report. Its own
module so that neither bench imports the other's internals.
"""

from __future__ import annotations

import random
import re

import numpy as np

DIM = 256
LIMIT = 8
COMMON = (
    "the deploy script staging database cluster budget marketing lead team prefers uses "
    "release service invoice customer report weekly owner backup region migration runs "
    "on in for with via is at by"
).split()


def synthetic_texts(rng: random.Random, n: int) -> list[str]:
    """Short synthetic memories: common words mixed with random names/identifiers."""
    letters = "abcdefghijklmnopqrstuvwxyz"

    def word() -> str:
        if rng.random() < 0.45:
            return rng.choice(COMMON)
        return "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))

    return [" ".join(word() for _ in range(rng.randint(6, 12))) for _ in range(n)]


LOW_DIVERSITY = COMMON[:24]
"""The low-diversity corpus's vocabulary: 24 common words, so every trigram of a
text is in thousands of stored texts (fold-in's index filters least there)."""


def low_diversity_texts(rng: random.Random, n: int) -> list[str]:
    """Texts of 6-12 words drawn from `LOW_DIVERSITY` alone (no identifiers)."""
    return [
        " ".join(rng.choice(LOW_DIVERSITY) for _ in range(rng.randint(6, 12))) for _ in range(n)
    ]


def longmemeval_sentences(path: str) -> list[str]:
    """Real chat text: the distinct 30-200 character sentences of LongMemEval's
    haystack turns (oracle and S splits, read in place through
    `evals.adapters`), in a fixed shuffled order."""
    from evals.adapters import load_longmemeval

    seen: set[str] = set()
    pool: list[str] = []
    transcripts = [
        t for variant in ("oracle", "s") for t in load_longmemeval(path, variant).transcripts
    ]
    for tr in transcripts:
        for m in tr.messages:
            for sent in re.split(r"(?<=[.!?])\s+", str(m.get("content") or "")):
                sent = " ".join(sent.split())
                if 30 <= len(sent) <= 200 and sent not in seen:
                    seen.add(sent)
                    pool.append(sent)
    random.Random(0).shuffle(pool)
    return pool


def file_sentences(path: str) -> list[str]:
    """A text corpus file (`--texts file:PATH`, e.g. `memkit bench corpus`'s): one
    text a line, in the file's order. A missing file, an empty line or a repeated
    text is a ConfigError naming the path and line (a corpus of repeats would make
    recall@8 meaningless)."""
    from memkit.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise ConfigError(f"--texts file:{path}: cannot read it ({e.strerror})") from e
    if lines and lines[-1] == "":
        lines.pop()
    first: dict[str, int] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise ConfigError(f"--texts file:{path}: line {i} is empty")
        if line in first:
            raise ConfigError(f"--texts file:{path}: line {i} repeats line {first[line]}")
        first[line] = i
    if not lines:
        raise ConfigError(f"--texts file:{path}: holds no text")
    return lines


def perturbed(rng: random.Random, text: str) -> str:
    """A query like a stored text, reworded: one word dropped, or one word replaced
    by a common word (a paraphrase-like query, not a vector-space noise copy)."""
    words = text.split()
    i = rng.randrange(len(words))
    if len(words) > 1 and rng.random() < 0.5:
        del words[i]
    else:
        words[i] = rng.choice([w for w in COMMON if w != words[i]])
    return " ".join(words)


VECTOR_SOURCES = ("random", "wordllama")
"""Where a bench's vectors come from: `random`, uniform random unit vectors (no
neighbourhood structure: HNSW's greedy walk has nothing to follow, its recall
is a floor); `wordllama`, the texts embedded with the default embedder
(`memkit.embed`, its bundled weights), so the corpus has a real embedder's geometry."""


def embedded(texts: list[str]) -> np.ndarray:
    """`texts` embedded with the default embedder (WordLlama, 256-d, offline)."""
    from memkit.embed import WordLlamaEmbedder

    return WordLlamaEmbedder(dim=DIM).embed(texts)


def corpus_stats(texts: list[str], vecs: np.ndarray) -> dict[str, int]:
    """How distinct a corpus is: distinct texts and distinct vectors (WordLlama
    averages token vectors, so a reordering of the same words is the same vector;
    a corpus of duplicates would make recall@8 meaningless)."""
    return {
        "distinct_texts": len(set(texts)),
        "distinct_vectors": len({v.tobytes() for v in np.ascontiguousarray(vecs)}),
    }


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def percentiles(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


class Table:
    """The bench embedder: answers from vectors computed before timing starts
    (`floor`: the recall floor of the embedder they came from, as `default_floor`)."""

    name, dim = f"bench-{DIM}", DIM

    def __init__(self, texts: list[str], vecs: np.ndarray, floor: float | None = None):
        self._t = dict(zip(texts, vecs, strict=True))
        if floor is not None:
            self.default_floor = floor

    def embed(self, texts):
        return np.stack([self._t[t] for t in texts])


def pool_split(pool: list[str], n: int, m: int, fresh: int) -> tuple[list[str], ...]:
    """A real-text pool cut into the big scope's `n` texts, the 1 % scope's `m` and
    `fresh` new texts for the writes, disjoint and in the pool's order; a
    ConfigError naming both counts when the pool is too small (never a smaller
    corpus than the row says)."""
    from memkit.errors import ConfigError

    if n + m + fresh > len(pool):
        raise ConfigError(
            f"the text pool holds {len(pool):,} texts; {n:,} rows + {m:,} (1 % scope) "
            f"+ {fresh:,} fresh writes need {n + m + fresh:,}"
        )
    return pool[:n], pool[n : n + m], pool[n + m : n + m + fresh]
