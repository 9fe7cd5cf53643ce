"""Shared test doubles for the store tests (no tests here): a clock and an embedder."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

T0 = 1_750_000_000.0


class Clock:
    """An injectable clock the test moves by hand."""

    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class TableEmbedder:
    """Embeds by lookup; unknown texts get a zero vector (cosine 0 with everything).

    `fail=True` makes every call raise, to exercise the fall-through paths.
    """

    def __init__(self, table: dict[str, Sequence[float]] | None = None, dim: int = 4):
        self.table = dict(table or {})
        self.dim = dim
        self.name = f"table-{dim}"
        self.fail = False
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise RuntimeError("embedder down")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            if t in self.table:
                v = np.asarray(self.table[t], dtype=np.float32)
                n = np.linalg.norm(v)
                out[i] = v / n if n else v
        return out
