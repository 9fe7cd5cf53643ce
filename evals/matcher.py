"""The documented matcher from stored memory text to gold facts.

Pipeline mode never knows which gold fact a consolidator meant, so every
stored row is matched to gold by text. The rule, in full:

1. Similarity of two texts is `max(trigram, containment)` where `trigram` is
   pg_trgm similarity (`memkit.text.trigram_similarity`) and `containment`
   is word-set containment |A∩B| / min(|A|,|B|) over the assembler's word
   sets, counted only when both sets hold at least `min_words` words (short
   texts contain each other by accident). Identical texts (after strip and
   casefold) score 1.0.
2. A row's score against a fact is the best similarity against the fact's
   content and each of its paraphrases.
3. A row whose text is identical to the content or a paraphrase of exactly
   one fact matches that fact. Otherwise the row matches the best-scoring
   fact of its scope when that score is at least `threshold` **and** beats
   the best *other* fact by at least `margin`; otherwise it matches nothing
   (an ambiguous row is unmatched, not guessed).

The matcher's own precision and recall are measured on labelled pairs
(`pair_accuracy`): a pair is predicted "paraphrase" when its similarity is at
least `threshold`. Every pipeline report prints those numbers beside the
extraction scores they qualify.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memkit.errors import ConfigError
from memkit.text import containment, jaccard, trigrams, word_set

DEFAULT_THRESHOLD = 0.5
DEFAULT_MARGIN = 0.05
DEFAULT_MIN_WORDS = 3


@dataclass(frozen=True, slots=True)
class _Text:
    norm: str
    grams: frozenset[str]
    words: frozenset[str]


def _prep(text: str) -> _Text:
    return _Text(text.strip().casefold(), trigrams(text), word_set(text))


def _sim(a: _Text, b: _Text, min_words: int) -> float:
    if a.norm and a.norm == b.norm:
        return 1.0
    s = jaccard(a.grams, b.grams)
    if len(a.words) >= min_words and len(b.words) >= min_words:
        s = max(s, containment(a.words, b.words))
    return s


def similarity(a: str, b: str, *, min_words: int = DEFAULT_MIN_WORDS) -> float:
    """The matcher's text similarity in [0, 1] (rule 1 above)."""
    return _sim(_prep(a), _prep(b), min_words)


@dataclass(frozen=True, slots=True)
class Match:
    fact_id: str | None
    score: float
    """Similarity to the best fact (even when it did not qualify)."""
    runner_up: float
    """Similarity to the best other fact (0 when there is none)."""


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


class Matcher:
    """Match texts to a fixed set of gold facts (one scope or many).

    `facts` are records with `fact_id`, `scope_id`, `content` and
    `paraphrases` (the dataset's `GoldFact`, or dicts of the same shape).
    """

    def __init__(
        self,
        facts: Iterable[Any],
        *,
        threshold: float = DEFAULT_THRESHOLD,
        margin: float = DEFAULT_MARGIN,
        min_words: int = DEFAULT_MIN_WORDS,
    ):
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"matcher threshold must be in [0, 1], got {threshold!r}")
        if not 0.0 <= margin <= 1.0:
            raise ConfigError(f"matcher margin must be in [0, 1], got {margin!r}")
        self.threshold = threshold
        self.margin = margin
        self.min_words = min_words
        self._by_scope: dict[str, list[tuple[str, list[_Text]]]] = {}
        for f in facts:
            texts = [_field(f, "content"), *(_field(f, "paraphrases") or ())]
            entry = (_field(f, "fact_id"), [_prep(t) for t in texts if t])
            self._by_scope.setdefault(_field(f, "scope_id"), []).append(entry)

    def match(self, text: str, scope_id: str, *, among: Iterable[str] | None = None) -> Match:
        """The gold fact `text` states, or `fact_id=None` (rule 3).

        `among` restricts the candidates (e.g. facts already established).
        """
        allowed = None if among is None else set(among)
        t = _prep(text)
        best_id, best, second = None, 0.0, 0.0
        exact: list[str] = []
        for fid, texts in self._by_scope.get(scope_id, ()):
            if allowed is not None and fid not in allowed:
                continue
            if t.norm and any(t.norm == x.norm for x in texts):
                exact.append(fid)
            s = max((_sim(t, x, self.min_words) for x in texts), default=0.0)
            if s > best:
                best_id, best, second = fid, s, best
            elif s > second:
                second = s
        if len(exact) == 1:
            return Match(exact[0], 1.0, second if best_id == exact[0] else best)
        ok = best_id is not None and best >= self.threshold and best - second >= self.margin
        return Match(best_id if ok else None, best, second)

    def labels(self, texts: Sequence[str], scope_id: str) -> list[str | None]:
        return [self.match(x, scope_id).fact_id for x in texts]


@dataclass(frozen=True, slots=True)
class PairAccuracy:
    """The matcher's similarity rule as a paraphrase classifier on labelled pairs."""

    threshold: float
    n: int
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")

    def as_dict(self) -> dict[str, Any]:
        def r(x: float) -> float | None:
            return None if x != x else round(x, 6)

        return {
            "threshold": self.threshold,
            "n": self.n,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "tn": self.tn,
            "precision": r(self.precision),
            "recall": r(self.recall),
        }


def pair_predictions(
    pairs: Iterable[Any],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_words: int = DEFAULT_MIN_WORDS,
) -> list[tuple[bool, bool]]:
    """(predicted paraphrase, labelled paraphrase) per pair, for bootstrap CIs."""
    out = []
    for p in pairs:
        label = _field(p, "label")
        if label not in ("paraphrase", "distinct"):
            raise ConfigError(f"pair label must be 'paraphrase' or 'distinct', got {label!r}")
        pred = similarity(_field(p, "a"), _field(p, "b"), min_words=min_words) >= threshold
        out.append((pred, label == "paraphrase"))
    return out


def pair_accuracy(
    pairs: Iterable[Any],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_words: int = DEFAULT_MIN_WORDS,
) -> PairAccuracy:
    """Precision/recall of "similarity >= threshold" against pair labels.

    Pairs have `a`, `b` and `label` ("paraphrase" or "distinct"); any other
    label is an error naming it.
    """
    tp = fp = fn = tn = n = 0
    for pred, gold in pair_predictions(pairs, threshold=threshold, min_words=min_words):
        n += 1
        tp += pred and gold
        fp += pred and not gold
        fn += gold and not pred
        tn += not pred and not gold
    return PairAccuracy(threshold, n, tp, fp, fn, tn)
