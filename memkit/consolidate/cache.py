"""On-disk response cache for model consolidators (DESIGN "LLM calls").

LiteLLM 1.110.2 has no disk cache of its own, so memkit keeps one: a JSON
file per key under a directory, written atomically (temp file + rename) so a
killed run never leaves a half-written entry. An entry holds the whole
attempt sequence of one answered request (the rate limits, server errors and
timeouts retried before the answer included, with their outcome) and its
answer, so a rerun replays what the first run saw. A request that ended
without an answer (429, 5xx, timeout, connection, a refusal) is never stored:
a failure is not a final answer, and a cached rerun asks the provider again
(issue #34: a cached 3 x 500 blip used to be replayed for ever).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CACHE_VERSION = 2
"""2: every attempt of a request is kept (1 kept only the final answer)."""


def cache_key(
    *,
    model: str,
    api_base: str | None,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    replicate: int,
    prompt_version: str,
) -> str:
    """SHA-256 over everything that can change an answer (never the API key)."""
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "model": model,
            "api_base": api_base or "",
            "messages": list(messages),
            "params": dict(params),
            "replicate": replicate,
            "prompt_version": prompt_version,
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=repr,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """A directory of cached answers: `<root>/<key[:2]>/<key>.json`."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            with open(self._path(key), encoding="utf-8") as f:
                record = json.load(f)
        except (FileNotFoundError, ValueError):
            return None
        return record if record.get("version") == CACHE_VERSION else None

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**record, "version": CACHE_VERSION, "key": key}, f, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.is_dir() else 0
