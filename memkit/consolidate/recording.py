"""Recordings: a real model's answers kept as a small JSON Lines file (memkit).

A recording lets a run against a live model be replayed offline, with no
server and no weights, byte-identical on every rerun: `replay:<file.jsonl>`
(`ReplayConsolidator`) answers each request by its hash. Line 1 is a header:

    {"kind": "memkit-recording", "version": 1, "model": "openai/smollm2",
     "system": "pipeline:litellm:openai/smollm2", "options": {...},
     "request_budget": 5860, "prompt_version": "memkit-native-1",
     "dataset": {"name": ..., "version": ..., "fingerprint": ...}, ...}

then one line per distinct request, in run order:

    {"request_hash": "<sha256>", "replicate": 0, "text": "<raw answer>",
     "attempts": [{"model": ..., "outcome": "ok", "input_tokens": 812,
                   "output_tokens": 97, "latency_s": 1.9, ...}]}

An entry is the response cache's (`memkit.consolidate.cache`): the whole
attempt sequence (real tokens and latency) and the answer, or the rate-limit /
server / timeout error it ended in (`"error"` instead of `"text"`). The
header's `request_budget` is the byte limit requests were shaped to, so a
replay shapes (and hashes) requests exactly as the recorded run did. This
module reads and writes the format; `evals.record` builds one from a run
folder. It holds no model and imports no LiteLLM.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from memkit.errors import ConfigError

RECORDING_KIND = "memkit-recording"
RECORDING_VERSION = 1

Key = tuple[str, int]
"""(request hash, replicate)."""


def is_recording(path: str | os.PathLike[str]) -> bool:
    """A `.jsonl` file (a run folder is the other thing `replay:` reads)."""
    p = Path(path)
    return p.suffix == ".jsonl" and not p.is_dir()


def read_recording(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[Key, dict]]:
    """The header and the entries by (request hash, replicate); a ConfigError names
    the file and line of anything that is not a recording of this version."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"replay: no recording {str(p)!r}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"replay: {p}: not UTF-8 ({e.reason})") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise ConfigError(f"replay: {p}:{n}: not JSON ({e})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"replay: {p}:{n}: a line must be a JSON object")
        rows.append((n, row))
    if not rows or rows[0][1].get("kind") != RECORDING_KIND:
        raise ConfigError(f"replay: {p}: line 1 is not a {RECORDING_KIND} header")
    header = rows[0][1]
    if header.get("version") != RECORDING_VERSION:
        raise ConfigError(
            f"replay: {p}: recording version {header.get('version')!r}, "
            f"this memkit reads {RECORDING_VERSION}"
        )
    entries: dict[Key, dict] = {}
    for n, row in rows[1:]:
        h, rep = row.get("request_hash"), row.get("replicate", 0)
        ok = isinstance(h, str) and len(h) == 64 and isinstance(rep, int)
        if not ok or not isinstance(row.get("attempts"), list) or not row["attempts"]:
            raise ConfigError(
                f"replay: {p}:{n}: an entry needs request_hash (64 hex), replicate and attempts"
            )
        if ("text" in row) == ("error" in row):
            raise ConfigError(f"replay: {p}:{n}: an entry holds either text or error")
        entries.setdefault((h, rep), row)
    return header, entries


def write_recording(
    path: str | os.PathLike[str], header: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]
) -> int:
    """Write header and entries atomically (temp file + rename); returns the entry count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = {"kind": RECORDING_KIND, "version": RECORDING_VERSION, **header}
    body = [json.dumps(dict(e), ensure_ascii=False, sort_keys=True) for e in entries]
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(head, ensure_ascii=False, sort_keys=True) + "\n")
            f.writelines(line + "\n" for line in body)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(body)
